"""One turn of one agent (agentctl(7), TURNS; agent-run(1)): the loop.

claim -> take all pending input -> loop { signals; mail that arrived; call
the model; persist its message; run its tool calls } -> commit. Every
write is its own transaction and the turn's state lives only in the
database, so the loop can start from any point: that is how an
interrupted turn resumes. The state changes are ops/'s: lease, turns, ending.
"""

import threading

from agentctl import keys, modelspec, settings, shape, voice
from agentctl.errors import SOFTWARE, USAGE, UsageError
from agentctl.models import ModelError, get_model
from agentctl.endpoint import setup
from agentctl.ops import budget, endpoints, ending, lease, mail, prices, supervise, turns
from agentctl.ops.gate import Gate
from agentctl.store import history, registry, turnlog
from agentctl.store.db import path_of
from agentctl.turn import builtin, compaction, context
from agentctl.turn.toolset import Paused, TaskWaits, Toolset
from agentctl.turn.watch import NOBODY

DEFAULT_MAX_STEPS = 20
SCHEMA_TRIES = 3        # replies that don't fit the agent's schema, in a run, before it fails
Outcome = ending.Outcome


def choose_model(agent, override=None):
    """The model a turn of `agent` calls, with the agent's options (those its provider
    takes: an -m of another provider leaves the others out) and schema."""
    spec = modelspec.chosen(agent, override)
    if not spec:
        raise UsageError(f"{registry.label(agent)}: no model (give -m MODEL, fork it with -m, "
                         "or set AGENTCTL_MODEL)")
    model = get_model(spec)
    model.check()
    known = modelspec.known_options(spec)
    model.model_options = {k: v for k, v in settings.options(agent["options"]).items() if k in known}
    model.schema = shape.loads(agent["schema"]) if agent["schema"] else None
    model.tier = settings.tier(agent)
    return spec, model


def gate(conn, agent_id, client):
    """The gate the model's calls pass (ops.gate.Gate), or None: for a model that calls
    no API, or with $AGENTCTL_ENDPOINT_STATE off."""
    identity = getattr(client, "identity", None)
    if identity is None or not endpoints.shared():
        return None
    return Gate(path_of(conn), agent_id, identity())


def run(conn, ref, *, model=None, max_steps=DEFAULT_MAX_STEPS, on_text=None, warn=None,
        prompt=None, watch=None, handed=None):
    """Run one turn of agent `ref`; returns an Outcome. Raises NotFound (1)
    when there is nothing to do, Refused (3), TempFail (75), ModelError. `watch`
    (a turn.watch.Watch) is told of the turn as it happens. `handed`: the holder
    (HOST:PID) of a claim this run takes over, agent-run --all's for the run it
    started (lease.claim)."""
    watch = watch or NOBODY
    try:
        agent = lease.claim(conn, ref, handed=handed)
        watch.attach(conn)
        outcome = _run(conn, agent, model, max_steps, on_text, warn, prompt, watch)
    except BaseException as e:
        watch.end(error=e)
        raise
    finally:
        watch.detach()
    watch.end(outcome)
    return outcome


def _run(conn, agent, model, max_steps, on_text, warn, prompt, watch):
    agent_id = agent["id"]
    try:
        try:
            spec, client = choose_model(agent, model)
        except UsageError as e:
            if model is None:   # the agent's own model can't be used: a failed turn
                with lease.holding(conn, agent_id):
                    supervise.fault(conn, agent_id, str(e), USAGE, _setup(agent))
            raise
        compaction.window(agent)        # a bad $AGENTCTL_CONTEXT_WINDOW: exit 2 before any intake
        prices.check()                  # and a bad $AGENTCTL_PRICES
        turns.backoff(0)                # and a bad $AGENTCTL_BACKOFF
        resumed = turns.open_turn(conn, agent_id)
        shared = gate(conn, agent_id, client)      # and a bad $AGENTCTL_CONCURRENCY
        client.gate = watch.gate(shared)
        turn = turns.start(conn, agent, spec, shared and shared.identity)
    except lease.LostClaim:
        raise                   # ended by a cascade since the claim: touch nothing
    except BaseException:
        ending.release(conn, agent_id)
        raise
    try:
        with lease.heartbeat(conn, agent_id):   # the lease lives as long as this process
            watch.begin(conn, registry.get(conn, agent_id), turn, resumed is not None, client)
            toolset = Toolset(conn, registry.get(conn, agent_id), warn, prompt)
            try:
                watch.offered(spec, toolset)
                return _loop(conn, agent_id, turn, spec, client, max_steps, on_text, toolset,
                             watch)
            finally:
                toolset.close()     # its MCP servers stop with the turn
                if shared is not None:
                    shared.close()
    except lease.LostClaim:
        raise                   # the agent is another run's now: touch nothing
    except Exception as e:
        # A refusal for good is a failed turn: the restart policy decides. A temporary
        # fault or a bug (exit 70) leaves the turn open, to be resumed after a backoff,
        # so that cron does not hit it every minute. A model given for this run alone
        # (-m) that is refused is this run's mistake: nothing is held (exit 2).
        once = model is not None and isinstance(e, ModelError)
        with lease.holding(conn, agent_id):
            if once:
                supervise.refused_once(conn, agent_id, str(e), None if resumed else turn)
            else:
                supervise.fault(conn, agent_id, str(e), getattr(e, "code", SOFTWARE),
                                _setup(agent))
        ending.release(conn, agent_id)
        if once:
            raise UsageError(f"-m {model}: {e} (nothing is held: the agent's input is "
                             "pending as it was)") from None
        raise
    except BaseException:
        ending.release(conn, agent_id)   # the turn stays open: the next run resumes it
        raise


