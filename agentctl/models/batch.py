"""The providers' batch APIs (agentctl(7), TIERS): a model call sent to be answered
within a day at half price, its batch's status asked, its result read, its batch
cancelled. Two wire forms:

- OpenAI's Batch API: the requests uploaded as a JSONL file (POST /files, purpose batch:
  one model a file), a batch made of it (POST /batches, endpoint /v1/chat/completions,
  completion_window 24h, our mark in its metadata), its status (GET /batches/ID), its
  output and error files (GET /files/ID/content) once it ended; POST
  /batches/ID/cancel; GET /batches?after= to find a batch by its mark.
- Anthropic's Message Batches: POST /v1/messages/batches with the requests,
  GET /v1/messages/batches/ID, its results (GET .../ID/results, JSONL) once ended,
  POST .../ID/cancel. A batch has no metadata: it can't be found by a mark.

The requests' bodies are those a call of the model makes (not streamed), so a batch's
prompt bytes are a standard call's and the provider's prompt cache serves them too.
Every call goes through http.post's retries; the key goes only to the endpoint's base
URL (a results_url the server names is not followed)."""

import json
import os
import secrets

from .. import env, jsonin
from ..errors import TempFail, UsageError
from .base import ModelError, Value, load_json, mapping, said, string

PROVIDERS = ("openai", "anthropic")     # the providers with a batch API
ENDPOINT = "/v1/chat/completions"       # OpenAI's, as a batch's lines name it
RESULTS_BYTES = 1024 * 1024 * 1024      # of a batch's results file, read a line at a time
ENDED = {"openai": ("completed", "failed", "expired", "cancelled"),
         "anthropic": ("ended",)}
MARK = "agentctl"                       # the metadata key of OpenAI's batch: a run's token
LIST_PAGES = 5                          # pages of 100 batches searched for a mark
REFUSED = (400, 401, 403, 404, 413, 422)   # a request's status that no retry mends


class Unknown(TempFail):
    """A batch's create that got no answer (the connection dropped, a timeout): the
    batch may have been made. Not tried again here: the caller finds it by its mark,
    or sends the requests again later."""


class Status(Value):
    """A batch as the provider said it is: `status` its word, `ended` whether its
    results are all there is, `files` (OpenAI: its output and error file ids, "" for
    none), `error` (OpenAI: why a batch failed)."""
    __slots__ = ("status", "ended", "files", "error")

    def __init__(self, status, ended, files=(), error=""):
        self.status, self.ended, self.files, self.error = status, ended, files, error


class Result(Value):
    """One request's result: `outcome` succeeded (`body`, the response as a call gets
    it), errored (`error`, a line; `refused`, whether another try would be refused
    too), expired or canceled."""
    __slots__ = ("id", "outcome", "body", "error", "refused")

    def __init__(self, id, outcome, body=None, error="", refused=False):
        self.id, self.outcome, self.body = id, outcome, body
        self.error, self.refused = error, refused


def supported(model):
    """Whether the model's provider has a batch API."""
    return getattr(model, "provider", "") in PROVIDERS and hasattr(model, "endpoint")


def request_id():
    """A request's custom_id: unique, what the provider echoes with its result."""
    return "agentctl-" + secrets.token_hex(10)


def body(model, messages, tools, cache=None):
    """The request a call of `model` would send (not streamed), as text. Anthropic's
    cache breakpoints last an hour (AGENTCTL_CACHE_TTL unset): a batch may run more
    than five minutes after the call before it."""
    endpoint = model.endpoint()
    if model.provider == "anthropic" and not os.environ.get("AGENTCTL_CACHE_TTL", "").strip():
        endpoint.options = {**endpoint.options, "cache_ttl": "1h"}
    return jsonin.dumps(model.request_body(messages, tools, False, endpoint, cache))


def size():
    """The most requests a batch holds ($AGENTCTL_BATCH_SIZE, 50 by default): no result
    comes back before the whole batch ends, so a smaller batch ends sooner."""
    return env.number("AGENTCTL_BATCH_SIZE", 50, minimum=1, whole=True)


