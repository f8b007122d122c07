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
              the turn where it failed) or changes a setting (agent-set); its
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
"""

from agentctl import clock, settings, voice
from agentctl.ops import lifecycle, mail, turns
from agentctl.store import events, registry
from agentctl.text import cut

RESTARTS_EXHAUSTED = 76


def restarts(agent):
    return agent["restart"] in ("on-failure", "always")


def failed(conn, agent_id, error):
    """The turn in progress (if one was opened) failed for good; apply the agent's
    restart policy. The caller holds the run's transaction."""
    agent = registry.get(conn, agent_id)
    turn = turns.open_turn(conn, agent_id)
    first = agent["failures"] == 0
    registry.update(conn, agent_id, last_failure=error)
    if not restarts(agent):
        hold(conn, agent, turn, error)
        if first:
            _tell(conn, agent, voice.NOT_RESTARTED, error)
        return
    if turn is not None:
        turns.void(conn, turn, "failed", error)
    restart(conn, agent, error, first)


def hold(conn, agent, turn, error):
    """Hold the agent after a failure: its turn stays open with its input, and --all
    leaves it alone until someone tries again (release())."""
    registry.update(conn, agent["id"], failures=agent["failures"] + 1, held_at=clock.now(),
                    retry_at=None)
    events.record(conn, agent["id"], "held", turn=turn and turn["id"], error=_short(error))


def release(conn, agent, actor=None, why="set"):
    """Let --all try a held (or backing off) agent again: its settings changed."""
    if agent["held_at"] is None and agent["retry_at"] is None:
        return False
    registry.update(conn, agent["id"], held_at=None, retry_at=None)
    events.record(conn, agent["id"], "release", actor, by=why)
    return True


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
