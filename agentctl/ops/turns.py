"""Turns: the lease that makes one agent-run the only runner of an agent, the
intake of pending input, and how a turn ends (agentctl(7), TURNS).

A turn is a row in `turns`. Its messages carry its id, and every step is
written as it happens, so a turn interrupted by a crash, a temporary fault
or STOP is resumed by the next agent-run from exactly where it stopped.
A killed or failed turn is voided: its messages stay in the table but are
never replayed, and the mail it had taken is unread again.
"""

import os
import socket
import threading
import time
from contextlib import contextmanager

from agentctl.ops import budget
from agentctl.store import history, registry
from agentctl.store.db import transaction
from agentctl.errors import NotFound, Refused, TempFail
from agentctl.ids import INIT_ID
from agentctl.ops.mail import count_unread, unread

LEASE_SECONDS = 300.0       # renewed at every step; a crashed run's lease expires
BACKOFF_MAX = 3600.0


def lease_seconds():
    """$AGENTCTL_LEASE when it is a finite number of seconds above 0, else the
    default (0, nan or inf would make the heartbeat spin, or never beat)."""
    try:
        seconds = float(os.environ.get("AGENTCTL_LEASE", LEASE_SECONDS))
    except ValueError:
        return LEASE_SECONDS
    return seconds if 0 < seconds < float("inf") else LEASE_SECONDS


def owner_token():
    return f"{socket.gethostname()}:{os.getpid()}"


def lease_is_live(agent, now=None):
    """A lease holds while it has not expired and, when its owner ran on this
    host, that process still exists (a crash frees it at once)."""
    if agent["lease_owner"] is None or (agent["lease_until"] or 0) <= (now or time.time()):
        return False
    host, _, pid = agent["lease_owner"].rpartition(":")
    if host == socket.gethostname() and pid.isascii() and pid.isdigit():
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass
    return True


def open_turn(conn, agent_id):
    return conn.execute("SELECT * FROM turns WHERE agent_id = ? AND status = 'running' "
                        "ORDER BY id DESC LIMIT 1", (agent_id,)).fetchone()


def has_pending_input(conn, agent, now=None):
    now = now or time.time()
    agent_id = agent["id"]
    return bool(
        conn.execute(f"SELECT 1 FROM mail WHERE recipient_id = ? AND {unread()} LIMIT 1",
                     (agent_id,)).fetchone()
        or conn.execute("SELECT 1 FROM messages WHERE agent_id = ? AND kind = 'user' "
                        "AND turn_id IS NULL AND void = 0 LIMIT 1", (agent_id,)).fetchone()
        or (agent["wake_at"] is not None and agent["wake_at"] <= now)
        or open_turn(conn, agent_id))


def claim(conn, ref):
    """Take the agent for one turn: status R and a lease. Exit 75 when another
    run holds it; 3 when it is stopped or has exited."""
    with transaction(conn):
        agent = registry.resolve(conn, ref)
        if agent["id"] == INIT_ID:
            raise Refused("init doesn't run turns")
        if agent["status"] == "R" and lease_is_live(agent):
            raise TempFail(f"{registry.label(agent)}: claimed by another agent-run "
                           f"({agent['lease_owner']})")
        if agent["status"] == "T":
            raise Refused(f"{registry.label(agent)}: stopped (agent-kill -s CONT to resume)")
        if agent["status"] in ("Z", "X"):
            raise Refused(f"{registry.label(agent)}: has exited")
        conn.execute("UPDATE agents SET status = 'R', lease_owner = ?, lease_until = ? "
                     "WHERE id = ?", (owner_token(), time.time() + lease_seconds(), agent["id"]))
        return registry.get(conn, agent["id"])


class LostClaim(TempFail):
    """Another agent-run has claimed the agent since this run did (this run's
    lease ran out, its process stalled): this run must write nothing more."""


class KilledMidTurn(LostClaim):
    """The agent was ended while this run ran (a cascade from an ancestor kills
    its running descendants at once): the turn is voided, write nothing more."""
    code = Refused.code


@contextmanager
def holding(conn, agent_id):
    """A write transaction of the run that holds the agent's claim. The claim
    is checked inside it, so no write of a run that lost its claim can land
    beside those of the run that took the agent over: LostClaim instead."""
    with transaction(conn):
        row = registry.get(conn, agent_id)
        if row["lease_owner"] != owner_token():
            if row["status"] in ("Z", "X") and row["exit_signal"]:
                raise KilledMidTurn(f"{registry.label(row)}: killed by {row['exit_signal']} "
                                    "while this run held it; it wrote nothing more")
            raise LostClaim(f"{registry.label(row)}: claimed by another agent-run while this "
                            "one ran (its lease ran out); it wrote nothing more")
        yield conn


def renew(conn, agent_id):
    conn.execute("UPDATE agents SET lease_until = ? WHERE id = ? AND lease_owner = ?",
                 (time.time() + lease_seconds(), agent_id, owner_token()))


