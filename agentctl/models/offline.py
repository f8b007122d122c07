"""Models that need no key and no network: `echo`, and `scripted:FILE` which replays canned replies.

They exist for tests, demos and shell pipelines, so they are deterministic and never import urllib3.
"""

import json
import re

from .. import jsonin
from ..errors import TempFail, UsageError
from ..keys import redact
from ..text import cut
from .base import Model, ModelError, Reply, ToolCall, default_stop, make_usage

RULE_KEYS = {"match", "reply", "steps", "comment"}
REPLY_KEYS = {"content", "tool_calls", "usage", "fail"}
CALL_KEYS = {"name", "arguments", "id"}
FAILURES = ("tempfail", "error")
JSON_SPACE = re.compile(r"[ \t\n\r]*")


class EchoModel(Model):
    """Answers with the latest user message, verbatim."""

    name = "echo"

    def complete(self, messages, tools, on_text=None, cache=None):
        text = latest_user_text(messages)
        if on_text and text:
            on_text(text)
        return Reply(text, [], make_usage(messages, text, []), "stop")


class ScriptedModel(Model):
    """Replays the replies of a rules file; see load_rules for its form."""

    def __init__(self, path, provider=None):
        self.path = path
        self.name = f"scripted:{path}"

    def check(self):
        load_rules(self.path)

    def complete(self, messages, tools, on_text=None, cache=None):
        # Read at every call: a test may rewrite the file between turns, and it is small.
        rules = load_rules(self.path)
        subject, step = latest_user_text(messages), step_index(messages)
        for rule in rules:
            if rule.match is None or rule.match.search(subject):
                spec = rule.steps[min(step, len(rule.steps) - 1)]
                return self._reply(spec, rule, step, messages, on_text)
        # Keys redacted before the cut, as in every error text (a key cut in two stays unfound).
        raise ModelError(f"scripted: no rule matches {cut(redact(subject), 60)!r} (step {step}) "
                         f"in {self.path}")

    def _reply(self, spec, rule, step, messages, on_text):
        text = spec.get("content", "")
        failure = spec.get("fail")
        if failure == "tempfail":
            raise TempFail(f"model API unavailable: scripted: {text or 'simulated failure'} "
                           f"({self.path}:{rule.line})", kind="unavailable")
        if failure == "error":
            raise ModelError(f"model API error: scripted: {text or 'simulated error'} "
                             f"({self.path}:{rule.line})")
        calls = [ToolCall(call.get("id") or f"call_{step}_{i}", call["name"],
                          raw_arguments(call.get("arguments", {})))
                 for i, call in enumerate(spec.get("tool_calls", ()))]
        usage = spec.get("usage", {})
        usage = make_usage(messages, text, calls, usage.get("input_tokens"),
                           usage.get("output_tokens"), usage.get("cache_read_tokens"),
                           usage.get("cache_write_tokens"))
        if on_text and text:
            on_text(text)
        return Reply(text, calls, usage, default_stop(calls))


def latest_user_index(messages):
    """The latest user message that is input (not the images a tool returned, which come
    as a user message of parts after its result)."""
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].get("role") == "user" and not isinstance(messages[i].get("content"), list):
            return i
    return -1


def latest_user_text(messages):
    i = latest_user_index(messages)
    return (messages[i].get("content") or "") if i >= 0 else ""


def step_index(messages):
    """How many assistant messages follow the latest user message: 0, then 1 after a tool round..."""
    after = messages[latest_user_index(messages) + 1:]
    return sum(1 for m in after if m.get("role") == "assistant")


def raw_arguments(arguments):
    # A string goes out verbatim, so a script can hand the caller invalid JSON on purpose.
    return arguments if isinstance(arguments, str) else json.dumps(arguments)


# -- the rules file ----------------------------------------------------------------------------------

class Rule:
    """One rule: an optional regex on the latest user message and the replies of its steps."""

    def __init__(self, path, line, rule):
        self.line = line
        problem = rule_problem(rule)
        if problem:
            raise bad_line(path, line, problem)
        try:
            self.match = re.compile(rule["match"]) if "match" in rule else None
        except re.error as exc:
            raise bad_line(path, line, f"bad match regex: {exc}") from None
        self.steps = rule["steps"] if "steps" in rule else [rule["reply"]]


def bad_line(path, line, problem):
    return UsageError(f"scripted: {path}:{line}: {problem}")


