"""The kinds of event (agent-log(1), Kinds), each declared once, here: the fields of
its data and the line people read for it. store/events.py writes and reads an
event's data by this declaration; agent-log's text and its summary column,
agent-top's log key and agent-run's stream-json render every event through line().
A kind is its row in KINDS: no kind without its line (tests/test_log.py).

The line is the operator's, not the model's (what the model reads is voice.py's);
it names other agents by what `names` (an agent id -> its label) makes of them."""

from agentctl import mailloop, money, voice
from agentctl.clock import iso
from agentctl.settings import Budget
from agentctl.text import host_port


class Kind:
    """One kind of event."""
    __slots__ = ("fields", "line")

    def __init__(self, fields, line):
        self.fields = fields    # its data's fields: "?" marks one an event may leave out
                                # (None), "|" parts the shapes of a kind that has more than one
        self.line = line        # (its fields by name, its actor's id or None, names) -> its line


def _turn(d):
    return f" (turn {d['turn']})" if d.get("turn") else ""


def _by(actor, names):
    """Who did it: an agent, else the operator."""
    return names(actor) if actor else "the operator"


def _tokens(d):
    """A call's or a turn's tokens: input+output, and the input's part read from the
    provider's cache and written to it."""
    text = f"{d.get('input_tokens', 0)}+{d.get('output_tokens', 0)} tokens"
    parts = [f"{d[k]} {w}" for k, w in (("cache_read_tokens", "cached"),
                                         ("cache_write_tokens", "written")) if d.get(k)]
    return text + (f" ({', '.join(parts)})" if parts else "")


def _cost(dollars, unpriced, calls):
    """', $0.0123' (+? when some calls had no price), ', unpriced' when none had one;
    nothing for no call (a turn written before costs were)."""
    if dollars is None and not (unpriced and calls):
        return ""
    return ", " + money.cost_text(None if dollars is None else money.of_dollars(dollars),
                                  unpriced)


def _plural(n, word):
    return f"{n} {word}{'' if n == 1 else 's'}"


def _fork(d, actor, names):
    about = ", ".join(x for x in (d.get("role"), d.get("model") and f"model {d['model']}") if x)
    return f"forked from {names(d.get('parent'))}" + (f" ({about})" if about else "")


def _turn_end(d, actor, names):
    text = (f"turn {d.get('turn')} {d.get('outcome')}: {_plural(d.get('steps', 0), 'step')}, "
            f"{_tokens(d)}{_cost(d.get('cost'), d.get('unpriced'), d.get('steps'))}, "
            f"{d.get('seconds', 0):.1f}s")
    if d.get("mail_read"):
        text += f", {d['mail_read']} mail read"
    return text + (f": {d['error']}" if d.get("error") else "")


def _call(d, actor, names):
    model = f" {d['model']}" if d.get("model") else ""
    estimated = " (estimated)" if d.get("estimated") else ""
    tier = f" ({d['tier']})" if d.get("tier") else ""     # batch, flex: its price's
    return (f"model call{model}{tier}: {_tokens(d)}{estimated}"
            f"{_cost(d.get('cost'), d.get('cost') is None, 1)}{_turn(d)}")


def _mail(d, actor, names):
    if "count" in d:        # agent-send --jsonl's batch
        return f"sent {d['count']} mails, ids {d['first']}-{d['last']}"
    what = voice.KINDS.get(d.get("type"), "mail")      # as the inbox calls it
    text = f"sent {what} {d.get('mail')} to {names(d.get('to'))}"
    return text + (f", due {iso(d['at'])}" if d.get("at") else "")


def _read(d, actor, names):
    first, last = d.get("first"), d.get("last")
    ids = f"{first}" if first == last else f"{first}-{last}"
    return f"read {d.get('count')} mail (id{'s' if d.get('count') != 1 else ''} {ids}){_turn(d)}"


def _exit(d, actor, names):
    how = f"killed by {d['signal']}" if d.get("signal") else f"exited {d.get('code')}"
    return how + (f" (became {d['status']})" if d.get("status") else "")


