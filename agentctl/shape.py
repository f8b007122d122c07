"""JSON Schema, the subset agentctl checks a reply against (agent-fork --schema;
agentctl(7), RESULTS AS DATA): a schema is checked when it is given, and a value
against it before it is stored. No third-party validator: this module comes with every
program (the settings check a schema given to agent-fork or agent-set), and costs them
next to nothing.

The keywords: type (a name or a list of them: object, array, string, number,
integer, boolean, null), properties, required, additionalProperties (true, false or
a schema), items, minItems, maxItems, enum, const, minimum, maximum,
exclusiveMinimum, exclusiveMaximum, minLength, maxLength, pattern, anyOf; and the
annotations title, description, default, examples, $schema, $id, which check
nothing. Any other keyword is refused when the schema is given, so that a schema
never promises what is not checked."""

import os
import re

from agentctl import jsonin
from agentctl.errors import UsageError

TYPES = ("object", "array", "string", "number", "integer", "boolean", "null")
ANNOTATIONS = frozenset(("title", "description", "default", "examples", "$schema", "$id",
                         "$comment"))
NUMBERS = frozenset(("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"))
COUNTS = frozenset(("minItems", "maxItems", "minLength", "maxLength"))
KEYWORDS = frozenset(("type", "properties", "required", "additionalProperties", "items",
                      "enum", "const", "pattern", "anyOf")) | NUMBERS | COUNTS | ANNOTATIONS


def _number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_schema(schema, where="schema"):
    """UsageError unless `schema` is a schema of the subset (a JSON object)."""
    if not isinstance(schema, dict):
        raise UsageError(f"{where}: a schema is a JSON object")
    for key, value in schema.items():
        if key not in KEYWORDS:
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
                check_schema(sub, f"{where}.properties.{name}")
        elif key == "required":
            if not isinstance(value, list) or not all(isinstance(n, str) for n in value):
                raise UsageError(f"{where}.required: a list of property names")
        elif key == "additionalProperties" and not isinstance(value, bool):
            check_schema(value, f"{where}.additionalProperties")
        elif key == "items":
            check_schema(value, f"{where}.items")
        elif key == "anyOf":
            if not isinstance(value, list) or not value:
                raise UsageError(f"{where}.anyOf: a list of schemas")
            for n, sub in enumerate(value):
                check_schema(sub, f"{where}.anyOf.{n}")
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
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "integer" if value.is_integer() else "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _same(a, b):
    """JSON equality: 1 and 1.0 are one number, true is not 1."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    return a == b


def problem(value, schema, where="$"):
    """What makes `value` not fit `schema` (one line naming where), or None."""
    kind = _type_of(value)
    if "type" in schema:
        names = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not (kind in names or (kind == "integer" and "number" in names)):
            return f"{where}: {kind}, not {' or '.join(names)}"
    if "const" in schema and not _same(value, schema["const"]):
        return f"{where}: must be {schema['const']!r}"
    if "enum" in schema and not any(_same(value, v) for v in schema["enum"]):
        return f"{where}: not one of the values allowed ({len(schema['enum'])})"
    if "anyOf" in schema and all(problem(value, s, where) for s in schema["anyOf"]):
        return f"{where}: fits none of anyOf's schemas"
    if kind in ("integer", "number"):
        for key, fails in (("minimum", lambda v, b: v < b), ("maximum", lambda v, b: v > b),
                           ("exclusiveMinimum", lambda v, b: v <= b),
                           ("exclusiveMaximum", lambda v, b: v >= b)):
            if key in schema and fails(value, schema[key]):
                return f"{where}: {value} is beyond {key} {schema[key]}"
    elif kind == "string":
        if len(value) < schema.get("minLength", 0):
            return f"{where}: shorter than {schema['minLength']} characters"
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            return f"{where}: longer than {schema['maxLength']} characters"
        if "pattern" in schema and not re.search(schema["pattern"], value):
            return f"{where}: does not match {schema['pattern']!r}"
    elif kind == "array":
        if len(value) < schema.get("minItems", 0):
            return f"{where}: fewer than {schema['minItems']} items"
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            return f"{where}: more than {schema['maxItems']} items"
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
            return f"{where}: {name!r} is missing"
    extra = schema.get("additionalProperties", True)
    for name, item in value.items():
        if name in properties:
            found = problem(item, properties[name], f"{where}.{name}")
        elif extra is False:
            found = f"{where}: {name!r} is not a property of the schema"
        else:
            found = extra is not True and problem(item, extra, f"{where}.{name}")
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
