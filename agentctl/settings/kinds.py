"""A per-agent setting's kind (agentctl.settings declares each setting): how its
value is read from text (agent-set's KEY=VALUE) and from agent-fork's option or the
fork tool's arguments, how it is shown, and in which direction a change narrows what
the agent may do (narrows())."""

import math
import os
import re
from operator import itemgetter

from agentctl import env, limits, mailloop, modelspec, money, paths, shape, voice
from agentctl.clock import parse_duration
from agentctl.errors import UsageError

RESTART_POLICIES = ("never", "on-failure", "always")
TIERS = ("standard", "batch", "flex")   # how an agent's model calls are sold
VARIABLE = r"[A-Za-z_][A-Za-z0-9_]*"      # an environment variable's name (compiled at its first use)
DEFAULT_MAX_RESTARTS = 5          # a max_restarts unset
DEFAULT_RESTART_WINDOW = 3600.0   # a restart_window unset, in seconds
DOLLARS_MOST = 1_000_000_000     # the largest budget a model gives in dollars
FLAGS = {"yes": True, "true": True, "1": True, "on": True,
         "no": False, "false": False, "0": False, "off": False}

# narrows: in which direction a change narrows what the agent may do (None: neither).
# A fork and agent-set hold a value given to what its giver holds alike
# (ops.confinement.gives), but a budget, which is carved out of an account (ops.budget).
MIN = "min"             # a smaller number, or one where there was none (no limit)
CARVE = "carve"         # as MIN, in one unit; it comes out of the parent's account (ops.budget)
SUBSET = "subset"       # fewer patterns (--allow: fewer tools; ops.grants judges globs),
                        # or fewer names (--rw, --env)
SUPERSET = "superset"   # more patterns (--ask: more calls wait for approval)
WITHIN = "within"       # paths inside the old ones (--cwd, --ro: less of the file tree)
OFF = "off"             # a flag turned off
HOSTS = "hosts"         # hosts within the old ones (--net: agentctl.hosts.within)
LOWER = "lower"         # limits each at most the old (--limit)
OPERATOR = "operator"   # turned off; only the operator turns it on (--unconfined)
SOONER = "sooner"       # a check that trips sooner: fewer mails, a longer window (--mail-loop)


class Budget(tuple):
    """A budget: an amount in its unit, "tokens" or "usd" (whole millionths of a
    dollar: agentctl.money). The unit is the account's: what its calls are charged.
    The pair written out, not a NamedTuple, whose making every program would pay for
    (0.2 ms)."""
    __slots__ = ()

    def __new__(cls, amount, unit="tokens"):
        return tuple.__new__(cls, (amount, unit))

    amount = property(itemgetter(0))
    unit = property(itemgetter(1))

    def __getnewargs__(self):
        return tuple(self)

    def __repr__(self):
        return f"Budget({self.amount!r}, {self.unit!r})"

    def __str__(self):
        return money.shown(self.amount) if self.unit == "usd" else str(self.amount)

    @classmethod
    def of(cls, row):
        """The budget an agents row holds (budget, budget_unit), or None."""
        if row["budget"] is None:
            return None
        return cls(row["budget"], row["budget_unit"] or "tokens")


