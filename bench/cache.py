"""make bench: what a fork family's prompts cost at Anthropic's published prices, with
agentctl's cache hints and without them (AGENTCTL_CACHE_TTL=off), at the standard tier
and through the Message Batches (agentctl(7), TIERS: half the price, the hints' prices
stacked on it, cache writes of an hour; each batch taken to end within the hour of the
one before, as most do).

The family: one parent with about 20,000 tokens of history, then 8 children forked
from it, 3 turns each. Every request is the one agentctl really sends (through the
fake Messages API of the tests, which checks each against the official SDK's request
types); what each is billed is worked out from the request alone by the caching
rules Anthropic documents:
- the prefix is tools, then system, then the messages, block by block;
- a block with cache_control is a breakpoint: the prefix through it is written to
  the cache (at 1.25 times the input price for 5 minutes), unless it is there already,
  and provided it is at least the model's minimum (1,024 tokens for Sonnet);
- at each breakpoint the cache is looked up at that block and at the block boundaries
  up to 20 blocks before it: the longest prefix found is read (at a tenth of the price);
- what follows the last breakpoint is input at the full price.
Every request comes within the 5 minutes of the one before, so nothing expires.
Tokens are estimated from the text (4 characters a token) on both sides alike.
"""

import hashlib
import json
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from agentctl.ids import INIT_ID  # noqa: E402
from agentctl.ops import lifecycle, mail  # noqa: E402
from agentctl.store import db, registry  # noqa: E402
from agentctl.store.db import transaction  # noqa: E402
from agentctl.turn import runner  # noqa: E402
from tests.fakeapi import ANTHROPIC_KEY, FakeAPI  # noqa: E402

MODEL = "claude-sonnet-4-5"
CHILDREN, TURNS, HISTORY_TURNS = 8, 3, 10
MINIMUM, LOOKBACK = 1024, 20
TARGET = 60.0           # percent less with the hints
PARAGRAPH = ("The survey of the module found these functions, their callers and what each "
             "of them reads and writes; the notes below are the plan for the next step. ")


