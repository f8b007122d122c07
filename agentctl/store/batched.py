"""Model calls sent through a provider's batch API (agentctl(5), batched): a row each,
from the moment a turn asks for it to the moment its result is applied to the turn.

    queued    the request (body) is stored, not yet sent
    sending   a run is sending it (token: that run's mark, also the batch's metadata)
    sent      the provider has it in batch `batch`
    ended     its result is here (outcome: succeeded, errored, expired, canceled)
    applied   the turn took its result (the step is written)
    abandoned its turn ended without it (KILL, TERM): its result is never applied
    cancelled abandoned, and its batch cancelled at the provider

A row's state moves forward only, each move a conditional UPDATE that names the state
it leaves: two runs that do the same move do it once."""

from agentctl import clock

GATHER = "AGENTCTL_BATCH_GATHER"   # set by agent-run --all for its runs: it sends
LIVE = ("queued", "sending", "sent")        # waiting for the provider
ALIVE = LIVE + ("ended",)                    # its turn still wants it
_COLUMNS = ("id, agent_id, turn_id, step, model, endpoint, url, state, body, token, batch, "
            "status, outcome, result, tries, created_at, sent_at, polled_at, ended_at")


def queue(conn, request_id, agent_id, turn_id, step, model, endpoint, url, body, tries=0):
    conn.execute(
        "INSERT INTO batched (id, agent_id, turn_id, step, model, endpoint, url, state, "
        "body, tries, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, 'queued', ?, ?, ?)",
        (request_id, agent_id, turn_id, step, model, endpoint, url, body, tries, clock.now()))


def for_step(conn, turn_id, step):
    """The newest request of the turn's step `step` that its turn still wants, or None."""
    return conn.execute(
        f"SELECT {_COLUMNS} FROM batched WHERE turn_id = ? AND step = ? "
        "AND state IN ('queued', 'sending', 'sent', 'ended') ORDER BY created_at DESC "
        "LIMIT 1", (turn_id, step)).fetchone()


def waiting(conn, agent_id):
    """The agent's request still with the provider (LIVE), or None."""
    return conn.execute(
        f"SELECT {_COLUMNS} FROM batched WHERE agent_id = ? AND state IN "
        "('queued', 'sending', 'sent') ORDER BY created_at DESC LIMIT 1",
        (agent_id,)).fetchone()


def any_out(conn):
    """Whether a request waits to be sent, or for its batch, or to be cancelled."""
    return conn.execute("SELECT 1 FROM batched WHERE state IN "
                        "('queued', 'sending', 'sent', 'abandoned') LIMIT 1").fetchone() \
        is not None


def get(conn, request_id):
    return conn.execute(f"SELECT {_COLUMNS} FROM batched WHERE id = ?",
                        (request_id,)).fetchone()


def queued(conn, endpoint=None):
    """Requests not yet sent (oldest first), of the endpoint `endpoint` or of all."""
    where = "" if endpoint is None else " AND endpoint = ?"
    return conn.execute(f"SELECT {_COLUMNS} FROM batched WHERE state = 'queued'{where} "
                        "ORDER BY created_at, id",
                        () if endpoint is None else (endpoint,)).fetchall()


def take(conn, ids, token):
    """Mark the queued requests `ids` as being sent by the run of `token`; the ids it
    took (those another run took first are left)."""
    taken = []
    for request_id in ids:
        if conn.execute("UPDATE batched SET state = 'sending', token = ?, sent_at = ? "
                        "WHERE id = ? AND state = 'queued'",
                        (token, clock.now(), request_id)).rowcount:
            taken.append(request_id)
    return taken


def stale(conn, before):
    """Requests left `sending` by a run that began before `before` (it died, or its
    batch was made and not recorded)."""
    return conn.execute(f"SELECT {_COLUMNS} FROM batched WHERE state = 'sending' "
                        "AND sent_at < ? ORDER BY sent_at", (before,)).fetchall()


def sent(conn, token, batch):
    """The run of `token` sent its requests as batch `batch`; the body is kept no longer."""
    conn.execute("UPDATE batched SET state = 'sent', batch = ?, body = NULL, token = NULL "
                 "WHERE token = ? AND state = 'sending'", (batch, token))


def requeue(conn, token):
    """The run of `token` did not send them: queued again."""
    conn.execute("UPDATE batched SET state = 'queued', token = NULL, sent_at = NULL "
                 "WHERE token = ? AND state = 'sending'", (token,))


def batches(conn):
    """[(batch, endpoint, url, model)] of the batches with a request still wanted, or
    one abandoned and not yet cancelled."""
    return conn.execute(
        "SELECT batch, min(endpoint), min(url), min(model) FROM batched "
        "WHERE state IN ('sent', 'abandoned') AND batch IS NOT NULL "
        "GROUP BY batch ORDER BY min(sent_at)").fetchall()


def in_batch(conn, batch):
    return conn.execute(f"SELECT {_COLUMNS} FROM batched WHERE batch = ? ORDER BY id",
                        (batch,)).fetchall()


def polled(conn, batch, status):
    conn.execute("UPDATE batched SET status = ?, polled_at = ? WHERE batch = ? "
                 "AND state IN ('sent', 'abandoned')", (status, clock.now(), batch))


def end(conn, request_id, outcome, result):
    """Its result came (`result`: the response's body, or the error's line): whether
    this run recorded it (another may have first)."""
    return conn.execute(
        "UPDATE batched SET state = 'ended', outcome = ?, result = ?, ended_at = ? "
        "WHERE id = ? AND state = 'sent'",
        (outcome, result, clock.now(), request_id)).rowcount == 1


def apply(conn, request_id):
    """The turn takes its result, in the transaction that writes the step: whether it
    was there to take (not taken, nor abandoned)."""
    return conn.execute("UPDATE batched SET state = 'applied', body = NULL WHERE id = ? "
                        "AND state = 'ended'", (request_id,)).rowcount == 1


def abandon(conn, turn_id):
    """The turn ended without them: their results, if they come, are not applied."""
    conn.execute("UPDATE batched SET state = 'abandoned', body = NULL WHERE turn_id = ? "
                 "AND state IN ('queued', 'sending', 'sent', 'ended')", (turn_id,))


def cancelled(conn, batch):
    """Its abandoned requests need no more: the batch was cancelled, or ended."""
    conn.execute("UPDATE batched SET state = 'cancelled' WHERE batch = ? "
                 "AND state = 'abandoned'", (batch,))


def refuse(conn, token, error):
    """The provider refused the batch the run of `token` made of them: each ended,
    refused, with `error`."""
    conn.execute("UPDATE batched SET state = 'ended', outcome = 'refused', result = ?, "
                 "ended_at = ?, body = NULL, token = NULL WHERE token = ? "
                 "AND state = 'sending'", (error, clock.now(), token))
