"""agent-top on a small terminal (80x24 and narrower: DOING stays, the other columns
give way), its why view (a long reason wrapped, its fix seen), a held agent (its
colour, counted held), the time of a model call in a resumed turn, and the README's
picture of it (made by docs/pictures.py)."""

import json
import os
import re
import subprocess
import sys
import threading

from agentctl.cli import top as cli_top
from agentctl.ops import top
from agentctl.store.db import transaction

from .conftest import ROOT, agent, events, fork, row, started, wait_until
from .fakeapi import fakeapi  # noqa: F401  (a fixture)
from .test_top import pane, sgr  # noqa: F401  (a fixture, and how a colour is seen)

LONG = "x" * 150        # a failure's text that makes a reason longer than the screen


def held(name, parent="init", failure="gone"):
    """An agent held after a failed turn (its scripted model's file can't be read)."""
    fork("-n", name, "-p", parent, "-m", f"scripted:relative/{failure}.jsonl", "hi")
    assert agent("run", name).code != 0


def cells(name, doing, depth=1):
    return ("ABCDEFGH", "  " * (depth - 1) + "\\_ " + name, "S", "worker", "0", "4m",
            "1.2k/20k", "$0.0030/$0.0190", doing)


def test_the_other_columns_give_way_to_doing_in_the_documented_order():
    rows = [cells("lead", "model call (3s)"), cells("worker-seven", "x" * 80, depth=2)]
    titles = {}
    for width in (150, 120, 90, 79, 70, 60, 50, 40, 30, 20):
        shape = cli_top.layout(rows, width)
        titles[width] = shape.titles().split()
        assert titles[width][-1] == "DOING" and {"NAME", "STAT"} <= set(titles[width])
        lines = [shape.line(c) for c in rows]
        assert lines[0].endswith(" model call (3s)") or width < 30   # whole when it fits
        assert all(len(line) <= max(width, 19) for line in lines), (width, lines)
        doing = lines[1][len(shape.titles()) - len("DOING"):]
        assert doing.endswith("...") and len(doing) >= min(cli_top.DOING_ROOM, width - 14)
    assert titles[150] == [t for t, _, _ in cli_top.COLUMNS] + ["DOING"]
    order = []                  # the columns left out, as the screen narrows
    for width in sorted(titles, reverse=True):
        order += sorted(set(titles[150]) - set(titles[width]) - set(order),
                        key=cli_top.LEFT_OUT.index)
    assert order == list(cli_top.LEFT_OUT) == ["COST", "TOKENS", "ID", "AGE", "ROLE", "MAIL"]
    assert cli_top.layout(rows).doing is None          # a snapshot: nothing cut
    assert cli_top.layout(rows).line(rows[1]).endswith("x" * 80)


def test_at_80x24_doing_is_there_and_cut_only_when_it_must_be(pane, conn):
    fork("-n", "lead")
    fork("-n", "worker-one", "-p", "lead", "do it")
    fork("-n", "w2", "-p", "lead")
    agent("kill", "-s", "STOP", "w2")
    held("fetcher", "lead", failure=LONG)
    screen = pane(width=80, height=24).shows("fetcher", "in flight")
    lines = screen.splitlines()
    assert lines[2].split() == ["ID", "NAME", "STAT", "ROLE", "MAIL", "AGE", "DOING"]
    assert "in flight: 0 model calls" in lines[0]   # (its zero counts left out to fit)
    assert max(map(len, lines)) < 80
    by = {line.split()[2]: line for line in lines[4:8]}
    assert by["worker-one"].endswith(" pending: 1 prompt")           # whole
    assert by["w2"].endswith(" stopped: by STOP...")                 # cut, with ...
    assert re.search(r" held after a failure \d+s\.\.\.$", by["fetcher"])


def test_the_why_view_wraps_a_long_reason_so_its_fix_is_seen(pane, conn):
    held("fetcher", failure=LONG)
    why = agent("why", "fetcher").out.strip()
    assert len(why) > 200 and why.endswith("lets --all)")
    screen = pane(width=80, height=24)
    screen.shows("fetcher")
    screen.keys("End", "w")
    shown = screen.shows("why of fetcher", "lets --all)")
    body = shown.split("q back)", 1)[1]

    def text(lines):
        return "".join(re.sub(r"\d+s ago", "", lines).split())
    assert text(body) == text(why)                       # all of it, over lines
    assert "agent-kill -s CONT fetcher" in " ".join(body.split())
    assert max(map(len, shown.splitlines())) < 80


