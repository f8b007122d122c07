"""The layering of ARCHITECTURE.md, enforced: every import between agentctl's own
modules (at the top of a file or inside a function) points down, the import
graph has no cycle, only the storage layer writes SQL, models/ knows nothing of
the database, click is the CLI's alone, and no module grows past MAX_LINES."""

import ast
import os
import re
import subprocess
import sys

import pytest

from .conftest import ROOT

PACKAGE = os.path.join(ROOT, "agentctl")

# Highest first. A module may import its own layer's modules and those of the
# layers below it, never one above. models sits beside ops: the turn uses both,
# and a model provider knows nothing of agents.
LAYERS = [
    ("launch", ["agentctl.launch"]),
    ("cli", ["agentctl.cli"]),
    ("turn", ["agentctl.turn"]),
    ("tools", ["agentctl.tools"]),
    ("ops", ["agentctl.ops", "agentctl.models", "agentctl.workspace"]),
    ("store", ["agentctl.store"]),
    ("base", ["agentctl.errors", "agentctl.ids", "agentctl.text", "agentctl.clock", "agentctl.env",
              "agentctl.jsonin", "agentctl.keys", "agentctl.paths", "agentctl.voice", "agentctl"]),
]
# Beside each other on one layer, yet never importing each other.
APART = [("agentctl.ops", "agentctl.models")]
# Never imported by the first, whatever the layers allow: a model provider knows
# nothing of the database.
NEVER = [("agentctl.models", "agentctl.store")]


def layer_of(module):
    best = None
    for rank, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if module == prefix or module.startswith(prefix + "."):
                if best is None or len(prefix) > best[1]:
                    best = (rank, len(prefix), prefix)
    return best and (best[0], best[2])


def imports_of(module, source):
    """The agentctl modules `module`'s source imports, wherever the import stands."""
    package = module if module.endswith("__init__") else module.rpartition(".")[0]
    package = package.removesuffix(".__init__")
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("agentctl")}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not target.startswith("agentctl"):
                continue
            for alias in node.names:     # `from agentctl.store import db` imports a module
                found.add(f"{target}.{alias.name}" if alias.name != "*" else target)
    return found


def sources():
    for top, _, files in os.walk(PACKAGE):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(top, name)
                module = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
                yield module.removesuffix(".__init__"), open(path, encoding="utf-8").read()


def graph(modules):
    """{module: {modules it imports}}, each import resolved to a module that exists."""
    known = set(modules)

    def resolve(name):
        while name and name not in known:
            name = name.rpartition(".")[0]       # agentctl.store.db.connect -> agentctl.store.db
        return name

    return {m: {resolve(i) for i in imports_of(m, src)} - {m, "", "agentctl"}
            for m, src in modules.items()}


def violations(modules):
    """Upward imports, imports between modules kept apart, and cycles."""
    found = []
    edges = graph(modules)
    for module, targets in sorted(edges.items()):
        mine = layer_of(module)
        for target in sorted(targets):
            theirs = layer_of(target)
            if mine is None or theirs is None:
                found.append(f"{module} -> {target}: a module in no layer")
            elif theirs[0] < mine[0]:
                found.append(f"{module} -> {target}: {LAYERS[mine[0]][0]} imports "
                             f"{LAYERS[theirs[0]][0]}, a layer above it")
            elif any({mine[1], theirs[1]} == set(pair) for pair in APART):
                found.append(f"{module} -> {target}: {mine[1]} and {theirs[1]} are kept apart")
            elif any(_within(module, a) and _within(target, b) for a, b in NEVER):
                found.append(f"{module} -> {target}: {mine[1]} never imports {theirs[1]}")
    found += [f"import cycle: {' -> '.join(cycle)}" for cycle in cycles(edges)]
    return found


def _within(module, prefix):
    return module == prefix or module.startswith(prefix + ".")


def cycles(edges):
    """One cycle per strongly connected group of modules that import each other."""
    found, state = [], {}

    def visit(node, path):
        state[node] = "open"
        for target in sorted(edges.get(node, ())):
            if state.get(target) == "open":
                found.append(path[path.index(target):] + [target])
            elif target not in state:
                visit(target, path + [target])
        state[node] = "done"

    for node in sorted(edges):
        if node not in state:
            visit(node, [node])
    return found


def test_every_import_points_down_and_none_goes_round():
    assert violations(dict(sources())) == []