def _reap(d, actor, names):
    if d.get("by", "wait") == "wait":
        return "collected by a waiter"
    return "collected: nobody waited within --reap-after"


def _budget(d, actor, names):
    if "budget" not in d:
        return "budget exhausted"
    unit = d.get("unit") or "tokens"
    return f"budget exhausted: {Budget(d['spent'], unit)} of {Budget(d['budget'], unit)}"


def _restart(d, actor, names):
    text = f"restart {d.get('count')} of {d.get('limit')}, next try in {d.get('delay', 0):g}s"
    return text + (f": {d['error']}" if d.get("error") else "")


def _loop(d, actor, names):
    found = (f"the same words {d['same']} times each way" if d.get("same")
             else f"{d.get('count')} mails within {mailloop.span(d.get('seconds', 0))}")
    return (f"held in a mail loop with {names(d.get('peer'))}: {found}, no other input "
            f"(mail {d.get('mail')})")


def _release(d, actor, names):
    if d.get("by") == "setup":
        return "released: what its model is given changed (a key, a URL, a model), tried again"
    why = {"set": " (its settings changed)", "CONT": " (CONT)"}.get(d.get("by"),
                                                                f" ({d.get('by')})")
    return f"released by {_by(actor, names)}{why}"


# A fault's exit status (agentctl(7), EXIT STATUS), as a fail event's line names it.
_FAULTS = {2: "its model can't be used", 69: "refused for good", 70: "a bug",
           75: "for now"}


def _fail(d, actor, names):
    code = d.get("code")
    text = f"failed ({code}, {_FAULTS.get(code, 'exit status')}){_turn(d)}: {d.get('error')}"
    return text + (f"; --all tries again after {iso(d['retry'])}" if d.get("retry") else "")


def _ask(d, actor, names):
    what = f"for approval to run {d['tool']}" if d.get("tool") else "a question"
    return f"asked {what}: request {d.get('request')}"


def _throttle(d, actor, names):
    until = f" until {iso(d['until'])}" if d.get("until") else ""
    return f"endpoint {d.get('endpoint')} throttled{until}: {d.get('reason')}"


def _bytes(n):
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def _net(d, actor, names):
    port = d.get("port")
    host = d.get("host", "")
    target = host_port(host, port)
    by = f" ({d['tool']})" if d.get("tool") else ""
    if d.get("reason"):
        return f"net {target} {d.get('outcome')}: {d['reason']}{by}"
    address = f" ({d['address']})" if d.get("address") else ""
    return (f"net {target}{address} {d.get('outcome')}: {_bytes(d.get('sent', 0))} out, "
            f"{_bytes(d.get('received', 0))} in, {d.get('seconds', 0):.2f}s{by}")


def _batch(d, actor, names):
    """A step's model call through a provider's batch (agentctl(7), TIERS)."""
    where = f" {d['batch']}" if d.get("batch") else ""
    if d.get("state") == "queued":
        return f"model call queued for a batch{_turn(d)}: request {d.get('request')}"
    if d.get("state") == "sent":
        return f"model call sent in batch{where}{_turn(d)}: request {d.get('request')}"
    said = ": ".join(str(d[k]) for k in ("outcome", "error") if d.get(k))
    return f"batch{where} answered {d.get('request')}{': ' if said else ''}{said}{_turn(d)}"


def _merge(d, actor, names):
    where = f"{names(d['into'])}'s layer" if d.get("into") else "the real directory"
    return f"merged into {where} by {_by(actor, names)}: {_plural(d.get('paths', 0), 'path')}"


