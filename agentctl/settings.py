"""The per-agent settings (agent-fork(1) gives them; agent-ps(1) shows some): each
declared once, here, with the agents column that holds it, how a child gets it when
its fork doesn't give it, in which direction a change narrows what the agent may do,
how a value is read from text and how it is shown.

ops.lifecycle.fork builds a child's row from SETTINGS (child()); agent-ps's -o
columns for them come from here; agent-set(1) (KEY=VALUE) changes them with get(),
parse() and narrows(), each but those `fixed` at fork."""

import math
import os
import re
from dataclasses import dataclass, field
from typing import NamedTuple

from agentctl import env, limits, modelspec, money, paths, shape
from agentctl.clock import parse_duration
from agentctl.errors import UsageError
from agentctl.ids import ROLES

RESTART_POLICIES = ("never", "on-failure", "always")
VARIABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")      # an environment variable's name
FLAGS = {"yes": True, "true": True, "1": True, "on": True,
         "no": False, "false": False, "0": False, "off": False}

# narrows: in which direction a change narrows what the agent may do (None: neither).
# A fork applies only "subset" (ops.grants.check_fork) and "carve" (ops.budget.carve).
MIN = "min"             # a smaller number, or one where there was none (no limit)
CARVE = "carve"         # as MIN, in one unit; it comes out of the parent's account (ops.budget)
SUBSET = "subset"       # fewer patterns (--allow: fewer tools; ops.grants judges globs),
                        # or fewer names (--rw, --env)
SUPERSET = "superset"   # more patterns (--ask: more calls wait for approval)
WITHIN = "within"       # paths inside the old ones (--cwd, --ro: less of the file tree)
OFF = "off"             # a flag turned off (--net)
LOWER = "lower"         # limits each at most the old (--limit)
OPERATOR = "operator"   # turned off; only the operator turns it on (--unconfined)


class Budget(NamedTuple):
    """A budget: an amount in its unit, "tokens" or "usd" (whole millionths of a
    dollar: agentctl.money). The unit is the account's: what its calls are charged."""
    amount: int
    unit: str = "tokens"

    def __str__(self):
        return money.shown(self.amount) if self.unit == "usd" else str(self.amount)

    @classmethod
    def of(cls, row):
        """The budget an agents row holds (budget, budget_unit), or None."""
        if row["budget"] is None:
            return None
        return cls(row["budget"], row["budget_unit"] or "tokens")


