"""The tools a turn offers its model: the programs' operations, through the
same library functions (agentctl(7), TOOLS).

An agent may signal, wait on and list only its own descendants, read only
its own mailbox, and see only the documents visible to it (docs.py). A bad
call (unknown tool, arguments that are not JSON or don't fit the schema, a
refused operation) becomes an error result the model sees, never a crash.
The arguments of every call, an external tool's too, are read and checked by
`arguments` (against the tool's schema by shape.problem). Each call's effect
and its result are written in one transaction, so a crash leaves either both
or neither.
"""

import datetime
import json
import time

from agentctl import clock, jsonin, keys, settings, shape, voice
from agentctl.errors import AgentctlError
from agentctl.ops import asks, authority, docs, lease, lifecycle, mail, signals
from agentctl.store import events, history, mailbox, registry
from agentctl.store.db import INTEGER_MAX
from agentctl.text import first_line, valid_json
from agentctl.turn import watch


def _schema(properties, required=()):
    return {"type": "object", "properties": properties, "required": list(required),
            "additionalProperties": False}


SPECS = {
    "fork": ("Fork yourself: a child that inherits this conversation up to now. Returns the "
             "child's id. With a prompt the child starts working on it; without one it waits "
             "for mail. With a budget (tokens) or budget_usd (dollars), the child's model "
             "calls are limited to it, carved out of your own budget if you have one (in "
             "its unit).",
             _schema({"prompt": {"type": "string"}, "name": {"type": "string"},
                      **{k: v for s in settings.SETTINGS for k, v in s.properties().items()}})),
    "send": ("Send mail to an agent (id or name). Returns the mail id.",
             _schema({"to": {"type": "string"}, "body": {"type": "string"}}, ["to", "body"])),
    "check_mail": ("Count your unread mail. Unread mail is delivered to you as an inbox "
                   "message before your next step.", _schema({})),
    "read_mail": ("Have your unread mail delivered now, as an inbox message after this step.",
                  _schema({})),
    "kill": ("Signal one of your descendants: TERM (default), KILL, STOP, CONT or HUP.",
             _schema({"agent": {"type": "string"},
                      "signal": {"type": "string", "enum": list(signals.NAMES)},
                      "cascade": {"type": "boolean"}}, ["agent"])),
    "wait": ("Wait (at most timeout seconds, up to 60) for descendants to exit and collect "
             "their results. Default: all your children.",
             _schema({"agents": {"type": "array", "items": {"type": "string"}},
                      "timeout": {"type": "number", "minimum": 0, "maximum": 60}})),
    "ps": ("List your descendants: id, name, status, role.", _schema({})),
    "sleep": ("End this turn and sleep: wake after `seconds`, or at `until` (ISO 8601 with "
              "its zone, e.g. 2026-11-24T09:30:00Z).",
              _schema({"seconds": {"type": "number", "minimum": 0},
                       "until": {"type": "string"}})),
    "exit": ("Finish: exit with this result, which your parent collects.",
             _schema({"result": {"type": "string"}}, ["result"])),
    "ask": ("Ask whoever supervises you (the operator, or an agent above you) a question. "
            "Your turn pauses until the answer comes, maybe hours later; the answer is this "
            "tool's result.", _schema({"question": {"type": "string"}}, ["question"])),
    "answer": ("Decide a request of an agent below you (its id is in the mail that told "
               "you): answer a question, or approve or deny a tool call (with a reason the "
               "asker sees).",
               _schema({"request": {"type": "string"}, "answer": {"type": "string"},
                        "approve": {"type": "boolean"}, "reason": {"type": "string"}},
                       ["request"])),
    "doc_put": ("Write a shared markdown document (a new version; earlier ones are kept). "
                "A new name is yours, private unless you give visibility: subtree (you and "
                "your descendants) or global. Returns its version.",
                _schema({"name": {"type": "string"}, "body": {"type": "string"},
                         "visibility": {"type": "string", "enum": list(docs.VISIBILITIES)}},
                        ["name", "body"])),
    "doc_get": ("Read a shared document you can see: the newest version, or `version`.",
                _schema({"name": {"type": "string"},
                         "version": {"type": "integer", "minimum": 1}}, ["name"])),
    "doc_ls": ("List the shared documents you can see: name, version, visibility, owner, "
               "size. `pattern` is a glob (* matches / too).",
               _schema({"pattern": {"type": "string"}})),
    "doc_rm": ("Remove a shared document you own (its versions are kept).",
               _schema({"name": {"type": "string"}}, ["name"])),
    "diff": ("What an agent (yourself, or a descendant) changed in its workspace since its "
             "fork, as a unified diff; `stat`: a line a file; `base`: against the real "
             "directory.", _schema({"agent": {"type": "string"}, "stat": {"type": "boolean"},
                                    "base": {"type": "boolean"}}, ["agent"])),
    "merge": ("Take a child's work (its workspace's changes since its fork) into your own "
              "workspace. A path you both changed is a conflict: nothing is merged, the "
              "paths are listed; then `theirs` takes the child's, `ours` keeps yours, "
              "`only` merges those paths alone.",
              _schema({"agent": {"type": "string"}, "theirs": {"type": "boolean"},
                       "ours": {"type": "boolean"},
                       "only": {"type": "array", "items": {"type": "string"}}}, ["agent"])),
}