def tokens(block):
    return -(-len(json.dumps(block, sort_keys=True, ensure_ascii=False)) // 4)


def blocks_of(body):
    """The request's blocks in the cache's order, each (its tokens, whether it is a
    breakpoint), without cache_control in what is counted."""
    def bare(block):
        return {k: v for k, v in block.items() if k != "cache_control"}
    system = body.get("system") or []
    system = [{"type": "text", "text": system}] if isinstance(system, str) else system
    found = [b for b in body.get("tools", [])] + list(system)
    for message in body["messages"]:
        content = message["content"]
        content = [{"type": "text", "text": content}] if isinstance(content, str) else content
        found += [dict(b, role=message["role"]) for b in content]
    return [(json.dumps(bare(b), sort_keys=True), tokens(bare(b)), "cache_control" in b)
            for b in found]


class Cache:
    """Anthropic's prompt cache, as documented, for one family within its 5 minutes."""

    def __init__(self):
        self.held = set()       # the hashes of the prefixes written

    def bill(self, body):
        """(read, written, input) tokens of a request."""
        blocks = blocks_of(body)
        hashes, sizes, digest, total = [], [], hashlib.sha256(), 0
        for text, count, _ in blocks:
            digest.update(text.encode())
            hashes.append(digest.copy().hexdigest())
            total += count
            sizes.append(total)
        points = [i for i, (_, _, point) in enumerate(blocks) if point and sizes[i] >= MINIMUM]
        read = 0
        for point in points:
            for i in range(point, max(point - LOOKBACK, -1), -1):
                if hashes[i] in self.held:
                    read = max(read, sizes[i])
                    break
        if not points:
            return 0, 0, total
        last = points[-1]
        for point in points:
            self.held.add(hashes[point])
        written = max(sizes[last] - read, 0)
        return read, written, total - read - written


def family(tmp, hinted):
    """Run the family; returns the bodies of its requests, and where the children's
    start."""
    api = FakeAPI()
    os.environ.update(ANTHROPIC_BASE_URL=api.url, ANTHROPIC_API_KEY=ANTHROPIC_KEY,
                      NO_PROXY="127.0.0.1,localhost",
                      AGENTCTL_CACHE_TTL="5m" if hinted else "off")
    conn = db.connect(os.path.join(tmp, f"family-{hinted}.db"))
    try:
        with transaction(conn):
            parent = lifecycle.fork(conn, registry.get(conn, INIT_ID), name="lead",
                                    model=f"anthropic:{MODEL}",
                                    system="You lead a code review. Be thorough. " * 20)
        for n in range(HISTORY_TURNS):      # about 2,000 tokens a turn
            with transaction(conn):
                mail.deliver(conn, None, registry.get(conn, parent),
                             f"Part {n} of the survey:\n" + PARAGRAPH * 45)
            api.reply(f"Noted part {n}: " + PARAGRAPH * 2)
            runner.run(conn, parent)
        built = len(api.requests)
        children = []
        with transaction(conn):
            for n in range(CHILDREN):
                children.append(lifecycle.fork(conn, registry.get(conn, parent), name=f"w{n}",
                                               prompt=f"Review part {n} in depth."))
        for turn in range(TURNS):
            for n, child in enumerate(children):
                if turn:
                    with transaction(conn):
                        mail.deliver(conn, None, registry.get(conn, child),
                                     f"Now check what you found in part {n}, step {turn}.")
                api.reply(f"Findings of w{n}, turn {turn}: " + PARAGRAPH)
                runner.run(conn, child)
        assert not api.violations, api.violations
        return [r["body"] for r in api.requests], built
    finally:
        conn.close()
        api.close()


def prices(batch=False):
    """Anthropic's published prices of the model (dollars per million tokens): input,
    cache write, cache read; from genai-prices' data. With `batch`, the Message Batches'
    prices (half), cache writes of an hour (what agentctl's batched calls ask for)."""
    from genai_prices import Usage, calc_price
    one = 1000      # below the tier of long prompts (over 200,000 tokens)
    context = {"processing": "batch"} if batch else None

    def rate(**counts):
        price = calc_price(Usage(**counts), MODEL, provider_id="anthropic",
                           price_context=context).input_price
        return float(price) * 1_000_000 / one
    write = {"cache_write_1h_tokens": one} if batch else {}
    return (rate(input_tokens=one), rate(input_tokens=one, cache_write_tokens=one, **write),
            rate(input_tokens=one, cache_read_tokens=one))


def billed(bodies, start, rates):
    """Each request billed in order with one cache (the lead's requests write what its
    children read); (dollars, read, written, input) of those from `start` on."""
    cache = Cache()
    read = written = fresh = 0
    for n, body in enumerate(bodies):
        r, w, i = cache.bill(body)
        if n >= start:
            read, written, fresh = read + r, written + w, fresh + i
    dollars = (fresh * rates[0] + written * rates[1] + read * rates[2]) / 1_000_000
    return dollars, read, written, fresh


def report(label, hinted, plain, start, rates, batch_rates):
    (with_, read, written, fresh) = billed(hinted, start, rates)
    (without, _, _, total) = billed(plain, start, rates)
    saved = 100 * (1 - with_ / without)
    print(f"{label}: {len(hinted) - start} requests, {total:,} input tokens")
    print(f"  standard:          ${without:.4f} (all input at ${rates[0]:g}/MTok)")
    print(f"  cached:            ${with_:.4f} ({read:,} read at ${rates[2]:g}, {written:,} "
          f"written at ${rates[1]:g}, {fresh:,} input at ${rates[0]:g})")
    batch, batch_cached = billed(plain, start, batch_rates)[0], \
        billed(hinted, start, batch_rates)[0]
    print(f"  batch:             ${batch:.4f} (all input at ${batch_rates[0]:g}/MTok)")
    print(f"  batch and cached:  ${batch_cached:.4f} (written for an hour at "
          f"${batch_rates[1]:g}, read at ${batch_rates[2]:g}): "
          f"{100 * (1 - batch_cached / without):.1f}% less than standard")
    verdict = "ok" if saved >= TARGET else "MISSED"
    print(f"  {saved:.1f}% less with the hints   target >= {TARGET:g}%: {verdict}")
    return saved


def main():
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["AGENTCTL_DB"] = os.path.join(tmp, "unused.db")
        hinted, start = family(tmp, True)
        plain, _ = family(tmp, False)
    rates, batch_rates = prices(), prices(batch=True)
    first = blocks_of(plain[start])
    history = sum(t for _, t, _ in first[:-1])
    print(f"cache hints, {MODEL} at Anthropic's prices: a lead with {history:,} tokens of "
          f"context (tools and system prompt included, estimated), {CHILDREN} children "
          f"forked from it, {TURNS} turns each")
    report("the children's requests", hinted, plain, start, rates, batch_rates)
    report("the whole family (the lead's history too)", hinted, plain, 0, rates, batch_rates)


if __name__ == "__main__":
    main()