@dataclass(frozen=True, eq=False)
class Setting:
    """One per-agent setting. Unset at a fork, a child gets its role's value when
    `by_role` names the role, else the parent's when `inherit`, else `default`."""
    name: str                   # the agents column; agent-ps's -o key; agent-set's KEY
    kind: str                   # text, model, choice, count, budget, duration, patterns,
                                # dir, paths, names (of `choices`, else variables'),
                                # flag, limits, options (KEY=VALUE, a line each) or
                                # schema (JSON text)
    doc: str
    inherit: bool = False
    default: object = None
    by_role: dict = field(default_factory=dict)
    narrows: str = None
    keyword: str = None         # ops.lifecycle.fork's keyword, where it is not `name`
    header: str = None          # agent-ps's column header; None: agent-ps doesn't show it
    least: int = 0              # a count's least value
    choices: tuple = ()
    fixed: bool = False         # set once, at fork: agent-set refuses it

    @property
    def key(self):
        """What ops.lifecycle.fork calls it."""
        return self.keyword or self.name

    def unset(self, parent, role):
        """What a child of `parent` (a row) with `role` gets when its fork doesn't
        give this setting."""
        if role in self.by_role:
            return self.by_role[role]
        return parent[self.name] if self.inherit else self.default

    def value(self, row):
        """The setting's value in an agents row (a budget with its unit)."""
        return Budget.of(row) if self.kind == "budget" else row[self.name]

    def parse(self, text):
        """A value from text (agent-set's KEY=VALUE), as ops.lifecycle.fork takes it;
        a usage error that names the setting when it is none. Patterns are split at
        commas; ops.grants.check checks them. Paths are resolved (absolute, every link
        followed: the sandbox compares and binds them as they are now, and refuses one
        that resolves otherwise later); whoever uses one checks that it exists, as
        agent-fork does (after checking that the actor may name it)."""
        if self.kind == "text":
            return text
        if self.kind == "patterns":
            return [p.strip() for p in text.split(",") if p.strip()]
        if self.kind == "options":
            lines = [p.strip() for p in text.split(",") if p.strip()]
            modelspec.parse_options(lines, None)    # each checked again against the model
            return lines
        if self.kind == "schema":
            return shape.load(text)
        if self.kind == "model":
            modelspec.check_name(text)
            return text
        if self.kind == "choice":
            if text not in self.choices:
                raise UsageError(f"unknown {self.name}: {text} "
                                 f"(one of {', '.join(self.choices)})")
            return text
        if self.kind == "count":
            value = int(text) if text.isascii() and text.isdigit() else None
            if value is None or not self.least <= value <= env.LARGEST:
                raise UsageError(f"bad {self.name}: {env.shown(text)} "
                                 f"(want a whole number >= {self.least})")
            return value
        if self.kind == "budget":
            if money.is_money(text):
                return Budget(money.parse(text, self.name), "usd")
            value = int(text) if text.isascii() and text.isdigit() else None
            if value is not None and value > env.LARGEST:
                raise UsageError(f"bad {self.name}: {env.shown(text)} (out of range: at most "
                                 f"{env.LARGEST} tokens)")
            if value is None or value < self.least:
                raise UsageError(f"bad {self.name}: {env.shown(text)} (want a whole number "
                                 "of tokens >= 1, or dollars such as '$2.50' or 2.50usd)")
            return Budget(value, "tokens")
        if self.kind == "duration":
            seconds = parse_duration(text)
            if not math.isfinite(seconds):
                raise UsageError(f"bad {self.name}: {env.shown(text)} (want a duration "
                                 "such as 90, 90s, 10m or 24h)")
            return seconds
        if self.kind == "dir":
            if not text:
                raise UsageError(f"bad {self.name}: '' (want a directory)")
            return resolved(text)
        if self.kind == "paths":
            return [resolved(p) for p in text.split(",") if p]
        if self.kind == "names":
            return self.names([p.strip() for p in text.split(",") if p.strip()])
        if self.kind == "flag":
            if text.lower() not in FLAGS:
                raise UsageError(f"bad {self.name}: {env.shown(text)} (want yes or no)")
            return FLAGS[text.lower()]
        if self.kind == "limits":
            return limits.parse(text)
        raise AssertionError(f"{self.name}: unknown kind {self.kind}")

    def names(self, given):
        """Names checked: each one of `choices`, or a variable's name."""
        for name in given:
            if (name not in self.choices) if self.choices else not VARIABLE.fullmatch(name):
                want = f"one of {', '.join(self.choices)}" if self.choices else \
                    "a variable's name: letters, digits and _"
                raise UsageError(f"bad {self.name}: {env.shown(name)} ({want})")
        return list(given)

    def text(self, value):
        """The stored value as people read it: - for none, patterns joined by commas."""
        if self.kind in LISTS:
            return ",".join(value.split("\n")) if value else "-"
        if self.kind == "flag":
            return "yes" if value else "-"
        if self.kind == "limits":
            return limits.shown(value)
        return "-" if value is None else str(value)

    def json(self, value):
        """The stored value for programs: patterns as a list, a budget in dollars or
        tokens (its unit is agent-ps's budget_unit)."""
        if self.kind in ("patterns", "paths", "names"):
            return value.split("\n") if value else []
        if isinstance(value, Budget):
            return money.dollars(value.amount) if value.unit == "usd" else value.amount
        if self.kind == "flag":
            return bool(value)
        if self.kind == "limits":
            return limits.read(value)
        if self.kind == "options":
            return options(value)
        if self.kind == "schema" and value:
            return shape.loads(value)
        return value


