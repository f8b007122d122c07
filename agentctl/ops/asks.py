"""Requests (agentctl(7), REQUESTS): an agent pauses for a human. The ask tool puts a
question; a call of a tool granted with --ask asks for approval. The turn pauses
right there: the agent holds no lease and its status is P until the request is
decided (answered, approved, denied; or expired at its deadline), by the operator
(agent-answer) or by any ancestor (the answer tool). The first decision wins. The
lifecycle parent is told by mail; the next agent-run resumes the turn at the call.
"""

from agentctl import clock, env, voice
from agentctl.errors import Refused, UsageError
from agentctl.ids import new_id
from agentctl.ops import grants, mail
from agentctl.store import asks as asks_store, events, registry

DECISIONS = {"answer": "answered", "approve": "approved", "deny": "denied"}
ELICITATION = asks_store.ELICITATION


def ask_timeout():
    """$AGENTCTL_ASK_TIMEOUT: how long a request waits before it is denied (unset: for
    ever)."""
    return env.duration("AGENTCTL_ASK_TIMEOUT", None)


def open_request(conn, agent, turn_id, call, kind, question=None, seconds=None, form=None):
    """Record a request for the call, in the caller's transaction, and tell the agent's
    supervisor by mail (mail.supervisor: none for a child of init, whose requests the
    operator lists with agent-answer). An MCP server's question (elicitation) has the
    `form` it asks to be filled, kept as its arguments."""
    request_id = new_id()
    seconds = seconds if seconds is not None else ask_timeout()
    deadline = clock.now() + seconds if seconds else None
    tool = call["tool_name"] if kind in ("approval", ELICITATION) else None
    arguments = call["content"] if kind == "approval" else form
    asks_store.insert(conn, request_id, agent["id"], turn_id, call["tool_call_id"], kind,
                    question=question, tool=tool, arguments=arguments, deadline=deadline)
    events.record(conn, agent["id"], "ask", request=request_id, type=kind, tool=tool)
    if kind == "question":
        body = voice.question_mail(registry.label(agent), agent["id"], request_id, question)
    elif kind == ELICITATION:
        from agentctl.ops import elicitation  # (start-up: 1 ms, only for such a question)
        body = voice.elicitation_mail(registry.label(agent), agent["id"], request_id, tool,
                                      question, elicitation.fields(form))
    else:
        body = voice.approval_mail(registry.label(agent), agent["id"], request_id, tool,
                                   arguments)
    mail.tell_supervisor(conn, agent, body, "request")
    return asks_store.get(conn, request_id)


def decide(conn, ref, by, how, text=None):
    """Decide a request: how is answer (text), approve, or deny (text: the reason).
    `by` is the deciding agent's id (an ancestor of the asker), None for the operator.
    The first decision wins; a later one is refused."""
    row = asks_store.resolve(conn, ref)
    if row["decision"] is not None:
        raise Refused(_already(conn, row))
    if row["kind"] == "question" and how != "answer":
        raise UsageError(f"request {row['id']} is a question: answer it with TEXT")
    if row["kind"] == ELICITATION and how == "approve":
        raise UsageError(f"request {row['id']} is an MCP server's question: answer it with "
                         "TEXT, or --deny it")
    if row["kind"] == "approval" and how == "answer":
        raise UsageError(f"request {row['id']} asks to run {row['tool']}: --approve or --deny it")
    if how == "answer" and not (text or "").strip():
        raise UsageError("an empty answer")
    if row["kind"] == ELICITATION and how == "answer":
        import json  # (start-up: 2 ms, only to answer an MCP server's question)
        from agentctl.ops import elicitation  # (start-up: 1 ms, only for such an answer)
        try:
            text = json.dumps(elicitation.content(row["arguments"], text))
        except UsageError as e:
            raise UsageError(f"request {row['id']}: {e}") from None
    if row["deadline"] is not None and row["deadline"] <= clock.now():
        raise Refused(f"request {row['id']} expired: no answer in time (its deadline was "
                      f"{clock.iso(row['deadline'])})")
    if by is not None and by not in registry.ancestors(conn, row["agent_id"]):
        raise Refused(f"request {row['id']}: only the operator or an ancestor of "
                      f"{registry.label(registry.get(conn, row['agent_id']))} may decide it")
    if by is not None and row["kind"] == "approval" and not could_call(conn, by, row["tool"]):
        raise Refused(f"request {row['id']}: {registry.label(registry.get(conn, by))} may not "
                      f"run {row['tool']} without asking, so it may not approve it")
    if not asks_store.decide(conn, row["id"], DECISIONS[how], text, by):
        raise Refused(_already(conn, asks_store.get(conn, row["id"])))
    _decided(conn, row, DECISIONS[how], by)
    return asks_store.get(conn, row["id"])


def could_call(conn, agent_id, tool):
    """Whether an agent could make a call of `tool` itself without asking: its grants
    (along its lineage) allow the tool, and no --ask pattern of its lineage covers it.
    Only such an ancestor, or the operator, may approve another's call."""
    mine = grants.Allowance(conn, agent_id)
    server, mcp, _ = tool.partition("__")
    allowed = tool in grants.BUILT_IN or mine.permits(tool) or mcp and mine.permits(tool, server)
    return bool(allowed) and not mine.needs_approval(tool)


def _already(conn, done):
    who = "the operator" if done["decided_by"] is None else \
        registry.label(registry.get(conn, done["decided_by"]))
    if done["decision"] in ("expired", "cancelled"):
        return f"request {done['id']} was already {done['decision']}: {done['answer']}"
    return f"request {done['id']} was already {done['decision']} by {who}"


def _decided(conn, row, decision, by):
    registry.change_status(conn, row["agent_id"], "P", "S")     # runnable: it resumes
    events.record(conn, row["agent_id"], "answer", actor=by, request=row["id"],
                  decision=decision)


def expire(conn, now):
    """Deny the requests past their deadline ("no answer in time"); how many."""
    rows = asks_store.due(conn, now)
    for row in rows:
        if asks_store.decide(conn, row["id"], "expired", voice.NO_ANSWER_IN_TIME, None):
            _decided(conn, row, "expired", None)
    return len(rows)


def end_all(conn, agent_id, decision, why):
    """Decide every pending request of an agent (TERM denies them, KILL cancels them)."""
    for row in asks_store.pending(conn, agent_id):
        if asks_store.decide(conn, row["id"], decision, why, None):
            events.record(conn, agent_id, "answer", request=row["id"], decision=decision)


def waiting(conn, agent_id):
    """Whether the agent waits for a decision."""
    return bool(asks_store.pending(conn, agent_id))


def result(row):
    """What the model sees for a decided request's call (None: approved, so it runs)."""
    return voice.request_result(row["decision"], row["answer"], row["decided_by"] is None)
