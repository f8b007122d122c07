"""One turn of one agent (agentctl(7), TURNS; agent-run(1)).

claim -> take all pending input -> loop { signals; mail that arrived; call
the model; persist its message; run its tool calls } -> commit. Every
write is its own transaction and the turn's state lives only in the
database, so the loop can start from any point: that is how an
interrupted turn resumes.
"""

import os
from dataclasses import dataclass

from agentctl.ops import budget, turns
from agentctl.turn import compaction, context, tools
from agentctl.store import history, registry
from agentctl.errors import TempFail, UsageError
from agentctl.models.base import ModelError

DEFAULT_MAX_STEPS = 20


@dataclass
class Outcome:
    agent_id: str
    turn_id: int
    status: str                  # done, over_budget, stopped, killed
    text: str = ""
    steps: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    mail_read: int = 0
    model: str = ""
    exited: str = None           # how the agent exited after the turn, if it did

    def record(self):
        return {"turn": self.turn_id, "agent": self.agent_id, "status": self.status,
                "model": self.model, "steps": self.steps, "input_tokens": self.input_tokens,
                "output_tokens": self.output_tokens, "mail_read": self.mail_read,
                "exited": self.exited, "text": self.text}


def choose_model(agent, override=None):
    spec = override or agent["model"] or os.environ.get("AGENTCTL_MODEL")
    if not spec:
        raise UsageError(f"{registry.label(agent)}: no model (give -m MODEL, fork it with -m, "
                         "or set AGENTCTL_MODEL)")
    from agentctl.models import get_model
    model = get_model(spec)
    model.check()
    return spec, model


def run(conn, ref, *, model=None, max_steps=DEFAULT_MAX_STEPS, on_text=None):
    """Run one turn of agent `ref`; returns an Outcome. Raises NotFound (1)
    when there is nothing to do, Refused (3), TempFail (75), ModelError."""
    agent = turns.claim(conn, ref)
    agent_id = agent["id"]
    try:
        spec, client = choose_model(agent, model)
        compaction.window(agent)        # a bad $AGENTCTL_CONTEXT_WINDOW: exit 2 before any intake
        turn = turns.start(conn, agent, spec)
    except turns.LostClaim:
        raise                   # ended by a cascade since the claim: touch nothing
    except BaseException:
        _release(conn, agent_id)
        raise
    try:
        with turns.heartbeat(conn, agent_id):   # the lease lives as long as this process
            return _loop(conn, agent_id, turn, spec, client, max_steps, on_text)
    except turns.LostClaim:
        raise                   # the agent is another run's now: touch nothing
    except TempFail:
        with turns.holding(conn, agent_id):
            turns.back_off(conn, agent_id)
        _release(conn, agent_id)
        raise
    except ModelError as e:      # the API refused for good: end the turn, retry later
        with turns.holding(conn, agent_id):
            turns.fail(conn, turns.open_turn(conn, agent_id), str(e))
            turns.back_off(conn, agent_id)
        _release(conn, agent_id)
        raise
    except Exception:
        # A bug (exit 70): the turn stays open, but cron must not hit it every minute.
        with turns.holding(conn, agent_id):
            turns.back_off(conn, agent_id)
        _release(conn, agent_id)
        raise
    except BaseException:
        _release(conn, agent_id)   # the turn stays open: the next run resumes it
        raise


def _release(conn, agent_id):
    """Give the agent back; a signal that arrived for the turn that is now not
    going to finish takes effect here (TERM and KILL end the agent, STOP stops it)."""
    from agentctl.ops import signals
    with turns.holding(conn, agent_id):
        turns.release(conn, agent_id)
        agent = registry.get(conn, agent_id)
        if agent["pending_signal"]:
            conn.execute("UPDATE agents SET pending_signal = NULL WHERE id = ?", (agent_id,))
            signals.apply(conn, agent, agent["pending_signal"], actor=None)


def _unanswered(conn, turn_id):
    return conn.execute(
        "SELECT * FROM messages c WHERE c.turn_id = ? AND c.kind = 'tool_call' AND c.void = 0 "
        "AND NOT EXISTS (SELECT 1 FROM messages r WHERE r.turn_id = c.turn_id "
        "AND r.kind = 'tool_result' AND r.tool_call_id = c.tool_call_id) ORDER BY c.id",
        (turn_id,)).fetchall()


