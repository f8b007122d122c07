"""Both providers' batch APIs, served by the fake model API (tests/fakeapi.py) at its own
address: an agent pointed at the fake makes its direct and its batch calls there.

    OpenAI     POST /v1/files (purpose=batch: a JSONL file of requests), GET /v1/files/ID,
               GET /v1/files/ID/content, DELETE /v1/files/ID, POST /v1/batches,
               GET /v1/batches?limit=&after=, GET /v1/batches/ID, POST /v1/batches/ID/cancel
    Anthropic  POST /v1/messages/batches, GET /v1/messages/batches?limit=&after_id=&before_id=,
               GET /v1/messages/batches/ID, POST /v1/messages/batches/ID/cancel,
               GET /v1/messages/batches/ID/results

Each request of a batch is checked as a direct one is (tests/fakechecks.py), and against the
batch APIs' own rules: custom_ids unique, no "stream": true, one model and one endpoint per
OpenAI file, the create's body of the SDK's BatchCreateParams. A call that breaks one is
answered 400 with the problem and recorded in fakeapi.violations: the fixture fails the test.

An OpenAI batch is "validating" when made, "in_progress" from its first poll; an Anthropic one
"in_progress". It stays in progress until the test ends it. Each of its requests then takes the
next behaviour of fakeapi's queue, as a direct request would: fakeapi.reply(...) a reply (the
direct one's body, with OpenAI's service_tier "default" and Anthropic's usage.service_tier
"batch" unless service_tier= says another; malformed=True cuts its line short, body=bytes is
its line), fakeapi.error(400, "bad") an errored request. A behaviour of the wire (cut_after,
drop, delay ...) taken by a batch's request is the test's mistake: the fixture fails the test.

    fakeapi.batches.finish()            # every batch in progress ends (or finish(ID): that one)
    fakeapi.batches.expire(ID, done=1)  # ends expired: its first request answered, others not
    fakeapi.batches.fail(ID, "why")     # OpenAI's "failed": the input refused, nothing run
    fakeapi.batches.auto = True         # from now on a batch ends at its first poll
    fakeapi.batches.drop_create(1, before=kill)     # the next create makes its batch, calls
                                        # kill(batch), then closes the connection unanswered

A cancel leaves a batch cancelling (Anthropic's "canceling"); its next poll or finish() ends
it, its unanswered requests cancelled. Results come in the reverse of the requests' order (no
API promises their order). What a test reads: fakeapi.batches.made (each Batch, oldest first),
fakeapi.batches[ID], fakeapi.batches.calls (a Counter of "upload", "create", "poll", "list",
"results", "cancel", "file", "delete") and, as ever, fakeapi.requests (each with its method).
"""

import json
import re
import threading
import time
from collections import Counter
from urllib.parse import parse_qs, urlsplit

from .fakebatchwire import (Refused, anthropic_requests, describe, file_object, form, listing,
                            new_id, openai_create, openai_file, page, result_line,
                            unanswered_line)
from .fakewire import error_body

ENDED = {"completed", "failed", "expired", "cancelled", "ended"}
# Behaviours of the wire: a batch's request that takes one is the test's mistake.
WIRE_FAULTS = ("cut_after", "drop", "delay", "hold", "gzip", "stall_after", "error_event",
               "ignore_stream", "clean")
ROUTES = [  # method, path, provider, what is done (the name Batches.calls counts)
    ("POST", r"/v1/files", "openai", "upload"),
    ("GET", r"/v1/files/([^/]+)", "openai", "file"),
    ("DELETE", r"/v1/files/([^/]+)", "openai", "delete"),
    ("GET", r"/v1/files/([^/]+)/content", "openai", "results"),
    ("POST", r"/v1/batches", "openai", "create"),
    ("GET", r"/v1/batches", "openai", "list"),
    ("GET", r"/v1/batches/([^/]+)", "openai", "poll"),
    ("POST", r"/v1/batches/([^/]+)/cancel", "openai", "cancel"),
    ("POST", r"/v1/messages/batches", "anthropic", "create"),
    ("GET", r"/v1/messages/batches", "anthropic", "list"),
    ("GET", r"/v1/messages/batches/([^/]+)", "anthropic", "poll"),
    ("POST", r"/v1/messages/batches/([^/]+)/cancel", "anthropic", "cancel"),
    ("GET", r"/v1/messages/batches/([^/]+)/results", "anthropic", "results")]