class Setting:
    """One per-agent setting. Unset at a fork, a child gets its role's value when
    `by_role` names the role, else the parent's when `inherit`, else `default`.
    Read-only once declared: a variant is a copy (replace()). A plain class, not a
    dataclass: every program reads the table, and making a dataclass costs its start
    more than 3 ms."""
    __slots__ = ("name", "kind", "doc", "inherit", "default", "by_role", "narrows",
                 "keyword", "header", "least", "choices", "fixed", "option", "metavar",
                 "help", "tool")

    def __init__(self, name, kind, doc, inherit=False, default=None, by_role=None,
                 narrows=None, keyword=None, header=None, least=0, choices=(),
                 fixed=False, option=(), metavar=None, help=None, tool=None):
        self.name = name            # the agents column; agent-ps's -o key; agent-set's KEY
        self.kind = kind            # text, model, choice, count, budget, duration, patterns,
                                    # dir, paths, names (of `choices`, else variables'),
                                    # flag, limits, options (KEY=VALUE, a line each),
                                    # hosts (patterns: agentctl.hosts, a line each),
                                    # schema (JSON text) or rate (N/DURATION or off:
                                    # agentctl.mailloop)
        self.doc = doc
        self.inherit = inherit
        self.default = default
        self.by_role = by_role or {}
        self.narrows = narrows
        self.keyword = keyword      # ops.lifecycle.fork's keyword, where it is not `name`
        self.header = header        # agent-ps's column header; None: agent-ps doesn't show it
        self.least = least          # a count's least value
        self.choices = choices
        self.fixed = fixed          # set once, at fork: agent-set refuses it
        self.option = option        # agent-fork's option: its spellings (default --NAME)
        self.metavar = metavar      # agent-fork's option's metavar (a flag has none)
        self.help = help            # agent-fork's option's help
        self.tool = tool            # the fork tool offers it to the model, with this text

    def __repr__(self):
        return f"Setting({self.name!r}, {self.kind!r})"

    def replace(self, **changes):
        """A copy with `changes` (a variant of a row, as a test declares one)."""
        return Setting(**{**{k: getattr(self, k) for k in self.__slots__}, **changes})

    @property
    def spellings(self):
        """agent-fork's option, as click declares it."""
        return self.option or (f"--{self.name.replace('_', '-')}",)

    @property
    def flag(self):
        """The option's long name, as a message names it (--cwd, --limit)."""
        return self.spellings[-1].partition("/")[0]

    @property
    def repeated(self):
        """Whether agent-fork takes the option once per value (a list; limits)."""
        return self.kind in LISTS or self.kind == "limits"

    @property
    def columns(self):
        """The agents columns that hold it: a budget's unit beside its amount."""
        return (self.name, "budget_unit") if self.kind == "budget" else (self.name,)

    @property
    def key(self):
        """What ops.lifecycle.fork calls it."""
        return self.keyword or self.name

    def unset(self, parent, role):
        """What a child of `parent` (a row) with `role` gets when its fork doesn't
        give this setting."""
        if role in self.by_role:
            return self.by_role[role]
        if self.inherit and parent[self.name] is not None:
            return parent[self.name]
        return self.default

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
        if self.kind == "hosts":
            from agentctl import hosts  # (start-up: 2 ms, only for a list of hosts given)
            return hosts.parse(text)
        if self.kind == "rate":
            value = mailloop.parse(text)
            if value is None:
                raise UsageError(f"bad {self.name}: {env.shown(text)} (want N/DURATION, N "
                                 "mails (2 or more) within a duration such as 20/1h, or off)")
            return value
        raise AssertionError(f"{self.name}: unknown kind {self.kind}")

    def given(self, value, off=False):
        """A value as agent-fork's option gives it (click's, typed by its kind; a
        repeated option's a tuple) as ops.lifecycle.fork takes it: None, not given.
        `off`: its --no- option was given (hosts: none)."""
        if off:
            if value is not None:
                raise UsageError(f"{self.flag} and --no-{self.name}: give one of them")
            return []
        if self.repeated:
            value = list(value) or None
        if value is None:
            return None
        if self.kind == "limits":
            return limits.parse(value)
        if self.kind in ("model", "schema", "rate", "hosts"):
            return self.parse(value)
        if self.kind == "names":
            return self.names(value)
        return value

    def properties(self):
        """The fork tool's parameters for it, {name: JSON Schema}: none unless offered.
        A budget is two: tokens (budget), or dollars (budget_usd)."""
        if self.tool is None:
            return {}
        if self.kind == "budget":
            return {self.name: {"type": "integer", "minimum": self.least,
                                "maximum": env.LARGEST, "description": self.tool},
                    f"{self.name}_usd": {"type": "number", "minimum": money.dollars(1),
                                         "maximum": DOLLARS_MOST,
                                         "description": "The same in dollars."}}
        schema = {"choice": {"type": "string", "enum": list(self.choices)},
                  "patterns": {"type": "array", "items": {"type": "string"}},
                  "count": {"type": "integer", "minimum": self.least,
                            "maximum": env.LARGEST},
                  "flag": {"type": "boolean"}}[self.kind]
        return {self.name: dict(schema, description=self.tool)}

    def offered(self, args):
        """The value a fork tool call's arguments give it (None: not given)."""
        if self.kind != "budget":
            return args.get(self.name)
        tokens, dollars = args.get(self.name), args.get(f"{self.name}_usd")
        if tokens is not None and dollars is not None:
            raise UsageError(voice.BUDGET_OR_DOLLARS)
        if dollars is not None:
            if not 1 <= money.of_dollars(dollars) <= money.of_dollars(DOLLARS_MOST):
                raise UsageError(f"{self.name}_usd out of range")
            return Budget(money.of_dollars(dollars), "usd")
        return None if tokens is None else Budget(tokens, "tokens")

    def names(self, given):
        """Names checked: each one of `choices`, or a variable's name."""
        for name in given:
            if (name not in self.choices) if self.choices else not re.fullmatch(VARIABLE, name):
                want = f"one of {', '.join(self.choices)}" if self.choices else \
                    "a variable's name: letters, digits and _"
                raise UsageError(f"bad {self.name}: {env.shown(name)} ({want})")
        return list(given)

    def text(self, value):
        """The stored value as people read it: - for none (a choice's default), patterns
        joined by commas."""
        if value is None and self.kind == "choice" and self.default is not None:
            return self.default
        if self.kind in LISTS or self.kind == "hosts":
            return ",".join(listed(value)) or "-"
        if self.kind == "flag":
            return "yes" if value else "-"
        if self.kind == "limits":
            return limits.shown(value)
        if self.kind == "rate":
            return mailloop.shown(value)
        return "-" if value is None else str(value)

    def json(self, value):
        """The stored value for programs: patterns as a list, a budget in dollars or
        tokens (its unit is agent-ps's budget_unit)."""
        if self.kind in ("patterns", "paths", "names", "hosts"):
            return listed(value)
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
        if self.kind == "rate":
            return mailloop.shown(value)
        return self.default if value is None and self.kind == "choice" else value