def specs():
    """The tools in OpenAI form."""
    return [{"type": "function", "function": {"name": name, "description": description,
                                              "parameters": parameters}}
            for name, (description, parameters) in SPECS.items()]


class ToolError(Exception):
    pass


def _stored(schema):
    """`schema` with what the database holds of an integer (SQLite's INTEGER) as the bounds
    of each integer argument that gives none: checked, not shown to the model."""
    widest = {"minimum": -INTEGER_MAX, "maximum": INTEGER_MAX}
    return dict(schema, properties={
        key: widest | rule if rule.get("type") == "integer" else rule
        for key, rule in schema["properties"].items()})


CHECKED = {name: _stored(parameters) for name, (_, parameters) in SPECS.items()}


def arguments(raw, schema=None):
    """A tool call's arguments, the JSON text the model wrote (nothing is {}): an object,
    checked against `schema` (its tool's parameters, in shape's subset) when one is
    given; else ToolError, saying what is wrong as the model reads it."""
    try:
        args = valid_json(jsonin.loads(raw, what="arguments", max_bytes=jsonin.ARGUMENTS_BYTES)) \
            if raw and raw.strip() else {}
    except jsonin.OutOfBounds as e:
        raise ToolError(str(e))
    except ValueError as e:
        raise ToolError(voice.not_json(getattr(e, "reason", e)))
    if not isinstance(args, dict):
        raise ToolError(voice.NOT_AN_OBJECT)
    wrong = schema is not None and shape.problem(args, schema, "")
    if wrong:
        raise ToolError(wrong)
    return args


def validate(name, raw):
    """Parse and check a built-in call's arguments against its schema; an integer as
    one (JSON's 2.0 is the integer 2)."""
    if name not in SPECS:
        raise ToolError(voice.unknown_tool(name, SPECS))
    args = arguments(raw, CHECKED[name])
    properties = CHECKED[name]["properties"]
    return {key: int(value) if properties[key].get("type") == "integer" else value
            for key, value in args.items()}


def execute(conn, agent_id, turn_id, call):
    """Run one tool call and record its result; returns the result text."""
    started = time.monotonic()
    try:
        args = validate(call["tool_name"], call["content"])
    except ToolError as e:
        return record_error(conn, agent_id, turn_id, call, voice.tool_error(e), started)
    handler = HANDLERS[call["tool_name"]]
    before = BEFORE.get(call["tool_name"])
    if before:
        # Waiting blocks, so it happens outside any transaction; collecting
        # what exited is then part of the call's transaction, like any effect.
        # A diff reads files and a merge makes its own (workspaces.py).
        try:
            args = dict(args, done=before(conn, agent_id, args))
        except (ToolError, AgentctlError) as e:
            return record_error(conn, agent_id, turn_id, call, voice.tool_error(e), started)
    try:
        with lease.holding(conn, agent_id):
            lease.check_not_killed(conn, agent_id)
            text = handler(conn, agent_id, args, call)
            record_result(conn, agent_id, turn_id, call, text, started, "ok")
        return text
    except lease.LostClaim:
        raise
    except (ToolError, AgentctlError) as e:
        return record_error(conn, agent_id, turn_id, call, voice.tool_error(e), started)


