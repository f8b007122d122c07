"""What the fake batch APIs (tests/fakebatch.py) read and write in each provider's wire form:
the checks of what a client sends (an OpenAI file of requests, an Anthropic batch's body), a
batch and a page of batches as each API describes them, and the lines of their results."""

import json
import re
import uuid
from datetime import datetime, timezone
from email import policy
from email.parser import BytesParser

from .fakechecks import batch_problem, request_problem
from .fakewire import anthropic_plain, error_body, openai_plain

DAY = 24 * 3600
ENDPOINT = "/v1/chat/completions"           # the one endpoint the fake batches
OPENAI_LINE = {"custom_id", "method", "url", "body"}
UPLOAD_FIELDS = {"purpose", "file", "expires_after[anchor]", "expires_after[seconds]"}
CUSTOM_ID = re.compile(r"[a-zA-Z0-9_-]{1,64}")      # Anthropic's rule for a custom_id
UNANSWERED = {"expired": "This request could not be executed before the completion window "
                         "expired.",
              "canceled": "This request was cancelled before it could be executed."}


class Refused(Exception):
    """A call answered with an error: (status, message, whether the real API's rules were
    broken: a violation that fails the test)."""


def new_id(prefix):
    return prefix + uuid.uuid4().hex[:24]


def rfc3339(when):
    return when and datetime.fromtimestamp(when, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# -- what a client sends ----------------------------------------------------------------------

def form(headers, raw):
    """A multipart/form-data body: its fields by name, a file's as (filename, bytes)."""
    head = f"Content-Type: {headers.get('Content-Type')}\r\n\r\n".encode()
    message = BytesParser(policy=policy.HTTP).parsebytes(head + raw)
    if not message.is_multipart():
        raise Refused(400, "the body is not multipart/form-data", True)
    fields = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        data = part.get_payload(decode=True) or b""
        fields[name] = (part.get_filename(), data) if part.get_filename() else data.decode()
    return fields


def openai_file(fields):
    """The requests of an uploaded batch file ([(custom_id, body)]) and their model."""
    unknown = set(fields) - UPLOAD_FIELDS
    if unknown or "file" not in fields or "purpose" not in fields:
        raise Refused(400, f"fields {sorted(fields)}: purpose and file are required, "
                           f"{sorted(unknown)} unknown", True)
    if fields["purpose"] != "batch":
        raise Refused(400, f"purpose {fields['purpose']!r}: the fake holds only batch files",
                      True)
    requests, models = [], set()
    lines = fields["file"][1].decode().splitlines()
    for n, text in enumerate(lines, 1):
        try:
            line = json.loads(text)
        except ValueError:
            raise Refused(400, f"line {n}: not JSON", True) from None
        problem = openai_line_problem(line, [c for c, _ in requests])
        if problem:
            raise Refused(400, f"line {n}: {problem}", True)
        requests.append((line["custom_id"], line["body"]))
        models.add(line["body"]["model"])
    if not requests:
        raise Refused(400, "the file holds no request", True)
    if len(models) > 1:
        raise Refused(400, f"one model per batch file, not {sorted(models)}", True)
    return requests, models.pop()


def openai_line_problem(line, custom_ids):
    if not isinstance(line, dict) or set(line) != OPENAI_LINE:
        return f"a line holds {sorted(OPENAI_LINE)}, no more"
    if not isinstance(line["custom_id"], str) or not line["custom_id"]:
        return "custom_id: a string, not empty"
    if line["custom_id"] in custom_ids:
        return f"custom_id {line['custom_id']!r} is not unique"
    if line["method"] != "POST" or line["url"] != ENDPOINT:
        return f"{line['method']} {line['url']}: only POST {ENDPOINT} is batched here"
    if not isinstance(line["body"], dict):
        return "body: an object"
    if line["body"].get("stream"):
        return "body.stream: a batch's requests are not streamed"
    return request_problem("openai", line["body"])


def anthropic_requests(body):
    """The requests of an Anthropic batch's body ([(custom_id, params)])."""
    if not isinstance(body, dict) or set(body) != {"requests"} or not isinstance(
            body["requests"], list) or not body["requests"]:
        raise Refused(400, "the body holds requests (a list, not empty), no more", True)
    custom_ids = []
    for n, request in enumerate(body["requests"]):
        params = request.get("params") if isinstance(request, dict) else None
        custom_id = request.get("custom_id") if isinstance(request, dict) else None
        problem = None
        if not isinstance(custom_id, str) or not CUSTOM_ID.fullmatch(custom_id):
            problem = f"custom_id {custom_id!r}: 1 to 64 of [a-zA-Z0-9_-]"
        elif custom_id in custom_ids:
            problem = f"custom_id {custom_id!r} is not unique"
        elif isinstance(params, dict) and params.get("stream"):
            problem = "params.stream: a batch's requests are not streamed"
        elif isinstance(params, dict):
            problem = request_problem("anthropic", params)
        if problem:
            raise Refused(400, f"requests.{n}: {problem}", True)
        custom_ids.append(custom_id)
    problem = batch_problem("anthropic", body)
    if problem:
        raise Refused(400, problem, True)
    return [(r["custom_id"], r["params"]) for r in body["requests"]]


def openai_create(body):
    """The checked body of an OpenAI batch's create."""
    problem = batch_problem("openai", body) if isinstance(body, dict) else "not an object"
    metadata = (body.get("metadata") or {}) if not problem else {}
    if not problem and (len(metadata) > 16 or any(len(k) > 64 or len(v) > 512
                                                  for k, v in metadata.items())):
        problem = "metadata: at most 16 pairs, keys of 64 characters, values of 512"
    if not problem and body["endpoint"] != ENDPOINT:
        problem = f"endpoint {body['endpoint']!r}: the file's requests are for {ENDPOINT}"
    if problem:
        raise Refused(400, problem, True)
    return body


def listing(query, most):
    """The limit and cursors of a list's query."""
    try:
        limit = int(query.get("limit", 20))
    except ValueError:
        limit = 0
    if not 1 <= limit <= most:
        raise Refused(400, f"limit: from 1 to {most}", True)
    return limit, query.get("after") or query.get("after_id"), query.get("before_id")


# -- what the APIs answer ---------------------------------------------------------------------

def describe(batch, url):
    """The batch as its API describes it."""
    if batch.provider == "anthropic":
        done = {kind: batch.count(kind) for kind in ("succeeded", "errored", "canceled",
                                                     "expired")}
        return {"id": batch.id, "type": "message_batch", "processing_status": batch.status,
                "request_counts": dict(done, processing=len(batch.requests) - sum(done.values())),
                "created_at": rfc3339(batch.created_at),
                "expires_at": rfc3339(batch.created_at + DAY),
                "ended_at": rfc3339(batch.times.get("ended")), "archived_at": None,
                "cancel_initiated_at": rfc3339(batch.times.get("cancelling")),
                "results_url": f"{url}/v1/messages/batches/{batch.id}/results"
                if batch.ended else None}
    total = 0 if batch.status == "validating" or batch.failure else len(batch.requests)
    obj = {"id": batch.id, "object": "batch", "endpoint": ENDPOINT, "model": batch.model,
           "input_file_id": batch.input_file_id, "completion_window": "24h",
           "status": batch.status, "created_at": int(batch.created_at),
           "expires_at": int(batch.created_at + DAY), "metadata": batch.metadata,
           "output_file_id": batch.files.get("output"), "error_file_id": batch.files.get("error"),
           "errors": batch.failure and {"object": "list", "data": [batch.failure]},
           "request_counts": {"total": total, "completed": batch.count("succeeded"),
                              "failed": len(batch.outcomes) - batch.count("succeeded")}}
    for name in ("in_progress", "finalizing", "completed", "failed", "expired", "cancelling",
                 "cancelled"):
        obj[f"{name}_at"] = batch.times.get(name) and int(batch.times[name])
    if batch.ended and not batch.failure:
        read, written, cached = batch.usage
        obj["usage"] = {"input_tokens": read, "input_tokens_details": {"cached_tokens": cached},
                        "output_tokens": written, "total_tokens": read + written,
                        "output_tokens_details": {"reasoning_tokens": 0}}
    return obj


def page(batches, provider, url, limit, after, before):
    """A page of the list of batches (the newest first), in the provider's form."""
    ids = [b.id for b in batches]
    for cursor in (after, before):
        if cursor is not None and cursor not in ids:
            raise Refused(400, f"no batch {cursor!r} to list from", False)
    if before is not None:
        start = max(0, ids.index(before) - limit)
        chosen = batches[start:ids.index(before)]
        more = start > 0
    else:
        start = ids.index(after) + 1 if after is not None else 0
        chosen = batches[start:start + limit]
        more = start + limit < len(batches)
    obj = {"data": [describe(b, url) for b in chosen], "has_more": more,
           "first_id": chosen[0].id if chosen else None,
           "last_id": chosen[-1].id if chosen else None}
    return dict(obj, object="list") if provider == "openai" else obj


def file_object(file_id, stored):
    return {"id": file_id, "object": "file", "bytes": len(stored["data"]),
            "created_at": int(stored["at"]), "expires_at": int(stored["at"]) + 30 * DAY,
            "filename": stored["filename"], "purpose": stored["purpose"],
            "status": "processed", "status_details": None}


def result_line(provider, custom_id, body, b):
    """The line of a request's result when it took behaviour b: (its kind, the line)."""
    model = b.get("served") or body["model"]
    if provider == "openai":
        response = {"status_code": b.get("status", 200), "request_id": new_id("req_")}
        if "status" in b:
            response["body"] = error_body("openai", b["status"], b["message"], b.get("code"))
        else:       # the SDK's types have no "batch" tier: a batch's replies say "default"
            response["body"] = dict(openai_plain(b, model),
                                    service_tier=b.get("service_tier") or "default")
        line = {"id": new_id("batch_req_"), "custom_id": custom_id, "response": response,
                "error": None}
    elif "status" in b:
        line = {"custom_id": custom_id, "result": {"type": "errored", "error": error_body(
            "anthropic", b["status"], b["message"])}}
    else:
        message = anthropic_plain(b, model)
        if message.get("usage"):
            message["usage"]["service_tier"] = b.get("service_tier") or "batch"
        line = {"custom_id": custom_id, "result": {"type": "succeeded", "message": message}}
    return ("errored" if "status" in b else "succeeded"), line


def unanswered_line(provider, custom_id, kind):
    """The line of a request the batch ended without: kind "expired" or "canceled"."""
    if provider == "anthropic":
        return {"custom_id": custom_id, "result": {"type": kind}}
    code = "batch_expired" if kind == "expired" else "batch_cancelled"
    return {"id": new_id("batch_req_"), "custom_id": custom_id, "response": None,
            "error": {"code": code, "message": UNANSWERED[kind]}}