@contextmanager
def heartbeat(conn, agent_id):
    """Keep the lease alive while a model call is in flight, however long it
    takes: a thread renews it every third of its length on its own connection."""
    path = conn.execute("PRAGMA database_list").fetchone()[2]
    stop = threading.Event()

    def beat():
        from agentctl.store.db import connect
        other = None
        while not stop.wait(lease_seconds() / 3):
            try:
                other = other or connect(path)
                with transaction(other):
                    renew(other, agent_id)
            except Exception:       # the next beat, or the step's own renewal, tries again
                pass
        if other is not None:
            other.close()

    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def release(conn, agent_id, status="S"):
    """Give up the claim: a running agent becomes `status`; one that exited
    during its turn keeps its Z or X."""
    conn.execute("UPDATE agents SET status = CASE status WHEN 'R' THEN ? ELSE status END, "
                 "lease_owner = NULL, lease_until = NULL WHERE id = ?", (status, agent_id))


def inbox_text(mails, label="INBOX"):
    """All pending mail as one user message: who sent what, when. Mail is
    always presented as mail from its sender, whatever its text says."""
    from agentctl.cli.output import age, iso
    now = time.time()
    lines = [f"[{label} - {len(mails)} new]", ""]
    # in the order it became mail: deferred mail counts from when it came due
    mails = sorted(mails, key=lambda m: (max(m["deliver_at"] or 0, m["created_at"]), m["id"]))
    for n, m in enumerate(mails, 1):
        who = registry.signed(m["sender_id"], m["sender_name"])
        what = {"exit": "exit notification", "budget": "budget notice"}.get(m["kind"], "mail")
        deferred = (m["deliver_at"] or 0) > m["created_at"]
        came = m["deliver_at"] if deferred else m["created_at"]     # when it became mail
        sent = f", sent {iso(m['created_at'])} for then" if deferred else ""
        lines.append(f"{n}. {what} {m['id']} from {who} at {iso(came)} "
                     f"({age(now - came)} ago){sent}:")
        # every line break Python knows (\r, U+2028 ...), or a body could start a line
        lines.extend("   " + line for line in m["body"].splitlines())
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def take_mail(conn, agent_id, turn_id, label):
    """Move every unread mail into the turn as one user message."""
    from agentctl.ops.mail import mark_read, select
    mails = select(conn, agent_id)
    if not mails:
        return 0
    history.append(conn, agent_id, "user", inbox_text(mails, label), turn_id=turn_id)
    mark_read(conn, [m["id"] for m in mails], turn=turn_id)
    conn.execute("UPDATE turns SET mail_read = mail_read + ? WHERE id = ?", (len(mails), turn_id))
    return len(mails)


def start(conn, agent, model_name):
    """Resume the agent's open turn, or open one with ALL pending input: the
    unanswered prompt, every unread mail (one inbox message), a due timer.
    Returns the turn row; NotFound when there is nothing to do, Refused when
    a new turn would start with the agent's account exhausted."""
    # Under the claim: a cascade may have ended the agent since it was claimed.
    if agent["budget_id"] is not None:
        with holding(conn, agent["id"]):    # committed before refusing: the notice stays
            over = open_turn(conn, agent["id"]) is None and has_pending_input(conn, agent) \
                and budget.refusal(conn, agent)
        if over:
            raise Refused(over)
    with holding(conn, agent["id"]):
        turn = open_turn(conn, agent["id"])
        if turn is not None:
            return turn
        now = time.time()
        prompts = conn.execute("SELECT id, content FROM messages WHERE agent_id = ? AND "
                               "kind = 'user' AND turn_id IS NULL AND void = 0 ORDER BY id",
                               (agent["id"],)).fetchall()
        due = agent["wake_at"] is not None and agent["wake_at"] <= now
        mails = count_unread(conn, agent["id"])
        if not (prompts or due or mails):
            release(conn, agent["id"])
            raise NotFound(f"{registry.label(agent)}: no pending input")
        turn_id = conn.execute("INSERT INTO turns (agent_id, model, started_at) VALUES (?, ?, ?)",
                               (agent["id"], model_name, now)).lastrowid
        conn.executemany("UPDATE messages SET turn_id = ? WHERE id = ?",
                         [(turn_id, p[0]) for p in prompts])
        first = history.latest(conn, agent) + 1
        cleared = conn.execute("SELECT max(id) FROM messages WHERE agent_id = ? AND "
                               "kind = 'clear' AND void = 0", (agent["id"],)).fetchone()[0] or 0
        for prompt_id, content in prompts:
            if prompt_id < cleared:     # a HUP came before the turn took it: input all the same
                history.append(conn, agent["id"], "user", content, turn_id=turn_id)
        if due:
            from agentctl.cli.output import iso
            history.append(conn, agent["id"], "user",
                           f"[TIMER] You asked to be woken at {iso(agent['wake_at'])}.",
                           turn_id=turn_id)
            conn.execute("UPDATE agents SET wake_at = NULL WHERE id = ?", (agent["id"],))
            conn.execute("UPDATE turns SET woke_at = ? WHERE id = ?", (agent["wake_at"], turn_id))
        take_mail(conn, agent["id"], turn_id, "INBOX")
        conn.execute("UPDATE turns SET first_msg_id = ? WHERE id = ?", (first, turn_id))
        return conn.execute("SELECT * FROM turns WHERE id = ?", (turn_id,)).fetchone()