def _ending(conn, turn_id):
    """A successful sleep or exit call in this turn ends it; exit's result."""
    rows = conn.execute(
        "SELECT r.tool_name, c.content FROM messages r JOIN messages c ON c.turn_id = r.turn_id "
        "AND c.kind = 'tool_call' AND c.tool_call_id = r.tool_call_id "
        "WHERE r.turn_id = ? AND r.kind = 'tool_result' AND r.tool_name IN ('sleep', 'exit') "
        "AND r.content NOT LIKE 'error:%' ORDER BY r.id", (turn_id,)).fetchall()
    for name, arguments in rows:
        if name == "exit":      # it succeeded, so its arguments passed the validator
            return "exit", tools.validate(name, arguments)["result"]
    return ("sleep", None) if rows else (None, None)


def _answered(conn, turn_id):
    """The model's last reply had no tool call: the turn only waits for its
    commit (a crash came in between), so the model is not asked again."""
    row = conn.execute("SELECT kind FROM messages WHERE turn_id = ? AND void = 0 "
                       "ORDER BY id DESC LIMIT 1", (turn_id,)).fetchone()
    return row is not None and row[0] == "assistant"


def _call_ids(conn, turn_id, calls):
    """A call's id is how its result finds it, so it must be unique in the
    turn: an id the model repeats (some servers number the calls of each
    message from 0) or leaves empty gets a suffix."""
    used = {r[0] for r in conn.execute("SELECT tool_call_id FROM messages WHERE turn_id = ? "
                                       "AND kind = 'tool_call'", (turn_id,))}
    ids = []
    for call in calls:
        base = call.id or "call"
        unique, n = base, 1
        while unique in used:
            n += 1
            unique = f"{base}_{n}"
        used.add(unique)
        ids.append(unique)
    return ids


def _run_calls(conn, agent_id, turn_id, calls):
    # The sync barrier: a fork sees every other call of its step completed.
    for call in sorted(calls, key=lambda c: c["tool_name"] == "fork"):
        tools.execute(conn, agent_id, turn_id, call)


def _loop(conn, agent_id, turn, spec, client, max_steps, on_text):
    turn_id = turn["id"]
    offered = tools.specs()
    while True:
        agent = registry.get(conn, agent_id)
        signal = agent["pending_signal"]
        if signal == "KILL":
            return _killed(conn, agent_id, turn_id, spec)
        pending = _unanswered(conn, turn_id)
        if pending:
            _run_calls(conn, agent_id, turn_id, pending)
            # what came while they ran: a KILL or STOP, or a CONT that took a STOP back
            signal = registry.get(conn, agent_id)["pending_signal"]
            if signal == "KILL":
                return _killed(conn, agent_id, turn_id, spec)
        if signal == "STOP":
            stopped = _stopped(conn, agent_id, turn_id, spec)
            if stopped:
                return stopped
        ending, result = _ending(conn, turn_id)
        steps = conn.execute("SELECT steps FROM turns WHERE id = ?", (turn_id,)).fetchone()[0]
        if ending or steps >= max_steps or _answered(conn, turn_id):
            break
        if _over_budget(conn, agent_id):
            return _commit(conn, agent_id, turn_id, spec, None, None, status="over_budget")
        with turns.holding(conn, agent_id):
            if steps:
                turns.take_mail(conn, agent_id, turn_id, "MID-TURN UPDATE")
            turns.renew(conn, agent_id)
        system, rows = compaction.prepare(conn, registry.get(conn, agent_id), turn_id, client)
        if _over_budget(conn, agent_id):        # the summary's call spent the rest
            return _commit(conn, agent_id, turn_id, spec, None, None, status="over_budget")
        reply = client.complete(context.as_openai(system, rows), offered, on_text=on_text)
        with turns.holding(conn, agent_id):
            history.append(conn, agent_id, "assistant", reply.text or "", turn_id=turn_id,
                           tokens=_measured(reply.usage))
            for call, call_id in zip(reply.tool_calls, _call_ids(conn, turn_id, reply.tool_calls)):
                history.append(conn, agent_id, "tool_call", call.arguments,
                               tool_name=call.name, tool_call_id=call_id, turn_id=turn_id)
            turns.record_step(conn, turn_id, agent_id, reply.usage)
        if not reply.tool_calls:
            break
    return _commit(conn, agent_id, turn_id, spec, *_ending(conn, turn_id))