def submit(model, requests, mark):
    """Send `requests` [(custom_id, body text)] of `model` as one batch, marked `mark`
    (OpenAI's metadata); its id."""
    if model.provider == "openai":
        lines = "".join(f'{{"custom_id": {json.dumps(i)}, "method": "POST", '
                        f'"url": "{ENDPOINT}", "body": {b}}}\n' for i, b in requests)
        upload = _call(model, "POST", "/files", *_multipart(lines.encode()))
        made = _create(model, "/batches", _json(
            {"input_file_id": string(upload.get("id")), "endpoint": ENDPOINT,
             "completion_window": "24h", "metadata": {MARK: mark}}))
    else:
        data = '{"requests": [' + ", ".join(
            f'{{"custom_id": {json.dumps(i)}, "params": {b}}}' for i, b in requests) + "]}"
        made = _create(model, "/v1/messages/batches", data.encode())
    batch = string(made.get("id"))
    if not batch:
        raise ModelError(f"model API error: {model.provider}: a batch made without an id")
    return batch


def _create(model, path, data):
    """A batch made, in one try: a create tried again after a connection dropped could
    make two batches of the same requests. Unknown when no answer came."""
    try:
        return _call(model, "POST", path, data, once=True)
    except TempFail as e:
        raise Unknown(str(e), kind=e.kind) from None


def status(model, batch):
    """The batch's Status."""
    if model.provider == "openai":
        got = _call(model, "GET", f"/batches/{batch}")
        word = string(got.get("status"))
        files = tuple(string(got.get(k)) for k in ("output_file_id", "error_file_id"))
        errors = [string(mapping(e).get("message")) for e in
                  mapping(got.get("errors")).get("data") or () if isinstance(e, dict)]
        return Status(word, word in ENDED["openai"], files, errors[0] if errors else "")
    got = _call(model, "GET", f"/v1/messages/batches/{batch}")
    word = string(got.get("processing_status"))
    return Status(word, word in ENDED["anthropic"])


def results(model, batch, state):
    """The Results of an ended batch (`state`, its Status), by custom_id. OpenAI's
    requests that are in neither file are expired (the batch expired) or canceled."""
    found = {}
    if model.provider == "openai":
        for file in state.files:
            if file:
                for line in _lines(model, f"/files/{file}/content"):
                    result = _openai(line)
                    found.setdefault(result.id, result)
        if state.status == "failed":    # the file itself was refused: every request is
            return found, Result("", "errored", error=f"batch failed: {said(state.error)}",
                                 refused=True)
        missing = {"expired": "expired", "cancelled": "canceled"}.get(state.status, "errored")
        return found, Result("", missing, error="no result in the batch's files")
    for line in _lines(model, f"/v1/messages/batches/{batch}/results"):
        result = _anthropic(line)
        found[result.id] = result
    return found, Result("", "errored", error="no result in the batch's results")


def cancel(model, batch):
    path = f"/batches/{batch}/cancel" if model.provider == "openai" else \
        f"/v1/messages/batches/{batch}/cancel"
    _call(model, "POST", path, b"{}")


def find(model, mark):
    """The id of the batch marked `mark` (OpenAI: by its metadata, among the newest
    LIST_PAGES pages), or None: not found, or a provider whose batches carry no mark."""
    if model.provider != "openai":
        return None
    after = ""
    for _ in range(LIST_PAGES):
        page = _call(model, "GET", "/batches?limit=100" + (f"&after={after}" if after else ""))
        for batch in page.get("data") or ():
            if isinstance(batch, dict) and mapping(batch.get("metadata")).get(MARK) == mark:
                return string(batch.get("id")) or None
        after = string(page.get("last_id"))
        if not page.get("has_more") or not after:
            return None
    return None


# -- one result's line ----------------------------------------------------------------------

