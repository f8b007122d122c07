"""How a turn ends (agentctl(7), TURNS): committed, killed, stopped, or given back
with the signal that waited for it; and what the turn's record says of it. Each
ending is a step of the run: a transaction of its own (lease.holding)."""

from agentctl import mailloop, money, shape
from agentctl.ops import lifecycle, signals, supervise
from agentctl.ops.lease import holding
from agentctl.store import asks, events, history, registry, turnlog
from agentctl.ops.turns import void


class Outcome:
    """What a turn came to: status is done, over_budget, stopped, killed, paused or
    batched (its model call waits in a provider's batch); exited
    how the agent exited after it, if it did; cut whether a reply was cut at the
    token limit; value the reply as a JSON value, for an agent with a schema. A plain
    class, not a dataclass: making one costs every turn's start."""
    __slots__ = ("agent_id", "turn_id", "status", "text", "steps", "input_tokens",
                 "output_tokens", "mail_read", "model", "exited", "cut", "value", "cached",
                 "written", "cost", "unpriced")

    def __init__(self, agent_id, turn_id, status, text="", steps=0, input_tokens=0,
                 output_tokens=0, mail_read=0, model="", exited=None, cut=False, value=None,
                 cached=0, written=0, cost=None, unpriced=0):
        self.agent_id, self.turn_id, self.status, self.text = agent_id, turn_id, status, text
        self.steps, self.input_tokens, self.output_tokens = steps, input_tokens, output_tokens
        self.mail_read, self.model, self.exited, self.cut = mail_read, model, exited, cut
        self.value, self.cached, self.written = value, cached, written
        self.cost, self.unpriced = cost, unpriced

    def record(self):
        """agent-run --format json's record: cost in dollars, null when no call had a
        price (unpriced counts the calls without one)."""
        return {"turn": self.turn_id, "agent": self.agent_id, "status": self.status,
                "model": self.model, "steps": self.steps, "input_tokens": self.input_tokens,
                "output_tokens": self.output_tokens, "cache_read_tokens": self.cached,
                "cache_write_tokens": self.written, "cost": money.dollars(self.cost),
                "unpriced": self.unpriced, "mail_read": self.mail_read,
                "exited": self.exited, "text": self.text, "cut": self.cut, "value": self.value}


def outcome(conn, agent_id, turn_id, status, spec, exited=None, text=None, agent=None):
    """The turn's Outcome, read once it is committed; `text` (its final text) and `agent`
    (the agent's row) when the caller has read them in that transaction."""
    turn = turnlog.get(conn, turn_id)
    text = turnlog.final_text(conn, turn_id) if text is None else text
    return Outcome(agent_id, turn_id, status, text, turn["steps"],
                   turn["input_tokens"], turn["output_tokens"], turn["mail_read"], spec, exited,
                   turn["stop_reason"] == "length",
                   shape.reply_value((agent or registry.get(conn, agent_id))["schema"], text)
                   if status == "done" else None,
                   turn["cache_read_tokens"], turn["cache_write_tokens"], turn["cost"],
                   turn["unpriced"])


def how_it_ends(conn, turn_id, validate):
    """A successful sleep or exit call in this turn ends it: ('exit', its result),
    ('sleep', None), or (None, None). `validate` parses a call's arguments."""
    rows = turnlog.successful_calls(conn, turn_id, ("sleep", "exit"))
    for name, arguments in rows:
        if name == "exit":      # it succeeded, so its arguments passed the validator
            return "exit", validate(name, arguments)["result"]
    return ("sleep", None) if rows else (None, None)


def answered(conn, turn_id):
    """The model's last reply had no tool call: the turn only waits for its
    commit (a crash came in between), so the model is not asked again."""
    return turnlog.last_kind(conn, turn_id) == "assistant"


def release(conn, agent_id):
    """Give the agent back; a signal that arrived for the turn that is now not
    going to finish takes effect here (TERM and KILL end the agent, STOP stops it)."""
    with holding(conn, agent_id):
        registry.release(conn, agent_id)
        agent = registry.get(conn, agent_id)
        if agent["pending_signal"]:
            registry.update(conn, agent_id, pending_signal=None)
            signals.apply(conn, agent, agent["pending_signal"], actor=None)


