"""The API keys agentctl reads from the environment, and redact(), which keeps their values out of
any text it shows or stores: error messages, a server's words, a model's reply.

Base layer: imports only the standard library.
"""

import os

VARIABLES = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY")
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
