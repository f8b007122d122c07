"""Signals: TERM, KILL, STOP, CONT, HUP (agentctl(7), SIGNALS).

An agent in a turn (status R, a live lease) is not changed under the turn's
feet: the signal is left in agents.pending_signal and agent-run honours it
between steps. A HUP waits for the turn in progress, running or open
(agents.hup_pending). Every signal is recorded as an event.
"""

from agentctl import clock, voice
from agentctl.errors import UsageError
from agentctl.ids import INIT_ID
from agentctl.ops import asks, authority, lease, lifecycle, turns
from agentctl.store import events, history, registry

NUMBERS = {"HUP": 1, "KILL": 9, "TERM": 15, "CONT": 18, "STOP": 19}
NAMES = tuple(NUMBERS)
RANK = {"STOP": 1, "TERM": 2, "KILL": 3}


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


def send(conn, me, target_id, sig, *, cascade=False, grace=None):
    """Signal the agent `target_id` (with `cascade`, its descendants too) as `me` (a
    row; None: the operator) may, in the caller's transaction, as agent-kill and
    agent-top's keys do: why the agent itself could not be signalled, or None (its
    descendants are signalled all the same)."""
    target = registry.get(conn, target_id)
    authority.check(conn, me, target, "signal")
    count, refusal = apply(conn, target, sig, cascade=cascade, actor=me["id"] if me else None,
                           grace=grace)
    return refusal and refusal + (f" (its descendants were signalled: {count})"
                                  if cascade else "")


def apply(conn, target, sig, *, cascade=False, actor=None, grace=None):
    """Signal `target` (and with `cascade` every live descendant), in the caller's
    transaction: (how many got it, why the target itself was refused or None).
    With `grace` (seconds, TERM only), each that has not exited when it ends is
    killed (kill_at)."""
    victims = [target] + ([d for d in registry.descendants(conn, target["id"])
                           if registry.is_live(d)] if cascade else [])
    refusal = _refusal(target, sig)
    if refusal:
        victims = victims[1:] if cascade else []
    dying = {v["id"] for v in victims} if sig in ("TERM", "KILL") else set()
    # The deepest first: a budget goes back up one account at a time (budget.give_back)
    for victim in reversed(victims):
        # A descendant in a cascade dies at once, in a turn or not: its run finds
        # the agent ended at its next write (lease.KilledMidTurn) and writes nothing.
        now = bool(dying) and victim["id"] != target["id"]
        _deliver(conn, registry.get(conn, victim["id"]), sig, actor, dying, now)
    if grace is not None:
        graced = [target["id"]] + ([d["id"] for d in registry.descendants(
            conn, target["id"])] if cascade else [])
        for victim in graced:
            if registry.is_live(registry.get(conn, victim)):
                registry.update(conn, victim, kill_at=clock.now() + grace)
    return len(victims), refusal


def _refusal(agent, sig):
    if agent["id"] == INIT_ID and sig in ("TERM", "KILL", "STOP"):
        return f"init can't be {'stopped' if sig == 'STOP' else 'killed'}"
    if not registry.is_live(agent):
        return f"{registry.label(agent)}: already exited"
    return None


def exit_code(sig):
    """The exit status of an agent ended by `sig`, as a shell reports a process's: 128 + N."""
    return 128 + NUMBERS[sig]


def _deliver(conn, agent, sig, actor, dying, now=False):
    events.record(conn, agent["id"], "signal", actor, signal=sig)
    if agent["status"] == "P" and sig == "TERM" and not now:
        # A paused agent's requests are denied; it ends its turn (the model sees the
        # denial) and exits at its end, as a running agent does on TERM.
        asks.end_all(conn, agent["id"], "denied", voice.SENT_TERM)
        registry.change_status(conn, agent["id"], "P", "S")
        registry.update(conn, agent["id"], pending_signal="TERM")
        return
    in_turn = agent["status"] == "R" and lease.held(agent) and not now
    if not in_turn and sig in ("TERM", "KILL"):
        # No runner to honour it (none, stopped, or crashed): a turn left
        # open is ended here and never replayed.
        turn = turns.open_turn(conn, agent["id"])
        if turn is not None:
            turns.void(conn, turn, "killed",
                       f"killed by {sig} {'in a cascade' if now else 'outside a run'}")
    if agent["status"] == "R" and not in_turn:
        registry.release(conn, agent["id"])
        agent = registry.get(conn, agent["id"])
    if agent["status"] == "R" and sig in ("TERM", "KILL", "STOP"):
        # KILL outranks TERM, which outranks STOP: a later, weaker signal
        # never cancels a stronger one still pending.
        if RANK[sig] > RANK.get(agent["pending_signal"], 0):
            registry.update(conn, agent["id"], pending_signal=sig)
    elif sig == "HUP" and (agent["status"] == "R" or turns.open_turn(conn, agent["id"])):
        # The clear goes after the turn in progress, running or open (cut short by a crash,
        # a temporary failure or STOP): it must not cut the turn's own input.
        registry.update(conn, agent["id"], hup_pending=1)
    elif sig in ("TERM", "KILL"):
        lifecycle.exit(conn, agent, code=exit_code(sig), signal=sig, actor=actor, dying=dying)
    elif sig == "STOP":
        old = agent["status"]
        if old in ("S", "P") and registry.change_status(conn, agent["id"], old, "T"):
            events.record(conn, agent["id"], "status", actor=actor, old=old, new="T")
    elif sig == "CONT":
        new = "P" if asks.waiting(conn, agent["id"]) else "S"   # back to its request
        if registry.change_status(conn, agent["id"], "T", new):
            events.record(conn, agent["id"], "status", actor=actor, old="T", new=new)
        if agent["pending_signal"] == "STOP":
            registry.update(conn, agent["id"], pending_signal=None)
        # held after a failure or in a mail loop, or backing off: continue means try
        # again (the next --all)
        from agentctl.ops import supervise  # (start-up: 0.8 ms, only for a CONT)
        supervise.release(conn, registry.get(conn, agent["id"]), actor, why="CONT")
    elif sig == "HUP":
        history.append(conn, agent["id"], "clear", "HUP")