def commit(conn, agent_id, turn_id, spec, ending, result, status="done"):
    """Close the turn, then what follows it: an exit call or a task's first
    turn ends the agent with its result, a pending TERM ends it too, a
    pending STOP stops it; the others sleep until new input. A turn ended
    over budget is committed as it stands (status over_budget); a task
    does not exit on it."""
    if registry.get(conn, agent_id)["pending_signal"] == "KILL":
        return killed(conn, agent_id, turn_id, spec)
    with holding(conn, agent_id) as before:
        signal = before["pending_signal"]
        turnlog.finish(conn, turn_id, status)
        history.clear_if_pending(conn, agent_id)
        # a turn that ends well lets go of a hold after a failure, not of a mail loop's
        # (the turn's own mail may have made it)
        registry.update(conn, agent_id, failures=0, retry_at=None,
                        held_at=before["held_at"] if mailloop.looping(before) else None,
                        held_for=None,
                        pending_signal=None)
        registry.release(conn, agent_id, "T" if signal == "STOP" else "S")
        agent = registry.get(conn, agent_id)
        text = turnlog.final_text(conn, turn_id)
        exited = None
        if ending == "exit" or (agent["role"] == "task" and status == "done"):
            if not supervise.exit_or_restart(conn, agent, result):
                lifecycle.exit(conn, agent, code=0,
                               result=result if ending == "exit" else text, actor=agent_id)
                exited = "exited"
        elif signal in ("TERM", "KILL"):
            lifecycle.exit(conn, agent, code=signals.exit_code("TERM"), signal="TERM",
                           result=text)
            exited = "killed by TERM"
        elif agent["role"] == "architect" and ending != "sleep":
            # An architect sleeps on its result until new mail wakes it.
            registry.update(conn, agent_id, wake_at=None)
    return outcome(conn, agent_id, turn_id, status, spec, exited, text,
                   agent if exited is None else None)


def killed(conn, agent_id, turn_id, spec):
    """KILL: stop now; the partial turn is never replayed."""
    with holding(conn, agent_id):
        void(conn, turnlog.get(conn, turn_id), "killed", "killed by KILL")
        registry.update(conn, agent_id, pending_signal=None)
        registry.release(conn, agent_id)
        lifecycle.exit(conn, registry.get(conn, agent_id), code=signals.exit_code("KILL"),
                       signal="KILL")
    return outcome(conn, agent_id, turn_id, "killed", spec, "killed by KILL")


def paused(conn, agent_id, turn_id, spec, request_id):
    """A request was opened: the turn stays open and the agent waits, P, holding no
    lease. Decided meanwhile (another shell was quick): it is runnable at once."""
    with holding(conn, agent_id):
        decided = asks.get(conn, request_id)["decision"] is not None
        registry.release(conn, agent_id, "S" if decided else "P")
        agent = registry.get(conn, agent_id)
        if agent["pending_signal"]:         # what came while the call was being asked
            registry.update(conn, agent_id, pending_signal=None)
            signals.apply(conn, agent, agent["pending_signal"], actor=None)
    return outcome(conn, agent_id, turn_id, "paused", spec)


def batched(conn, agent_id, turn_id, spec):
    """The step's model call waits in a provider's batch (turn.batches): the turn stays
    open and the agent sleeps, holding no lease, until a run collects the result (it
    is not runnable meanwhile: turns.would_run). A signal that came meanwhile takes
    effect here: KILL and TERM end the turn, and its request is abandoned."""
    release(conn, agent_id)
    return outcome(conn, agent_id, turn_id, "batched", spec, text="")


def task_waits(conn, agent_id, turn_id, spec):
    """A call's MCP task still runs (tools/mcptasks.py): the turn stays open, kept
    with the call's run, and the agent is given back runnable: its next run (cron's
    --all) resumes the turn at the call and polls the task again."""
    release(conn, agent_id)
    return outcome(conn, agent_id, turn_id, "task", spec, text="")


def stopped(conn, agent_id, turn_id, spec):
    """STOP: the turn stays open and resumes after CONT. None when a CONT took
    the STOP back before this transaction: the turn goes on."""
    with holding(conn, agent_id):
        if registry.get(conn, agent_id)["pending_signal"] != "STOP":
            return None
        registry.update(conn, agent_id, pending_signal=None)
        registry.release(conn, agent_id, "T")
        events.record(conn, agent_id, "status", old="R", new="T", turn=turn_id)
    return outcome(conn, agent_id, turn_id, "stopped", spec)
