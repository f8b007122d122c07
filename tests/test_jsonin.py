"""agentctl.jsonin: JSON from outside parsed within bounds of depth and size, never recursing on a
document too deep, with one-line errors."""

import json

import pytest
from hypothesis import given, strategies as st

from agentctl import jsonin


def nested(depth, inner="1"):
    return "[" * depth + inner + "]" * depth


@pytest.mark.parametrize("depth", [101, 5000, 200_000])
def test_too_deep_is_refused_without_recursing(depth):
    with pytest.raises(jsonin.TooDeep) as caught:
        jsonin.loads(nested(depth), what="reply")
    assert str(caught.value) == "reply: nested more than 100 levels deep"
    assert caught.value.pos == 100          # the bracket one level too deep
    assert isinstance(caught.value, ValueError)


def test_the_depth_bound_is_inclusive():
    assert jsonin.loads(nested(100)) == json.loads(nested(100))
    assert jsonin.loads(nested(3), max_depth=3) == [[[1]]]
    with pytest.raises(jsonin.TooDeep):
        jsonin.loads(nested(4), max_depth=3)


def test_objects_count_as_levels_too():
    text = '{"a": ' * 101 + "1" + "}" * 101
    with pytest.raises(jsonin.TooDeep):
        jsonin.loads(text)
    with pytest.raises(jsonin.TooDeep):      # an unparsable text is still checked first
        jsonin.check('{"a": [' * 60)


@pytest.mark.parametrize("text", ['"' + "[" * 500 + '"', '["\\"' + "[" * 500 + '"]',
                                  '"\\\\"', '["\\\\", "' + "{" * 500 + '"]'])
def test_brackets_inside_strings_are_no_levels(text):
    assert jsonin.loads(text) == json.loads(text)


def test_too_large_counts_utf8_bytes():
    assert jsonin.loads('"' + "x" * 8 + '"', max_bytes=10) == "x" * 8
    with pytest.raises(jsonin.TooLarge) as caught:
        jsonin.loads('"' + "é" * 8 + '"', what="arguments", max_bytes=10)     # 18 bytes
    assert str(caught.value) == "arguments: larger than 10 bytes"
    with pytest.raises(jsonin.TooLarge, match="larger than 1 MiB"):
        jsonin.loads(b"[" + b" " * jsonin.ARGUMENTS_BYTES + b"]", max_bytes=jsonin.ARGUMENTS_BYTES)


@pytest.mark.parametrize("text, message", [
    ("", "rules: not JSON (Expecting value)"),
    ("[1,", "rules: not JSON (Expecting value)"),
    (b"\xff[]", "rules: not JSON (not UTF-8)"),
    ("1" * 5000, "rules: not JSON (Exceeds the limit (4300 digits)"),
])
def test_not_json_is_a_json_error_naming_what(text, message):
    with pytest.raises(jsonin.JSONError) as caught:
        jsonin.loads(text, what="rules")
    assert str(caught.value).startswith(message)
    assert "\n" not in str(caught.value)
    assert not isinstance(caught.value, jsonin.OutOfBounds)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet='[]{}"\\ab\n'),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.text(alphabet='[]{}"\\ab'), inner, max_size=3),
    max_leaves=30)


def depth_of(value):
    if isinstance(value, list):
        return 1 + max(map(depth_of, value), default=0)
    if isinstance(value, dict):
        return 1 + max(map(depth_of, value.values()), default=0)
    return 0


@given(json_values, st.integers(0, 8), st.booleans())
def test_the_depth_scan_agrees_with_the_parser(value, bound, indent):
    text = json.dumps(value, indent=1 if indent else None, ensure_ascii=False)
    if depth_of(value) > bound:
        with pytest.raises(jsonin.TooDeep):
            jsonin.loads(text, max_depth=bound)
    else:
        assert jsonin.loads(text, max_depth=bound) == value


@given(st.text(alphabet='[]{}"\\ 1,:u'), st.integers(0, 4))
def test_any_text_passed_as_shallow_enough_parses_no_deeper(text, bound):
    try:
        value = jsonin.loads(text, max_depth=bound)
    except jsonin.JSONError:
        return
    assert depth_of(value) <= bound
