"""agent-ps: columns, the tree, formats, filters."""

import json
import re
import time

from agentctl.store.db import transaction

from .conftest import agent, fork, needs, shell


def setup_tree():
    lead = fork("-n", "lead", "-r", "lead", "plan")
    w1 = fork("-p", "lead", "-n", "w1", "-r", "worker", "job")
    w2 = fork("-p", "w1", "-n", "w2", "-r", "worker")
    return lead, w1, w2


def test_table_lists_the_living_with_default_columns():
    setup_tree()
    lines = agent("ps").lines
    assert lines[0].split() == ["ID", "NAME", "PARENT", "STAT", "ROLE", "MSGS", "MAIL", "AGE"]
    assert [line.split()[1:6] for line in lines[1:]] == [
        ["init", "-", "S", "kernel", "0"],
        ["lead", "init", "S", "lead", "1"],
        ["w1", "lead", "S", "worker", "1"],
        ["w2", "w1", "S", "worker", "0"]]


def test_forest_indents_by_depth():
    setup_tree()
    names = [re.match(r"\S+  ( *(?:\\_ )?\S+)", line).group(1)
             for line in agent("ps", "-f").lines[1:]]
    assert names == ["init", "\\_ lead", "    \\_ w1", "        \\_ w2"]


def test_all_includes_the_dead():
    lead, w1, w2 = setup_tree()
    agent("kill", "--cascade", "w1")
    agent("wait", "w1")
    assert agent("ps", "-q").lines[1:] == [lead]
    assert agent("ps", "-a", "-q").lines[1:] == [lead, w1, w2]


def test_machine_formats():
    lead, w1, w2 = setup_tree()
    rows = json.loads(agent("ps", "--format", "json", "--role", "worker").out)
    assert [r["id"] for r in rows] == [w1, w2]
    assert set(rows[0]) == {"id", "name", "parent", "stat", "role", "msgs", "mail", "age"}
    assert rows[0]["parent"] == lead and rows[0]["msgs"] == 1
    lines = agent("ps", "--format", "jsonl", "--parent", "lead").lines
    assert [json.loads(line)["id"] for line in lines] == [w1]
    tsv = agent("ps", "--format", "tsv", "-o", "id,name,stat").lines
    assert tsv[0] == "id\tname\tstat" and tsv[-1] == f"{w2}\tw2\tS"
    assert agent("ps", "--format", "tsv", "--no-headers", "-o", "name").lines[-1] == "w2"
    assert agent("ps", "-q", "--role", "worker").out == f"{w1}\n{w2}\n"
    assert agent("ps", "-0", "--role", "worker").out == f"{w1}\0{w2}\0"
    tree = json.loads(agent("ps", "-f", "--format", "json", "-o", "name").out)
    assert tree == [{"name": "init", "depth": 0}, {"name": "lead", "depth": 1},
                    {"name": "w1", "depth": 2}, {"name": "w2", "depth": 3}]


def test_filters_and_errors():
    setup_tree()
    agent("kill", "-s", "STOP", "w2")
    assert [line.split()[1] for line in agent("ps", "--status", "T").lines[1:]] == ["w2"]
    assert agent("ps", "--status", "Q").err == "agent-ps: unknown status: Q (R, S, T, P, Z or X)\n"
    result = agent("ps", "-o", "id,bogus")
    assert result.code == 2 and result.err.startswith("agent-ps: unknown column: bogus (one of id,")
    assert agent("ps", "--format", "xml").code == 2
    assert agent("ps", "--parent", "nobody").code == 1


def test_an_agent_whose_run_died_shows_sleeping(conn):
    """kill -9 of agent-run leaves status R in the table; a dead run holds nothing."""
    fork("-n", "a")
    fork("-n", "b")
    conn.execute("UPDATE agents SET status = 'R', lease_owner = 'nohost:1', lease_until = ? "
                 "WHERE name = 'a'", (time.time() - 1,))
    conn.execute("UPDATE agents SET status = 'R', lease_owner = 'elsewhere:1', lease_until = ? "
                 "WHERE name = 'b'", (time.time() + 300,))
    conn.commit()
    rows = json.loads(agent("ps", "--format", "json", "-o", "name,stat").out)
    assert rows[1:] == [{"name": "a", "stat": "S"}, {"name": "b", "stat": "R"}]
    assert agent("ps", "--status", "S", "-o", "name", "--format", "tsv",
                 "--no-headers").out == "init\na\n"
    assert agent("ps", "--status", "R", "-o", "name", "--format", "tsv",
                 "--no-headers").out == "b\n"


