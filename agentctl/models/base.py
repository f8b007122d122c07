"""What every model shares: the reply types, the error for a refused request, usage estimates.

Kept free of urllib3 and json: `import agentctl.models` must stay cheap, since the programs run in
shell loops and most invocations never talk to a model. Its types are plain classes, not
dataclasses: making a dataclass costs every turn's start (a value, its equality, its repr).
"""

from .. import jsonin
from ..errors import UNAVAILABLE, AgentctlError
from ..keys import redact
from ..text import first_line, valid


class ModelError(AgentctlError):
    """The model's API refused the request for good (400, 401, 404...): don't retry blindly."""

    code = UNAVAILABLE


class Transient(Exception):
    """A fault worth another try (a cut stream, a malformed body, an overload notice).

    Raised by the reply parsers and consumed by the retry loop; it never reaches a caller of
    complete(): the loop turns a persistent one into TempFail.
    """


class Unusable(Exception):
    """A reply no retry would mend (a body nested too deep, or too large to read).

    Raised by the reply parsers like Transient; the retry loop turns it into ModelError at once.
    """


class Value:
    """A value of named fields (`__slots__`): equal to another of its class with equal
    fields, shown as Class(field=value, ...)."""
    __slots__ = ()

    def fields(self):
        return tuple(getattr(self, name) for name in self.__slots__)

    def __eq__(self, other):
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self.fields() == other.fields()

    __hash__ = None

    def __repr__(self):
        shown = ", ".join(f"{n}={v!r}" for n, v in zip(self.__slots__, self.fields()))
        return f"{self.__class__.__name__}({shown})"


class ToolCall(Value):
    __slots__ = ("id", "name", "arguments")

    def __init__(self, id, name, arguments):
        # arguments: the JSON text as the model wrote it; may be invalid, the caller validates
        self.id, self.name, self.arguments = valid(id), valid(name), valid(arguments)


class Reply(Value):
    __slots__ = ("text", "tool_calls", "usage", "stop_reason", "api_url", "response_id",
                 "response_model")

    def __init__(self, text, tool_calls=None, usage=None, stop_reason="stop", api_url="",
                 response_id="", response_model=""):
        self.text = valid(text)      # a JSON escape such as \udcff is no UTF-8 to store
        self.tool_calls = [] if tool_calls is None else tool_calls
        self.usage = {} if usage is None else usage
        self.stop_reason = stop_reason
        self.api_url = api_url      # the API that answered (its base URL), for its price; "" offline
        # The id the API gave its response, and the model that answered as the API names
        # it ("": unsaid): names, one line each, cut as any text from a server is (spans)
        self.response_id = first_line(valid(response_id), 200)
        self.response_model = first_line(valid(response_model), 200)


class Cache(Value):
    """Where a request's prefix is stable, for a provider's prompt cache: `marks` are
    indexes of messages that each end a prefix a later request sends again (the fork
    point siblings share, the end of the previous request, the end of this one); `key`
    names the family of requests that share prefixes (OpenAI's prompt_cache_key).
    The system prompt and the tools are always a stable prefix. Read-only."""
    __slots__ = ("marks", "key")

    def __init__(self, marks=(), key=""):
        self.marks, self.key = marks, key

    def __hash__(self):
        return hash(self.fields())


class Gate:
    """What a model's calls to an endpoint ask before each try and tell after it, so that
    every run that shares a database shares what it knows of the endpoint, and those who
    watch the turn learn of each retry (a turn hands one to its model: turn.watch.Told,
    around ops.gate.Gate). Models know nothing of the database; this is the whole of what
    they see of it. The calls of one model are made one at a time.

    acquire() returns when a try may be sent (a slot of the endpoint is free and it is
    not throttled or paced), raising TempFail (75) when that would take too long.
    release(limits, backoff) is told what the try's response said (models.limits.Limits,
    None when none came) and the wait this run would take before its next try; it
    returns True when it took that wait over (the next acquire() waits for it).
    retrying(attempt, tries, status, reason, delay) is told, after release(), that try
    number `attempt` (of `tries` at most) failed and another follows in `delay` seconds:
    `status` the HTTP status that asked for it (None: a fault of the connection or of
    the response), `reason` one line without keys."""

    def acquire(self):
        pass

    def release(self, limits, backoff):
        return False

    def retrying(self, attempt, tries, status, reason, delay):
        pass


class Model:
    """A conversation in, one reply out. Subclasses: the API providers and the offline models.

    `gate`: the Gate its calls to an API pass (None: none; the offline models call none)."""

    name = ""
    model_options = {}  # model options by agentctl's name (modelspec.OPTIONS), checked
    schema = None       # a JSON Schema the final reply must fit (agentctl.shape's subset)
    gate = None
    tier = "standard"   # the agent's (settings.TIERS): flex is OpenAI's (models.openai)

    def __init__(self, model="", provider=None):
        """As get_model makes it: `model`, the name after its provider's colon ("" for a
        name alone, echo), and `provider`, its row (modelspec.PROVIDERS)."""

    def complete(self, messages, tools, on_text=None, cache=None):
        """Return the model's Reply to `messages` (OpenAI chat form), offering `tools` (OpenAI form).

        With on_text, the reply is streamed and on_text(chunk) is called for each piece of text.
        With `cache` (a Cache), the request carries the hints its provider takes.
        """
        raise NotImplementedError

    def check(self):
        """Raise UsageError now when complete() is bound to fail for want of configuration.

        Optional for callers: complete() checks again (the environment is read at call time).
        """

    def __repr__(self):
        return f"<{type(self).__name__} {self.name}>"