@pytest.mark.parametrize("module, source, expected", [
    ("agentctl.store.registry", "from agentctl.ops import budget",
     "agentctl.store.registry -> agentctl.ops.budget: store imports ops, a layer above it"),
    ("agentctl.store.registry", "def f():\n    from ..ops.budget import carve",
     "agentctl.store.registry -> agentctl.ops.budget: store imports ops, a layer above it"),
    ("agentctl.ops.budget", "import agentctl.cli.ps",
     "agentctl.ops.budget -> agentctl.cli.ps: ops imports cli, a layer above it"),
    ("agentctl.models.http", "from agentctl.ops import mail",
     "agentctl.models.http -> agentctl.ops.mail: agentctl.models and agentctl.ops are kept apart"),
    ("agentctl.ops.mail", "from agentctl.ops import budget",
     "import cycle: agentctl.ops.mail -> agentctl.ops.budget -> agentctl.ops.mail"),
    ("agentctl.models.http", "def f():\n    from agentctl.store import db",
     "agentctl.models.http -> agentctl.store.db: agentctl.models never imports agentctl.store"),
    ("agentctl.voice", "from agentctl.store import registry",
     "agentctl.voice -> agentctl.store.registry: base imports store, a layer above it"),
])
def test_the_check_catches_an_upward_import_and_a_cycle(module, source, expected):
    """The check itself can fail: each of these, added to today's tree, is found."""
    modules = dict(sources())
    modules[module] = modules.get(module, "") + "\n" + source + "\n"
    assert expected in violations(modules)


# A program (a module pyproject.toml's [project.scripts] starts) is imported by no module:
# what two programs share lives below both (ARCHITECTURE.md, Invariants), so that each
# program's start-up is its own and no program's change reaches into another.
def programs():
    import tomllib
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        scripts = tomllib.load(f)["project"]["scripts"]
    return {target.partition(":")[0] for target in scripts.values()}


def programs_imported(modules, programs):
    return [f"{module} -> {target}: imports a program"
            for module, targets in sorted(graph(modules).items())
            for target in sorted(targets & programs)]


def test_no_module_imports_a_program():
    found = programs()
    assert "agentctl.cli.log" in found and "agentctl.cli.top" in found
    assert programs_imported(dict(sources()), found) == []


@pytest.mark.parametrize("module, source, program", [
    ("agentctl.cli.top", "from agentctl.cli import kill", "agentctl.cli.kill"),
    ("agentctl.cli.top", "from agentctl.cli.ps import COLUMNS", "agentctl.cli.ps"),
    ("agentctl.cli.streamjson", "def f():\n    import agentctl.cli.log  # (a reason)",
     "agentctl.cli.log"),
])
def test_the_program_check_catches_an_import_of_a_program(module, source, program):
    modules = dict(sources())
    modules[module] += "\n" + source + "\n"
    assert programs_imported(modules, programs()) == [f"{module} -> {program}: imports a program"]


# A call on a connection, or a string that starts as a statement does (not an HTTP
# request's method).
SQL = re.compile(r"\bconn\w*\.execute|(?<!method=)[\"']\s*(SELECT|INSERT|UPDATE|DELETE|WITH|PRAGMA|BEGIN|"
                 r"COMMIT|ROLLBACK|CREATE|ALTER)\b")


def sql_outside_the_store(modules):
    return [f"{module}: {line.strip()}" for module, src in modules.items()
            if not module.startswith("agentctl.store")
            for line in src.splitlines() if SQL.search(line)]


def test_only_the_storage_layer_writes_sql():
    assert sql_outside_the_store(dict(sources())) == []


@pytest.mark.parametrize("line", ['    conn.execute("UPDATE agents SET status = \'S\'")',
                                  '    QUERY = f"SELECT id FROM agents WHERE {where}"'])
def test_the_sql_check_catches_a_statement_outside_the_store(line):
    modules = dict(sources())
    modules["agentctl.ops.mail"] += line + "\n"
    assert sql_outside_the_store(modules) == [f"agentctl.ops.mail: {line.strip()}"]