def test_a_held_agent_is_coloured_and_counted_held_not_sleeping(pane, conn):
    fork("-n", "a")
    held("h")
    held("h2")
    agent("kill", "-s", "STOP", "h2")          # stopped first: counted stopped
    snapshot = agent("top").out.splitlines()
    assert snapshot[0].startswith(
        "agents: 4 live: 0 running, 0 paused, 2 sleeping, 1 held, 1 stopped, 0 zombie;")
    screen = pane()
    screen.shows(" h ", "1 held")
    coloured = screen.screen(colours=True).splitlines()
    line = next(i for i, text in enumerate(screen.screen().splitlines()) if " h " in text)
    assert sgr(coloured[line], "35")                            # magenta, as in dot
    plain = next(i for i, text in enumerate(screen.screen().splitlines()) if " a " in text)
    assert not sgr(coloured[plain], "3[0-7]")


def test_a_resumed_turn_counts_its_model_call_from_the_call_not_the_turn(
        conn, tmp_path, fakeapi, monkeypatch):
    """A turn whose first call was an hour ago (then it failed, and was held) and whose
    next call is now; and a new turn taking a prompt written an hour ago."""
    monkeypatch.setenv("AGENTCTL_HTTP_TIMEOUT", "60")
    monkeypatch.setattr(top, "FULL_EVERY", 1e9)     # what the view sees, it sees by events
    steps = [{"tool_calls": [{"name": "ps", "arguments": {}}]}, {"fail": "error"}]
    rules = tmp_path / "steps.jsonl"
    rules.write_text(json.dumps({"steps": steps}) + "\n")
    fork("-n", "old", "-m", f"scripted:{rules}", "go")
    assert agent("run", "old").code == 69          # a step done, then held: its turn open
    fork("-n", "fresh", "-m", "openai:gpt-test", "go")
    turn = conn.execute("SELECT id FROM turns WHERE status = 'running'").fetchone()[0]
    with transaction(conn):                        # all of it an hour ago
        conn.execute("UPDATE turns SET started_at = started_at - 3600 WHERE id = ?", (turn,))
        conn.execute("UPDATE messages SET created_at = created_at - 3600")
        conn.execute("UPDATE events SET created_at = created_at - 3600")
    assert agent("set", "old", "model=openai:gpt-test").code == 0      # lets it go
    view = top.View(conn)
    hold = threading.Event()
    fakeapi.reply("done", hold=hold)
    fakeapi.reply("done", hold=hold)
    runs = [started("agent-run", name) for name in ("old", "fresh")]
    try:
        wait_until(lambda: len(fakeapi.requests) == 2, "both calls in flight")
        snapshot = agent("top").out
        for name in ("old", "fresh"):
            line = next(text for text in snapshot.splitlines() if f" {name} " in text)
            assert re.search(r" model call \(\d+s\)$", line), line      # not (1h)
        wait_until(lambda: (view.update(), all(
            view.rows[row(conn, n)["id"]]["status"] == "R" for n in ("old", "fresh")))[1],
            "the view to see both running")
        for name in ("old", "fresh"):
            doing = view.doing(view.rows[row(conn, name)["id"]])
            assert re.fullmatch(r"model call \(\d+s\)", doing), doing
    finally:
        hold.set()
        for run in runs:
            run.communicate(timeout=60)
    assert [r.returncode for r in runs] == [0, 0]
    assert [e["turn"] for e in events(conn, "old", "turn-resume")] == [turn]
    assert events(conn, "fresh", "turn-resume") == []


def test_the_readmes_picture_of_agent_top_is_what_it_prints_today():
    """README.md's block is made by docs/pictures.py (make pictures), not by hand: its
    titles are the ones agent-top prints on the same tree, its header of the same form."""
    made = subprocess.run([sys.executable, os.path.join(ROOT, "docs", "pictures.py"),
                           "--print"], capture_output=True, text=True, timeout=300)
    assert made.returncode == 0, made.stderr
    with open(os.path.join(ROOT, "README.md")) as f:
        readme = f.read().split("## Watching a tree\n", 1)[1]
    block = code_block(readme)
    ours = code_block(made.stdout)

    def form(line):
        return re.sub(r"\$[\d.]+|\d+(\.\d+)?k?", "N", line.strip())
    assert [form(line) for line in block[:2]] == [form(line) for line in ours[:2]]
    assert block[3].strip() == ours[3].strip()            # the titles, to the space
    assert [line.split()[1:3] for line in block[4:]] == [line.split()[1:3] for line in ours[4:]]
    assert os.path.exists(os.path.join(ROOT, "docs", "tree.svg"))
    assert "](docs/tree.svg)" in readme


def code_block(text):
    """The lines of the first indented block of a Markdown text, unindented."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("    "))
    block = []
    for line in lines[start:]:
        if line and not line.startswith("    "):
            break
        block.append(line[4:])
    while block and not block[-1]:
        block.pop()
    return block
