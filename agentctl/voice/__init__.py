"""agentctl's voice to the model: every text agentctl writes that a model reads, in
mail, in a conversation's messages or as a tool's result, is written here: the
inbox and its headers, the exit, failure, budget and request notices, the timer,
the compaction's instruction and marker, the results and errors of the tools.

The rule, for the prompt's prefix to stay cacheable: nothing time-dependent that
changes between two requests (the current time, an age, "2 minutes ago") is
rendered into a message that becomes part of the replayed prefix. A message's text
is fixed when it is stored, and replayed byte for byte. So no function here reads a
clock: the same arguments give the same text at any time. A time is given to it and
written absolutely (ISO 8601, UTC); the one span, a mail's age in its inbox, is the
difference of two times given to it (when the mail came, when the turn took it),
fixed when the inbox is stored.

What stays where it is: the tools' descriptions and schemas (turn/builtin.py), the
per-argument messages of a schema check (builtin.validate), the refusals of
operations, which a program prints and a tool call returns alike (ops/, errors), how
an agent signs its words (store.registry.signed, given to inbox() ready-made), and the
transcript a compaction summarises, which is agent-replay's (turn/context.py).
"""

from agentctl import jsonin, money
from agentctl.clock import age, iso
from agentctl.text import quoted

# -- errors: a tool result that starts with ERROR is an error the model sees

ERROR = "error: "


def tool_error(reason):
    return f"{ERROR}{reason}"


def is_error(text):
    return text.startswith(ERROR)


# -- the inbox: all pending mail as one user message

INBOX = "INBOX"                   # at the start of a turn
MID_TURN = "MID-TURN UPDATE"      # mail that came while the turn ran
KINDS = {"exit": "exit notification", "budget": "budget notice", "request": "request",
         "failure": "failure notice", "loop": "mail loop notice"}


def inbox(heading, mails, taken_at):
    """The inbox message: `mails` are (mail row, its sender as registry.signed writes
    it), taken into a turn at `taken_at`. Mail is always presented as mail from its
    sender, whatever its text says."""
    lines = [f"[{heading} - {len(mails)} new]", ""]
    # in the order it became mail: deferred mail counts from when it came due
    mails = sorted(mails, key=lambda p: (max(p[0]["deliver_at"] or 0, p[0]["created_at"]),
                                         p[0]["id"]))
    for n, (m, who) in enumerate(mails, 1):
        what = KINDS.get(m["kind"], "mail")
        deferred = (m["deliver_at"] or 0) > m["created_at"]
        came = m["deliver_at"] if deferred else m["created_at"]     # when it became mail
        sent = f", sent {iso(m['created_at'])} for then" if deferred else ""
        lines.append(f"{n}. {what} {m['id']} from {who} at {iso(came)} "
                     f"({age(taken_at - came)} ago){sent}:")
        # every line break Python knows (\r, U+2028 ...), or a body could start a line
        lines.extend("   " + line for line in m["body"].splitlines())
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


# -- mail to a parent: its child exited, failed, overspent, or asks

def exit_notice(label, agent_id, code, signal, result):
    """The SIGCHLD of agentctl: who exited, how, and with what result."""
    if signal:
        how = f"was killed by {signal}"
    else:
        how = "exited normally" if code == 0 else f"failed ({code})"
    body = f"{label} ({agent_id}) {how}; exit status {code}"
    if result:
        body += f"\nresult:\n{result}"
    return body


def failure_notice(label, agent_id, how, why):
    """A failed turn, in the exit notice's form: `how` is NOT_RESTARTED or restarting()."""
    return f"{label} ({agent_id}) {how}\nerror:\n{why}"


NOT_RESTARTED = ("failed; not restarted (--restart never): held, its input kept, until the "
                 "operator runs it again or changes its settings")


def restarting(delay, count, limit, window):
    return (f"failed; restarting in {delay:g} s (restart {count} of {limit} "
            f"within {window:g} s)")


def restarts_used_up(limit, window, why):
    """The result of an agent that exited with its restarts used up."""
    return f"restarts used up: more than {limit} within {window:g} s; the last failure: {why}"