# click is the CLI layer's. (launch.py, which starts a program, only names it, when a
# checkout's program can't import it.)
def click_outside_the_cli(modules):
    found = []
    for module, src in sorted(modules.items()):
        if module.startswith("agentctl.cli"):
            continue
        for node in ast.walk(ast.parse(src)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            if any(n == "click" or n.startswith("click.") for n in names):
                found.append(f"{module}: imports click")
    return found


def test_click_is_imported_only_by_the_cli():
    assert click_outside_the_cli(dict(sources())) == []


def test_the_click_check_catches_an_import_outside_the_cli():
    modules = dict(sources())
    modules["agentctl.ops.mail"] += "\ndef f():\n    import click\n"
    assert click_outside_the_cli(modules) == ["agentctl.ops.mail: imports click"]


# A module is read whole: past this, split it by what it holds (ARCHITECTURE.md).
MAX_LINES = 400


def long_modules(modules):
    return [f"{module}: {len(src.splitlines())} lines" for module, src in sorted(modules.items())
            if len(src.splitlines()) > MAX_LINES]


def test_no_module_is_over_max_lines():
    assert long_modules(dict(sources())) == []


def test_the_length_check_catches_a_long_module():
    modules = dict(sources())
    modules["agentctl.ops.mail"] += "\n" * MAX_LINES
    assert [m.split(":")[0] for m in long_modules(modules)] == ["agentctl.ops.mail"]


# What only a layer above the store may do: probe a process, read a setting from the
# environment. The one exception, with its reason:
STORE_SETTINGS = {"agentctl.store.db": "the busy timeout: how a database is opened"}
BEYOND_ROWS = re.compile(r"\bos\.(kill|getpid|getenv|environ)\b"
                         r"|\benv\.(number|duration|durations)\(|\bimport socket\b")


def store_beyond_rows(modules):
    return [f"{module}: {line.strip()}" for module, src in modules.items()
            if module.startswith("agentctl.store") and module not in STORE_SETTINGS
            for line in src.splitlines() if BEYOND_ROWS.search(line)]


def test_the_store_only_reads_and_writes_rows():
    assert store_beyond_rows(dict(sources())) == []


@pytest.mark.parametrize("line", ["        os.kill(int(pid), 0)",
                                  '    return env.duration("AGENTCTL_REAP_AFTER", 86400.0)',
                                  '    given = os.environ.get("AGENTCTL_HOST", "")'])
def test_the_rows_check_catches_a_probe_and_a_setting(line):
    modules = dict(sources())
    modules["agentctl.store.registry"] += line + "\n"
    assert store_beyond_rows(modules) == [f"agentctl.store.registry: {line.strip()}"]


# Who opens a transaction (ARCHITECTURE.md, Invariants): a program (cli/) or the turn
# (turn/). Below them a function runs in its caller's and opens none, but these, each
# its own transaction for the reason given:
RUN_STEP = "a step of a run: a transaction of the run that holds the agent (lease.holding)"
OWN_TRANSACTION = {
    "agentctl.store.db._migrate": "opening a database migrates it, one migrator at a time",
    "agentctl.store.copy.copy": "agent-db copy writes DST in one transaction",
    "agentctl.ops.lease.claim": "the claim: the transaction that starts a run",
    "agentctl.ops.lease.holding": "the run's transaction itself, its claim checked inside it",
    "agentctl.ops.lease.heartbeat": "a thread with a connection of its own: a commit a beat",
    "agentctl.ops.gate.Gate": "a model call's thread with a connection of its own: a "
                                   "slot taken and given back by the run (lease.holding)",
    "agentctl.ops.lifecycle.wait": "a waiting loop: each reap is committed as it is found",
    "agentctl.ops.deadlines.carry_out": "every writing program's first step, and the tick of a "
                                        "waiting loop: it looks without the write lock first",
    "agentctl.ops.turns.start": RUN_STEP,
    "agentctl.ops.ending.release": RUN_STEP,
    "agentctl.ops.ending.commit": RUN_STEP,
    "agentctl.ops.ending.killed": RUN_STEP,
    "agentctl.ops.ending.paused": RUN_STEP,
    "agentctl.ops.ending.stopped": RUN_STEP,
}
OPENERS = ("transaction", "holding")       # store.db.transaction, ops.lease.holding
BELOW_THE_TURN = ("agentctl.tools", "agentctl.ops", "agentctl.models", "agentctl.store")


def transactions_opened(modules):
    """{'module.function': [what it calls]} for each function below the turn that opens
    a transaction (a function nested in another counts as the outer one)."""
    found = {}
    for module, src in modules.items():
        if not module.startswith(BELOW_THE_TURN):
            continue
        for top in ast.parse(src).body:
            name = f"{module}.{getattr(top, 'name', '')}".rstrip(".")
            for node in ast.walk(top):
                if isinstance(node, ast.Call):
                    called = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
                    if called in OPENERS:
                        found.setdefault(name, []).append(f"{called}()")
    return found


def transaction_violations(modules):
    opened = transactions_opened(modules)
    return [f"{name}: opens a transaction ({', '.join(sorted(set(calls)))})"
            for name, calls in sorted(opened.items()) if name not in OWN_TRANSACTION] + \
        [f"{name}: listed as its own transaction, and opens none"
         for name in sorted(set(OWN_TRANSACTION) - set(opened))]


def test_only_a_program_or_the_turn_opens_a_transaction():
    assert transaction_violations(dict(sources())) == []


@pytest.mark.parametrize("module, source, expected", [
    ("agentctl.ops.lifecycle",
     "def reap(conn, agent_id):\n    with transaction(conn):\n        collect(conn, agent_id)",
     "agentctl.ops.lifecycle.reap: opens a transaction (transaction())"),
    ("agentctl.ops.signals",
     "def send(conn, target, sig):\n    with db.transaction(conn):\n        apply(conn, target, sig)",
     "agentctl.ops.signals.send: opens a transaction (transaction())"),
    ("agentctl.ops.budget",
     "def charge_now(conn, agent_id):\n    def later():\n        with holding(conn, agent_id):\n"
     "            pass\n    return later",
     "agentctl.ops.budget.charge_now: opens a transaction (holding())"),
    ("agentctl.store.registry",
     "def claim_now(conn):\n    with transaction(conn):\n        pass",
     "agentctl.store.registry.claim_now: opens a transaction (transaction())"),
])
def test_the_transaction_check_catches_one_opened_below_the_turn(module, source, expected):
    modules = dict(sources())
    modules[module] += "\n\n" + source + "\n"
    assert transaction_violations(modules) == [expected]


def test_the_transaction_check_catches_an_exception_that_opens_none():
    modules = dict(sources())
    modules["agentctl.ops.lifecycle"] = modules["agentctl.ops.lifecycle"].replace(
        "with transaction(conn):", "if True:")
    assert transaction_violations(modules) == [
        "agentctl.ops.lifecycle.wait: listed as its own transaction, and opens none"]


# An import stands at the top of its file. One inside a function says why on its line, in
# one of two forms: what it would cost the start-up of the programs that don't need it,
# measured (python -X importtime, or a timed import), and when it is needed; or which
# optional extra (pyproject.toml) it comes with.
REASON = re.compile(r"# \((start-up: [\d.]+( to [\d.]+)? m?s( of \w+)?, only .+"
                    r"|an optional extra: (?P<extra>[\w-]+))\)$")


def extras():
    import tomllib
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return set(tomllib.load(f)["project"]["optional-dependencies"])


def lazy_imports_without_a_reason(modules):
    found = []
    for module, line, _ in imports_in_functions(modules):
        text = modules[module].splitlines()[line - 1]
        reason = REASON.search(text)
        if not reason or reason["extra"] and reason["extra"] not in extras():
            found.append(f"{module}:{line}: {text.strip()}")
    return sorted(set(found))


def test_an_import_in_a_function_says_why():
    assert lazy_imports_without_a_reason(dict(sources())) == []


@pytest.mark.parametrize("line", [
    "    from agentctl.ops import budget",
    "    import json     # (here: only for a picture)",
    "    import json  # (start-up: only for a picture)",
    "    import psycopg  # (an optional extra: pg)",
])
def test_the_lazy_import_check_catches_one_without_a_reason(line):
    modules = dict(sources())
    modules["agentctl.ops.mail"] += f"\ndef f():\n{line}\n"
    lines = len(modules["agentctl.ops.mail"].splitlines())
    assert lazy_imports_without_a_reason(modules) == [f"agentctl.ops.mail:{lines}: {line.strip()}"]


def imports_in_functions(modules):
    """(module, line number, the module imported) of every import inside a function."""
    found = set()
    for module, src in modules.items():
        for function in ast.walk(ast.parse(src)):
            if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(function):
                if isinstance(node, ast.Import):
                    found |= {(module, node.lineno, a.name) for a in node.names}
                elif isinstance(node, ast.ImportFrom):
                    target = node.module or ""
                    if node.level:
                        package = module.split(".")[:-node.level]
                        target = ".".join(package + ([target] if target else []))
                    found |= {(module, node.lineno, f"{target}.{a.name}"
                               if f"{target}.{a.name}" in modules else target)
                              for a in node.names}
    return sorted(found)


def loaded_by_every_program():
    """The modules that every program has loaded once its module is imported, as an
    installed copy starts (without site: a checkout's editable install puts modules of
    its own, pathlib's, in every start)."""
    import site
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, *site.getsitepackages()]))
    code = ("import sys, importlib; importlib.import_module(sys.argv[1]); "
            "print(' '.join(sys.modules))")
    procs = [subprocess.Popen([sys.executable, "-S", "-c", code, module], env=env,
                              stdout=subprocess.PIPE, text=True) for module in programs()]
    loaded = [set(proc.communicate()[0].split()) for proc in procs]
    assert all(proc.returncode == 0 for proc in procs)
    return set.intersection(*loaded)


