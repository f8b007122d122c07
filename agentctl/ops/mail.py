"""Mailboxes, Erlang-style with a pull model (agentctl(7), MAILBOXES): sending,
the exit notice, and how a turn takes its mail.

Mail is never deleted: reading sets read_at (and read_turn when a turn of
agent-run consumed it). The operator at the shell has no agent: mail from
the operator has sender_id NULL and shows '-' as its sender.
"""

from agentctl import clock, voice
from agentctl.errors import Refused, UsageError
from agentctl.ids import INIT_ID
from agentctl.store import events, history, mailbox, registry, turnlog

MAX_BODY = 1024 * 1024      # bytes of UTF-8; larger belongs in a document


def check_body(body):
    if body is None or not body.strip():
        raise UsageError("empty body")
    size = len(body.encode("utf-8", errors="surrogateescape"))
    if size > MAX_BODY:
        raise UsageError(f"body too long: {size} bytes (at most {MAX_BODY})")


def check_recipient(agent):
    if registry.has_exited(agent):
        raise Refused(f"{registry.label(agent)}: can't receive mail: it has exited")


def sender(conn, ref, actor=None):
    """The id of the agent `ref` names as a sender (- for the operator: None); an
    agent that has exited sends nothing (Refused), and an agent acting (`actor`, a
    row) sends only as itself (ops/authority.py)."""
    agent = None if ref == "-" else registry.resolve(conn, ref)
    if actor is not None and (agent is None or agent["id"] != actor["id"]):
        raise Refused(f"{registry.label(actor)} can't send as "
                      f"{registry.label(agent) if agent else 'the operator'}: an agent "
                      "sends mail only as itself")
    if agent is None:
        return None
    if registry.has_exited(agent):
        raise Refused(f"{registry.label(agent)}: can't send mail: it has exited")
    return agent["id"]


def recipient(conn, ref):
    """The agent `ref` names, when it can receive mail."""
    agent = registry.resolve(conn, ref)
    check_recipient(agent)
    return agent


def deliver(conn, sender_id, recipient, body, kind="mail", deliver_at=None):
    """Insert one mail, and its event (the sender's), unchecked: the notices ops
    sends of itself (an exit, a budget, a failure, a request) to a parent it found
    live, whatever their size. A sender's mail goes through send(), checked."""
    mail_id = mailbox.insert(conn, sender_id, recipient["id"], body, kind, deliver_at)
    events.record(conn, sender_id or INIT_ID, "mail", to=recipient["id"], mail=mail_id,
                  type=None if kind == "mail" else kind, at=deliver_at)
    return mail_id


def send(conn, sender_id, refs, body, deliver_at=None):
    """The one sending sequence of agent-send and the send tool: check the body
    and every recipient, then deliver to each; the mail ids. (agent-send --jsonl
    checks each line the same way, then delivers a batch at once: deliver_many.)"""
    check_body(body)
    recipients = [recipient(conn, ref) for ref in refs]
    return [deliver(conn, sender_id, r, body, deliver_at=deliver_at) for r in recipients]


def deliver_many(conn, items):
    """Insert (sender_id, recipient_id, body, deliver_at) mails at once, checked, and
    one event for them all, with their count and the range of their ids: the
    senders' when they are one, else init's. Returns the ids."""
    ids = mailbox.insert_many(conn, items)
    if ids:
        senders = {item[0] or INIT_ID for item in items}
        events.record(conn, senders.pop() if len(senders) == 1 else INIT_ID, "mail",
                      count=len(ids), first=ids[0], last=ids[-1])
    return ids


def supervisor(conn, agent):
    """Who is told of `agent` (agentctl(7), SUPERVISION): its lifecycle parent, or when
    that one lives no more the nearest live ancestor (whom its children go to); None
    when that is init: the operator's agents tell no one (agent-ps, agent-log and
    agent-answer show the operator)."""
    above = registry.nearest_live_ancestor(conn, agent)
    return None if above["id"] == INIT_ID else above


def tell_supervisor(conn, agent, body, kind):
    """Mail the notice `body` of `kind` (exit, failure, request, budget) from `agent` to
    its supervisor, unchecked (deliver); the mail's id, or None when no one is told."""
    above = supervisor(conn, agent)
    return None if above is None else deliver(conn, agent["id"], above, body, kind=kind)


def notify_exit(conn, agent):
    """The SIGCHLD of agentctl: the supervisor of `agent`, a zombie (its parent lives to
    collect it), is told who exited, how, and with what result."""
    body = voice.exit_notice(registry.label(agent), agent["id"], agent["exit_code"],
                             agent["exit_signal"], agent["result"])
    return tell_supervisor(conn, agent, body, "exit")


def take(conn, recipient_id, turn=None, **matching):
    """Select the mail and mark it read in the caller's transaction, so that of
    two readers of one mailbox each mail goes to one; the rows taken."""
    rows = mailbox.select(conn, recipient_id, **matching)
    ids = [r["id"] for r in rows]
    mailbox.mark_read(conn, ids, turn=turn)
    if rows:
        for owner in {r["recipient_id"] for r in rows}:     # (by ids: any mailbox)
            taken = [r["id"] for r in rows if r["recipient_id"] == owner]
            events.record(conn, owner, "read", count=len(taken), first=min(taken),
                          last=max(taken), turn=turn)
    return rows


def take_into_turn(conn, agent_id, turn_id, heading):
    """Move every unread mail into the turn as one user message (voice.inbox, under
    `heading`: voice.INBOX or voice.MID_TURN)."""
    mails = take(conn, agent_id, turn=turn_id)
    if not mails:
        return 0
    senders = [(m, registry.signed(m["sender_id"], m["sender_name"])) for m in mails]
    history.append(conn, agent_id, "user", voice.inbox(heading, senders, clock.now()),
                   turn_id=turn_id)
    turnlog.add(conn, turn_id, mail_read=len(mails))
    return len(mails)