SETTINGS = (    # role first: the others' rules read the child's role
    Setting("role", "choice", "What the agent is for (agentctl(7), Roles).",
            default="agent", choices=ROLES, header="ROLE", fixed=True),
    Setting("model", "model", "The model its turns call, PROVIDER:MODEL or echo.",
            inherit=True, header="MODEL"),
    Setting("system_prompt", "text", "Its system prompt.", inherit=True, keyword="system"),
    Setting("context_window", "count", "Compact its context beyond this many tokens.",
            inherit=True, least=1),
    Setting("budget", "budget", "Its own budget, in tokens or dollars, carved out of its "
            "parent's account (unset: it is charged to its parent's).", narrows=CARVE,
            header="BUDGET", least=1),
    Setting("restart", "choice", "What a failed turn does to it: never, on-failure or "
            "always.", default="never", by_role={"daemon": "always"},
            choices=RESTART_POLICIES),
    Setting("max_restarts", "count", "Give up after this many restarts within "
            "restart_window."),
    Setting("restart_window", "duration", "The window max_restarts counts in."),
    Setting("reap_after", "duration", "Reap it this long after it exits, if nobody waits "
            "for it.", inherit=True),
    Setting("idle_exit", "duration", "It exits after this long without input."),
    Setting("max_children", "count", "At most this many children alive or not yet "
            "collected at once.", inherit=True, by_role={"worker": 4}, narrows=MIN),
    Setting("allow", "patterns", "The external tools it may use (globs over tool names), "
            "within what its ancestors may.", narrows=SUBSET, header="ALLOW"),
    Setting("ask", "patterns", "Calls of matching tools wait for approval; its ancestors' "
            "patterns apply too.", narrows=SUPERSET, header="ASK"),
    Setting("cwd", "dir", "Its working directory, where its tools run: the one place "
            "their sandbox may write.", inherit=True, narrows=WITHIN, header="CWD"),
    Setting("ro", "paths", "More paths its tools may read (the sandbox's read-only "
            "binds), within its parent's.", inherit=True, narrows=WITHIN, header="RO"),
    Setting("net", "flag", "Its tools may use the network.", inherit=True, narrows=OFF,
            header="NET"),
    Setting("rw", "names", "Names of the read-only set (.git, .vscode ...: agentctl(7), "
            "SANDBOX) its tools may write at the top of their working directory, within "
            "its parent's.", inherit=True, narrows=SUBSET, header="RW",
            choices=paths.READ_ONLY_SET),
    Setting("env", "names", "Environment variables its tools get from agent-run's, by "
            "name (besides PATH, LANG, TERM, TZ ...), within its parent's.", inherit=True,
            narrows=SUBSET, header="ENV"),
    Setting("limits", "limits", "The limits on each of its tool calls (cpu, mem, procs, "
            "fsize, files), at most its parent's.", inherit=True, narrows=LOWER,
            header="LIMITS"),
    Setting("unconfined", "flag", "Its tools run outside the sandbox, with the "
            "operator's power: only the operator gives it, and no child inherits it.",
            narrows=OPERATOR, header="UNCONFINED"),
    Setting("options", "options", "Options of its model's calls, KEY=VALUE separated by "
            "commas (temperature, max_tokens ...: agentctl(7), Models).", inherit=True,
            keyword="model_options", header="OPTIONS"),
    Setting("schema", "schema", "The JSON Schema its final reply must fit: a file, or the "
            "JSON itself (agentctl(7), RESULTS AS DATA).", header="SCHEMA"),
)

BY_NAME = {s.name: s for s in SETTINGS}
LISTS = ("patterns", "paths", "names", "options")      # stored one a line
KEYS = frozenset(s.key for s in SETTINGS)


def options(stored):
    """Stored model options (KEY=VALUE, one a line) as {KEY: value}, each typed as the
    providers declare it (modelspec.OPTIONS)."""
    if not stored:
        return {}
    return modelspec.parse_options(stored.split("\n"), None)


def get(name):
    """A setting by name; a usage error for none."""
    if name not in BY_NAME:
        raise UsageError(f"unknown setting: {name} (one of {', '.join(BY_NAME)})")
    return BY_NAME[name]


def child(parent, given):
    """The settings of a new child of `parent` (a row), by name: each one `given`
    (by ops.lifecycle.fork's keyword) and not None, else what its rule gives."""
    unknown = set(given) - KEYS
    if unknown:
        raise TypeError(f"fork() got an unexpected keyword argument {sorted(unknown)[0]!r}")
    values = {}
    for setting in SETTINGS:
        value = given.get(setting.key)
        values[setting.name] = value if value is not None \
            else setting.unset(parent, values.get("role"))
    return values


def _patterns(value):
    """Patterns as stored (one a line) or given (a list), as a set."""
    if not value:
        return set()
    return set(value.split("\n") if isinstance(value, str) else value)


inside = paths.inside


def resolved(text):
    """A path as the sandbox binds it: absolute, each link followed."""
    return os.path.realpath(text)


def narrows(setting, old, new):
    """Whether changing `setting` from `old` to `new` leaves the agent able to do at
    most what it could: the same value always does. Patterns compare as text, not as
    globs: a narrower glob that is not the same text does not count. Paths narrow
    when each new one is inside an old one (no old cwd: any); a flag when it is
    turned off; limits when each is at most the old."""
    if old == new:
        return True
    if setting.narrows == WITHIN:
        if setting.kind == "dir":
            return old is None or (new is not None and inside(new, [old]))
        return all(inside(p, _patterns(old)) for p in _patterns(new))
    if setting.narrows in (OFF, OPERATOR):
        return not new
    if setting.narrows == LOWER:
        return not limits.within(limits.stored(new) if isinstance(new, dict) else new, old)
    if setting.narrows == CARVE and old is not None and new is not None:
        old, new = (v if isinstance(v, Budget) else Budget(v) for v in (old, new))
        if old.unit != new.unit:
            return False        # no rate turns tokens into dollars
    if setting.narrows in (MIN, CARVE):
        return new is not None and (old is None or new <= old)
    if setting.narrows == SUBSET:
        return _patterns(new) <= _patterns(old)
    if setting.narrows == SUPERSET:
        return _patterns(new) >= _patterns(old)
    return False