def imported_in_vain(modules, loaded):
    """Imports inside a function of what every program has loaded at start: no start-up
    is saved, and the function only reads as if some were."""
    return [f"{module}:{line}: {target}" for module, line, target in imports_in_functions(modules)
            if target in loaded]


def test_no_function_imports_what_every_program_has_loaded():
    loaded = loaded_by_every_program()
    assert {"datetime", "threading", "agentctl.paths"} <= loaded and "json" not in loaded
    assert imported_in_vain(dict(sources()), loaded) == []


def test_the_vain_import_check_catches_one():
    modules = dict(sources())
    modules["agentctl.ops.mail"] += "\ndef f():\n    import datetime\n"
    lines = len(modules["agentctl.ops.mail"].splitlines())
    assert imported_in_vain(modules, {"datetime"}) == [f"agentctl.ops.mail:{lines}: datetime"]


# agentctl's own code in a child process (a program, the proxy's forwarders, the
# sandbox's launcher, a Python tool) is started by agentctl.spawn alone: its Python,
# agentctl first on the import path, never the current directory (-P). paths.py names
# the interpreter too, as code no tool may write (paths.agentctl_code).
SPAWN = re.compile(r"\bsys\.executable\b|[\"']-P[\"' ]|sys\.path\.insert|\bPYTHONPATH\b.*"
                   r"\bpathsep\b|from agentctl\.cli\.[\"'{]")
