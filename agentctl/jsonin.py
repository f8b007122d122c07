"""JSON from outside, parsed within bounds: nothing nests deeper than MAX_DEPTH, nothing is longer
than the caller's size bound.

    from agentctl import jsonin
    value = jsonin.loads(text, what="tool call arguments", max_bytes=jsonin.ARGUMENTS_BYTES)

And the other way, dumps(value): JSON text as agentctl writes it (non-ASCII characters as they
are: ensure_ascii=False). These two import json, when first called: this module comes with every program,
and most (agent-ps, agent-send, agent-fork ...) read and write no JSON at all.

loads() raises JSONError (a ValueError) with a one-line message that starts with `what`:
TooDeep and TooLarge for a document beyond the bounds, plain JSONError for one that is no JSON.
Catch JSONError for all three, or OutOfBounds for the first two alone (a server whose body is
too deep is refused, while one that isn't JSON may be worth another try).

The bounds, and why:

    MAX_DEPTH = 100           arrays and objects inside one another. No API body or tool call
                              needs a tenth of it; Python's own parser recurses once a level, so
                              a few thousand '[' would raise RecursionError (a crash, exit 70).
                              The depth is checked by a linear scan, before anything recurses.
    MAX_BYTES = 64 MiB        the default: an HTTP response body or one stream event, a rules
                              file. Generous: a model's reply is kilobytes.
    ARGUMENTS_BYTES = 1 MiB   the arguments of one tool call, as a model wrote them.

Sizes count UTF-8 bytes. Base layer: imports only the standard library.
"""

import re

MAX_DEPTH = 100
MAX_BYTES = 64 * 1024 * 1024
ARGUMENTS_BYTES = 1024 * 1024

# Patterns as text, compiled at their first use. A string (an unterminated one runs to the end) or
# a bracket, in a text whose escapes are gone.
_TOKENS = r'"[^"]*"?|[\[\]{}]'
# The same in a text with its escapes, each skipped whole: slower, used to find where a text is
# too deep once it is known to be.
_RAW_TOKENS = r'(?s)"[^"\\]*(?:\\.[^"\\]*)*"?|[\[\]{}]'


class JSONError(ValueError):
    """A JSON text refused: not JSON, or beyond the bounds.

    str() is one line, "WHAT: REASON"; .reason alone is for a caller that names the text its own
    way ("not JSON (Expecting value)", "nested more than 100 levels deep").
    """

    def __init__(self, what, reason):
        super().__init__(f"{what}: {reason}")
        self.what, self.reason = what, reason


class OutOfBounds(JSONError):
    """A JSON text beyond the bounds (too deep or too large), whether or not it is valid."""


class TooDeep(OutOfBounds):
    def __init__(self, what, reason, pos):
        super().__init__(what, reason)
        self.pos = pos          # the offset in the text of the bracket one level too deep


class TooLarge(OutOfBounds):
    pass


def size(text):
    """The length of `text` in UTF-8 bytes (bytes as they are)."""
    if isinstance(text, (bytes, bytearray)) or text.isascii():
        return len(text)
    return len(text.encode("utf-8", "surrogatepass"))


def check(text, *, what="JSON", max_depth=MAX_DEPTH, max_bytes=MAX_BYTES):
    """Raise TooLarge or TooDeep when `text` (str) is beyond the bounds; parse nothing.

    For a caller that parses by itself (a file whose errors name a line, say).
    """
    if len(text) > max_bytes or size(text) > max_bytes:
        raise TooLarge(what, f"larger than {describe_bytes(max_bytes)}")
    if text.count("[") + text.count("{") <= max_depth:
        return
    # Escapes out of the way first (at the speed of str.replace): a backslash pair, then an
    # escaped quote, left to right as a parser reads them. In the part of a text that a parser
    # would accept, strings are then what they were, less their escapes.
    plain = text.replace("\\\\", "").replace('\\"', "") if "\\" in text else text
    pos = _deepest(_TOKENS, plain, max_depth)
    if pos is not None:
        # Where, in the text as given (in one that is no JSON, a guess).
        exact = _deepest(_RAW_TOKENS, text, max_depth) if plain is not text else pos
        raise TooDeep(what, f"nested more than {max_depth} levels deep",
                      pos if exact is None else exact)


def _deepest(tokens, text, max_depth):
    """The offset of the first bracket more than max_depth levels deep, or None."""
    depth = 0
    for token in re.finditer(tokens, text):
        char = token.group()[0]
        if char in "[{":
            depth += 1
            if depth > max_depth:
                return token.start()
        elif char in "]}":
            depth = max(0, depth - 1)   # a stray closer is the parser's to refuse
    return None


def loads(text, *, what="JSON", max_depth=MAX_DEPTH, max_bytes=MAX_BYTES):
    """The value of the JSON document `text` (str, or bytes in UTF-8), checked first.

    JSONError (TooDeep, TooLarge or not JSON at all) with a message naming `what`.
    """
    import json  # (start-up: 1 ms, only to read JSON)
    if isinstance(text, (bytes, bytearray)):
        if len(text) > max_bytes:
            raise TooLarge(what, f"larger than {describe_bytes(max_bytes)}")
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            raise JSONError(what, "not JSON (not UTF-8)") from None
    check(text, what=what, max_depth=max_depth, max_bytes=max_bytes)
    try:
        return json.loads(text)
    except ValueError as exc:   # JSONDecodeError, or an integer of more digits than int() takes
        raise JSONError(what, f"not JSON ({getattr(exc, 'msg', exc)})") from None


def dumps(value, *, indent=None, separators=None):
    """`value` as JSON text, non-ASCII characters as they are."""
    import json  # (start-up: 1 ms, only to write JSON)
    return json.dumps(value, ensure_ascii=False, indent=indent, separators=separators)


def describe_bytes(count):
    for unit, scale in (("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if count >= scale and count % scale == 0:
            return f"{count // scale} {unit}"
    return f"{count} bytes"