def _over_budget(conn, agent_id):
    return budget.is_exhausted(budget.account(conn, registry.get(conn, agent_id)))


def _measured(usage):
    """The tokens of a call as the API reported them; None for an estimate."""
    if usage.get("estimated", True):
        return None
    return usage.get("input_tokens", 0) + usage.get("output_tokens", 0)


def _final_text(conn, turn_id):
    row = conn.execute("SELECT content FROM messages WHERE turn_id = ? AND kind = 'assistant' "
                       "AND content != '' AND void = 0 ORDER BY id DESC LIMIT 1",
                       (turn_id,)).fetchone()
    return row[0] if row else ""


def _outcome(conn, agent_id, turn_id, status, spec, exited=None):
    turn = conn.execute("SELECT * FROM turns WHERE id = ?", (turn_id,)).fetchone()
    return Outcome(agent_id, turn_id, status, _final_text(conn, turn_id), turn["steps"],
                   turn["input_tokens"], turn["output_tokens"], turn["mail_read"], spec, exited)


def _commit(conn, agent_id, turn_id, spec, ending, result, status="done"):
    """Close the turn, then what follows it: an exit call or a task's first
    turn ends the agent with its result, a pending TERM ends it too, a
    pending STOP stops it; the others sleep until new input. A turn ended
    over budget is committed as it stands (status over_budget); a task
    does not exit on it."""
    if registry.get(conn, agent_id)["pending_signal"] == "KILL":
        return _killed(conn, agent_id, turn_id, spec)
    with turns.holding(conn, agent_id):
        signal = registry.get(conn, agent_id)["pending_signal"]
        turns.finish(conn, turn_id, status)
        history.clear_if_pending(conn, agent_id)
        conn.execute("UPDATE agents SET failures = 0, retry_at = NULL, pending_signal = NULL "
                     "WHERE id = ?", (agent_id,))
        turns.release(conn, agent_id, "T" if signal == "STOP" else "S")
        agent = registry.get(conn, agent_id)
        text = _final_text(conn, turn_id)
        exited = None
        if ending == "exit" or (agent["role"] == "task" and status == "done"):
            registry.exit_agent(conn, agent, code=0, result=result if ending == "exit" else text,
                                actor=agent_id)
            exited = "exited"
        elif signal in ("TERM", "KILL"):
            registry.exit_agent(conn, agent, code=143, signal="TERM", result=text)
            exited = "killed by TERM"
        elif agent["role"] == "architect" and ending != "sleep":
            # An architect sleeps on its result until new mail wakes it.
            conn.execute("UPDATE agents SET wake_at = NULL WHERE id = ?", (agent_id,))
    return _outcome(conn, agent_id, turn_id, status, spec, exited)


def _killed(conn, agent_id, turn_id, spec):
    """KILL: stop now; the partial turn is never replayed."""
    with turns.holding(conn, agent_id):
        turn = conn.execute("SELECT * FROM turns WHERE id = ?", (turn_id,)).fetchone()
        turns.void(conn, turn, "killed", "killed by KILL")
        conn.execute("UPDATE agents SET pending_signal = NULL WHERE id = ?", (agent_id,))
        turns.release(conn, agent_id)
        registry.exit_agent(conn, registry.get(conn, agent_id), code=137, signal="KILL")
    return _outcome(conn, agent_id, turn_id, "killed", spec, "killed by KILL")


def _stopped(conn, agent_id, turn_id, spec):
    """STOP: the turn stays open and resumes after CONT. None when a CONT took
    the STOP back before this transaction: the turn goes on."""
    with turns.holding(conn, agent_id):
        if registry.get(conn, agent_id)["pending_signal"] != "STOP":
            return None
        conn.execute("UPDATE agents SET pending_signal = NULL WHERE id = ?", (agent_id,))
        turns.release(conn, agent_id, "T")
    return _outcome(conn, agent_id, turn_id, "stopped", spec)
