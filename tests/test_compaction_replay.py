"""Compaction after compaction, the agent's own and inherited ones: replay is the newest
summary, then exactly the messages of the line from its keep_from on, checked through the
programs against a brute-force reading of the whole record (agent-replay --full)."""

import json
import random

import pytest

from agentctl.models import offline

from .conftest import agent, script, scripted_calls

SUMMARY = "SUMMARY"
HIDDEN = ("clear", "event")


@pytest.fixture
def summaries(monkeypatch):
    """The transcript each summarising call was sent."""
    def transcript(messages):
        text = offline.latest_user_text(messages)
        return text if text.startswith("[COMPACT]") else None
    return scripted_calls(monkeypatch, transcript)


def rules(tmp_path):
    """A reply to "big" that the API measured at twice the window: the next call compacts."""
    return script(tmp_path, {"match": r"^\[COMPACT\]", "reply": {"content": SUMMARY}},
                  {"match": "big", "reply": {"content": "ok big", "usage": {
                      "input_tokens": 2000, "output_tokens": 5}}},
                  {"reply": {"content": "ok"}})


def records(ref, *args):
    result = agent("replay", "--format", "jsonl", ref, *args)
    assert result.code == 0, result.err
    return [json.loads(line) for line in result.lines]


def expected(full):
    """The rule, by brute force over the record of the agent's line: the newest clear or
    compaction that is not void bounds the context. After a clear, what follows it; a
    compaction comes first, then every message of the line from its keep_from on (from
    itself when it keeps nothing), void, hidden and older summaries left out."""
    line = [r for r in full if r["id"] is not None and not r["void"]]
    bounds = [r for r in line if r["kind"] in ("clear", "compaction")]
    head, start = [], 0
    if bounds and bounds[-1]["kind"] == "clear":
        start = bounds[-1]["id"] + 1
    elif bounds:
        head, start = [bounds[-1]["id"]], bounds[-1]["keep_from"] or bounds[-1]["id"]
    return head + [r["id"] for r in line if r["id"] >= start
                   and r["kind"] not in HIDDEN + ("compaction",)]


def check(ref):
    got = [r["id"] for r in records(ref) if r["id"] is not None]
    assert got == expected(records(ref, "--full")), ref
    return records(ref)


def converse(ref, *prompts):
    for prompt in prompts:
        assert agent("send", ref, prompt).code == 0
        result = agent("run", ref)
        assert result.code == 0, result.err


def test_a_second_compaction_leaves_one_summary_first(tmp_path, summaries):
    assert agent("fork", "-n", "a", "-m", rules(tmp_path), "-w", "1000", "big 1").code == 0
    assert agent("run", "a").code == 0
    converse("a", "x 2", "big 3", "x 4", "x 5", "x 6")
    context = check("a")
    compactions = [r for r in records("a", "--full") if r["kind"] == "compaction"]
    assert len(compactions) == 2, "one per measured big reply, not one every turn after"
    first, second = compactions
    assert context[0]["id"] == second["id"]
    assert second["keep_from"] >= first["keep_from"]
    assert all(r["kind"] != "compaction" for r in context[1:])
    ids = [r["id"] for r in context[1:]]
    assert ids == sorted(set(ids)) and ids[0] == second["keep_from"]
    # The newest summary was written from a transcript that began with the older one.
    assert len(summaries) == 2 and f"#{first['id']} compaction" in summaries[1]


def test_a_child_compacts_after_its_parent_did(tmp_path):
    assert agent("fork", "-n", "p", "-m", rules(tmp_path), "-w", "1000", "big 1").code == 0
    assert agent("run", "p").code == 0
    converse("p", "x 2")
    inherited = records("p")[0]
    assert inherited["kind"] == "compaction"
    assert agent("fork", "-p", "p", "-n", "c", "big 3").code == 0
    assert agent("run", "c").code == 0
    converse("c", "x 4", "x 5")
    context = check("c")
    head = context[0]
    assert head["kind"] == "compaction" and head["id"] != inherited["id"]
    assert head["keep_from"] < inherited["id"], "it keeps messages from before the old summary"
    ids = [r["id"] for r in context[1:]]
    assert ids[0] == head["keep_from"] and inherited["id"] not in ids
    assert ids == sorted(set(ids))
    check("p")


@pytest.mark.parametrize("seed", range(4))
def test_replay_follows_the_rule_over_many_turns_and_forks(tmp_path, seed):
    """Random turns of random sizes, forks and clears; after each, every agent's replay
    is what the rule says of its record."""
    rng = random.Random(seed)
    model = rules(tmp_path)
    assert agent("fork", "-n", "a0", "-m", model, "-w", "1000", "big 0").code == 0
    assert agent("run", "a0").code == 0
    names = ["a0"]
    for step in range(1, 40):
        ref = rng.choice(names)
        roll = rng.random()
        if roll < 0.12 and len(names) < 5:
            names.append(f"a{step}")
            assert agent("fork", "-p", ref, "-n", names[-1]).code == 0
        elif roll < 0.16:
            assert agent("kill", "-s", "HUP", ref).code == 0
        else:
            before = records(ref)
            word = "big" if rng.random() < 0.3 else "x"
            converse(ref, f"{word} {step} " + "pad " * rng.randrange(0, 120))
            after = records(ref)
            if after[0]["kind"] == "compaction" and before and before[0]["kind"] == "compaction" \
                    and after[0]["id"] != before[0]["id"]:
                assert after[0]["keep_from"] > before[0]["keep_from"]
        for name in names:
            check(name)
