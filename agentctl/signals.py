"""Signals: TERM, KILL, STOP, CONT, HUP (agentctl(7), SIGNALS).

An agent in a turn (status R, a live lease) is not changed under the turn's
feet: the signal is left in agents.pending_signal and agent-run honours it
between steps. Every signal is recorded as an event.
"""

from . import history, registry
from .db import transaction
from .errors import Refused, UsageError
from .ids import INIT_ID

NUMBERS = {"HUP": 1, "KILL": 9, "TERM": 15, "CONT": 18, "STOP": 19}
NAMES = tuple(NUMBERS)


def parse(text):
    """'TERM', 'term', 'SIGTERM' or '15' -> 'TERM'."""
    word = text.upper()
    word = word[3:] if word.startswith("SIG") else word
    if word in NUMBERS:
        return word
    for name, number in NUMBERS.items():
        if word == str(number):
            return name
    raise UsageError(f"unknown signal: {text} (one of {', '.join(NAMES)})")


def send(conn, target, sig, *, cascade=False, actor=None):
    """Signal `target` (and with `cascade` every live descendant) in one
    transaction. Returns how many agents got it."""
    with transaction(conn):
        target = registry.get(conn, target["id"])
        victims = [target] + ([d for d in registry.descendants(conn, target["id"])
                               if registry.is_live(d)] if cascade else [])
        refusal = _refusal(target, sig)
        if refusal and not cascade:
            raise Refused(refusal)
        if refusal:
            victims = victims[1:]
        dying = {v["id"] for v in victims} if sig in ("TERM", "KILL") else set()
        for victim in victims:
            _deliver(conn, registry.get(conn, victim["id"]), sig, actor, dying)
    if refusal:
        raise Refused(refusal + f" (its {len(victims)} descendants were signalled)")
    return len(victims)


def _refusal(agent, sig):
    if agent["id"] == INIT_ID and sig in ("TERM", "KILL", "STOP"):
        return f"init can't be {'stopped' if sig == 'STOP' else 'killed'}"
    if not registry.is_live(agent):
        return f"{registry.label(agent)}: already exited"
    return None


def _deliver(conn, agent, sig, actor, dying):
    registry.record(conn, agent["id"], "signal", sig, actor)
    if agent["status"] == "R" and sig in ("TERM", "KILL", "STOP"):
        conn.execute("UPDATE agents SET pending_signal = ? WHERE id = ?",
                     (sig, agent["id"]))
    elif sig in ("TERM", "KILL"):
        registry.exit_agent(conn, agent, code=128 + NUMBERS[sig], signal=sig,
                            actor=actor, dying=dying)
    elif sig == "STOP":
        conn.execute("UPDATE agents SET status = 'T' WHERE id = ? AND status = 'S'",
                     (agent["id"],))
    elif sig == "CONT":
        conn.execute("UPDATE agents SET status = 'S', pending_signal = NULL "
                     "WHERE id = ? AND status = 'T'", (agent["id"],))
    elif sig == "HUP":
        history.append(conn, agent["id"], "clear", "HUP")