class Batch:
    """A batch the fake made: its id, provider ("openai" or "anthropic"), requests
    ([(custom_id, body)] as sent), metadata (OpenAI's), status (OpenAI's status, Anthropic's
    processing_status), cancelled (a cancel was asked), outcomes once it ended (custom_id ->
    "succeeded", "errored", "expired" or "canceled"), polls and fetches (of its results)."""

    def __init__(self, provider, requests, metadata=None, input_file_id=None, model=None):
        self.provider, self.requests, self.metadata = provider, requests, metadata
        self.id = new_id("batch_" if provider == "openai" else "msgbatch_")
        self.input_file_id, self.model = input_file_id, model
        self.status = "validating" if provider == "openai" else "in_progress"
        self.cancelled = False
        self.created_at, self.times = time.time(), {}
        self.outcomes, self.lines, self.files, self.usage = {}, {}, {}, [0, 0, 0]
        self.failure = None
        self.polls = self.fetches = 0

    @property
    def custom_ids(self):
        return [custom_id for custom_id, _ in self.requests]

    @property
    def bodies(self):
        return [body for _, body in self.requests]

    @property
    def ended(self):
        return self.status in ENDED

    def count(self, kind):
        return sum(1 for outcome in self.outcomes.values() if outcome == kind)

    def results(self, kinds=("succeeded", "errored", "expired", "canceled")):
        """Its result lines of these kinds, as a JSONL file: the last request's first."""
        return b"".join(self.lines[c] + b"\n" for c in reversed(self.custom_ids)
                        if self.outcomes.get(c) in kinds)


