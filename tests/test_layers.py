"""The layering of ARCHITECTURE.md, enforced: every import between agentctl's own
modules (at the top of a file or inside a function) points down, the import
graph has no cycle, and only the storage layer writes SQL."""

import ast
import os
import re

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
    ("ops", ["agentctl.ops", "agentctl.models"]),
    ("store", ["agentctl.store"]),
    ("base", ["agentctl.errors", "agentctl.ids", "agentctl.text", "agentctl.clock", "agentctl.env",
              "agentctl.jsonin", "agentctl.keys", "agentctl.paths", "agentctl.voice", "agentctl"]),
]
# Beside each other on one layer, yet never importing each other.
APART = [("agentctl.ops", "agentctl.models")]


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
    found += [f"import cycle: {' -> '.join(cycle)}" for cycle in cycles(edges)]
    return found


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
    ("agentctl.voice", "from agentctl.store import registry",
     "agentctl.voice -> agentctl.store.registry: base imports store, a layer above it"),
])
def test_the_check_catches_an_upward_import_and_a_cycle(module, source, expected):
    """The check itself can fail: each of these, added to today's tree, is found."""
    modules = dict(sources())
    modules[module] = modules.get(module, "") + "\n" + source + "\n"
    assert expected in violations(modules)


# A call on a connection, or a string that starts as a statement does.
SQL = re.compile(r"\bconn\w*\.execute|[\"']\s*(SELECT|INSERT|UPDATE|DELETE|WITH|PRAGMA|BEGIN|"
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