KINDS = {
    "fork": Kind("parent at role model?", _fork),
    "turn-start": Kind("turn model?", lambda d, actor, names: f"turn {d.get('turn')} started"
                       + (f", model {d['model']}" if d.get("model") else "")),
    # a run took up an open turn again (after a crash, a failure, STOP, a request)
    "turn-resume": Kind("turn model?", lambda d, actor, names: f"turn {d.get('turn')} resumed"
                        + (f", model {d['model']}" if d.get("model") else "")),
    "turn-end": Kind("turn model? outcome steps input_tokens output_tokens mail_read seconds "
                     "error? cache_read_tokens? cache_write_tokens? cost? unpriced?", _turn_end),
    # one model call: its usage as the provider reported it (estimated: it did not), and
    # its cost in dollars (none: the model has no price)
    "call": Kind("turn model? input_tokens output_tokens cache_read_tokens cache_write_tokens "
                 "cost? estimated? tier?", _call),
    # a tool call's end; error: what failed, first line (a server down, a timeout, the
    # tool's own error)
    "tool": Kind("turn tool call outcome seconds error?", lambda d, actor, names:
                 f"{d.get('tool')} {d.get('outcome')} in {d.get('seconds', 0):.2f}s{_turn(d)}"
                 + (f": {d['error']}" if d.get("error") else "")),
    "mail": Kind("to mail type? at? | count first last", _mail),  # one mail | a batch
    "read": Kind("count first last turn?", _read),
    "signal": Kind("signal", lambda d, actor, names:
                   d.get("signal", "") + (f" from {names(actor)}" if actor else "")),
    "status": Kind("old new turn?", lambda d, actor, names:
                   f"{d.get('old')} -> {d.get('new')}{_turn(d)}"),
    "exit": Kind("code signal? status", _exit),
    "reparent": Kind("old new", lambda d, actor, names:
                     f"parent {names(d.get('old'))} exited: now a child of {names(d.get('new'))}"),
    "reap": Kind("by", _reap),
    "compaction": Kind("turn summarised keep_from",
                       lambda d, actor, names: f"context compacted{_turn(d)}"),
    "timer": Kind("at", lambda d, actor, names:
                  f"timer set for {iso(d['at'])}" if d.get("at") else "timer set"),
    "wake": Kind("turn at", lambda d, actor, names: f"woken by its timer{_turn(d)}"),
    "budget": Kind("spent budget unit?", _budget),     # the account's; unit usd: micros
    "restart": Kind("count limit delay error", _restart),
    # a run that ended on a fault (agent-run(1), Failures): its exit status, its error,
    # and for a fault for now when --all tries again
    "fail": Kind("turn? code error retry?", _fail),
    "held": Kind("turn? error", lambda d, actor, names:
                 f"held after a failed turn{_turn(d)}: {d.get('error')}"),
    # held in a mail loop with `peer` (agentctl.mailloop): the mails of the run within
    # the window of `seconds`, `same` when the same words found it; `mail` tripped it
    "loop": Kind("peer count seconds same? mail", _loop),
    "release": Kind("by", _release),
    "set": Kind("setting old? new?", lambda d, actor, names:
                f"{d.get('setting')}: {d.get('old', '-')} -> {d.get('new', '-')} "
                f"by {_by(actor, names)}"),
    "ask": Kind("request type tool?", _ask),
    "answer": Kind("request decision", lambda d, actor, names:
                   f"request {d.get('request')} {d.get('decision')}"
                   + (f" by {names(actor)}" if actor else "")),
    "throttle": Kind("endpoint until reason", _throttle),
    # a connection a tool made through the egress proxy (agentctl(7), NETWORK): allowed,
    # refused (`reason`) or failed (the host could not be reached); its bytes each way
    "net": Kind("turn? tool? host port outcome address? reason? sent received seconds", _net),
    # a step's model call through a provider's batch: queued, sent (in `batch`), or
    # ended with its outcome (succeeded, errored, refused, expired, canceled)
    "batch": Kind("turn request batch? state outcome? error?", _batch),
    "recover": Kind("endpoint seconds", lambda d, actor, names:
                    f"endpoint {d.get('endpoint')} recovered after {d.get('seconds', 0):.1f}s"),
    # agent-merge: the agent's changes since its fork applied (token: its journal's)
    "merge": Kind("paths token into?", _merge),
}


def line(kind, fields, actor, names, detail=None):
    """The line of an event of `kind` with `fields` (its fields by name,
    store.events.fields) and `actor`; of a kind no longer known, its `detail`."""
    known = KINDS.get(kind)
    return known.line(fields, actor, names) if known else detail or ""