def _setup(agent):
    """What the environment gives the agent's own model (agentctl.endpoint.setup): a hold
    keeps it, and --all tries the agent again once it differs."""
    return setup(modelspec.chosen(agent))


def _call_ids(conn, turn_id, calls):
    """A call's id is how its result finds it, so it must be unique in the
    turn: an id the model repeats (some servers number the calls of each
    message from 0) or leaves empty gets a suffix."""
    used = turnlog.call_ids(conn, turn_id)
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


def _run_calls(conn, agent_id, turn_id, calls, toolset, watch):
    # The sync barrier: a fork sees every other call of its step completed.
    try:
        for call in sorted(calls, key=lambda c: c["tool_name"] == "fork"):
            watch.tool(call)
            try:
                text = toolset.execute(conn, agent_id, turn_id, call)
            except BaseException as e:
                watch.tool_done(call, error=e)
                raise
            watch.tool_done(call, text)
    except lease.KillPending:
        pass                    # the loop ends the turn: killed


class Interruptible:
    """A model whose calls a KILL cuts short: the call runs in a thread while this
    one asks the database every KILL_POLL seconds whether a KILL was recorded, and
    gives the call up at once if so (agent-run exits soon after, taking the thread
    and its connection with it)."""

    KILL_POLL = 0.25

    def __init__(self, conn, agent_id, model, watch=NOBODY):
        self.conn, self.agent_id, self.model, self.watch = conn, agent_id, model, watch
        self.calls = 0          # the calls made: a step's own, and a compaction's summary

    def complete(self, messages, tools, on_text=None, cache=None, step=False):
        """The model's reply; a `step` of the turn (not a compaction's summary) streams
        its text to the watchers that want it."""
        lease.check_not_killed(self.conn, self.agent_id)
        self.calls += 1
        self.watch.calling(messages, tools)
        try:
            reply = self._complete(messages, tools,
                                   self._streamed(on_text) if step else on_text, cache)
        except BaseException as e:
            self.watch.called(error=e)
            raise
        self.watch.called(reply)
        return reply

    def _streamed(self, on_text):
        """on_text, and the watchers that want the text: with them the reply is streamed."""
        if not self.watch.text:
            return on_text

        def both(chunk):
            self.watch.streamed(chunk)
            if on_text is not None:
                on_text(chunk)
        return both

    def _complete(self, messages, tools, on_text, cache):
        done = {}

        def call():
            try:
                done["reply"] = self.model.complete(messages, tools, on_text=on_text,
                                                    cache=cache)
            except BaseException as e:      # handed to the thread that waits for it
                done["error"] = e

        worker = threading.Thread(target=call, daemon=True)
        worker.start()
        while worker.is_alive():
            worker.join(self.KILL_POLL)
            if worker.is_alive():
                lease.check_not_killed(self.conn, self.agent_id)
        if "error" in done:
            raise done["error"]
        return done["reply"]


def _loop(conn, agent_id, turn, spec, client, max_steps, on_text, toolset, watch):
    turn_id = turn["id"]
    client = Interruptible(conn, agent_id, client, watch)
    try:
        return _steps(conn, agent_id, turn_id, spec, client, max_steps, toolset, on_text, watch)
    except lease.KillPending:
        return ending.killed(conn, agent_id, turn_id, spec)
    except Paused as e:
        return ending.paused(conn, agent_id, turn_id, spec, e.args[0])
    except TaskWaits:
        return ending.task_waits(conn, agent_id, turn_id, spec)


def _separated(on_text):
    """on_text for each step in turn: the text of a step starts on a line of its own
    when an earlier step's text was shown (else they would run together)."""
    if on_text is None:
        return lambda: None
    shown = {"any": False}

    def for_step():
        started = {"yet": False}

        def step_text(chunk):
            if chunk and not started["yet"]:
                started["yet"] = True
                if shown["any"]:
                    on_text("\n")
                shown["any"] = True
            on_text(chunk)
        return step_text
    return for_step


