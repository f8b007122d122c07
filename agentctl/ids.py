"""Agent ids and names (agentctl(7), IDENTITY)."""

import binascii
import re
import uuid

ID_LENGTH = 22
MIN_PREFIX = 4
SHORT = 8                           # the characters of an id a table shows
INIT_ID = "A" * ID_LENGTH          # the nil UUID, base64url: init's id
NAME_RE = re.compile(r"[a-z][a-z0-9._-]{0,63}\Z")
ROLES = ("agent", "task", "worker", "lead", "architect", "daemon")


def new_id():
    """22 characters of base64url from a random UUID; never starts with '-'
    (an id must never be mistaken for an option)."""
    while True:
        raw = binascii.b2a_base64(uuid.uuid4().bytes, newline=False)
        text = raw.decode("ascii").rstrip("=").replace("+", "-").replace("/", "_")
        if text[0] != "-":
            return text


def short(agent_id):
    return agent_id[:SHORT]
