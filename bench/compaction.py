"""make bench: the tokens a 50-turn scripted conversation sends per turn, with
and without compaction (a 2,000-token window against none). Prints a table."""

import json
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from agentctl.store import db, registry
from agentctl.ops import lifecycle
from agentctl.ops import mail
from agentctl.turn import runner  # noqa: E402
from agentctl.store.db import transaction  # noqa: E402
from agentctl.ids import INIT_ID  # noqa: E402
from agentctl.models import offline  # noqa: E402
from agentctl.models.base import estimate_tokens, message_chars  # noqa: E402

TURNS, WINDOW = 50, 2000
ANSWER = "An answer that is long enough to fill the context quickly. " * 7
QUESTION = "why is the sky blue? " * 8


def conversation(tmp, window):
    """[(turn, tokens of the step's call, tokens of a summary call or 0)]"""
    rules = os.path.join(tmp, f"rules-{window}.jsonl")
    with open(rules, "w") as f:
        f.write(json.dumps({"match": r"^\[COMPACT\]", "reply": {"content": "Summary."}}) + "\n")
        f.write(json.dumps({"reply": {"content": ANSWER}}) + "\n")
    sent = []
    real = offline.ScriptedModel.complete

    def spy(self, messages, tools, on_text=None, cache=None):
        summary = offline.latest_user_text(messages).startswith("[COMPACT]")
        sent.append(("summary" if summary else "step", estimate_tokens(message_chars(messages))))
        return real(self, messages, tools, on_text, cache)
    offline.ScriptedModel.complete = spy
    conn = db.connect(os.path.join(tmp, f"{window}.db"))
    with transaction(conn):
        a = lifecycle.fork(conn, registry.get(conn, INIT_ID), name="a", model=f"scripted:{rules}",
                          system="Answer briefly.", context_window=window)
    rows = []
    for n in range(1, TURNS + 1):
        with transaction(conn):
            mail.deliver(conn, None, registry.get(conn, a), f"Question {n}: {QUESTION}")
        del sent[:]
        runner.run(conn, a)
        rows.append((n, sum(t for k, t in sent if k == "step"),
                     sum(t for k, t in sent if k == "summary")))
    offline.ScriptedModel.complete = real
    return rows


def main():
    with tempfile.TemporaryDirectory() as tmp:
        without = conversation(tmp, 10 ** 9)
        with_ = conversation(tmp, WINDOW)
    print(f"tokens sent per turn, {TURNS} scripted turns (estimated from the request text):")
    print(f"{'turn':>5} {'no compaction':>14} {'window 2000':>12} {'+ summary call':>15}")
    for (n, plain, _), (_, step, summary) in zip(without, with_):
        if n in (1, 2, 5, 10, 15, 20, 25, 30, 35, 40, 45, 50) or summary:
            print(f"{n:>5} {plain:>14} {step:>12} {summary or '':>15}")
    total_plain = sum(r[1] for r in without)
    total_with = sum(r[1] + r[2] for r in with_)
    print(f"total {total_plain:>14} {total_with:>12}  (summaries included); "
          f"max per step {max(r[1] for r in without)} vs {max(r[1] for r in with_)}")


if __name__ == "__main__":
    main()
