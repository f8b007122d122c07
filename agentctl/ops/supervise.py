"""Supervision (agentctl(7), LIFECYCLE): what an agent's restart policy makes of a
failed turn, as an Erlang/OTP supervisor would.

A failed turn is one the model's API refused for good (exit 69), or one whose
model can't be used as the agent's settings and the environment name it (no key,
a scripted model's file that can't be read: exit 2, before any input is taken). A temporary
fault (75) or a bug (70) leaves the turn open, to be resumed after a backoff; a
crash of agent-run leaves it open too, and the next run resumes it where it
stopped; a turn ended over budget or at --max-steps is committed. None of those
is a failure.

  never       the agent is held: the failed turn stays open, its input (prompt,
              mail, timer) kept in it, and `agent-run --all` leaves the agent
              alone until the operator runs it (`agent-run AGENT`, which resumes
              the turn where it failed), lets it go (`agent-kill -s CONT`),
              changes a setting (agent-set), or what the environment gives its
              model changes (a key set, another URL: cause_gone()); its
              parent is told. A task too: held, not exited, so that a typo
              costs nothing that a fix can't give back
  on-failure  the agent is restarted: the failed turn is voided, its input
              pending again, and the next run after a backoff takes it again;
              more than --max-restarts restarts within --restart-window seconds
              and it exits with status 76, its restarts used up
  always      as on-failure, and an exit (the exit tool) restarts it too

Its parent is told once at the first failure of a run of failures (a mail of
kind failure), and once more when the restarts run out (the exit notice), not
at every retry: each mail wakes it and costs it tokens. TERM and KILL never
lead to a restart.

Every fault of a run, for good or for now, is a `fail` event with its reason and
the agent's last_failure (fault()), so that agent-log, agent-ps and agent-why show
what cron's log file alone used to.
"""

from agentctl import clock, modelspec, settings, voice
from agentctl.errors import UNAVAILABLE, USAGE
from agentctl.ops import lifecycle, mail, turns
from agentctl.store import events, registry
from agentctl.text import cut

RESTARTS_EXHAUSTED = 76


def restarts(agent):
    return agent["restart"] in ("on-failure", "always")


def fault(conn, agent_id, error, code, setup=None):
    """A run of the agent ended on a fault, `error` its one line and `code` the run's exit
    status: its `fail` event and its last failure, then what follows. A refusal for good
    (69) or a model that can't be used (2) is a failed turn: the restart policy decides
    (failed()); any other fault (75: unreachable, a timeout, a 5xx or 429 after the
    retries; 70) leaves the turn open, to be resumed after a backoff. `setup`: what
    the environment gave the agent's model (agentctl.endpoint.setup), which a hold keeps.
    The caller holds the run's transaction."""
    turn = turns.open_turn(conn, agent_id)
    if code in (USAGE, UNAVAILABLE):
        events.record(conn, agent_id, "fail", turn=turn and turn["id"], code=code,
                      error=_short(error))
        failed(conn, agent_id, error, setup)
        return
    registry.update(conn, agent_id, last_failure=error)
    delay = turns.back_off(conn, agent_id)
    events.record(conn, agent_id, "fail", turn=turn and turn["id"], code=code,
                  error=_short(error), retry=clock.now() + delay)


def refused_once(conn, agent_id, error, opened):
    """The model a run was given for itself (agent-run -m) can't be used or was refused
    for good: the run's mistake, not the agent's. Its `fail` event, nothing held, no
    one told; the turn the run `opened` (a row, or None) is voided, so that its input
    is pending again as it was."""
    turn = turns.open_turn(conn, agent_id)
    events.record(conn, agent_id, "fail", turn=turn and turn["id"], code=USAGE,
                  error=_short(error))
    if opened is not None and turn is not None and turn["id"] == opened["id"]:
        turns.void(conn, turn, "failed", error)


