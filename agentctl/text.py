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


CELL = 60       # the characters of a text in a table's cell (a subject, a result)


def cut(text, width):
    """`text` shown in at most `width` (4 or more) characters: whole when it fits,
    else cut and ended with "...". The cut is made at a space when one is in the
    second half of what is kept (a word cut in two reads as another word), else
    where the room ends. Every text agentctl shortens for a reader is cut here."""
    if len(text) <= width:
        return text
    kept = text[:width - 3]
    space = kept.rfind(" ")
    if space > len(kept) // 2:
        kept = kept[:space]
    return kept.rstrip(" ,;:") + "..."


def first_line(text, width=CELL):
    """The first line of `text` (None is empty), cut to `width` characters: a table
    cell, a subject, one line of a message. A line ends at any line break Python
    knows (\\r, U+2028 ...), so what is returned is one line."""
    lines = (text or "").strip().splitlines()
    return cut(lines[0].rstrip() if lines else "", width)


def host_port(host, port=None):
    """A host as a URL writes it, an IPv6 address in brackets, with `port` if given."""
    host = f"[{host}]" if ":" in host else host
    return host if port is None else f"{host}:{port}"
