"""agentctl's voice to the model has one home, agentctl/voice: no module outside
it writes one of the forms the model reads (a notice, a heading, a marker, a tool's
error), and what it writes does not depend on when it is written, so that a stored
message, replayed, is the same prefix at every request."""

import ast
import inspect
import time

import pytest

from agentctl import clock, voice

from .test_layers import sources

# A literal (a string, or a constant part of an f-string; docstrings aside) that
# starts with one of STARTS or holds one of WITHIN is one of voice.py's forms.
STARTS = ("error: ", "[TIMER]", "[COMPACT", "[DOCUMENT", "INBOX", "MID-TURN UPDATE",
          "You are the child", "You asked to be woken", "restarts used up", "idle: no input for",
          "no answer in time", "sleeping until", "exiting after this", "unknown tool: ",
          "interrupted: ", "timed out after", "arguments are not valid JSON",
          "(no result in this context", "the agent exited", "the agent was sent TERM",
          "the server said the call failed", "[SCHEMA]")
WITHIN = (" new]", "exit notification", "failure notice", "budget notice", "is over budget",
          ") asks", "Answer with the answer tool", "Decide with the answer tool",
          "; exit status ", "\nresult:\n", "\nerror:\n", "restarting in", "not restarted",
          "[output cut", "still running", "forked from", "delivered as an inbox message",
          "not one of your descendants", "has no zone", "denied by ", "your supervisor",
          "Summarise the conversation", "written by you", "any more: your next turn",
          "returned besides text", "[resource ", "are held in a mail loop")


def form(text):
    """The marker of voice.py's form that `text` starts or holds, or None."""
    for marker in STARTS:
        if text.startswith(marker):
            return marker
    for marker in WITHIN:
        if marker in text:
            return marker
    return None


def literals(source):
    """(line, text) of every string literal in `source` but the bare ones (docstrings)."""
    tree = ast.parse(source)
    bare = {id(node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)}
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and id(node) not in bare]


# What is the operator's to read, not the model's: the programs' output (cli/), and the
# event log's lines (agent-log's "forked from lead" is not the child's prompt).
OPERATORS = ("agentctl.cli", "agentctl.eventkinds")


def voice_elsewhere(modules):
    """Voice.py's forms written by another module but the operator's (OPERATORS)."""
    found = []
    for module, source in sorted(modules.items()):
        if module.split(".")[:2] == ["agentctl", "voice"] or module.startswith(OPERATORS):
            continue
        for line, text in literals(source):
            marker = form(text)
            if marker:
                found.append(f"{module}:{line}: {text!r} is voice.py's {marker!r}")
    return found


def test_only_voice_py_writes_what_the_model_reads():
    assert voice_elsewhere(dict(sources())) == []


def test_every_form_looked_for_is_one_voice_py_writes():
    """The lists above name texts that exist: a form renamed in voice.py is renamed here."""
    rendered = [text for module in (voice, voice.tools)
                for _, text in literals(inspect.getsource(module))]
    rendered += [text for text in map(render, SAMPLES) if isinstance(text, str)]
    rendered += [value for name, value in vars(voice).items()
                 if isinstance(value, str) and not name.startswith("_")]
    missing = [m for m in STARTS + WITHIN if not any(m in t for t in rendered)]
    assert missing == []


@pytest.mark.parametrize("module, line", [
    ("agentctl.ops.turns", 'TEXT = f"[TIMER] You asked to be woken at {when}."'),
    ("agentctl.turn.toolset", 'TEXT = f"error: unknown tool: {name} (tools: {offered})"'),
    ("agentctl.ops.mail", 'BODY = f"{label} ({agent_id}) exited normally; exit status {code}"'),
    ("agentctl.turn.context", 'HEAD = ("[COMPACTED MEMORY] A summary, written by you, of the "\n'
                              '        "earlier part of this conversation:\\n")'),
    ("agentctl.ops.budget", 'BODY = f"{label} ({acc}) is over budget: {words}; its turns ..."'),
    ("agentctl.turn.runner", 'mail.take_into_turn(conn, agent_id, turn_id, "MID-TURN UPDATE")'),
    ("agentctl.tools.calls", 'text += f"\\n[output cut at {cap} bytes]"'),
    ("agentctl.ops.asks", 'BODY = f"{label} ({agent_id}) asks (request {request_id}):\\n"'),
])
def test_the_check_catches_a_notice_written_outside_voice_py(module, line):
    modules = dict(sources())
    modules[module] += "\n" + line + "\n"
    found = voice_elsewhere(modules)
    assert len(found) == 1 and found[0].startswith(module + ":"), found


def test_a_docstring_may_quote_a_form():
    modules = {"agentctl.ops.mail": '"""Tells the parent: "... exited normally; exit status 0"."""'}
    assert voice_elsewhere(modules) == []


# -- prefix stability: the same arguments, the same text, whenever it is written

T = 1_790_000_000.0       # 2026-09-21T...Z
MAIL = {"id": 7, "kind": "exit", "created_at": T - 700, "deliver_at": None,
        "body": "b exited normally; exit status 0\nresult:\ndone"}
DEFERRED = {"id": 8, "kind": "mail", "created_at": T - 7200, "deliver_at": T - 60,
            "body": "remember\u2028the milk"}
