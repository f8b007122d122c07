"""Model and mail text on a terminal: control sequences are shown, not acted on
(OSC 52 would set the clipboard, others the title or the screen); a pipe gets the
exact bytes."""

import os
import select
import subprocess
import sys

import pytest

from .conftest import BIN, agent, fork

EVIL = "hi \x1b]52;c;ZXZpbA==\x07 bye\x9b2J\tdone\x7f"
SHOWN = "hi ^[]52;c;ZXZpbA==^G byeM-^[2J\tdone^?"


def on_a_terminal(program, *args):
    """What `program` writes to a pseudo-terminal."""
    master, slave = os.openpty()
    proc = subprocess.Popen([sys.executable, os.path.join(BIN, program), *args],
                            stdin=subprocess.DEVNULL, stdout=slave, stderr=subprocess.PIPE)
    os.close(slave)
    out = b""
    while True:
        ready, _, _ = select.select([master], [], [], 30)
        if not ready:
            break
        try:
            chunk = os.read(master, 65536)
        except OSError:         # the other end is closed
            break
        if not chunk:
            break
        out += chunk
    proc.wait(timeout=30)
    os.close(master)
    return out.decode("utf-8").replace("\r\n", "\n")


@pytest.mark.parametrize("program, args", [
    ("agent-mail", ["-r", "a"]), ("agent-replay", ["a"]), ("agent-doc", ["get", "d"]),
    ("agent-run", ["b"])])
def test_control_characters_are_shown_on_a_terminal_and_kept_in_a_pipe(conn, program, args):
    fork("-n", "a", EVIL)
    agent("send", "a", EVIL)
    agent("doc", "put", "d", EVIL)
    fork("-n", "b", "-m", "echo", EVIL)
    shown = on_a_terminal(program, *args)
    assert "\x1b" not in shown and "\x9b" not in shown and "\x07" not in shown
    assert SHOWN in shown
    if program == "agent-run":
        fork("-n", "c", "-m", "echo", EVIL)
        args = ["c"]
    agent("send", "a", EVIL)          # the terminal read the first
    piped = agent(program.removeprefix("agent-"), *args)
    assert EVIL in piped.out
