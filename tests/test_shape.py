"""shape.py: the one checker of agentctl's subset of JSON Schema. A reply is checked
against --schema by it, and a tool call's arguments against its tool's parameters
(the built-in tools' and a program tool's), so each keyword says one thing, once."""

import pytest

from agentctl import shape
from agentctl.errors import UsageError
from agentctl.turn import builtin

OBJECT = {"type": "object", "additionalProperties": False, "required": ["n"],
          "properties": {"n": {"type": "integer", "minimum": 1, "maximum": 10},
                         "x": {"type": "number", "exclusiveMinimum": 0,
                               "exclusiveMaximum": 1},
                         "s": {"type": "string", "minLength": 2, "maxLength": 3,
                               "pattern": "^[a-z]+$"},
                         "a": {"type": "array", "items": {"type": "string"},
                               "minItems": 1, "maxItems": 2},
                         "e": {"enum": ["red", "green", 3]},
                         "c": {"const": True},
                         "o": {"anyOf": [{"type": "string"}, {"type": "null"}]},
                         "m": {"type": ["string", "null"]},
                         "d": {"type": "object", "properties": {"deep": {"type": "boolean"}}}}}


@pytest.mark.parametrize("value, where, problem", [
    ({"n": 1}, "$", None),
    ({"n": 2.0}, "$", None),                      # 2.0 is an integer, as in JSON Schema
    ({}, "$", "$.n is missing"),
    ({"n": "1"}, "$", "$.n must be an integer"),
    ({"n": True}, "$", "$.n must be an integer"),
    ({"n": 1.5}, "$", "$.n must be an integer"),
    ({"n": float("nan")}, "$", "$.n must be an integer"),
    ({"n": 0}, "$", "$.n must be at least 1"),
    ({"n": 11}, "$", "$.n must be at most 10"),
    ({"n": 1, "x": 0}, "$", "$.x must be more than 0"),
    ({"n": 1, "x": 1}, "$", "$.x must be less than 1"),
    ({"n": 1, "x": float("inf")}, "$", "$.x must be a number"),
    ({"n": 1, "s": "a"}, "$", "$.s must be at least 2 characters long"),
    ({"n": 1, "s": "abcd"}, "$", "$.s must be at most 3 characters long"),
    ({"n": 1, "s": "AB"}, "$", "$.s must match '^[a-z]+$'"),
    ({"n": 1, "a": []}, "$", "$.a must have at least 1 item"),
    ({"n": 1, "a": ["p", "q", "r"]}, "$", "$.a must have at most 2 items"),
    ({"n": 1, "a": ["p", 2]}, "$", "$.a[1] must be a string"),
    ({"n": 1, "e": "blue"}, "$", "$.e must be one of red, green, 3"),
    ({"n": 1, "c": 1}, "$", "$.c must be true"),
    ({"n": 1, "o": 5}, "$", "$.o must fit one of anyOf's schemas"),
    ({"n": 1, "m": 5}, "$", "$.m must be a string or null"),
    ({"n": 1, "d": {"deep": 0}}, "$", "$.d.deep must be a boolean"),
    ({"n": 1, "z": 0}, "$", "$.z is not in the schema"),
    ({"n": 1, "a\nb": 0}, "$", '$["a\\nb"] is not in the schema'),     # one line
    ([], "$", "$ must be an object"),
    # a tool call's arguments: named alone
    ({"n": "1"}, "", "n must be an integer"),
    ({"n": 1, "a": [0]}, "", "a[0] must be a string"),
    ({}, "", "n is missing"),
    ([], "", "the value must be an object"),
])
def test_each_keyword_says_what_does_not_fit_in_one_line(value, where, problem):
    assert shape.problem(value, OBJECT, where) == problem


def test_the_checker_checks_only_what_a_schema_says():
    assert shape.problem({"anything": [1, {"x": None}]}, {"type": "object"}) is None
    assert shape.problem(5, {}) is None


@pytest.mark.parametrize("name", list(builtin.SPECS))
def test_every_built_in_tools_schema_is_one_the_checker_checks(name):
    shape.check_schema(builtin.SPECS[name][1])


def test_a_built_in_integer_is_one_the_database_holds():
    with pytest.raises(builtin.ToolError, match="^version must be at most 9223372036854775807$"):
        builtin.validate("doc_get", '{"name": "n", "version": 1e20}')
    assert builtin.validate("doc_get", '{"name": "n", "version": 2.0}') == {"name": "n",
                                                                          "version": 2}
    assert type(builtin.validate("doc_get", '{"name": "n", "version": 2.0}')["version"]) is int


def test_a_schema_outside_the_subset_is_refused_when_given():
    with pytest.raises(UsageError, match="keyword 'oneOf' is not one agentctl checks"):
        shape.check_schema({"oneOf": [{}]})


def test_a_program_tools_parameters_may_say_more_but_not_say_it_wrong():
    """A keyword outside the subset is the program's to check; one of the subset must
    be one problem() can read."""
    more = {"type": "object", "$defs": {"x": {"type": "strange"}},
            "properties": {"day": {"type": "string", "format": "date"}}}
    assert shape.check_schema(more, "parameters", others=True) is more
    with pytest.raises(UsageError, match=r"keyword '\$defs'"):
        shape.check_schema(more)
    with pytest.raises(UsageError, match=r"^parameters\.properties\.n\.minimum: a number$"):
        shape.check_schema({"properties": {"n": {"minimum": "1"}}}, "parameters", others=True)