def _openai(line):
    """A Result of a line of OpenAI's output or error file."""
    custom = string(line.get("custom_id"))
    response, error = mapping(line.get("response")), mapping(line.get("error"))
    code = response.get("status_code")
    if isinstance(code, int) and 200 <= code < 300 and not error:
        return Result(custom, "succeeded", mapping(response.get("body")))
    kind = string(error.get("code"))
    if kind == "batch_expired":
        return Result(custom, "expired")
    if kind == "batch_cancelled":
        return Result(custom, "canceled")
    message = error.get("message") or mapping(mapping(response.get("body")).get(
        "error")).get("message") or kind or "no explanation given"
    where = f"HTTP {code}: " if isinstance(code, int) else ""
    return Result(custom, "errored", error=f"{where}{said(message)}", refused=code in REFUSED)


def _anthropic(line):
    """A Result of a line of Anthropic's results."""
    custom = string(line.get("custom_id"))
    result = mapping(line.get("result"))
    kind = string(result.get("type"))
    if kind == "succeeded":
        return Result(custom, "succeeded", mapping(result.get("message")))
    if kind in ("expired", "canceled"):
        return Result(custom, kind)
    error = mapping(mapping(result.get("error")).get("error"))
    word = string(error.get("type")) or "error"
    return Result(custom, "errored", error=f"{word}: {said(error.get('message'))}",
                  refused=word in ("invalid_request_error", "authentication_error",
                                   "permission_error", "not_found_error",
                                   "request_too_large"))


# -- the calls ----------------------------------------------------------------------------------

def _json(value):
    return jsonin.dumps(value).encode()


def _multipart(data):
    """(body, headers) of a form with purpose=batch and the file `data`."""
    boundary = "agentctl-" + secrets.token_hex(12)
    head = (f'--{boundary}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n'
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; '
            f'filename="requests.jsonl"\r\nContent-Type: application/jsonl\r\n\r\n').encode()
    return head + data + f"\r\n--{boundary}--\r\n".encode(), \
        {"Content-Type": f"multipart/form-data; boundary={boundary}"}


def _send(model, method, path, data, read, content_type="application/json", once=False):
    from . import http  # (start-up: 55 ms of urllib3, only for a call)
    endpoint = model.endpoint()
    headers = {"Content-Type": content_type, **model.headers(endpoint)}
    if data is None:
        del headers["Content-Type"]
    settings = http.Settings()
    if once:
        settings.tries = 1
    return http.post(model.provider, endpoint.url + path, headers, data, read,
                     lambda code, text: model.hint(code, text, endpoint), method=method,
                     settings=settings)


def _call(model, method, path, data=None, headers=None, once=False):
    """The JSON object a call of the batch API answers (ModelError for a refusal,
    TempFail when it stays unavailable)."""
    from . import http  # (start-up: 55 ms of urllib3, only for a call)

    def read(response):
        got = load_json(b"".join(http.bounded(http.body_chunks(response), jsonin.MAX_BYTES)))
        if not isinstance(got, dict):
            raise ModelError(f"model API error: {model.provider}: {path}: not an object")
        return got
    kind = (headers or {}).get("Content-Type", "application/json")
    return _send(model, method, path, data, read, kind, once)


def _lines(model, path):
    """The JSON objects of a JSONL body, read a line at a time (a line that is no object
    is skipped: its request is then found in no file, and said so)."""
    from . import http  # (start-up: 55 ms of urllib3, only for a call)

    def read(response):
        objects, pending = [], b""
        for chunk in http.bounded(http.body_chunks(response), RESULTS_BYTES):
            pending += chunk
            *lines, pending = pending.split(b"\n")
            objects += [_object(line) for line in lines if line.strip()]
        if pending.strip():
            objects.append(_object(pending))
        return [o for o in objects if o is not None]
    return _send(model, "GET", path, None, read)


def _object(line):
    try:
        got = jsonin.loads(line.decode("utf-8", "replace"), what="batch result")
    except jsonin.JSONError:
        return None
    return got if isinstance(got, dict) else None


def check(model):
    """A usage error now when `model` can't be batched (its provider has no batch API)."""
    if not supported(model):
        raise UsageError(f"{model.name}: tier batch: its provider has no batch API "
                         f"(one of {', '.join(PROVIDERS)})")
