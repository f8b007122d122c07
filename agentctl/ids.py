"""Agent ids and names (agentctl(7), IDENTITY); the names of tools."""

import binascii
import os
import re

ID_LENGTH = 22
MIN_PREFIX = 4
SHORT = 8                           # the characters of an id a table shows
INIT_ID = "A" * ID_LENGTH          # the nil UUID, base64url: init's id
# Patterns as text: re compiles each at its first use (and keeps it), not at every
# program's start.
NAME = r"[a-z][a-z0-9._-]{0,63}"     # an agent's name
ROLES = ("agent", "task", "worker", "lead", "architect", "daemon")
# A tool's name as the providers take it (OpenAI's and Anthropic's rule): a program
# tool's, an MCP server's and the SERVER__TOOL its tools are offered under, and a name
# sent back to an API.
TOOL_NAME_CHARACTERS = "A-Za-z0-9_-"
TOOL_NAME_LONGEST = 64
TOOL_NAME = f"[{TOOL_NAME_CHARACTERS}]{{1,{TOOL_NAME_LONGEST}}}"
TOOL_NAME_RULE = f"1 to {TOOL_NAME_LONGEST} letters, digits, _ or -"


def is_name(text):
    """Whether `text` may be an agent's name."""
    return re.fullmatch(NAME, text) is not None


def is_tool_name(text):
    """Whether `text` may be a tool's name (TOOL_NAME)."""
    return re.fullmatch(TOOL_NAME, text) is not None


def random_uuid():
    """The 16 bytes of a random (version 4) UUID, as uuid.uuid4().bytes, without
    importing uuid (it loads platform: a few ms of every program's start-up)."""
    raw = bytearray(os.urandom(16))
    raw[6] = raw[6] & 0x0F | 0x40       # version 4
    raw[8] = raw[8] & 0x3F | 0x80       # the RFC 4122 variant
    return bytes(raw)


def new_id():
    """22 characters of base64url from a random UUID; never starts with '-'
    (an id must never be mistaken for an option)."""
    while True:
        raw = binascii.b2a_base64(random_uuid(), newline=False)
        text = raw.decode("ascii").rstrip("=").replace("+", "-").replace("/", "_")
        if text[0] != "-":
            return text


def short(agent_id):
    return agent_id[:SHORT]
