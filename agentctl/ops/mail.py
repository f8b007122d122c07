"""Mailboxes, Erlang-style with a pull model (agentctl(7), MAILBOXES): sending (and
stopping a mail loop where a delivery makes one), the exit notice, and how a turn
takes its mail.

Mail is never deleted: reading sets read_at (and read_turn when a turn of
agent-run consumed it). The operator at the shell has no agent: mail from
the operator has sender_id NULL and shows '-' as its sender.
"""

from agentctl import clock, mailloop, voice
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
    and every recipient, then deliver to each, and stop a mail loop each makes; the
    mail ids. (agent-send --jsonl checks each line the same way, then delivers a
    batch at once: deliver_many.)"""
    check_body(body)
    recipients = [recipient(conn, ref) for ref in refs]
    ids = [deliver(conn, sender_id, r, body, deliver_at=deliver_at) for r in recipients]
    for r, mail_id in zip(recipients, ids):
        stop_loop(conn, sender_id, r["id"], mail_id)
    return ids


def deliver_many(conn, items):
    """Insert (sender_id, recipient_id, body, deliver_at) mails at once, checked, and
    one event for them all, with their count and the range of their ids: the
    senders' when they are one, else init's; then stop a mail loop, looked for once
    for each two agents the batch wrote between. Returns the ids."""
    ids = mailbox.insert_many(conn, items)
    if ids:
        senders = {item[0] or INIT_ID for item in items}
        events.record(conn, senders.pop() if len(senders) == 1 else INIT_ID, "mail",
                      count=len(ids), first=ids[0], last=ids[-1])
        last = {frozenset(item[:2]): (item[0], item[1], mail_id)
                for item, mail_id in zip(items, ids)}
        for sender_id, recipient_id, mail_id in last.values():
            stop_loop(conn, sender_id, recipient_id, mail_id)
    return ids


def stop_loop(conn, sender_id, recipient_id, mail_id):
    """Where the mail `mail_id` just delivered makes its sender and recipient a mail
    loop (agentctl.mailloop, by the settings of both), hold both as a failed turn holds
    (held_at, which CONT or a change of settings releases; looped_at, after which their
    count starts again), a loop event each, and one notice to each of their supervisors
    but those two. The mail stays delivered. The Loop found, or None."""
    if sender_id is None or sender_id == recipient_id:
        return None
    pair = [registry.get(conn, sender_id), registry.get(conn, recipient_id)]
    rules = [rule for rule in (mailloop.read(a["mail_loop"]) for a in pair) if rule]
    if not rules:
        return None
    now = clock.now()
    window = now - max(seconds for _, seconds in rules)
    hold = max(a["looped_at"] or 0 for a in pair)
    other = {sender_id: recipient_id, recipient_id: sender_id}
    run = []
    limit = max([n for n, _ in rules] + [2 * mailloop.SAME])
    for m in mailbox.latest(conn, other, limit, mailloop.WORDS):
        if m["created_at"] < window or m["created_at"] <= hold:
            break
        if m["kind"] != "mail" or m["sender_id"] != other[m["recipient_id"]]:
            break           # other input to one of them: the run starts after it
        run.append((m["sender_id"], m["body"], m["created_at"]))
    loop = mailloop.tripped(run, rules, now)
    if loop is None:
        return None
    for me, peer in (pair, pair[::-1]):
        registry.update(conn, me["id"], held_at=now, looped_at=now, retry_at=None)
        events.record(conn, me["id"], "loop", peer=peer["id"], count=loop.count,
                      seconds=loop.seconds, same=loop.same or None, mail=mail_id)
    body = voice.loop_notice(registry.label(pair[0]), sender_id, registry.label(pair[1]),
                             recipient_id, loop.count, mailloop.span(loop.seconds), loop.same)
    told = set(other)
    for agent in pair:
        tell_supervisor(conn, agent, body, "loop", told)
    return loop


def supervisor(conn, agent):
    """Who is told of `agent` (agentctl(7), SUPERVISION): its lifecycle parent, or when
    that one lives no more the nearest live ancestor (whom its children go to); None
    when that is init: the operator's agents tell no one (agent-ps, agent-log and
    agent-answer show the operator)."""
    above = registry.nearest_live_ancestor(conn, agent)
    return None if above["id"] == INIT_ID else above


def tell_supervisor(conn, agent, body, kind, told=None):
    """Mail the notice `body` of `kind` (exit, failure, request, budget, loop) from
    `agent` to its supervisor, unchecked (deliver); the mail's id, or None when no one
    is told. `told`: a set of agents' ids not to tell (those told already), to which
    the one told is added."""
    above = supervisor(conn, agent)
    if above is None or (told is not None and above["id"] in told):
        return None
    if told is not None:
        told.add(above["id"])
    return deliver(conn, agent["id"], above, body, kind=kind)


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