SPAWN_EXCEPTIONS = {"agentctl.spawn": "the helper itself",
                    "agentctl.paths": "the interpreter's directory, protected"}


def spawning_outside_spawn(modules):
    return [f"{module}: {line.strip()}" for module, src in sorted(modules.items())
            if module not in SPAWN_EXCEPTIONS
            for line in src.splitlines() if SPAWN.search(line)]


def test_agentctl_runs_its_own_code_in_a_child_through_spawn_alone():
    assert spawning_outside_spawn(dict(sources())) == []


SPAWNED_ELSEWHERE = (
    'base = [sys.executable, "-P", "-c", "import sys; from agentctl.cli.run import main"]',
    'argv = [python, "-P", "-c", code]',
    'env["PYTHONPATH"] = os.pathsep.join((top, env.get("PYTHONPATH", "")))',
    "code = f\"import sys; sys.path.insert(0, {top!r}); launch()\"",
    'code = f"from agentctl.cli.{program} import main"',
)


def test_the_spawn_check_catches_a_child_made_elsewhere():
    modules = dict(sources())
    modules["agentctl.tools.calls"] += "".join(f"    {line}\n" for line in SPAWNED_ELSEWHERE)
    assert spawning_outside_spawn(modules) == [f"agentctl.tools.calls: {line}"
                                               for line in SPAWNED_ELSEWHERE]


# Waiting for another connection's commit is one loop, store.waits.commits (agent-mail -w,
# agent-wait, agent-log -f, agent-top, a model call's gate): nothing else reads the
# number a commit changes.
def commit_looks_outside_the_loop(modules):
    return [f"{module}: {line.strip()}" for module, src in sorted(modules.items())
            if module != "agentctl.store.waits"
            for line in src.splitlines() if re.search(r"\bdata_version\(|\.changes\(\)", line)]


def test_one_loop_waits_for_a_commit():
    assert commit_looks_outside_the_loop(dict(sources())) == []
    modules = dict(sources())
    modules["agentctl.cli.log"] += "    version = data_version(conn)\n"
    assert commit_looks_outside_the_loop(modules) == [
        "agentctl.cli.log: version = data_version(conn)"]
