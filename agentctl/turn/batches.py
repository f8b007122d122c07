"""Turns at batch prices (agentctl(7), TIERS): a step of an agent whose tier is batch
sends its model call through the provider's batch API and the run ends; a later run
collects the result and the turn goes on from there.

    ask        the request is stored (store.batched: queued) in the step's place
    send       queued requests go out, one batch per endpoint and model, at most
               batch.size() a batch: at once from agent-run AGENT, after its runs
               from agent-run --all (GATHER), so that the agents due share batches
    poll       a run asks the batches it knows (AGENTCTL_BATCH_POLL apart), reads
               the results of those ended, and stores each with its request: the
               agent is then runnable, and its next run takes the result
    take       the result is written as the step's reply, the request marked applied
               in the same transaction (once, whoever collected it)

A request that expired, was canceled by the provider, or erred for now (a 5xx, an
overload) is made as a standard call at once by the run that takes it: the agent has
waited already. One the provider refused (a 4xx) fails the turn, as a refused call
does. A run killed between sending a batch and recording it leaves its requests
`sending`: once its process is gone (or STALE passed, on another host), the next run
finds the batch by its mark (OpenAI) or sends them again (Anthropic, whose batches
carry no mark: the call may then be paid twice; its result is applied once)."""

import json
import os
import secrets

from agentctl import clock, env, jsonin
from agentctl.errors import TempFail, UsageError
from agentctl.models import ModelError, batch, get_model
from agentctl.models.base import Transient, Unusable
from agentctl.ops import lease
from agentctl.store import batched, events
from agentctl.store.db import transaction

STALE = 600.0       # seconds: a run on another host that sent and did not record, dead


class Waiting(Exception):
    """The step's model call waits in a provider's batch: the run ends here, the turn
    stays open (args: the request's id)."""


def check(model):
    """A usage error now for a model at the batch tier whose provider has no batch
    API."""
    batch.check(model)


def reply(conn, agent_id, turn_id, step, model, messages, tools, cache):
    """The step's reply from its batch: (a models.base.Reply, the request's id to
    take() with the step), or (None, the id) when the step is to make a standard
    call instead; Waiting when it was sent, or is still out; ModelError when the
    provider refused it."""
    row = batched.for_step(conn, turn_id, step)
    if row is None:
        _ask(conn, agent_id, turn_id, step, model, messages, tools, cache)
        row = batched.for_step(conn, turn_id, step)
    elif row["state"] in ("queued", "sent"):     # not sent yet (a fault), or out
        try:
            if row["state"] == "sent":
                poll(conn, only=row["batch"])
            elif not os.environ.get(batched.GATHER):
                send(conn)
        except (TempFail, ModelError):
            pass            # the provider is out of reach (the next run asks again), or
                            # refused it, as its row now says
        row = batched.get(conn, row["id"])
    if row["state"] in batched.LIVE:
        raise Waiting(row["id"])
    if row["outcome"] == "succeeded":
        try:
            reply = model.parse_plain(jsonin.loads(row["result"], what="batch result"),
                                      messages)
        except (Transient, Unusable, jsonin.JSONError):
            return None, row["id"]      # a result no step can be made of: a standard call
        reply.api_url = row["url"]
        reply.usage["tier"] = "batch"
        return reply, row["id"]
    if row["outcome"] == "refused":
        with lease.holding(conn, agent_id):
            batched.apply(conn, row["id"])      # spent: another try is a new request
        raise ModelError(f"model API error: {model.provider}: batch request refused: "
                         f"{row['result']}")
    return None, row["id"]      # expired, canceled, or failed for now: a standard call


def take(conn, request_id):
    """In the transaction that writes the step: its request applied. A request taken
    already (or abandoned) is no step to write: LostClaim, and nothing is written."""
    if request_id is not None and not batched.apply(conn, request_id):
        raise lease.LostClaim(f"batch request {request_id}: applied or abandoned already")


def waits(conn, turn_id, step):
    """Whether the step's call is in a batch (asked, not yet taken): the step's input
    is fixed, so mail that came since waits for the next step."""
    return batched.for_step(conn, turn_id, step) is not None


def _ask(conn, agent_id, turn_id, step, model, messages, tools, cache):
    request = batch.request_id()
    text = batch.body(model, messages, tools, cache)
    identity = model.identity()
    with lease.holding(conn, agent_id):
        batched.queue(conn, request, agent_id, turn_id, step, model.name, identity.name,
                      identity.url, text)
        events.record(conn, agent_id, "batch", turn=turn_id, request=request, state="queued")
    if not os.environ.get(batched.GATHER):
        try:
            send(conn)
        except (TempFail, ModelError):
            pass    # queued, or sending: a later run sends it or finds it; or refused,
                    # as its row says