def charge(conn, turn_id, agent_id, usage):
    """Account for one model call of the turn (a step, or the summary of a compaction):
    the turn's and the agent's counts, and the budget it is charged to."""
    budget.charge(conn, agent_id, usage.get("input_tokens", 0) + usage.get("output_tokens", 0))
    conn.execute("UPDATE turns SET input_tokens = input_tokens + ?, "
                 "output_tokens = output_tokens + ? WHERE id = ?",
                 (usage.get("input_tokens", 0), usage.get("output_tokens", 0), turn_id))
    conn.execute("UPDATE agents SET tokens_in = tokens_in + ?, tokens_out = tokens_out + ? "
                 "WHERE id = ?", (usage.get("input_tokens", 0), usage.get("output_tokens", 0),
                                  agent_id))


def record_step(conn, turn_id, agent_id, usage):
    conn.execute("UPDATE turns SET steps = steps + 1 WHERE id = ?", (turn_id,))
    charge(conn, turn_id, agent_id, usage)
    renew(conn, agent_id)


def finish(conn, turn_id, status="done", error=None):
    conn.execute("UPDATE turns SET status = ?, ended_at = ?, error = ? WHERE id = ?",
                 (status, time.time(), error, turn_id))


def void(conn, turn, status, error=None):
    """End a turn as if it never ran: its messages are never replayed, the
    prompts it took are pending again, the mail it took is unread again, the
    timer it took is due again."""
    first = turn["first_msg_id"] or 0
    if turn["woke_at"] is not None:
        conn.execute("UPDATE agents SET wake_at = coalesce(wake_at, ?) WHERE id = ?",
                     (turn["woke_at"], turn["agent_id"]))
    conn.execute("UPDATE messages SET turn_id = NULL WHERE turn_id = ? AND id < ?",
                 (turn["id"], first))
    conn.execute("UPDATE messages SET void = 1 WHERE turn_id = ?", (turn["id"],))
    conn.execute("UPDATE mail SET read_at = NULL, read_turn = NULL WHERE read_turn = ?",
                 (turn["id"],))
    finish(conn, turn["id"], status, error)


def fail(conn, turn, error):
    """End a turn the model's API refused for good. The steps it completed stay
    in the history, their input taken: their tool calls' effects happened, and
    a turn redone from its input would do them twice. A turn with no step is
    voided, its input pending again. A clear waiting for the turn follows it.
    A task, whose one turn this was, exits failed (status 69, the error as its
    result), so that whoever waits for it learns."""
    if not turn["steps"]:
        void(conn, turn, "failed", error)
        return
    finish(conn, turn["id"], "failed", error)
    history.clear_if_pending(conn, turn["agent_id"])
    agent = registry.get(conn, turn["agent_id"])
    if agent["role"] == "task":
        from agentctl.errors import UNAVAILABLE
        registry.exit_agent(conn, registry.get(conn, agent["id"]), code=UNAVAILABLE,
                            result=error)


def back_off(conn, agent_id):
    """After a failed turn: `agent-run --all` leaves the agent alone for a
    while, doubling from 30 s up to an hour."""
    row = conn.execute("SELECT failures FROM agents WHERE id = ?", (agent_id,)).fetchone()
    delay = min(30.0 * 2 ** row[0], BACKOFF_MAX)
    conn.execute("UPDATE agents SET failures = failures + 1, retry_at = ? WHERE id = ?",
                 (time.time() + delay, agent_id))


def runnable(conn, now=None):
    """Ids of the agents `agent-run --all` should run: sleeping (or holding a
    dead lease), with pending input or a due timer, not backing off."""
    now = now or time.time()
    rows = conn.execute(
        f"SELECT {registry.AGENT_COLUMNS} FROM agents WHERE status IN ('S', 'R') "
        "AND role != 'kernel' ORDER BY created_at").fetchall()
    spent = {r[0] for r in conn.execute(
        "SELECT id FROM agents WHERE budget IS NOT NULL AND spent >= budget")}
    return [r["id"] for r in rows
            if (r["status"] == "S" or not lease_is_live(r, now))
            and (r["retry_at"] is None or r["retry_at"] <= now)
            and (r["budget_id"] not in spent or open_turn(conn, r["id"]))
            and has_pending_input(conn, r, now)]
