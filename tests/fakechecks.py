"""The request checks of the fake model API (tests/fakeapi.py): the official SDKs' request types,
validated by pydantic with unknown keys refused, and the rules the APIs enforce beyond them."""

import copy
import re
import threading


class Schemas:
    """The SDKs' request types as pydantic validators, built once per process in a thread of its
    own (importing the SDKs takes a second or so: the server starts at once all the same)."""

    lock = threading.Lock()
    thread = None
    validators = None
    failure = None

    @classmethod
    def start(cls):
        with cls.lock:
            if cls.thread is None:
                cls.thread = threading.Thread(target=cls.build, daemon=True)
                cls.thread.start()

    @classmethod
    def wait(cls):
        cls.start()
        cls.thread.join()
        if cls.failure:
            raise AssertionError(f"fakeapi: cannot check requests ({cls.failure}): "
                                 "install the test extra, pip install -e '.[test]'")
        return cls.validators

    @classmethod
    def build(cls):
        try:
            cls.validators = cls.validators_of_the_sdks()
        except Exception as exc:        # said by every test that uses the fixture
            cls.failure = f"{type(exc).__name__}: {exc}"

    @staticmethod
    def validators_of_the_sdks():
        import pydantic
        import pydantic_core
        from anthropic.types import message_create_params as anthropic_params
        from anthropic.types.messages import batch_create_params as anthropic_batch
        from openai.types import batch_create_params as openai_batch
        from openai.types.chat import completion_create_params as openai_params

        def validator(kind):
            schema = copy.deepcopy(pydantic.TypeAdapter(kind).core_schema)
            return pydantic_core.SchemaValidator(closed(schema))

        return {
            ("openai", False): validator(openai_params.CompletionCreateParamsNonStreaming),
            ("openai", True): validator(openai_params.CompletionCreateParamsStreaming),
            ("anthropic", False): validator(anthropic_params.MessageCreateParamsNonStreaming),
            ("anthropic", True): validator(anthropic_params.MessageCreateParamsStreaming),
            ("openai", "batch"): validator(openai_batch.BatchCreateParams),
            ("anthropic", "batch"): validator(anthropic_batch.BatchCreateParams)}


STRICT_TYPES = {"bool", "int", "float", "str", "list", "dict", "typed-dict"}


def closed(schema):
    """A pydantic core schema made as strict as the API: unknown keys refused in every TypedDict
    (TypedDicts let them through), and a list's items checked at once (pydantic checks those of
    an Iterable only as it is iterated, and nothing iterates them here), and values of their own
    JSON types (no "yes" for true, no "10" for 10: pydantic's lax mode would take them)."""
    kind = schema.get("type") if isinstance(schema, dict) else None
    if isinstance(kind, str):           # else a field named "type", or no schema at all
        if kind == "generator":
            schema["type"] = kind = "list"
        if kind == "typed-dict":
            schema["extra_behavior"] = "forbid"
        if kind in STRICT_TYPES:
            schema["strict"] = True
    if isinstance(schema, dict):
        for value in schema.values():
            closed(value)
    elif isinstance(schema, list):
        for value in schema:
            closed(value)
    return schema


def request_problem(flavour, body):
    """What is wrong with a request body, or None."""
    import pydantic_core
    validators = Schemas.wait()
    try:
        validators[flavour, bool(body.get("stream"))].validate_python(body)
    except pydantic_core.ValidationError as exc:
        return schema_problem(exc.errors())
    return (openai_problem if flavour == "openai" else anthropic_problem)(body)


def batch_problem(flavour, body):
    """What is wrong with the body of a batch's create (its requests aside), or None."""
    import pydantic_core
    try:
        Schemas.wait()[flavour, "batch"].validate_python(body)
    except pydantic_core.ValidationError as exc:
        return schema_problem(exc.errors())
    return None


def schema_problem(errors):
    """The errors that tell: in a union of message or block types, those of the member whose role
    or type matched (the others fail on it, saying nothing of use), else all."""
    def mismatch(error):
        return error["type"] == "literal_error" and error["loc"][-1] in ("role", "type")
    telling = [e for e in errors if not mismatch(e)] or errors
    return "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in telling[:3])


def openai_problem(body):
    """The rules of Chat Completions beyond its types: each tool message answers a call of the
    assistant message before it, and each call is answered."""
    waiting = set()
    for n, message in enumerate(body["messages"]):
        if message["role"] == "tool":
            if message["tool_call_id"] not in waiting:
                return (f"messages.{n}: role 'tool' must be a response to a preceding message "
                        f"with 'tool_calls' ({message['tool_call_id']!r} is none of them)")
            waiting.discard(message["tool_call_id"])
            continue
        if waiting:
            return f"messages.{n}: tool_call_ids did not have response messages: {sorted(waiting)}"
        for call in message.get("tool_calls") or ():
            if not call["id"]:
                return f"messages.{n}: a tool call id is empty"
            waiting.add(call["id"])
    if waiting:
        return f"tool_call_ids did not have response messages: {sorted(waiting)}"
    return None


TOOL_ID = re.compile(r"[a-zA-Z0-9_-]+")


def anthropic_problem(body):
    """The rules of the Messages API beyond its types: text blocks hold more than whitespace,
    tool_use ids are unique and of [a-zA-Z0-9_-], and the tool_result blocks of a user message
    answer the tool_use blocks of the message before it, each of them."""
    seen, waiting = set(), set()
    for n, message in enumerate(body["messages"]):
        blocks = message["content"]
        blocks = [{"type": "text", "text": blocks}] if isinstance(blocks, str) else blocks
        if not blocks:
            return f"messages.{n}: all messages must have non-empty content"
        results = {b["tool_use_id"] for b in blocks if b["type"] == "tool_result"}
        if results - waiting:
            return (f"messages.{n}: unexpected tool_use_id found in tool_result blocks: "
                    f"{sorted(results - waiting)}")
        if waiting - results:
            return (f"messages.{n - 1}: tool_use ids were found without tool_result blocks "
                    f"immediately after: {sorted(waiting - results)}")
        waiting = set()
        for block in blocks:
            if block["type"] == "text" and not block["text"].strip():
                return f"messages.{n}: text content blocks must contain non-whitespace text"
            if block["type"] == "tool_use":
                if not TOOL_ID.fullmatch(block["id"]):
                    return f"messages.{n}: tool_use.id: String should match pattern " \
                           f"'^[a-zA-Z0-9_-]+$' ({block['id']!r})"
                if block["id"] in seen:
                    return f"messages.{n}: tool_use ids must be unique ({block['id']!r})"
                seen.add(block["id"])
                waiting.add(block["id"])
    system = body.get("system")
    if isinstance(system, str) and not system.strip():
        return "system: text content blocks must contain non-whitespace text"
    return None
