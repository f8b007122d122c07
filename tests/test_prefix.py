"""Prefix stability, the property a prompt cache lives on (agentctl(7), COST): a fork
family's requests, as agentctl really sends them (captured by the fake API), share
their prefixes byte for byte. A child's first request starts with what its parent
sent up to the fork point; each request of an agent starts with the whole of its
previous one, unless a clear (HUP) or a compaction came between them. Anthropic's
requests carry cache breakpoints where those prefixes end."""

import json

import pytest

from tests.fakeapi import fakeapi  # noqa: F401 (a fixture)

from .conftest import agent, fork

SYSTEM = "You are a careful planner. " * 8


def items(flavour, body):
    """A request body as the sequence of what its provider caches in order (tools, the
    system prompt, then each message, or each content block for Anthropic), each as
    JSON text without its cache_control (where a breakpoint is, is no content)."""
    def text(value):
        return json.dumps(strip(value), sort_keys=True, ensure_ascii=False)
    found = [("tools", text(body.get("tools", [])))]
    if flavour == "openai":
        return found + [("message", text(m)) for m in body["messages"]]
    system = body.get("system")
    found.append(("system", text(system if isinstance(system, str) else
                                 "\n\n".join(b["text"] for b in system or ()))))
    for message in body["messages"]:
        content = message["content"]
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        found += [(message["role"], text(block)) for block in blocks]
    return found


def strip(value):
    if isinstance(value, dict):
        return {k: strip(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [strip(v) for v in value]
    return value


def marked(body):
    """The indexes (in items()) of the Anthropic blocks that carry cache_control."""
    found = []
    system = body.get("system")
    tools = body.get("tools", [])
    if any("cache_control" in t for t in tools):
        found.append(0)
    if isinstance(system, list) and any("cache_control" in b for b in system):
        found.append(1)
    index = 2
    for message in body["messages"]:
        content = message["content"]
        for block in [content] if isinstance(content, str) else content:
            if isinstance(block, dict) and "cache_control" in block:
                found.append(index)
            index += 1
    return found


def where(sequence, marker):
    """The index of the first item holding `marker`."""
    return next(i for i, (_, t) in enumerate(sequence) if marker in t)


class Family:
    """Runs turns and keeps each request sent, with the agent that sent it."""

    def __init__(self, api, flavour):
        self.api, self.flavour, self.sent = api, flavour, []

    def run(self, name, *replies):
        for reply in replies:
            self.api.reply(**reply)
        before = len(self.api.requests)
        result = agent("run", name)
        assert result.code == 0, result.err
        for request in self.api.requests[before:]:
            self.sent.append((name, request["body"], items(self.flavour, request["body"])))

    def of(self, name):
        return [(body, seq) for who, body, seq in self.sent if who == name]


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
def test_a_fork_familys_requests_share_their_prefixes(fakeapi, provider):  # noqa: F811
    flavour = provider
    family = Family(fakeapi, flavour)
    model = {"anthropic": "anthropic:claude-test", "openai": "openai:gpt-test"}[provider]
    fork("-n", "p", "-m", model, "-s", SYSTEM, "Plan marker-p1.")
    family.run("p", {"text": "Reply marker-p2."})
    agent("send", "p", "Next marker-p3.")
    family.run("p", {"tool_calls": [("fork", '{"name": "c1", "prompt": "Work marker-c1."}')]},
               {"text": "Forked marker-p4."})
    # c2 forked at an earlier message, c3 at the latest one
    replayed = agent("replay", "--format", "jsonl", "p").lines
    at = next(json.loads(r)["id"] for r in replayed if "marker-p2" in r)
    fork("-p", "p", "--at", at, "-n", "c2", "Work marker-c2.")
    family.run("c2", {"text": "c2 done."})
    agent("send", "c2", "More marker-c2m.")
    family.run("c2", {"text": "c2 again."})
    family.run("c1", {"text": "c1 done."})
    agent("send", "c1", "Again marker-c1m.")
    family.run("c1", {"text": "c1 again."})
    fork("-p", "p", "-n", "c3", "Work marker-c3.")
    family.run("c3", {"text": "c3 done.", "usage": (3000, 10)})     # a large context
    # a clear of the parent, then turns on the fresh context
    assert agent("kill", "-s", "HUP", "p").code == 0
    agent("send", "p", "Fresh marker-p5.")
    family.run("p", {"text": "Fresh reply."})
    agent("send", "p", "Again marker-p6.")
    family.run("p", {"text": "Again reply."})
    # a compaction: c4's window is far below the context it inherits
    fork("-p", "c3", "-n", "c4", "-w", "300", "Work marker-c4.")
    family.run("c4", {"text": "Summary marker-sum."}, {"text": "c4 done."})
    agent("send", "c4", "More marker-c4m.")
    family.run("c4", {"text": "c4 again."})

    # Each agent's next request starts with its whole previous one, but across a clear
    # or a compaction (and the summarising call, a request of its own).
    breaks = {("p", "marker-p5"), ("c4", "marker-sum")}
    for name in ("p", "c1", "c2", "c3", "c4"):
        requests = [(b, s) for b, s in family.of(name) if not any("[COMPACT]" in t for _, t in s)]
        for (_, before), (body, after) in zip(requests, requests[1:]):
            if any(who == name and any(m in t for _, t in after) and
                   not any(m in t for _, t in before) for who, m in breaks):
                continue
            assert after[:len(before)] == before, f"{name}: a request changed its prefix"
            if flavour == "anthropic":      # and reads what the previous one wrote
                assert len(before) - 1 in marked(body), name
    # A child's first request starts with what its parent sent before the fork, up to
    # the fork point.
    parent = [s for _, s in family.of("p")]
    firsts = {n: family.of(n)[0] for n in ("c1", "c2", "c3")}
    forks = {"c1": (parent[1], None), "c2": (parent[2], "marker-p2"), "c3": (parent[2], None)}
    for name, (sent, marker) in forks.items():
        body, child = firsts[name]
        end = len(sent) if marker is None else where(sent, marker) + 1
        assert child[:end] == sent[:end], f"{name}: its prefix is not its parent's"
        if flavour == "anthropic":      # a breakpoint at the fork point: the marker's
            point = end - 1 if marker else end      # item, else the first after `sent`
            assert point in marked(body), f"{name}: no breakpoint at its fork point"
    # After the clear, the parent's context starts again: nothing before it is sent.
    fresh = [s for _, s in family.of("p") if any("marker-p5" in t for _, t in s)][0]
    assert not any("marker-p1" in t for _, t in fresh)
    # The compaction happened: c4's requests start from its summary.
    assert all(any("marker-sum" in t for _, t in s) for _, s in family.of("c4")[1:])
    if flavour == "anthropic":      # at most 4 breakpoints, of the default 5 minutes
        for _, body, sequence in family.sent:
            if any("[COMPACT]" in t for _, t in sequence):
                continue        # the summarising call: a prompt of its own, no hints
            assert 1 <= len(marked(body)) <= 4
            assert '"cache_control": {"type": "ephemeral"}' in json.dumps(body)
            assert '"ttl"' not in json.dumps(body)
    else:
        # A loopback server is no api.openai.com: it is sent no prompt_cache_key.
        assert all("prompt_cache_key" not in body for _, body, _ in family.sent)
