"""The per-agent settings (agent-fork(1) gives them; agent-ps(1) shows some): each
declared once, here, with the agents column that holds it, its kind (settings.kinds:
how a value is read, shown and narrowed), how a child gets it when its fork doesn't
give it, in which direction a change narrows what the agent may do, agent-fork's
option for it and, for some, agent-ps's column and the fork tool's parameter.

Read from this table: agent-fork's options (cli.options.setting_options), the fork
tool's parameters (turn.builtin), agent-ps's columns, the agents columns that the
storage reads and writes (COLUMNS: store.registry, store.proctable), a child's row
(child(), ops.lifecycle.fork), and agent-set (get(), Setting.parse, and
ops.confinement.gives, the one rule of what a giver may give, which a fork asks
too); each but those `fixed` at fork may change."""

from agentctl import paths
from agentctl.errors import UsageError
from agentctl.ids import ROLES
from agentctl.settings.kinds import (  # noqa: F401 (what readers of settings ask for)
    CARVE, DEFAULT_MAX_RESTARTS, DEFAULT_RESTART_WINDOW, HOSTS, LISTS, LOWER, MIN, OFF, OPERATOR,
    RESTART_POLICIES, SOONER, SUBSET, SUPERSET, TIERS, WITHIN, Budget, Setting, inside,
    listed, listing, narrows, options, resolved, tier)

