"""Text from outside (arguments, the environment, model replies) made valid
UTF-8 before anything stores or compares it: bytes that are not UTF-8
become U+FFFD, as in a body read from standard input."""

from agentctl import jsonin


def valid(text):
    """`text` with every lone surrogate (how Python carries undecodable bytes
    of argv and the environment, or a JSON escape like \\udcff) replaced."""
    if text is None or text.isascii():
        return text
    try:
        raw = text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        raw = text.encode("utf-8", "surrogatepass")
    return raw.decode("utf-8", "replace")


def quoted(text):
    """`text` as a JSON string on one line, for a tool result that quotes
    another agent's words: no line break it holds can start a line that
    poses as agentctl's own (U+2028 and kin are escaped too)."""
    return jsonin.dumps(text).translate(
        {0x85: "\\u0085", 0x2028: "\\u2028", 0x2029: "\\u2029"})


def valid_json(value):
    """A parsed JSON value with valid() applied to every string in it: a JSON
    text of plain ASCII may still escape a lone surrogate (\\udcff)."""
    if isinstance(value, str):
        return valid(value)
    if isinstance(value, list):
        return [valid_json(v) for v in value]
    if isinstance(value, dict):
        return {valid(k): valid_json(v) for k, v in value.items()}
    return value


def first_line(text, width):
    """The first line of `text` for a table cell: at most `width` characters, cut
    at a space (a word cut in two reads as another word) and ended with "...";
    a single word longer than the cell is cut where the cell ends."""
    line = (text or "").strip().split("\n", 1)[0].rstrip()
    if len(line) <= width:
        return line
    cut = line[:width - 3]
    if " " in cut:
        cut = cut[:cut.rindex(" ")]
    return cut.rstrip(" ,;:") + "..."
