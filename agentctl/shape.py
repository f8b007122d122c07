"""JSON Schema, the subset agentctl checks a reply against (agent-fork --schema;
agentctl(7), RESULTS AS DATA): a schema is checked when it is given, and a value
against it before it is stored. The same checker (`problem`) checks a tool call's
arguments against its tool's parameters. No third-party validator: this module comes
with every program (the settings check a schema given to agent-fork or agent-set), and
costs them next to nothing.

The keywords: type (a name or a list of them: object, array, string, number,
integer, boolean, null), properties, required, additionalProperties (true, false or
a schema), items, minItems, maxItems, enum, const, minimum, maximum,
exclusiveMinimum, exclusiveMaximum, minLength, maxLength, pattern, anyOf; and the
annotations title, description, default, examples, $schema, $id, which check
nothing. Any other keyword is refused when the schema is given, so that a schema
never promises what is not checked."""

import math
import os
import re

from agentctl import jsonin
from agentctl.errors import UsageError
from agentctl.text import cut, quoted

TYPES = ("object", "array", "string", "number", "integer", "boolean", "null")
ANNOTATIONS = frozenset(("title", "description", "default", "examples", "$schema", "$id",
                         "$comment"))
NUMBERS = frozenset(("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"))
COUNTS = frozenset(("minItems", "maxItems", "minLength", "maxLength"))
KEYWORDS = frozenset(("type", "properties", "required", "additionalProperties", "items",
                      "enum", "const", "pattern", "anyOf")) | NUMBERS | COUNTS | ANNOTATIONS


def _number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_schema(schema, where="schema", others=False):
    """UsageError unless `schema` is a schema of the subset (a JSON object). With
    `others`, a keyword outside the subset is let be (a program tool's parameters may
    say more than agentctl checks: its program checks the rest), but one of the subset
    must still be well formed, as problem() reads it."""
    if not isinstance(schema, dict):
        raise UsageError(f"{where}: a schema is a JSON object")
    for key, value in schema.items():
        if key not in KEYWORDS:
            if others:
                continue
            raise UsageError(f"{where}: keyword {key!r} is not one agentctl checks "
                             "(agentctl(7), RESULTS AS DATA)")
        if key == "type":
            names = value if isinstance(value, list) else [value]
            if not names or any(n not in TYPES for n in names):
                raise UsageError(f"{where}.type: one of {', '.join(TYPES)}, or a list of them")
        elif key == "properties":
            if not isinstance(value, dict):
                raise UsageError(f"{where}.properties: an object of schemas")
            for name, sub in value.items():
                check_schema(sub, _in(f"{where}.properties", name), others)
        elif key == "required":
            if not isinstance(value, list) or not all(isinstance(n, str) for n in value):
                raise UsageError(f"{where}.required: a list of property names")
        elif key == "additionalProperties" and not isinstance(value, bool):
            check_schema(value, f"{where}.additionalProperties", others)
        elif key == "items":
            check_schema(value, f"{where}.items", others)
        elif key == "anyOf":
            if not isinstance(value, list) or not value:
                raise UsageError(f"{where}.anyOf: a list of schemas")
            for n, sub in enumerate(value):
                check_schema(sub, f"{where}.anyOf.{n}", others)
        elif key == "enum" and not isinstance(value, list):
            raise UsageError(f"{where}.enum: a list of values")
        elif key in NUMBERS and not _number(value):
            raise UsageError(f"{where}.{key}: a number")
        elif key in COUNTS and not (isinstance(value, int) and not isinstance(value, bool)
                                    and value >= 0):
            raise UsageError(f"{where}.{key}: a whole number >= 0")
        elif key == "pattern":
            try:
                re.compile(value)
            except (re.error, TypeError):
                raise UsageError(f"{where}.pattern: not a regular expression") from None
    return schema


def _type_of(value):
    """The JSON type of a parsed value; None for NaN and the infinities, which JSON has
    not (Python's parser takes them)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        return "integer" if value.is_integer() else "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _same(a, b):
    """JSON equality: 1 and 1.0 are one number, true is not 1."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    return a == b


NOUNS = {"object": "an object", "array": "an array", "string": "a string", "number": "a number",
         "integer": "an integer", "boolean": "a boolean", "null": "null"}
BOUNDS = (("minimum", "at least", lambda v, b: v < b), ("maximum", "at most", lambda v, b: v > b),
          ("exclusiveMinimum", "more than", lambda v, b: v <= b),
          ("exclusiveMaximum", "less than", lambda v, b: v >= b))
PLAIN = r"(?a)[\w-]{1,40}"     # a property's name a path shows bare (compiled at its first use)


def _in(where, name):
    """The place of property `name` in the value at `where`: where.name, or where["name"]
    for a name that is not plain (cut, and quoted: a line break in it would end the
    message's line)."""
    if not re.fullmatch(PLAIN, name):
        return f"{where}[{quoted(cut(name, 40))}]"
    return f"{where}.{name}" if where else name