def rule_problem(rule):
    """What is wrong with a rule, or None."""
    if not isinstance(rule, dict):
        return "a rule must be an object"
    unknown = sorted(set(rule) - RULE_KEYS)
    if unknown:
        return f"unknown key {unknown[0]!r} (rule keys: match, reply, steps)"
    if "match" in rule and not isinstance(rule["match"], str):
        return "match must be a string (a regular expression)"
    if ("reply" in rule) == ("steps" in rule):
        return "a rule needs either reply or steps"
    steps = rule["steps"] if "steps" in rule else [rule["reply"]]
    if not isinstance(steps, list) or not steps:
        return "steps must be a non-empty list of replies"
    for reply in steps:
        problem = reply_problem(reply)
        if problem:
            return problem
    return None


def reply_problem(reply):
    if not isinstance(reply, dict):
        return "a reply must be an object"
    unknown = sorted(set(reply) - REPLY_KEYS)
    if unknown:
        return f"unknown reply key {unknown[0]!r} (reply keys: content, tool_calls, usage, fail)"
    if not isinstance(reply.get("content", ""), str):
        return "content must be a string"
    if reply.get("fail", FAILURES[0]) not in FAILURES:
        return "fail must be \"tempfail\" or \"error\""
    usage = reply.get("usage", {})
    if not isinstance(usage, dict) or not all(isinstance(v, int) for v in usage.values()):
        return "usage must be an object of token counts"
    calls = reply.get("tool_calls", [])
    if not isinstance(calls, list):
        return "tool_calls must be a list"
    for call in calls:
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            return "each tool call needs a name"
        if set(call) - CALL_KEYS:
            return f"unknown tool call key {sorted(set(call) - CALL_KEYS)[0]!r}"
        if not isinstance(call.get("id", ""), str):
            return "a tool call id must be a string"
    return None


def load_rules(path):
    """Rules from a JSON array, or from JSONL: one rule a line, blank lines and # lines skipped.

    Within jsonin's bounds: a file of at most jsonin.MAX_BYTES, rules nested at most
    jsonin.MAX_DEPTH levels deep.
    """
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read(jsonin.MAX_BYTES + 1)
    except OSError as exc:
        raise UsageError(f"scripted: cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise UsageError(f"scripted: {path}: not UTF-8 text") from None
    if jsonin.size(text) > jsonin.MAX_BYTES:
        raise UsageError(f"scripted: {path}: larger than "
                         f"{jsonin.describe_bytes(jsonin.MAX_BYTES)}")
    if text.lstrip().startswith("["):
        items = json_array_items(path, text)
    else:
        items = jsonl_items(path, text)
    if not items:
        raise UsageError(f"scripted: {path}: no rules")
    return [Rule(path, line, rule) for line, rule in items]


def jsonl_items(path, text):
    items = []
    for number, line in enumerate(text.split("\n"), 1):     # not splitlines: JSON allows U+2028
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        try:
            items.append((number, jsonin.loads(line)))
        except jsonin.JSONError as exc:
            raise bad_line(path, number, exc.reason) from None
    return items


def json_array_items(path, text):
    """(line, element) for each element of a JSON array, so errors can name the rule's line."""
    try:
        jsonin.check(text)      # before the decoder, which recurses once a level
    except jsonin.TooDeep as exc:
        raise bad_line(path, line_of(text, exc.pos), exc.reason) from None
    decoder, items = json.JSONDecoder(), []
    pos = skip_space(text, text.index("[") + 1)
    if text.startswith("]", pos):
        return array_end(path, text, pos + 1, items)
    while True:
        try:
            value, end = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            raise bad_line(path, exc.lineno, f"not JSON ({exc.msg})") from None
        items.append((line_of(text, pos), value))
        pos = skip_space(text, end)
        if text.startswith("]", pos):
            return array_end(path, text, pos + 1, items)
        if not text.startswith(",", pos):
            raise bad_line(path, line_of(text, pos), "not JSON (expected ',' or ']')")
        pos = skip_space(text, pos + 1)


def array_end(path, text, pos, items):
    pos = skip_space(text, pos)
    if pos < len(text):
        raise bad_line(path, line_of(text, pos), "not JSON (text after the closing ']')")
    return items


def skip_space(text, pos):
    return JSON_SPACE.match(text, pos).end()


def line_of(text, pos):
    return text.count("\n", 0, pos) + 1
