"""An MCP server's question during a call (elicitation/create, a form to fill: agent-run(1),
MCP servers) as a request (agentctl(7), REQUESTS), of kind "elicitation": the server is
told "cancel" and the call given up; the turn pauses at it as at an ask, the agent holding
no process; once the request is decided (agent-answer, or an ancestor's answer tool), the
next agent-run makes the call again and gives the server the decision when it asks again:
the answer's fields (accept), "decline" for a denial, "cancel" for a request expired or
cancelled. So a question survives agent-run's exit, and the server's (a stdio server
ends with the turn). A call that asks several questions pauses once for each.

The form is an object of primitive fields (the specification's requestedSchema): the
answer is a JSON object of them, or, for a form of one field, that field's text."""

import json

from agentctl.errors import UsageError
from agentctl.store.asks import ELICITATION as KIND
from agentctl.text import cut

MESSAGE_CHARS = 2000
ACTIONS = {"answered": "accept", "denied": "decline"}    # else (expired, cancelled): cancel


def question(params):
    """The request's question (the server's message) and the form it asks to be filled,
    as kept in the request's question and arguments."""
    message = params.get("message")
    schema = params.get("requestedSchema")
    return (cut(message if isinstance(message, str) else "", MESSAGE_CHARS),
            json.dumps(schema if isinstance(schema, dict) else {}))


def answers(rows):
    """What the server is told, for each decided request of a call (oldest first)."""
    told = []
    for row in rows:
        action = ACTIONS.get(row["decision"], "cancel")
        told.append({"action": action, "content": json.loads(row["answer"])}
                    if action == "accept" else {"action": action})
    return told


def fields(schema):
    """The form's fields in words: `name (string, required), age (integer)`."""
    schema = _form(schema)
    required = set(schema.get("required") or ())
    return ", ".join(f"{name} ({_kind(spec)}{', required' if name in required else ''})"
                     for name, spec in schema["properties"].items()) or "nothing"


def content(schema, text):
    """The form filled from `text`, an answer: a JSON object of its fields, or the text of
    its one field. UsageError, naming the fields, when it doesn't fit."""
    schema = _form(schema)
    properties = schema["properties"]
    try:
        given = json.loads(text)
    except ValueError:
        given = None
    if not isinstance(given, dict):
        if len(properties) != 1:
            raise UsageError(f"the server's form has {fields(schema)}: answer with a JSON "
                             "object of them")
        (name, spec), = properties.items()
        given = {name: _from_text(name, spec, text.strip())}
    unknown = sorted(set(given) - set(properties))
    if unknown:
        raise UsageError(f"the server's form has no field {unknown[0]!r} (it has "
                         f"{fields(schema)})")
    missing = [name for name in schema.get("required") or () if name not in given]
    if missing:
        raise UsageError(f"the server's form wants {missing[0]!r} too (it has "
                         f"{fields(schema)})")
    for name, value in given.items():
        _check(name, properties[name], value)
    return given


def _form(schema):
    schema = schema if isinstance(schema, dict) else json.loads(schema or "{}")
    properties = schema.get("properties")
    return {**schema, "properties": properties if isinstance(properties, dict) else {}}


def _kind(spec):
    spec = spec if isinstance(spec, dict) else {}
    if isinstance(spec.get("enum"), list):
        return "one of " + "|".join(str(v) for v in spec["enum"])
    return str(spec.get("type") or "any")


def _from_text(name, spec, text):
    """The value of field `name` written as text."""
    kind = _kind(spec)
    try:
        if kind == "integer":
            return int(text)
        if kind == "number":
            return float(text)
    except ValueError:
        raise UsageError(f"the server's field {name!r} is {kind}: {text!r} is not")
    if kind == "boolean":
        if text.lower() in ("true", "yes", "y", "1"):
            return True
        if text.lower() in ("false", "no", "n", "0"):
            return False
        raise UsageError(f"the server's field {name!r} is boolean: answer yes or no")
    return text


def _check(name, spec, value):
    spec = spec if isinstance(spec, dict) else {}
    kind = spec.get("type")
    fits = {"string": lambda v: isinstance(v, str),
            "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
            "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
            "boolean": lambda v: isinstance(v, bool)}.get(kind, lambda v: True)
    if not fits(value) or (isinstance(spec.get("enum"), list) and value not in spec["enum"]):
        raise UsageError(f"the server's field {name!r} is {_kind(spec)}: {value!r} is not")