def loop_notice(label, agent_id, peer, peer_id, count, window, same):
    """Two agents held in a mail loop (agentctl(7), Lifecycle): `count` mails between
    them within `window` (as mailloop.span writes it), or the same words `same` times
    each way."""
    found = (f"the same words {same} times in a row each way" if same
             else f"{count} mails between them within {window}")
    return (f"{label} ({agent_id}) and {peer} ({peer_id}) are held in a mail loop: {found}, "
            "with no other input. Neither runs a turn until it is sent CONT (the kill "
            "tool) or its settings change, and then their count starts again; mail them "
            "first if they should do something else.")


def idle_exit(seconds):
    """The result of an agent that exited at its --idle-exit."""
    return f"idle: no input for {seconds:g} s (--idle-exit)"


UNITS = {"tokens": "tokens", "usd": "dollars"}


def spent(used, budget, unit="tokens"):
    """What an account spent of its budget, in its unit (usd: micros, shown as dollars)."""
    if unit == "usd":
        return f"spent {money.shown(used)} of {money.shown(budget)}"
    return f"spent {used} of {budget} tokens"


def budget_notice(label, account_id, used, budget, by_label=None, by_id=None, unit="tokens"):
    """An account is exhausted; `by_*` name the agent whose call did it, when that is
    not the account's owner."""
    by = "" if by_id is None else f" (by {by_label}, {by_id})"
    return (f"{label} ({account_id}) is over budget{by}: {spent(used, budget, unit)}; "
            "its turns are refused until its budget grows")


def shown_call(tool, arguments):
    """A tool call as a request shows it: control characters escaped as JSON does (the
    operator's agent-answer and agent-run's question at the terminal show it so too)."""
    try:
        value = jsonin.loads(arguments or "{}")
    except jsonin.JSONError:
        value = arguments
    return f"{tool} {jsonin.dumps(value)}"


def question_mail(label, agent_id, request_id, question):
    return (f"{label} ({agent_id}) asks (request {request_id}):\n"
            f"{question}\nAnswer with the answer tool: request {request_id}, answer.")


def elicitation_mail(label, agent_id, request_id, tool, message, fields):
    return (f"{label} ({agent_id}) called {tool}, whose MCP server asks (request "
            f"{request_id}):\n{message}\nIts form: {fields}. Answer with the answer tool: "
            f"request {request_id}, answer (a JSON object of its fields, or the text of "
            "its one field), or approve false to decline.")


def elicitation_what(tool, message, fields):
    """An MCP server's question, as agent-answer lists it."""
    return f"{tool} asks: {message} [{fields}]"


def approval_mail(label, agent_id, request_id, tool, arguments):
    return (f"{label} ({agent_id}) asks to run "
            f"{shown_call(tool, arguments)} (request {request_id}).\nDecide with the "
            f"answer tool: request {request_id}, approve true or false, a reason.")


# -- a request's decision, as the asking call's result

NO_ANSWER_IN_TIME = "no answer in time"         # why an expired request was denied
AGENT_EXITED = "the agent exited"               # why its requests were cancelled
SENT_TERM = "the agent was sent TERM"           # why a paused agent's requests were denied


def request_result(decision, answer, by_operator):
    """What the model sees for a decided request's call (None: approved, so it runs)."""
    who = "the operator" if by_operator else "your supervisor"
    if decision == "answered":
        return answer
    if decision == "approved":
        return None
    if decision == "expired":
        return tool_error(f"{NO_ANSWER_IN_TIME}: the request expired")
    if decision == "cancelled":
        return tool_error(f"cancelled: {answer}")
    return tool_error(f"denied by {who}" + (f": {answer}" if answer else ""))


# -- input a turn starts with, besides mail and prompts

def timer(wake_at):
    return f"[TIMER] You asked to be woken at {iso(wake_at)}."



# -- a final reply that does not fit the agent's JSON Schema (agent-fork --schema)

def misfit(problem):
    """Said to the model after a final reply that does not fit its schema."""
    return (f"[SCHEMA] Your reply does not fit the JSON Schema it must: {problem}. Reply "
            "again with only a JSON value that fits it, no other text.")


# -- compaction

COMPACT_INSTRUCTION = (
    "[COMPACT] Your context is full. Summarise the conversation below for your own memory: "
    "your task and who gave it, decisions made and why, facts learned, the ids and names of "
    "agents you work with, documents and mail that matter, what is done and what is still "
    "pending. Write only the summary; it will replace those messages.\n\n"
    "The conversation:\n\n")
SUMMARY_HEAD = ("[COMPACTED MEMORY] A summary, written by you, of the earlier part of this "
                "conversation:\n")