def record_error(conn, agent_id, turn_id, call, text, started):
    with lease.holding(conn, agent_id):
        lease.check_not_killed(conn, agent_id)
        record_result(conn, agent_id, turn_id, call, text, started, "error")
    return text


def record_result(conn, agent_id, turn_id, call, text, started, outcome, media=None):
    """The call's result, and its event (not its output), in the caller's transaction.
    Keys are redacted as in replies: a tool may print what it found (agent-run's
    environment in /proc, a file that holds one). `media`, what it returned that is not
    text (images), is a message of its own after it (kind media: context.py sends it)."""
    history.append(conn, agent_id, "tool_result", keys.redact(text), tool_name=call["tool_name"],
                   tool_call_id=call["tool_call_id"], turn_id=turn_id)
    if media:
        history.append(conn, agent_id, "media", json.dumps({"parts": media},
                                                           separators=(",", ":")),
                       tool_name=call["tool_name"], tool_call_id=call["tool_call_id"],
                       turn_id=turn_id)
    error = {"error": first_line(keys.redact(text.removeprefix(voice.ERROR)), 500)} \
        if outcome == "error" else {}
    events.record(conn, agent_id, "tool", turn=turn_id, tool=call["tool_name"],
                  call=call["tool_call_id"], outcome=outcome,
                  seconds=round(time.monotonic() - started, 3), **error)


def _descendant(conn, agent_id, ref):
    target = registry.resolve(conn, ref)
    if target["id"] == agent_id or not authority.mine(conn, agent_id, target["id"]):
        raise ToolError(voice.not_a_descendant(ref))
    return target


def _fork(conn, agent_id, args, call):
    me = registry.get(conn, agent_id)
    given = {s.key: s.offered(args) for s in settings.SETTINGS if s.tool}
    child = lifecycle.fork(conn, me, name=args.get("name"), actor=agent_id,
                           trace=watch.traceparent(), tool_names=_program_names, **given)
    # As fork(2) returns 0 in the child, the child sees this call answered for itself.
    history.append(conn, child, "tool_result",
                   voice.forked_child(child, registry.label(me), agent_id),
                   tool_name="fork", tool_call_id=call["tool_call_id"])
    if args.get("prompt"):
        history.append(conn, child, "user", args["prompt"])
    return child


def _answer(conn, agent_id, args, call):
    if "approve" in args:
        how, text = ("approve" if args["approve"] else "deny"), args.get("reason")
        if "answer" in args:
            raise ToolError(voice.ANSWER_OR_APPROVE)
    elif "answer" in args:
        how, text = "answer", args["answer"]
    else:
        raise ToolError(voice.ANSWER_OR_APPROVE_MISSING)
    row = asks.decide(conn, args["request"], agent_id, how, text)
    return voice.decided(row["id"], row["decision"])


def _program_names():
    """The external tools a grant may name."""
    from agentctl.tools.catalog import Catalog  # (start-up: 3 ms, only for a fork that grants)
    return Catalog().names()


def _send(conn, agent_id, args, call):
    mail_id, = mail.send(conn, agent_id, [args["to"]], args["body"])
    return voice.sent_mail(mail_id)


def _check_mail(conn, agent_id, args, call):
    return voice.unread(mailbox.count_unread(conn, agent_id))


def _read_mail(conn, agent_id, args, call):
    return voice.mail_coming(mailbox.count_unread(conn, agent_id))


def _kill(conn, agent_id, args, call):
    target = _descendant(conn, agent_id, args["agent"])
    sig = args.get("signal", "TERM")
    count, refusal = signals.apply(conn, target, sig, cascade=args.get("cascade", False),
                                   actor=agent_id)
    if refusal:
        raise ToolError(refusal)
    return voice.signalled(sig, count)


def _wait(conn, agent_id, args):
    """Block until the descendants waited for exit: (exited rows, ids still running)."""
    refs = args.get("agents")
    if refs:
        ids = [_descendant(conn, agent_id, ref)["id"] for ref in refs]
    else:
        ids = registry.children(conn, agent_id)
    if not ids:
        return [], []
    return lifecycle.wait(conn, ids, timeout=args.get("timeout", 0), actor=agent_id,
                          reap_them=False, until=lambda: _kill_pending(conn, agent_id),
                          next_due=lambda: registry.get(conn, agent_id)["kill_at"])