def failed(conn, agent_id, error, setup=None):
    """The turn in progress (if one was opened) failed for good; apply the agent's
    restart policy. The caller holds the run's transaction."""
    agent = registry.get(conn, agent_id)
    turn = turns.open_turn(conn, agent_id)
    first = agent["failures"] == 0
    registry.update(conn, agent_id, last_failure=error)
    if not restarts(agent):
        hold(conn, agent, turn, error, setup)
        if first:
            _tell(conn, agent, voice.NOT_RESTARTED, error)
        return
    if turn is not None:
        turns.void(conn, turn, "failed", error)
    restart(conn, agent, error, first)


def hold(conn, agent, turn, error, setup=None):
    """Hold the agent after a failure: its turn stays open with its input, and --all
    leaves it alone until someone tries again (release()), or until what the
    environment gives its model differs from `setup` (cause_gone())."""
    registry.update(conn, agent["id"], failures=agent["failures"] + 1, held_at=clock.now(),
                    held_for=setup, retry_at=None)
    events.record(conn, agent["id"], "held", turn=turn and turn["id"], error=_short(error))


def release(conn, agent, actor=None, why="set"):
    """Let --all try a held (or backing off) agent again: its settings changed (set),
    the operator let it go (CONT), what its model is given changed (setup)."""
    if agent["held_at"] is None and agent["retry_at"] is None:
        return False
    registry.update(conn, agent["id"], held_at=None, held_for=None, retry_at=None)
    events.record(conn, agent["id"], "release", actor, by=why)
    return True


def cause_gone(agent):
    """Whether what held `agent` may be gone: what this process's environment gives its
    model (its name, base URL and key, a scripted model's file) differs from what it was
    given when its turn failed. A hold from before held_for was kept is never."""
    if agent["held_at"] is None or agent["held_for"] is None:
        return False
    from agentctl.endpoint import setup  # (start-up: 1 ms, only for a held agent)
    return agent["held_for"] != setup(modelspec.chosen(agent))


def retry_held(conn):
    """agent-run --all, in the caller's transaction: let go every hold whose cause looks
    gone (cause_gone()), so that this run tries them again without a human."""
    for agent in registry.held(conn):
        if cause_gone(agent):
            release(conn, agent, why="setup")


def any_to_retry(conn):
    """Whether retry_held() would let any hold go: read first, so that an --all with
    nothing to let go takes no write lock for it."""
    return any(cause_gone(agent) for agent in registry.held(conn))


def _short(text):
    return cut(text, 200)


def restart(conn, agent, why, first=False):
    """Count a restart in the agent's window; exit it when there are too many, else
    let it back off. `first`: the first failure of a run, which its parent is told."""
    now = clock.now()
    window = agent["restart_window"] or settings.DEFAULT_RESTART_WINDOW
    limit = settings.DEFAULT_MAX_RESTARTS if agent["max_restarts"] is None \
        else agent["max_restarts"]
    if agent["window_start"] is None or now - agent["window_start"] > window:
        start, count = now, 1
    else:
        start, count = agent["window_start"], agent["window_restarts"] + 1
    registry.update(conn, agent["id"], restarts=agent["restarts"] + 1, window_start=start,
                    window_restarts=count)
    if count > limit:
        lifecycle.exit(conn, registry.get(conn, agent["id"]), code=RESTARTS_EXHAUSTED,
                       result=voice.restarts_used_up(limit, window, why))
        return
    delay = turns.back_off(conn, agent["id"])
    events.record(conn, agent["id"], "restart", count=count, limit=limit, delay=delay,
                  error=_short(why))
    if first:
        _tell(conn, agent, voice.restarting(delay, count, limit, window), why)


def _tell(conn, agent, how, why):
    """The failure notice, in the exit notice's form, to its supervisor."""
    mail.tell_supervisor(conn, agent, voice.failure_notice(registry.label(agent), agent["id"],
                                                           how, why), "failure")


def exit_or_restart(conn, agent, result):
    """An exit call (or a task's end) of an agent whose policy is always restarts it:
    it stays alive, no zombie, no exit mail. Whether it was restarted."""
    if agent["restart"] != "always":
        return False
    registry.update(conn, agent["id"], restarts=agent["restarts"] + 1)
    return True