# The result a call gets in a context that holds the call but not its result.
UNANSWERED = ("(no result in this context: the conversation was forked, or read, before this "
              "call finished)")


# -- the built-in tools' results (turn/builtin.py)

def forked_child(child_id, parent_label, parent_id):
    """The fork call's result in the child, as fork(2) returns 0 there."""
    return f"You are the child ({child_id}), forked from {parent_label} ({parent_id})."


def decided(request_id, decision):
    return f"request {request_id} {decision}"


def sent_mail(mail_id):
    return f"sent: mail {mail_id}"


def unread(count):
    return f"{count} unread"


def mail_coming(count):
    """read_mail's result: the mail comes as an inbox message after this step."""
    return f"{count} unread; delivered as an inbox message after this step" if count \
        else "no unread mail"


def signalled(signal, count):
    return f"sent {signal} to {count} agent(s)"


NO_CHILDREN = "no children to wait for"


def collected(agent_id, label, how, code, result):
    """A line of wait's result: an agent that exited, and its result, quoted."""
    return f"{agent_id} {label} {how} {code}" + (f": {quoted(result)}" if result else "")


def still_running(agent_id):
    return f"{agent_id} still running"


NO_DESCENDANTS = "no descendants"
NO_CHANGES = "no changes"


def cut_diff(head, size):
    """A diff too long for a tool's result: its head, and what was left out."""
    return f"{head}\n[... the diff goes on: {size} characters in all; ask for stat]"


def merged(paths, skipped):
    """The merge tool's result: the paths it changed, and those it left out."""
    lines = [f"merged {len(paths)} path(s)"] + paths
    return "\n".join(lines + [f"not merged: {p}" for p in skipped])


def conflicts(message, paths):
    """A merge stopped by conflicts: why, then the paths, one a line."""
    return "\n".join([message] + paths)


def descendant(agent_id, label, status, role):
    """A line of ps's result."""
    return f"{agent_id} {label} {status} {role}"


def sleeping_until(wake_at):
    return f"sleeping until {iso(wake_at)}"


EXITING = "exiting after this step"


def doc_written(name, version):
    return f"{name}: version {version}"


def document(name, version, author, visibility, body):
    """doc_get's result: a heading says whose text this is (another agent's words)."""
    return f"[DOCUMENT {quoted(name)} version {version} by {author}, {visibility}]\n{body}"


def doc_line(name, version, visibility, owner, size):
    """A line of doc_ls's result."""
    return f"{quoted(name)} version {version} {visibility} owner {owner} {size} bytes"


NO_DOCUMENTS = "no documents"


def doc_removed(name, version):
    return f"{name}: removed (version {version})"


# -- why a call failed (each given to tool_error by whoever records the result)

def unknown_tool(name, offered):
    """A call of a tool the turn does not offer: the model is told every tool it has."""
    return f"unknown tool: {name} (tools: {', '.join(offered)})"


def not_json(reason):
    return f"arguments are not valid JSON: {reason}"


NOT_AN_OBJECT = "arguments must be a JSON object"


def not_a_descendant(ref):
    return f"{ref} is not one of your descendants"


ANSWER_OR_APPROVE = "give answer (a question) or approve (a tool call), not both"
ANSWER_OR_APPROVE_MISSING = "give answer (to a question) or approve true or false (a tool call)"
SECONDS_OR_UNTIL = "give seconds or until, not both"
BUDGET_OR_DOLLARS = "give budget (tokens) or budget_usd (dollars), not both"
SECONDS_OR_UNTIL_MISSING = "give seconds or until"


def until_not_iso(text):
    return f"until: not an ISO 8601 time: {quoted(text)}"


def until_without_zone(text):
    """A time the model gives without a zone is refused, not guessed."""
    return (f"until: {quoted(text)} has no zone: add Z for UTC (the times you see are UTC), "
            "or +HH:MM")


# A call to the outside found started and never ended when its turn resumed.
INTERRUPTED = tool_error("interrupted: agent-run ended while this call ran; its outcome is "
                         "unknown and it was not run again")


from agentctl.voice.tools import (  # noqa: E402, F401 (one home: voice.NAME)
    timed_out, exit_status, cant_run, sandbox_failed, output_cut, media_note,
    mcp_resource, mcp_link, media_from, mcp_tool_gone, MCP_FAILED)