class Batches:
    """fakeapi.batches: the batches and files the fake holds, and the test's controls."""

    def __init__(self, fake, keys):
        self.fake, self.keys = fake, keys
        self.lock = threading.RLock()
        self.made = []                  # every Batch, oldest first
        self.files = {}                 # OpenAI's files: id -> {"data", "purpose", ...}
        self.calls = Counter()
        self.auto = False
        self.dropping = None            # (the number of the create to drop, what to call)

    def __getitem__(self, batch_id):
        return next(b for b in self.made if b.id == batch_id)

    def __len__(self):
        return len(self.made)

    # -- the test's controls ------------------------------------------------------------------

    def finish(self, batch_id=None):
        """End the batch (else every batch not ended) as its API ends one that ran: each
        request not answered takes the next behaviour of the queue (a cancelling batch's:
        cancelled instead). Returns the batches ended."""
        return self.end(batch_id, "completed")

    def expire(self, batch_id=None, done=0):
        """End it as expired: its first `done` requests take the queue's behaviours, the
        others expired."""
        return self.end(batch_id, "expired", done)

    def fail(self, batch_id=None, message="fakeapi: the batch failed", code="invalid_request"):
        """End an OpenAI batch as "failed": its input refused by the validation, nothing run."""
        return self.end(batch_id, "failed", failure={"code": code, "message": message,
                                                     "param": None, "line": None})

    def drop_create(self, n=1, before=None):
        """The n-th batch create from now (of either API) makes its batch, calls before(batch)
        if given (to kill the client, say), then closes the connection without an answer."""
        self.dropping = (self.calls["create"] + n, before)

    def end(self, batch_id, how, done=0, failure=None):
        with self.lock:
            chosen = [self[batch_id]] if batch_id else [b for b in self.made if not b.ended]
            for batch in chosen:
                assert not batch.ended, f"fakebatch: {batch.id} has ended already"
                if failure:
                    assert batch.provider == "openai", "fakebatch: only OpenAI's batches fail"
                    batch.failure = failure
                elif not batch.cancelled:
                    self.answer(batch, done if how == "expired" else len(batch.requests))
                self.close(batch, "cancelled" if batch.cancelled and not failure else how)
            return chosen

    def answer(self, batch, n):
        """Its first n requests not answered take their behaviours from the queue."""
        for custom_id, body in batch.requests:
            if n and custom_id not in batch.outcomes:
                n -= 1
                b = self.fake.next_behaviour()
                faults = [f for f in WIRE_FAULTS if b.get(f)]
                if faults:
                    self.fake.errors.append(f"fakebatch: {custom_id} of {batch.id} took a "
                                            f"behaviour of the wire, meaningless here: {faults}")
                kind, line = result_line(batch.provider, custom_id, body, b)
                data = json.dumps(line).encode()
                batch.outcomes[custom_id] = kind
                if kind == "succeeded" and b.get("body") is not None:
                    data = b["body"]                # the line as the test wrote it
                elif b.get("malformed"):
                    data = data[:len(data) // 2]
                batch.lines[custom_id] = data
                if kind == "succeeded" and b["usage"]:
                    batch.usage = [batch.usage[0] + b["usage"][0],
                                   batch.usage[1] + b["usage"][1], batch.usage[2] + b["cached"][0]]

    def close(self, batch, status):
        """End the batch: its unanswered requests expired or cancelled, its results made."""
        now = time.time()
        if status != "failed":
            for custom_id in batch.custom_ids:
                if custom_id not in batch.outcomes:
                    kind = "expired" if status == "expired" else "canceled"
                    batch.outcomes[custom_id] = kind
                    batch.lines[custom_id] = json.dumps(unanswered_line(
                        batch.provider, custom_id, kind)).encode()
            batch.times.update({"in_progress": batch.times.get("in_progress", now),
                                "finalizing": now})
        batch.times.update({status: now, "ended": now})
        batch.status = status if batch.provider == "openai" else "ended"
        for name, kinds in (("output", ("succeeded",)), ("error", ("errored", "expired",
                                                                   "canceled"))):
            data = batch.results(kinds)
            if data and batch.provider == "openai":
                batch.files[name] = self.store(data, "batch_output", f"{batch.id}_{name}.jsonl",
                                               batch=batch)

    def store(self, data, purpose, filename, **more):
        file_id = new_id("file-")
        self.files[file_id] = dict(more, data=data, purpose=purpose, filename=filename,
                                   at=time.time())
        return file_id

    # -- serving ------------------------------------------------------------------------------

    def serve(self, handler, raw):
        """Answer the call if its path is a batch API's: True, else False."""
        url = urlsplit(handler.path)
        for method, pattern, provider, what in ROUTES:
            found = re.fullmatch(pattern, url.path)
            if found and method == handler.command:
                break
        else:
            return False
        self.calls[what] += 1
        body = raw or None
        try:
            try:
                body = self.parsed(handler, raw)
            finally:
                self.fake.record(handler, body)
            self.authorised(handler, provider)
            query = {k: v[-1] for k, v in parse_qs(url.query).items()}
            with self.lock:
                answer = getattr(self, f"{provider}_{what}")(
                    *found.groups(), handler=handler, body=body, query=query)
        except Refused as refusal:
            status, message, broken = refusal.args
            if broken:
                self.fake.violations.append((handler.path, message))
                message = f"fakeapi: invalid request: {message}"
            handler.send_json(status, error_body(provider, status, message))
            return True
        if isinstance(answer, bytes):
            handler.answer(200, answer, "application/octet-stream")
        elif answer is not None:
            handler.send_json(200, answer)
        return True

    @staticmethod
    def parsed(handler, raw):
        """The body of the call: a form's fields, JSON's value, None (no body)."""
        if handler.headers.get("Content-Type", "").startswith("multipart/"):
            return form(handler.headers, raw)
        try:
            return json.loads(raw) if raw else None
        except ValueError:
            raise Refused(400, "the body is not JSON", True) from None

    def authorised(self, handler, provider):
        """The provider's key: OpenAI's as a bearer token, Anthropic's as x-api-key (or as a
        bearer token, as its SDK now sends it)."""
        bearer = f"Bearer {self.keys[provider]}"
        if provider == "openai":
            if handler.headers.get("Authorization") != bearer:
                raise Refused(401, "Incorrect API key provided", False)
        elif self.keys["anthropic"] != handler.headers.get("x-api-key") and bearer != \
                handler.headers.get("Authorization"):
            raise Refused(401, "invalid x-api-key", False)
        elif not handler.headers.get("anthropic-version"):
            raise Refused(400, "anthropic-version: header is required", True)

    def find(self, provider, batch_id):
        for batch in self.made:
            if batch.id == batch_id and batch.provider == provider:
                return batch
        raise Refused(404, f"No batch found with id '{batch_id}'", False)

    def stored(self, file_id):
        if file_id not in self.files:
            raise Refused(404, f"No such File object: {file_id}", False)
        return self.files[file_id]

    def made_one(self, batch, handler):
        self.made.append(batch)
        if self.dropping and self.dropping[0] == self.calls["create"]:
            before, self.dropping = self.dropping[1], None
            if before:
                before(batch)
            try:
                handler.drop()
            except OSError:         # the client is gone already
                handler.close_connection = True
            return None
        return describe(batch, self.fake.url)

    def polled(self, batch):
        batch.polls += 1
        if batch.status == "validating":
            batch.status = "in_progress"
            batch.times["in_progress"] = time.time()
        if not batch.ended and (batch.cancelled or self.auto):
            self.end(batch.id, "completed")
        return describe(batch, self.fake.url)

    def cancelled(self, batch):
        if batch.ended and not batch.cancelled:
            raise Refused(400, f"Cannot cancel a batch with status '{batch.status}'", False)
        if not batch.cancelled:
            batch.cancelled = True
            batch.status = "cancelling" if batch.provider == "openai" else "canceling"
            batch.times["cancelling"] = time.time()
        return describe(batch, self.fake.url)

    def listed(self, provider, query, most):
        limit, after, before = listing(query, most)
        mine = [b for b in reversed(self.made) if b.provider == provider]
        return page(mine, provider, self.fake.url, limit, after, before)

    # -- the endpoints, called with the lock held ---------------------------------------------

    def openai_upload(self, body, **_):
        if not isinstance(body, dict):
            raise Refused(400, "the body is not multipart/form-data", True)
        requests, model = openai_file(body)
        filename, data = body["file"]
        file_id = self.store(data, "batch", filename or "upload.jsonl", requests=requests,
                             model=model)
        return file_object(file_id, self.files[file_id])

    def openai_file(self, file_id, **_):
        return file_object(file_id, self.stored(file_id))

    def openai_delete(self, file_id, **_):
        self.stored(file_id)
        del self.files[file_id]
        return {"id": file_id, "object": "file", "deleted": True}

    def openai_results(self, file_id, **_):
        stored = self.stored(file_id)
        if "batch" in stored:
            stored["batch"].fetches += 1
        return stored["data"]

    def openai_create(self, body, handler, **_):
        body = openai_create(body)
        stored = self.files.get(body["input_file_id"])
        if not stored or stored["purpose"] != "batch":
            raise Refused(400, f"input_file_id {body['input_file_id']!r}: no batch file of "
                               "that id", True)
        return self.made_one(Batch("openai", list(stored["requests"]), body.get("metadata"),
                                   body["input_file_id"], stored["model"]), handler)

    def openai_list(self, query, **_):
        return self.listed("openai", dict(query, before_id=None), 100)

    def openai_poll(self, batch_id, **_):
        return self.polled(self.find("openai", batch_id))

    def openai_cancel(self, batch_id, **_):
        return self.cancelled(self.find("openai", batch_id))

    def anthropic_create(self, body, handler, **_):
        return self.made_one(Batch("anthropic", anthropic_requests(body)), handler)

    def anthropic_list(self, query, **_):
        return self.listed("anthropic", query, 1000)

    def anthropic_poll(self, batch_id, **_):
        return self.polled(self.find("anthropic", batch_id))

    def anthropic_cancel(self, batch_id, **_):
        return self.cancelled(self.find("anthropic", batch_id))

    def anthropic_results(self, batch_id, **_):
        batch = self.find("anthropic", batch_id)
        if not batch.ended:
            raise Refused(400, f"Message Batch {batch_id} has not ended: its results are not "
                               "available yet", False)
        batch.fetches += 1
        return batch.results()