def test_an_agent_stopped_while_its_run_died_shows_stopped(conn):
    fork("-n", "a")
    conn.execute("UPDATE agents SET status = 'R', pending_signal = 'STOP', "
                 "lease_owner = 'nohost:1', lease_until = ? WHERE name = 'a'", (time.time() - 1,))
    conn.commit()
    assert agent("ps", "--status", "T", "-o", "name,stat", "--format", "tsv",
                 "--no-headers").out == "a\tT\n"


def test_dot_draws_a_held_agent_as_held_in_agent_tops_colour(conn):
    """A held agent is SH in the picture, in the colour agent-top gives it (one table:
    ops.proctable.COLOURS), and the legend names it."""
    from agentctl.cli import graph
    from agentctl.ops import proctable
    kid = fork("-n", "kid")
    with transaction(conn):
        conn.execute("UPDATE agents SET held_at = 1 WHERE id = ?", (kid,))
    text = agent("ps", "--format", "dot").out
    assert f'"{kid}" [label="kid\\nSH agent", fillcolor="plum"];' in text, text
    assert '"legend H" [label="H held (a failure, a mail loop)", fillcolor="plum"' in text
    assert proctable.COLOURS["H"] == "magenta" and graph.FILLS["magenta"] == "plum"
    assert set(proctable.COLOURS) <= set(proctable.STATES)
    assert set(proctable.COLOURS.values()) <= set(graph.FILLS)


def test_dot_is_a_picture_that_graphviz_draws(tmp_path):
    """agent-ps -a --format dot | dot -Tsvg: a node per agent (name, STAT, role), fork
    edges, a reparented agent's lifecycle parent, and mail edges with their counts,
    each told apart; a real dot reads it and draws every node and edge."""
    import subprocess
    import xml.etree.ElementTree as ET
    dot = needs("dot", "graphviz")
    lead = fork("-n", "lead")
    w1 = fork("-p", "lead", "-n", "w1")
    mid = fork("-p", "lead", "-n", "mid")
    orphan = fork("-p", "mid", "-n", "orphan")
    assert agent("kill", "-s", "KILL", "mid").code == 0           # orphan goes to lead
    for _ in range(2):
        assert shell(f"AGENT_ID={w1} agent-send lead 'a \"quoted\" question'").code == 0
    result = agent("ps", "-a", "--format", "dot")
    assert result.code == 0, result.err
    text = result.out
    assert text.startswith("digraph agents {\n") and text.endswith("}\n")
    assert f'"{lead}" [label="lead\\nS agent", fillcolor="white"];' in text
    assert f'"{mid}" -> "{orphan}" [class=fork];' in text
    assert f'"{lead}" -> "{orphan}" [class=parent, style=dotted' in text
    assert f'"{w1}" -> "{lead}" [class=mail, style=dashed, color=blue, fontcolor=blue, ' \
        'constraint=false, label="2"];' in text
    assert f'"{mid}" -> "{lead}" [class=mail' not in text         # its exit notice: no
    assert '"legend S" [label="S sleeping", fillcolor="white", class=legend];' in text
    assert '"legend Z" [label="Z zombie", fillcolor="lightblue", class=legend];' in text
    assert '"legend R"' not in text                                # none running
    svg = subprocess.run([dot, "-Tsvg"], input=text, capture_output=True, text=True)
    assert svg.returncode == 0 and svg.stderr == "", svg.stderr
    ns = {"svg": "http://www.w3.org/2000/svg"}
    groups = ET.fromstring(svg.stdout).findall(".//svg:g", ns)
    kinds = [g.get("class") for g in groups]
    assert kinds.count("node") == 5                        # init, lead, w1, mid, orphan
    assert kinds.count("node legend") == 2                 # S and Z
    assert kinds.count("edge fork") == 4
    assert kinds.count("edge parent") == 1 and kinds.count("edge mail") == 1
    refused = agent("ps", "--format", "dot", "-q")
    assert (refused.code, refused.err) == (2, "agent-ps: --format dot takes no -o, -q, -0 or "
                                              "--no-headers\n")