def _steps(conn, agent_id, turn_id, spec, client, max_steps, toolset, on_text, watch):
    offered = toolset.specs()
    next_step_text = _separated(on_text)
    batches = _batches(client.model)
    schema = client.model.schema
    misfits = 0
    while True:
        # a KILL, or a grace period's end
        signal = lease.check_not_killed(conn, agent_id)["pending_signal"]
        if signal == "KILL":
            return ending.killed(conn, agent_id, turn_id, spec)
        pending = turnlog.unanswered(conn, turn_id)
        if pending:
            _run_calls(conn, agent_id, turn_id, pending, toolset, watch)
            # what came while they ran: a KILL or STOP, or a CONT that took a STOP back
            signal = registry.get(conn, agent_id)["pending_signal"]
            if signal == "KILL":
                return ending.killed(conn, agent_id, turn_id, spec)
        if signal == "STOP":
            stopped = ending.stopped(conn, agent_id, turn_id, spec)
            if stopped:
                return stopped
        how, _ = ending.how_it_ends(conn, turn_id, builtin.validate)
        steps = turnlog.get(conn, turn_id)["steps"]
        if how or steps >= max_steps or ending.answered(conn, turn_id):
            break
        if budget.over(conn, agent_id):
            return ending.commit(conn, agent_id, turn_id, spec, None, None, status="over_budget")
        with lease.holding(conn, agent_id) as agent:     # (its context is the same after)
            if steps and not (batches and batches.waits(conn, turn_id, steps)):
                mail.take_into_turn(conn, agent_id, turn_id, voice.MID_TURN)
            lease.renew(conn, agent_id)
        calls = client.calls
        system, rows = compaction.prepare(conn, agent, turn_id, client)
        if client.calls != calls:               # a summary's call: it may have spent the rest
            if budget.over(conn, agent_id):
                return ending.commit(conn, agent_id, turn_id, spec, None, None,
                                     status="over_budget")
            agent = registry.get(conn, agent_id)
        messages, cache = context.request(conn, agent, system, rows)
        reply, request = None, None
        if batches is not None:
            try:
                reply, request = batches.reply(conn, agent_id, turn_id, steps, client.model,
                                               messages, offered, cache)
            except batches.Waiting:
                return ending.batched(conn, agent_id, turn_id, spec)
        if reply is None:
            reply = client.complete(messages, offered, on_text=next_step_text(), cache=cache,
                                    step=True)
        misfit = schema is not None and not reply.tool_calls and \
            shape.parse_reply(reply.text or "", schema)[1]
        with lease.holding(conn, agent_id):
            # A model repeating its environment must not write a key anywhere.
            history.append(conn, agent_id, "assistant", keys.redact(reply.text or ""),
                           turn_id=turn_id,
                           tokens=_measured(reply.usage))
            for call, call_id in zip(reply.tool_calls, _call_ids(conn, turn_id, reply.tool_calls)):
                history.append(conn, agent_id, "tool_call", keys.redact(call.arguments),
                               tool_name=call.name, tool_call_id=call_id, turn_id=turn_id)
            turns.record_step(conn, turn_id, agent_id, reply.usage, reply.api_url)
            if request is not None:
                batches.take(conn, request)
            if reply.stop_reason == "length":       # cut at the token limit: say so
                turnlog.update(conn, turn_id, stop_reason="length")
            if misfit:      # a failed step: the model is told, in the same transaction
                history.append(conn, agent_id, "user", voice.misfit(misfit), turn_id=turn_id)
        if misfit:
            misfits += 1
            if misfits >= SCHEMA_TRIES:
                raise ModelError(f"the reply does not fit the agent's schema ({misfits} tries): "
                                 f"{misfit}")
            continue
        if not reply.tool_calls:
            break
    how, result = ending.how_it_ends(conn, turn_id, builtin.validate)
    if schema is not None and how is None:
        misfit = shape.parse_reply(turnlog.final_text(conn, turn_id), schema)[1]
        if misfit:      # --max-steps came before a reply that fits
            raise ModelError(f"the turn ended without a reply that fits the agent's schema: "
                             f"{misfit}")
    return ending.commit(conn, agent_id, turn_id, spec, how, result)


def _batches(model):
    """turn.batches when the agent's steps go through a provider's batch (its tier, as
    choose_model gave it to its model), else None."""
    if model.tier != "batch":
        return None
    from agentctl.turn import batches  # (start-up: 5 ms, only at the batch tier)
    batches.check(model)
    return batches


def _measured(usage):
    """The tokens of a call as the API reported them; None for an estimate."""
    if usage.get("estimated", True):
        return None
    return usage.get("input_tokens", 0) + usage.get("output_tokens", 0)
