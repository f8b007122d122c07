"""What a plain turn costs around its model call (agent-run(1), PERFORMANCE; make bench's
turn line): the modules `agent-run AGENT` loads for one turn of an API's model that
calls no tool, and the SQL statements it runs. Each is pinned: a module more, or more
statements, is a visible decision (this file changes with it), not a drift."""

import os
import subprocess
import sys

import pytest

from tests.conftest import BACKEND, ROOT, agent, fork
from tests.fakeapi import fakeapi  # noqa: F401  (a fixture)

# agentctl's modules a plain turn loads: the single agent's turn, without --all
# (cli.runall), stream-json (cli.streamjson), OpenTelemetry (turn.tracing, telemetry,
# otlp), external tools (tools.*: the catalog, the sandbox, calls, MCP).
PLAIN_TURN = {
    "agentctl", "agentctl.clock", "agentctl.endpoint", "agentctl.env", "agentctl.errors",
    "agentctl.eventkinds", "agentctl.ids", "agentctl.jsonin", "agentctl.keys",
    "agentctl.limits", "agentctl.mailloop", "agentctl.modelspec", "agentctl.money",
    "agentctl.paths", "agentctl.shape", "agentctl.text", "agentctl.voice",
    "agentctl.voice.tools",
    "agentctl.settings", "agentctl.settings.kinds",
    "agentctl.cli", "agentctl.cli.options", "agentctl.cli.output", "agentctl.cli.program",
    "agentctl.cli.run", "agentctl.cli.stdio",
    "agentctl.models", "agentctl.models.api", "agentctl.models.base", "agentctl.models.http",
    "agentctl.models.limits", "agentctl.models.openai", "agentctl.models.transport",
    "agentctl.ops", "agentctl.ops.asks", "agentctl.ops.authority", "agentctl.ops.budget",
    "agentctl.ops.confinement", "agentctl.ops.deadlines", "agentctl.ops.docs",
    "agentctl.ops.elicitation",  # (a request's kind, with ops.asks: 80 lines, no import)
    "agentctl.ops.ending", "agentctl.ops.endpoints", "agentctl.ops.gate",
    "agentctl.ops.grants", "agentctl.ops.lease", "agentctl.ops.lifecycle", "agentctl.ops.mail",
    "agentctl.ops.prices", "agentctl.ops.signals", "agentctl.ops.supervise",
    "agentctl.ops.turns",
    "agentctl.store", "agentctl.store.accounts", "agentctl.store.asks", "agentctl.store.batched",
    "agentctl.store.db",
    "agentctl.store.dialect", "agentctl.store.documents", "agentctl.store.endpoints",
    "agentctl.store.events", "agentctl.store.history", "agentctl.store.mailbox",
    "agentctl.store.pending", "agentctl.store.registry", "agentctl.store.toolruns",
    "agentctl.store.turnlog", "agentctl.store.waits",
    "agentctl.turn", "agentctl.turn.builtin", "agentctl.turn.compaction",
    "agentctl.turn.context", "agentctl.turn.requests", "agentctl.turn.runner",
    "agentctl.turn.toolset",
    "agentctl.turn.watch",
    # (whether the agent works in a layer, and its stack: workspace.layers, 99 lines)
    "agentctl.workspace", "agentctl.workspace.layers", "agentctl.store.layers",
}
# On PostgreSQL, its connection and schema too (psycopg, an optional extra)
POSTGRESQL = {"agentctl.store.pg", "agentctl.store.libpq", "agentctl.store.pgschema"}
# Nor any of these, which requests (the floor's own import) does not load either (but
# psycopg imports dataclasses)
NOT_LOADED = {"subprocess", "dataclasses"}
# On either backend: requests, and what it adds to urllib3, which the model call speaks
# through (models/transport.py); a call over plain http needs no certificates either.
NOT_ON_A_CALLS_PATH = {"requests", "charset_normalizer", "idna", "http.cookiejar", "certifi"}
# The statements of that turn, on each backend: a turn that takes one prompt, one call
# whose response says its rate limits (the gate writes what it learnt), then commits.
STATEMENTS = {"sqlite": 82, "postgresql": 76}
MARGIN = 2


def loaded_by(args, extra=()):
    """The modules `agent-run ARGS` loads, run as its own process: (exit status, set)."""
    code = (f"import sys; sys.argv = ['agent-run'] + {list(args)!r}\n"
            "from agentctl.cli.run import main\n"
            "try:\n    status = main()\nfinally:\n"
            "    print(' '.join(sys.modules), file=sys.stderr)\n"
            "sys.exit(status)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, env=dict(os.environ, **dict(extra)), timeout=120)
    return proc.returncode, set(proc.stderr.split()[-2000:])


def test_a_plain_turn_loads_the_modules_it_needs_and_no_more(fakeapi):  # noqa: F811
    fork("-n", "a", "-m", "openai:gpt-test", "hello")
    fakeapi.reply("hi")
    status, modules = loaded_by(["a"])
    assert status == 0 and len(fakeapi.requests) == 1
    assert modules & NOT_ON_A_CALLS_PATH == set()
    ours = {m for m in modules if m == "agentctl" or m.startswith("agentctl.")}
    expected = PLAIN_TURN | (POSTGRESQL if BACKEND["name"] == "postgresql" else set())
    assert sorted(ours - expected) == [], \
        f"new on a plain turn's path: add it, on purpose: {sorted(ours - expected)}"
    assert sorted(expected - ours) == [], "no longer loaded: take it off the list"
    if BACKEND["name"] == "sqlite":
        assert modules & NOT_LOADED == set()


def test_what_a_plain_turn_does_not_load_loads_when_asked_for(fakeapi):  # noqa: F811
    """The list above is not the whole program: each part left out is there when used."""
    fork("-n", "a", "-m", "openai:gpt-test", "hello")
    fakeapi.reply("hi")
    _, streamed = loaded_by(["--format", "stream-json", "a"])
    assert "agentctl.cli.streamjson" in streamed
    fork("-n", "b", "-m", "openai:gpt-test", "hello")
    fakeapi.reply("hi")
    _, traced = loaded_by(["b"], {"OTEL_TRACES_EXPORTER": "console",
                                  "OTEL_METRICS_EXPORTER": "none"})
    assert "agentctl.turn.tracing" in traced
    _, everything = loaded_by(["--all"])
    assert "agentctl.cli.runall" in everything
    fork("-n", "c", "-m", "openai:gpt-test", "--allow", "*", "hello")
    fakeapi.reply("hi")
    _, granted = loaded_by(["c"])
    assert "agentctl.tools.catalog" in granted
    assert {"agentctl.tools.sandbox", "agentctl.tools.mcpsession"} & granted == set()


def test_a_plain_turn_runs_the_statements_it_needs(fakeapi, monkeypatch):  # noqa: F811
    from agentctl.store import db
    fork("-n", "a", "-m", "openai:gpt-test", "hello")
    fakeapi.reply("hi")
    statements = []

    def trace(sql, params):
        statements.append(" ".join(sql.split()))
    monkeypatch.setattr(db.Connection, "tracer", staticmethod(trace))
    if BACKEND["name"] == "postgresql":
        from agentctl.store import pg
        monkeypatch.setattr(pg.Connection, "tracer", staticmethod(trace))
    result = agent("run", "a")
    assert result.code == 0 and result.out == "hi\n", result.err
    expected = STATEMENTS[BACKEND["name"]]
    assert expected - MARGIN <= len(statements) <= expected, "\n".join(statements)
