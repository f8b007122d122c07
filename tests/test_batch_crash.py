"""Turns at batch prices killed (kill -9) at every commit of sending a step's model call
to a provider's batch and of taking its result: neither loses nor doubles the call's
effect (agentctl(7), TIERS). SQLite's pass alone: what is tested is where a run dies,
which the backend does not change (test_batch.py runs the states on both)."""

import os
import subprocess
import sys

import pytest

from .conftest import ROOT, agent, fork, row, started
from .fakeapi import fakeapi  # noqa: F401 (a fixture)
from .test_batch import batching, replies, requests  # noqa: F401 (a fixture)

WRAPPER = os.path.join(ROOT, "tests", "crash_wrapper.py")


def sent_for(api, conn, name):
    """The batches the fake made that hold a request of the agent `name`."""
    mine = {r[0] for r in conn.execute("SELECT id FROM batched WHERE agent_id = ?",
                                       (row(conn, name)["id"],))}
    return [b for b in api.batches.made if mine & set(b.custom_ids)]


def wrapped(point, n, *args):
    return subprocess.run([sys.executable, WRAPPER, point, str(n), *args], cwd=ROOT,
                          capture_output=True, text=True, stdin=subprocess.DEVNULL,
                          timeout=120)


@pytest.mark.parametrize("model, point", [("openai:gpt-test", "before"),
                                          ("openai:gpt-test", "after"),
                                          ("anthropic:claude-test", "before")])
def test_kill_9_at_every_commit_of_sending_and_collecting(batching, conn, model, point):
    """agent-run killed at its Nth commit, for every N, while it sends the step's call and
    while it takes the result: the turn ends with the reply written once, whatever the
    provider (Anthropic's batches carry no mark: a call sent again is a batch more)."""
    for phase in ("send", "collect"):
        n = 0
        while True:
            n += 1
            name = f"{phase}{point}{n}"
            fork("-n", name, "-m", model, "--tier", "batch", "hello")
            batching.reply(f"reply of {name}")
            if phase == "collect":
                assert agent("run", name).code == 0
                (made,) = sent_for(batching, conn, name)
                batching.batches.finish(made.id)    # (not a batch a dead run left behind)
            crashed = wrapped(point, n, name)
            batching.batches.auto = True
            for _ in range(3):      # recover, send, poll; then the turn takes the result
                if replies(conn, name):
                    break
                agent("run", "--all")
            batching.batches.auto = False
            assert replies(conn, name) == [f"reply of {name}"], (phase, point, n, crashed.stderr)
            assert [r[0] for r in requests(conn, name)].count("applied") == 1
            sent = sent_for(batching, conn, name)
            if model.startswith("openai"):
                assert len(sent) == 1, (phase, point, n)    # found by its mark
            if crashed.returncode == 0:     # no Nth commit: every boundary was crossed
                break


def test_crash_between_the_batch_made_and_recorded_is_found_by_its_mark(batching, conn):
    """The batch is made and the connection dies before its answer: agent-run is killed
    there; the next run finds the batch by the mark in its metadata (OpenAI)."""
    fork("-n", "a", "-m", "openai:gpt-test", "--tier", "batch", "hello")
    batching.reply("found")
    runs = []
    batching.batches.drop_create(1, before=lambda batch: runs[0].kill())
    run = started("agent-run", "a")
    runs.append(run)
    run.communicate(timeout=120)
    assert requests(conn, "a") == [("sending", None)]
    assert agent("run", "--all").code == 1
    (made,) = batching.batches.made
    assert requests(conn, "a") == [("sent", None)] and batching.batches.calls["list"] >= 1
    batching.batches.finish()
    assert agent("run", "--all").code == 0
    assert replies(conn, "a") == ["found"] and len(batching.batches.made) == 1