def _count(n, what):
    return f"{n} {what}" if n == 1 else f"{n} {what}s"


def _shown(value):
    """A value of a schema (enum, const) as a message shows it: a string as it is."""
    if isinstance(value, str):
        return value
    return jsonin.dumps(value)


def problem(value, schema, where="$"):
    """What makes `value` not fit `schema` (one line naming where: "$.answer must be at
    least 0"), or None. The one checker of the subset: a reply against --schema, a
    tool call's arguments against its tool's parameters (with where "", so a line names
    the argument alone: "seconds must be a number"). A keyword outside the subset checks
    nothing: a program tool's schema may say more, which its program checks."""
    kind = _type_of(value)
    subject = where or "the value"
    if "type" in schema:
        names = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not (kind in names or (kind == "integer" and "number" in names)):
            return f"{subject} must be {' or '.join(NOUNS[n] for n in names)}"
    if kind is None:
        return f"{subject} must be a number"
    if "const" in schema and not _same(value, schema["const"]):
        return f"{subject} must be {cut(_shown(schema['const']), 200)}"
    if "enum" in schema and not any(_same(value, v) for v in schema["enum"]):
        return f"{subject} must be one of {cut(', '.join(map(_shown, schema['enum'])), 200)}"
    if "anyOf" in schema and all(problem(value, s, where) for s in schema["anyOf"]):
        return f"{subject} must fit one of anyOf's schemas"
    if kind in ("integer", "number"):
        for key, words, fails in BOUNDS:
            if key in schema and fails(value, schema[key]):
                return f"{subject} must be {words} {schema[key]}"
    elif kind == "string":
        if len(value) < schema.get("minLength", 0):
            return f"{subject} must be at least {_count(schema['minLength'], 'character')} long"
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            return f"{subject} must be at most {_count(schema['maxLength'], 'character')} long"
        if "pattern" in schema and not re.search(schema["pattern"], value):
            return f"{subject} must match {cut(repr(schema['pattern']), 100)}"
    elif kind == "array":
        if len(value) < schema.get("minItems", 0):
            return f"{subject} must have at least {_count(schema['minItems'], 'item')}"
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            return f"{subject} must have at most {_count(schema['maxItems'], 'item')}"
        for n, item in enumerate(value):
            found = "items" in schema and problem(item, schema["items"], f"{where}[{n}]")
            if found:
                return found
    elif kind == "object":
        return _object_problem(value, schema, where)
    return None


def _object_problem(value, schema, where):
    properties = schema.get("properties", {})
    for name in schema.get("required", ()):
        if name not in value:
            return f"{_in(where, name)} is missing"
    extra = schema.get("additionalProperties", True)
    for name, item in value.items():
        if name in properties:
            found = problem(item, properties[name], _in(where, name))
        elif extra is False:
            found = f"{_in(where, name)} is not in the schema"
        else:
            found = extra is not True and problem(item, extra, _in(where, name))
        if found:
            return found
    return None


def parse_reply(text, schema):
    """(the JSON value of a reply's text, None), or (None, what is wrong with it)."""
    if not text.strip():
        return None, "empty: a JSON value was wanted"
    try:
        value = jsonin.loads(text, what="reply")
    except jsonin.JSONError as e:
        return None, f"not JSON ({e.reason})"
    return value, problem(value, schema)


def reply_value(schema, text):
    """The JSON value of a reply (a turn's, or an agent's result) of an agent whose
    schema (as stored) is `schema`, which was checked to fit it before it was
    committed; else None."""
    if not schema or not text:
        return None
    found, wrong = parse_reply(text, loads(schema))
    return None if wrong else found


def load(text):
    """A schema from --schema's text: JSON itself when it starts with {, else the name of
    a file that holds it; checked, and returned as compact JSON text (how it is stored)."""
    source = "--schema"
    if not text.lstrip().startswith("{"):
        if os.environ.get("AGENTCTL_PROXIED"):     # agent-run would read it for the tool
            raise UsageError(f"--schema {text}: a sandboxed tool gives a schema as JSON, "
                             "not as a file (agent-run would read a file its tool can't)")
        try:
            with open(text, encoding="utf-8") as f:
                source, text = text, f.read(jsonin.MAX_BYTES + 1)
        except (OSError, UnicodeDecodeError) as e:
            raise UsageError(f"--schema {text}: can't read it: "
                             f"{getattr(e, 'strerror', None) or e}") from None
    try:
        schema = jsonin.loads(text, what=source)
    except jsonin.JSONError as e:
        raise UsageError(str(e)) from None
    check_schema(schema)
    return jsonin.dumps(schema, separators=(",", ":"))


def loads(stored):
    """A stored schema (JSON text) as an object."""
    return jsonin.loads(stored, what="schema")