LISTS = ("patterns", "paths", "names", "options")      # stored one a line


def tier(row):
    """An agents row's tier (TIERS): standard when unset."""
    return row["tier"] or TIERS[0]


def listed(stored):
    """A list setting's items as the agents column holds them (one a line)."""
    return stored.split("\n") if stored else []


def listing(items):
    """A list setting's items as the agents column holds them: one a line, each once
    (the first kept), None for none."""
    return "\n".join(dict.fromkeys(items)) or None


def options(stored):
    """Stored model options (KEY=VALUE, one a line) as {KEY: value}, each typed as the
    providers declare it (modelspec.OPTIONS)."""
    if not stored:
        return {}
    return modelspec.parse_options(listed(stored), None)


def _patterns(value):
    """Patterns as stored (one a line) or given (a list), as a set."""
    return set(listed(value) if isinstance(value, str) else value or ())


inside = paths.inside


def resolved(text):
    """A path as the sandbox binds it: absolute, each link followed."""
    return os.path.realpath(text)


def narrows(setting, old, new):
    """Whether changing `setting` from `old` to `new` leaves the agent able to do at
    most what it could: the same value always does. Patterns compare as text, not as
    globs: a narrower glob that is not the same text does not count. Paths narrow
    when each new one is inside an old one (no old cwd: any); a flag when it is
    turned off; hosts when each new pattern is within an old one; limits when each is at most the old; a mail loop check when it
    finds a loop at least as soon (mailloop.sooner)."""
    if old == new:
        return True
    if setting.narrows == WITHIN:
        if setting.kind == "dir":
            return old is None or (new is not None and inside(new, [old]))
        return all(inside(p, _patterns(old)) for p in _patterns(new))
    if setting.narrows in (OFF, OPERATOR):
        return not new
    if setting.narrows == SOONER:
        return mailloop.sooner(old, new)
    if setting.narrows == HOSTS:
        from agentctl import hosts  # (start-up: 2 ms, only for a list of hosts changed)
        return hosts.within(new, old)
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