SAMPLES = {
    "tool_error": ("refused",),
    "is_error": ("error: refused",),
    "inbox": (voice.INBOX, [(DEFERRED, "the operator"), (MAIL, "b (AAAA)")], T),
    "exit_notice": ("b", "AAAA", 0, None, "done"),
    "failure_notice": ("b", "AAAA", voice.NOT_RESTARTED, "model API error: 400"),
    "misfit": ("$.answer is missing",),
    "restarting": (30.0, 1, 5, 3600.0),
    "loop_notice": ("a", "AAAA", "b", "BBBB", 20, "1h", 0),
    "restarts_used_up": (5, 3600.0, "model API error: 400"),
    "idle_exit": (600.0,),
    "spent": (1_200_000, 1_000_000, "usd"),
    "budget_notice": ("b", "AAAA", 1200, 1000, "c", "CCCC"),
    "shown_call": ("run", '{"command": "ls\\n"}'),
    "question_mail": ("b", "AAAA", "RRRR", "which one?"),
    "elicitation_mail": ("b", "AAAA", "RRRR", "notes__greet", "Who is there?",
                         "name (string, required)"),
    "elicitation_what": ("notes__greet", "Who is there?", "name (string, required)"),
    "approval_mail": ("b", "AAAA", "RRRR", "run", '{"command": "ls"}'),
    "request_result": ("denied", "too risky", False),
    "timer": (T + 3600,),
    "forked_child": ("CCCC", "a", "AAAA"),
    "decided": ("RRRR", "approved"),
    "sent_mail": (9,),
    "unread": (2,),
    "mail_coming": (2,),
    "signalled": ("TERM", 3),
    "collected": ("CCCC", "c", "exited", 0, "line one\nline two"),
    "still_running": ("CCCC",),
    "descendant": ("CCCC", "c", "S", "worker"),
    "sleeping_until": (T + 90,),
    "doc_written": ("notes", 2),
    "document": ("notes", 2, "the operator", "global", "# Notes"),
    "doc_line": ("notes", 2, "global", "a (AAAA)", 7),
    "doc_removed": ("notes", 2),
    "cut_diff": ("diff --git a/x b/x", 250000),
    "merged": (["a.txt", "b/c"], [".git/config"]),
    "conflicts": ("w2: 1 path changed on both sides since the fork", ["a.txt"]),
    "unknown_tool": ("frobnicate", ["fork", "send"]),
    "not_json": ("Expecting value",),
    "not_a_descendant": ("zed",),
    "until_not_iso": ("tomorrow",),
    "until_without_zone": ("2026-09-22T09:00",),
    "timed_out": (60.0, True),
    "exit_status": (2, "no such file"),
    "cant_run": ("/bin/tool", "Permission denied"),
    "sandbox_failed": ("the sandbox needs bubblewrap (bwrap): install it",),
    "output_cut": (65536,),
    "media_note": ("image", "image/png", "iVBORw0KGgo="),
    "mcp_resource": ("file:///notes.txt", "the notes"),
    "mcp_link": ("file:///notes.txt", "notes"),
    "mcp_tool_gone": ("notes", "extra"),
    "media_from": (["notes__picture", "notes__picture"],),
}


def render(name, *args):
    return getattr(voice, name)(*(args or SAMPLES[name]))


def at(monkeypatch, when, name, *args):
    """What voice.`name` writes with the clock at `when`."""
    monkeypatch.setattr(time, "time", lambda: when)
    monkeypatch.setattr(clock, "now", lambda: when)
    return render(name, *args)


def test_every_function_of_voice_py_has_a_sample():
    functions = {name for name, value in vars(voice).items()
                 if inspect.isfunction(value) and value.__module__.startswith("agentctl.voice")
                 and not name.startswith("_")}
    assert functions == set(SAMPLES)


@pytest.mark.parametrize("name", SAMPLES)
def test_a_text_is_the_same_whenever_it_is_written(monkeypatch, name):
    """Rendered at two times a day and an hour apart, each text is byte for byte the
    same: nothing in it comes from the clock."""
    assert at(monkeypatch, T, name) == at(monkeypatch, T + 90061, name)


def test_the_check_catches_a_text_that_reads_the_clock(monkeypatch):
    """The check above can fail: a timer notice that said how long ago it was set."""
    monkeypatch.setattr(voice, "timer",
                        lambda wake_at: f"[TIMER] set {clock.age(clock.now() - wake_at)} ago",
                        raising=True)
    assert at(monkeypatch, T, "timer") != at(monkeypatch, T + 90061, "timer")


def test_a_time_is_written_as_iso_8601():
    """A time given to voice.py is written absolutely; the inbox's one span, a mail's age,
    is between two times given to it (when it came, when the turn took it)."""
    assert clock.iso(T + 3600) in render("timer")
    assert render("sleeping_until").endswith(clock.iso(T + 90))
    text = render("inbox")
    assert f"at {clock.iso(T - 700)} (11m ago):" in text
    assert f"at {clock.iso(T - 60)} (1m ago), sent {clock.iso(T - 7200)} for then:" in text


def test_the_inbox_as_the_model_reads_it():
    """Byte for byte, the form the tests of the programs compare piece by piece."""
    assert render("inbox") == (
        "[INBOX - 2 new]\n"
        "\n"
        f"1. exit notification 7 from b (AAAA) at {clock.iso(T - 700)} (11m ago):\n"
        "   b exited normally; exit status 0\n"
        "   result:\n"
        "   done\n"
        "\n"
        f"2. mail 8 from the operator at {clock.iso(T - 60)} (1m ago), "
        f"sent {clock.iso(T - 7200)} for then:\n"
        "   remember\n"
        "   the milk\n")