IMAGE_CHARS = 6000     # an image's tokens at a guess (~1,500: what providers bill a small one)


def estimate_tokens(chars):
    # The usual rule of thumb for English text and code: about four characters a token.
    return -(-chars // 4)


def message_chars(messages):
    total = 0
    for message in messages:
        content = message.get("content") or ""
        if isinstance(content, list):       # parts: text, and images at a guess each
            total += sum(len(p.get("text") or "") or IMAGE_CHARS for p in content)
            continue
        total += len(content)
        for call in message.get("tool_calls") or ():
            function = call.get("function") or {}
            total += len(function.get("name") or "") + len(function.get("arguments") or "")
    return total


MAX_TOKENS = 10 ** 12      # per call: a count beyond it (or below 0) is no count at all


def is_count(value):
    """Whether an API's token count is one to believe: a whole number, 0 to MAX_TOKENS.
    A negative one would refund a budget; a huge one would overflow SQLite's INTEGER."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_TOKENS


def make_usage(messages, text, tool_calls, input_tokens=None, output_tokens=None,
               cache_read=None, cache_write=None, cache_write_1h=None):
    """The usage dict of a Reply: the API's counts where it gave them, estimates otherwise.
    input_tokens counts every prompt token, those served from the provider's cache
    (cache_read_tokens) and written to it (cache_write_tokens, of which
    cache_write_1h_tokens for an hour) included."""
    estimated = False
    if not is_count(input_tokens):
        input_tokens = estimate_tokens(message_chars(messages))
        estimated = True
    if not is_count(output_tokens):
        out_chars = len(text) + sum(len(c.name) + len(c.arguments) for c in tool_calls)
        output_tokens = estimate_tokens(out_chars)
        estimated = True
    # A part can't be more than the whole it is part of.
    cache_read = min(cache_read, input_tokens) if is_count(cache_read) else 0
    cache_write = min(cache_write, input_tokens - cache_read) if is_count(cache_write) else 0
    usage = {"input_tokens": input_tokens, "output_tokens": output_tokens,
             "cache_read_tokens": cache_read, "cache_write_tokens": cache_write,
             "estimated": estimated}
    if is_count(cache_write_1h) and cache_write_1h:
        usage["cache_write_1h_tokens"] = min(cache_write_1h, cache_write)
    return usage


def load_json(data, what="response"):
    """Parse an API body or stream event within jsonin's bounds: one that is no JSON is worth
    another try (Transient), one beyond the bounds is not (Unusable)."""
    try:
        return jsonin.loads(data, what=what)
    except jsonin.OutOfBounds as exc:
        raise Unusable(str(exc)) from None
    except jsonin.JSONError:
        raise Transient("malformed response (not JSON)") from None


def with_tool_ids(messages, keeps, stem=lambda call_id: call_id or "call"):
    """`messages` (OpenAI form) with each tool call's id that keeps(id, ids so far) refuses
    replaced, in the call and in the result that answers it, by stem(id) + "_" + the call's
    position among the conversation's tool calls (made unique).

    The new ids are derived from the conversation alone: the same conversation gets the same
    ids, and a longer one the same ids for the calls they share (a replay stays exact, a prompt
    cache still matches). A result answers the first call not yet answered with its id in the
    latest assistant message, as when one id comes twice. The messages given are not changed.
    """
    used, waiting, out = set(), {}, []
    position = 0
    for message in messages:
        if message.get("role") == "assistant":
            waiting = {}        # results answer the latest assistant message's calls
            calls = []
            for call in message.get("tool_calls") or ():
                call_id = call.get("id") or ""
                new = call_id
                if not keeps(call_id, used):
                    new = f"{stem(call_id)}_{position}"
                    while new in used:
                        new += "_"
                    call = {**call, "id": new}
                used.add(new)
                waiting.setdefault(call_id, []).append(new)
                calls.append(call)
                position += 1
            if calls:
                message = {**message, "tool_calls": calls}
        elif message.get("role") == "tool":
            call_id = message.get("tool_call_id") or ""
            if waiting.get(call_id):
                message = {**message, "tool_call_id": waiting[call_id].pop(0)}
        out.append(message)
    return out


def said(text, limit=200):
    """A server's words, made fit for a one-line message: keys redacted first (a key cut in two
    would no longer be found), then the first line, at most `limit` characters."""
    return first_line(redact(str(text or "")), limit)


# A reply's JSON may hold any value anywhere (a number where an object should be): the parsers
# read it through these, so a value of the wrong type counts as one left out, never a crash.

def mapping(value):
    return value if isinstance(value, dict) else {}


def mappings(value):
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def string(value):
    return value if isinstance(value, str) else ""


def index(value, default):
    """A position as given (a whole number), else `default`."""
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def default_stop(tool_calls):
    return "tool_calls" if tool_calls else "stop"


def stop_reason(raw, tool_calls, names):
    """Why the model stopped, in agentctl's words: a provider's `raw` reason through
    its `names` (a reason it doesn't map is kept as it is), else from the reply."""
    raw = string(raw)
    if not raw:
        return default_stop(tool_calls)
    return names.get(raw, raw)