# -- what any run does for every agent: send, poll, recover ---------------------------------

def tend(conn, warn=None):
    """agent-run --all's first step: requests a dead run left half sent found or queued
    again, the batches polled (their results stored: those agents become runnable),
    abandoned batches cancelled, queued requests sent. A provider's fault is said
    (`warn`) and left for the next run."""
    if not batched.any_out(conn):
        return
    for step in (recover, poll, send):
        try:
            step(conn)
        except (TempFail, ModelError, UsageError) as e:
            if warn is not None:
                warn(f"batches: {e}")


def send(conn):
    """Send the queued requests this environment may send (its key is their
    endpoint's), one batch per endpoint and model, at most batch.size() each."""
    groups = {}
    for row in batched.queued(conn):
        groups.setdefault((row["endpoint"], row["model"]), []).append(row)
    for (endpoint, spec), rows in groups.items():
        model = _model(spec, endpoint)
        if model is None:
            continue
        most = batch.size()
        for start in range(0, len(rows), most):
            _send(conn, model, rows[start:start + most])


def _send(conn, model, rows):
    token = f"{lease.owner_token()}/{secrets.token_hex(6)}"
    with transaction(conn):
        taken = set(batched.take(conn, [r["id"] for r in rows], token))
    if not taken:
        return
    try:
        made = batch.submit(model, [(r["id"], r["body"]) for r in rows if r["id"] in taken],
                            token)
    except ModelError as e:        # refused: these requests can't be batched
        with transaction(conn):
            batched.refuse(conn, token, str(e).removeprefix("model API error: "))
        raise
    except batch.Unknown:
        raise           # made, perhaps: left sending, for recover() once this run is gone
    except BaseException:
        with transaction(conn):
            batched.requeue(conn, token)
        raise
    with transaction(conn):
        batched.sent(conn, token, made)
        for row in rows:
            if row["id"] in taken:
                events.record(conn, row["agent_id"], "batch", turn=row["turn_id"],
                              request=row["id"], batch=made, state="sent")


def poll(conn, only=None):
    """Ask the provider of each batch with a request still out (or `only` that one,
    at once) how it is; store the results of those ended; cancel those whose every
    request was abandoned."""
    now = clock.now()
    apart = env.duration("AGENTCTL_BATCH_POLL", 30.0)
    for batch_id, endpoint, _url, spec in batched.batches(conn):
        if only is not None and batch_id != only:
            continue
        model = _model(spec, endpoint)
        if model is None:
            continue
        rows = batched.in_batch(conn, batch_id)
        out = [r for r in rows if r["state"] == "sent"]
        if not out:
            _cancel(conn, model, batch_id)
            continue
        if only is None and any(r["polled_at"] and r["polled_at"] > now - apart for r in out):
            continue
        state = batch.status(model, batch_id)
        with transaction(conn):
            batched.polled(conn, batch_id, state.status)
        if state.ended:
            _collect(conn, model, batch_id, state, out)


def _collect(conn, model, batch_id, state, out):
    found, missing = batch.results(model, batch_id, state)
    with transaction(conn):
        for row in out:
            result = found.get(row["id"], missing)
            outcome = "refused" if result.outcome == "errored" and result.refused \
                else result.outcome
            stored = json.dumps(result.body) if outcome == "succeeded" else result.error
            if batched.end(conn, row["id"], outcome, stored):
                events.record(conn, row["agent_id"], "batch", turn=row["turn_id"],
                              request=row["id"], batch=batch_id, state="ended",
                              outcome=outcome, error=result.error or None)
        batched.cancelled(conn, batch_id)      # its abandoned ones: ended, no cancel


def _cancel(conn, model, batch_id):
    """Every request of the batch was abandoned: cancel it (one ended already is
    left as it is)."""
    try:
        batch.cancel(model, batch_id)
    except ModelError:
        pass            # ended before the cancel came: nothing to cancel
    with transaction(conn):
        batched.cancelled(conn, batch_id)


def recover(conn):
    """Requests a run left `sending` when it died: found in the batch its mark names,
    or queued again."""
    now = clock.now()
    seen = set()
    for row in batched.stale(conn, now):
        token = row["token"]
        if token in seen or lease.alive(token.partition("/")[0], row["sent_at"] + STALE, now):
            continue
        seen.add(token)
        model = _model(row["model"], row["endpoint"])
        if model is None:
            continue
        found = batch.find(model, token)
        with transaction(conn):
            if found:
                batched.sent(conn, token, found)
            else:
                batched.requeue(conn, token)


def _model(spec, endpoint):
    """The model `spec` when this environment calls the endpoint `endpoint` (its URL
    and key), else None: a batch is another key's to poll."""
    try:
        model = get_model(spec)
        return model if model.identity().name == endpoint else None
    except (UsageError, AttributeError):
        return None
