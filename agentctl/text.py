"""Text from outside (arguments, the environment, model replies) made valid
UTF-8 before anything stores or compares it: bytes that are not UTF-8
become U+FFFD, as in a body read from standard input."""


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
