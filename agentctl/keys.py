"""The API keys agentctl reads from the environment, and redact(), which keeps their values out of
any text it shows or stores: error messages, a server's words, a model's reply.

Base layer: imports only the standard library and the provider table (modelspec).
"""

import os

from agentctl.modelspec import PROVIDERS

VARIABLES = tuple(p.key for p in PROVIDERS if p.key)     # each provider's (its row's key)
SHORTEST = 8    # a shorter value is left alone: it would blank out words that merely match it


def redact(text):
    """`text` with the value of each of VARIABLES (as set now, 8 characters or more) as "***".

    Redact before cutting a text short: a key cut in two is no longer found.
    """
    if not text:
        return text
    values = {os.environ.get(name, "").strip() for name in VARIABLES}
    for value in sorted((v for v in values if len(v) >= SHORTEST), key=len, reverse=True):
        text = text.replace(value, "***")
    return text


def _values():
    values = {os.environ.get(name, "").strip() for name in VARIABLES}
    return [v for v in values if len(v) >= SHORTEST]


class Stream:
    """redact() for text that arrives in pieces (a streamed reply): a key split
    between two pieces is still found, because the end of what came so far that
    could begin a key is held back until the next piece (or flush()) shows it."""

    def __init__(self, write):
        self.write, self.held = write, ""
        self.keep = max((len(v) for v in _values()), default=1) - 1

    def __call__(self, piece):
        text = redact(self.held + piece)
        cut = max(0, len(text) - self.keep)
        self.held = text[cut:]
        if cut:
            self.write(text[:cut])

    def flush(self):
        if self.held:
            self.write(redact(self.held))
        self.held = ""