def _kill_pending(conn, agent_id):
    """A KILL cuts a blocking wait short (ops.lease.KillPending)."""
    try:
        lease.check_not_killed(conn, agent_id)
    except lease.KillPending:
        return True
    return False


def _collect(conn, agent_id, args, call):
    exited, pending = args["done"]
    if not exited and not pending:
        return voice.NO_CHILDREN
    for row in exited:
        lifecycle.collect(conn, row["id"], actor=agent_id)
    lines = [voice.collected(r["id"], registry.label(r), lifecycle.how(r), r["exit_code"],
                             r["result"]) for r in exited]
    lines += [voice.still_running(i) for i in pending]
    return "\n".join(lines)


def _ps(conn, agent_id, args, call):
    rows = registry.descendants(conn, agent_id)
    if not rows:
        return voice.NO_DESCENDANTS
    return "\n".join(voice.descendant(r["id"], registry.label(r), lease.effective_status(r),
                                      r["role"]) for r in rows)


def _sleep(conn, agent_id, args, call):
    if "until" in args and "seconds" in args:
        raise ToolError(voice.SECONDS_OR_UNTIL)
    if "until" in args:
        wake = _zoned(args["until"])
    elif "seconds" in args:
        wake = clock.after(args["seconds"])
    else:
        raise ToolError(voice.SECONDS_OR_UNTIL_MISSING)
    registry.update(conn, agent_id, wake_at=wake)
    events.record(conn, agent_id, "timer", at=wake)
    return voice.sleeping_until(wake)


def _zoned(text):
    """A time the model gives: ISO 8601 with its zone. A time without one is refused,
    not guessed: the model only ever sees UTC times, and the operator's agent-send
    --at reads zoneless times as local time."""
    try:
        when = datetime.datetime.fromisoformat(text.strip())
    except ValueError:
        raise ToolError(voice.until_not_iso(text)) from None
    if when.tzinfo is None:
        raise ToolError(voice.until_without_zone(text))
    return clock.parse_time(text)


def _exit(conn, agent_id, args, call):
    return voice.EXITING


def _doc_put(conn, agent_id, args, call):
    version = docs.put(conn, agent_id, args["name"], args["body"],
                       visibility=args.get("visibility"))
    return voice.doc_written(args["name"], version)


def _doc_get(conn, agent_id, args, call):
    row = docs.get(conn, agent_id, args["name"], args.get("version"))
    return voice.document(row["name"], row["version"], docs.who(row, "author", full=True),
                          row["visibility"], row["body"])


def _doc_ls(conn, agent_id, args, call):
    rows = docs.listing(conn, agent_id, args.get("pattern"))
    if not rows:
        return voice.NO_DOCUMENTS
    return "\n".join(voice.doc_line(r["name"], r["version"], r["visibility"],
                                    docs.who(r, "owner", full=True), r["size"]) for r in rows)


def _doc_rm(conn, agent_id, args, call):
    return voice.doc_removed(args["name"], docs.rm(conn, agent_id, args["name"]))


HANDLERS = {"fork": _fork, "send": _send, "check_mail": _check_mail, "read_mail": _read_mail,
            "kill": _kill, "wait": _collect, "ps": _ps, "sleep": _sleep, "exit": _exit,
            "doc_put": _doc_put, "doc_get": _doc_get, "doc_ls": _doc_ls, "doc_rm": _doc_rm,
            "ask": lambda *a: _asked(), "answer": _answer,
            "diff": lambda conn, agent_id, args, call: args["done"],
            "merge": lambda conn, agent_id, args, call: args["done"]}
# What runs before the call's transaction, its result the handler's args["done"].
BEFORE = {"wait": lambda conn, agent_id, args: _wait(conn, agent_id, args),
          "diff": lambda conn, agent_id, args: _workspaces().diff(conn, agent_id, args,
                                                                  _descendant),
          "merge": lambda conn, agent_id, args: _workspaces().merge(conn, agent_id, args,
                                                                    _descendant)}


def _workspaces():
    from agentctl.turn import workspaces  # (start-up: 18 ms, only for diff and merge)
    return workspaces


def _asked():
    raise ToolError("ask is answered by the turn, not run")      # (the toolset takes it)