SETTINGS = (    # role first: the others' rules read the child's role
    Setting("role", "choice", "What the agent is for (agentctl(7), Roles).",
            default="agent", choices=ROLES, header="ROLE", fixed=True,
            option=("-r", "--role"), metavar="ROLE",
            help="agent, task, worker, lead, architect or daemon (default agent).",
            tool="What the child is for (agent, unless you say otherwise)."),
    Setting("model", "model", "The model its turns call, PROVIDER:MODEL or echo.",
            inherit=True, header="MODEL", option=("-m", "--model"), metavar="MODEL",
            help="The child's model (default: the parent's)."),
    Setting("system_prompt", "text", "Its system prompt.", inherit=True, keyword="system",
            option=("-s", "--system"), metavar="SYSTEM",
            help="The child's system prompt (default: the parent's)."),
    Setting("context_window", "count", "Compact its context beyond this many tokens.",
            inherit=True, least=1, option=("-w", "--context-window"), metavar="TOKENS",
            help="Compact the child's context beyond this many tokens (default: the "
                 "parent's)."),
    Setting("budget", "budget", "Its own budget, in tokens or dollars, carved out of its "
            "parent's account (unset: it is charged to its parent's).", narrows=CARVE,
            header="BUDGET", least=1, metavar="BUDGET",
            help="The child's own budget, TOKENS or dollars ('$2.50' or 2.50usd), carved "
                 "out of the parent's account (in its unit).",
            tool="The child's own budget in tokens, carved out of yours."),
    Setting("restart", "choice", "What a failed turn does to it: never, on-failure or "
            "always.", default="never", by_role={"daemon": "always"},
            choices=RESTART_POLICIES, metavar="POLICY",
            help="never, on-failure or always (default: always for a daemon, else never)."),
    Setting("max_restarts", "count", "Give up after this many restarts within "
            "restart_window.", metavar="N",
            help=f"Give up after N restarts within the window (default "
                 f"{DEFAULT_MAX_RESTARTS})."),
    Setting("restart_window", "duration", "The window max_restarts counts in.",
            metavar="DURATION", help="The window --max-restarts counts in (default "
                                      f"{DEFAULT_RESTART_WINDOW / 3600:g}h)."),
    Setting("reap_after", "duration", "Reap it this long after it exits, if nobody waits "
            "for it.", inherit=True, metavar="DURATION",
            help="Reap the child this long after it exits, if nobody waits for it "
                 "(default: the parent's, else $AGENTCTL_REAP_AFTER, else 24h)."),
    Setting("idle_exit", "duration", "It exits after this long without input.",
            metavar="DURATION", help="The child exits after this long without input."),
    Setting("max_children", "count", "At most this many children alive or not yet "
            "collected at once.", inherit=True, by_role={"worker": 4}, narrows=MIN,
            metavar="N", help="At most N children alive or not yet collected at once "
                              "(default: the parent's; a worker's 4), at most the "
                              "parent's."),
    Setting("mail_loop", "rate", "Hold it and the agent it exchanges mail with when the "
            "two exchanged N mails within DURATION with no other input (a mail loop): "
            "N/DURATION, or off.", inherit=True, narrows=SOONER, header="LOOP",
            metavar="N/DURATION",
            help="Hold the child and the agent it exchanges mail with after N mails between "
                 "them within DURATION with no other input, a mail loop (N/DURATION, or off; "
                 "default: the parent's, else 20/1h), at most as loose as the parent's."),
    Setting("allow", "patterns", "The external tools it may use (globs over tool names), "
            "within what its ancestors may.", narrows=SUBSET, header="ALLOW",
            metavar="PATTERN", help="Grant the external tools whose names match (a shell "
                                    "glob; repeat it), within what the parent may use.",
            tool="External tools the child may use (globs over tool names), within your "
                 "own."),
    Setting("ask", "patterns", "Calls of matching tools wait for approval; its ancestors' "
            "patterns apply too.", narrows=SUPERSET, header="ASK", metavar="PATTERN",
            help="Calls of matching tools need approval before they run (repeatable).",
            tool="Tools whose calls need approval."),
    Setting("cwd", "dir", "Its working directory, where its tools run: the one place "
            "their sandbox may write.", inherit=True, narrows=WITHIN, header="CWD",
            metavar="DIR", help="The child's working directory, where its tools run and "
                                "may write (default: the parent's, else this one), within "
                                "the parent's."),
    Setting("shared", "flag", "Its tools write its working directory itself, directly, "
            "as they work (agentctl(7), WORKSPACES); else they write a layer of its own "
            "over it, reviewed and merged. Given by a giver that holds it.", inherit=True,
            narrows=OFF, header="SHARED", option=("--shared/--no-shared",),
            help="Its tools write its working directory itself, as they work, not a layer "
                 "of its own over it (agentctl(7), WORKSPACES); inherited. Implied when "
                 "--cwd is not given and the parent has none."),
    Setting("ro", "paths", "More paths its tools may read (the sandbox's read-only "
            "binds), within its parent's.", inherit=True, narrows=WITHIN, header="RO",
            metavar="PATH", help="A path its tools may read besides its working "
                                 "directory, within what the parent's may (repeatable; "
                                 "inherited)."),
    Setting("rw", "names", "Names of the read-only set (.git, .vscode ...: agentctl(7), "
            "SANDBOX) its tools may write at the top of their working directory, within "
            "its parent's.", inherit=True, narrows=SUBSET, header="RW",
            choices=paths.READ_ONLY_SET, metavar="NAME",
            help="Its tools may write NAME of the read-only set at the top of their "
                 "working directory (.git, .vscode ...: agentctl(7), SANDBOX), if the "
                 "parent's may (repeatable; inherited)."),
    Setting("env", "names", "Environment variables its tools get from agent-run's, by "
            "name (besides PATH, LANG, TERM, TZ ...), within its parent's.", inherit=True,
            narrows=SUBSET, header="ENV", metavar="NAME",
            help="Its tools get agent-run's variable NAME, which they don't by default "
                 "(a token, a password ...), if the parent's do (repeatable; inherited)."),
    Setting("net", "hosts", "The hosts its tools may reach, through the egress proxy: "
            "names, *.suffixes, * (every public host), addresses or networks, each with an "
            "optional :port (agentctl(7), NETWORK), within its parent's.", inherit=True,
            narrows=HOSTS, header="NET", option=("--net",), metavar="[HOSTS]",
            help="Its tools may reach HOSTS (comma-separated: pypi.org, *.github.com:443, "
                 "10.0.0.0/8; alone, every public host) through the egress proxy, within "
                 "the parent's (default: the parent's). --no-net: none."),
    Setting("limits", "limits", "The limits on each of its tool calls (cpu, mem, procs, "
            "fsize, files), at most its parent's.", inherit=True, narrows=LOWER,
            header="LIMITS", option=("--limit",), metavar="KEY=VALUE,...",
            help="Limits on each tool call: cpu=SECONDS, mem=SIZE, procs=N, fsize=SIZE, "
                 "files=N, at most the parent's (repeatable; inherited)."),
    Setting("unconfined", "flag", "Its tools run outside the sandbox, with the "
            "operator's power: only the operator gives it, and no child inherits it.",
            narrows=OPERATOR, header="UNCONFINED",
            help="Its tools run with the operator's whole power, outside the sandbox; "
                 "only the operator gives it, and no child inherits it."),
    Setting("tier", "choice", "How its model calls are sold: standard, batch (through the "
            "provider's batch API, at half price, answered within a day) or flex "
            "(OpenAI's slower, cheaper tier) (agentctl(7), TIERS).", inherit=True,
            default=TIERS[0], choices=TIERS, header="TIER", metavar="TIER",
            help="standard, batch or flex: how the child's model calls are sold "
                 "(agentctl(7), TIERS; default: the parent's, else standard)."),
    Setting("options", "options", "Options of its model's calls, KEY=VALUE separated by "
            "commas (temperature, max_tokens ...: agentctl(7), Models).", inherit=True,
            keyword="model_options", header="OPTIONS", option=("-o", "--model-option"),
            metavar="KEY=VALUE",
            help="A model option (temperature=0.2, max_tokens=800 ...: agentctl(7), "
                 "Models); repeatable (default: the parent's)."),
    Setting("schema", "schema", "The JSON Schema its final reply must fit: a file, or the "
            "JSON itself (agentctl(7), RESULTS AS DATA).", header="SCHEMA",
            metavar="FILE|JSON",
            help="The child's final reply must be a JSON value that fits this JSON "
                 "Schema (a file, or the JSON itself)."),
)

BY_NAME = {s.name: s for s in SETTINGS}
KEYS = frozenset(s.key for s in SETTINGS)
COLUMNS = tuple(c for s in SETTINGS for c in s.columns)    # the agents columns they fill


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
