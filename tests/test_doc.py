"""agent-doc and the doc_* tools: versions, visibility for agents, the
operator, error paths, and the tools through agent-run's scripted model."""

import json

import pytest

from .conftest import Result, agent, calling, fork, script, shell, tool_results


@pytest.fixture
def tree(monkeypatch):
    """lead -> w1 -> w1a, lead -> w2, and a stranger outside lead's tree."""
    ids = {"lead": fork("-n", "lead"), "stranger": fork("-n", "stranger")}
    for name, parent in (("w1", "lead"), ("w2", "lead"), ("w1a", "w1")):
        ids[name] = fork("-p", parent, "-n", name)
    return ids


def as_(monkeypatch, who):
    if who is None:
        monkeypatch.delenv("AGENT_ID", raising=False)
    else:
        monkeypatch.setenv("AGENT_ID", who)


def test_put_get_ls_log_rm_as_the_operator():
    assert agent("doc", "put", "plans/a", "first").out == "1\n"
    assert agent("doc", "put", "plans/a", "-", stdin="second\n").out == "2\n"
    assert agent("doc", "get", "plans/a").out == "second\n"
    assert agent("doc", "get", "-V", "1", "plans/a").out == "first\n"     # kept, newline added
    agent("doc", "put", "notes", "x")
    result = agent("doc", "ls", "--format", "jsonl")
    rows = [json.loads(line) for line in result.lines]
    assert [(r["name"], r["version"], r["owner"], r["visibility"], r["size"]) for r in rows] == \
        [("notes", 1, None, "private", 1), ("plans/a", 2, None, "private", 7)]
    assert agent("doc", "ls", "-q", "plans/").out == "plans/a\n"
    assert agent("doc", "ls", "-q", "p*s/?").out == "plans/a\n"
    assert agent("doc", "ls", "-q", "plans").out == ""
    assert agent("doc", "rm", "plans/a").code == 0
    result = agent("doc", "get", "plans/a")
    assert (result.code, result.err) == (1, "agent-doc: no such document: plans/a\n")
    assert agent("doc", "ls", "-q").out == "notes\n"
    log = agent("doc", "log", "--format", "tsv", "-o", "version,size,removed", "plans/a")
    assert log.out == "version\tsize\tremoved\n1\t5\tfalse\n2\t7\tfalse\n3\t\ttrue\n"
    assert agent("doc", "get", "-V", "2", "plans/a").out == "second\n"
    result = agent("doc", "get", "-V", "3", "plans/a")
    assert (result.code, result.err) == (1, "agent-doc: plans/a: version 3 removed it\n")
    # a removed name is free again; its numbering goes on
    assert agent("doc", "put", "plans/a", "reborn").out == "4\n"
    assert agent("doc", "log", "-q", "plans/a").out == "1\n2\n3\n4\n"


def test_body_from_stdin_and_its_rules():
    assert shell("printf '# Plan\\n\\n- one\\n' | agent-doc put plan && agent-doc get plan").out \
        == "1\n# Plan\n\n- one\n"
    result = shell("agent-doc put plan; echo rc=$?")                     # stdin: /dev/null
    assert result.out == "rc=2\n"
    assert result.err == "agent-doc: missing TEXT (give it, or - to read it from stdin)\n"
    assert agent("doc", "put", "plan", "  \n").code == 2
    big = "x" * (1024 * 1024 + 1)
    result = agent("doc", "put", "plan", "-", stdin=big)
    assert (result.code, result.err) == (
        2, "agent-doc: body too long: 1048577 bytes (at most 1048576)\n")
    assert agent("doc", "put", "plan", "-", stdin=big[:-1]).out == "2\n"
    assert agent("doc", "log", "-q", "plan").out == "1\n2\n"               # nothing half-written


@pytest.mark.parametrize("name", ["", "-rf", "a\nb", "tab\there", "x" * 256, "\udcff\udcfe",
                                  "no\u00a0break"])
def test_bad_names_are_usage_errors(name):
    result = agent("doc", "put", "--", name, "body")      # -- so -rf reaches the check
    assert result.code == 2 and result.err.startswith("agent-doc: bad document name: ")
    assert agent("doc", "get", "--", name).code == 2
    assert agent("doc", "ls", "-q").out == ""


def test_names_that_are_not_utf8_are_refused_not_merged():
    """Undecodable bytes become U+FFFD: two different names would be one."""
    result = shell("agent-doc put $'\\xff\\xfe' y; echo $?; agent-doc get $'\\xfe\\xff'; echo $?")
    assert result.out.split() == ["2", "2"], result
    assert result.err.count("not valid UTF-8") == 2


def test_patterns_empty_and_too_long(conn, tmp_path):
    agent("doc", "put", "-v", "global", "a", "x")
    assert agent("doc", "ls", "-q", "") == Result(0, "", "")  # a glob that matches no name
    assert agent("doc", "ls", "-q", "*").out == "a\n"
    result = agent("doc", "ls", "*" * 1025)
    assert (result.code, result.err) == (2, "agent-doc: pattern too long: 1025 characters "
                                            "(at most 1024)\n")
    calls = [{"name": "doc_ls", "arguments": {"pattern": "*" * 50001}}]
    w = fork("-n", "w", "-m", script(tmp_path, {"steps": [{"tool_calls": calls},
                                                      {"content": "ok"}]}), "go")
    assert agent("run", "w").out == "ok\n"                  # an error result, not exit 74
    assert tool_results(conn, w) == ["error: pattern too long: 50001 characters (at most 1024)"]


def test_bad_options_and_unknown_documents():
    agent("doc", "put", "a", "x")
    assert agent("doc", "put", "x" * 255, "fine").code == 0
    for args in (["get", "-V", "0", "a"], ["get", "-V", "one", "a"], ["put", "-v", "public", "a", "y"],
                 ["ls", "--format", "xml"], ["ls", "-o", "nope"], ["frobnicate"], []):
        result = agent("doc", *args)
        assert result.code == 2, args
        assert result.err.count("\n") == 1 and "Traceback" not in result.err
    result = agent("doc", "get", "-V", "9", "a")
    assert (result.code, result.err) == (1, "agent-doc: no such document: a version 9\n")
    assert agent("doc", "get", "nope").code == 1
    assert agent("doc", "log", "nope").code == 1
    result = agent("doc", "rm", "nope", "a")
    assert (result.code, result.err) == (1, "agent-doc: no such document: nope\n")
    assert agent("doc", "get", "a").code == 1           # the other name was still removed


def test_if_version_is_compare_and_swap():
    result = agent("doc", "put", "--if-version", "1", "a", "x")
    assert (result.code, result.err) == (3, "agent-doc: a: is at version 0, not 1\n")
    assert agent("doc", "put", "--if-version", "0", "a", "x").out == "1\n"
    assert agent("doc", "put", "--if-version", "0", "a", "y").code == 3
    assert agent("doc", "put", "--if-version", "1", "a", "y").out == "2\n"
    assert agent("doc", "get", "a").out == "y\n"


def test_private_is_the_owner_only(tree, monkeypatch):
    as_(monkeypatch, "w1")
    assert agent("doc", "put", "mine", "secret").out == "1\n"
    assert agent("doc", "get", "mine").out == "secret\n"
    for other in ("lead", "w1a", "w2", "stranger"):
        as_(monkeypatch, other)
        result = agent("doc", "get", "mine")
        assert (result.code, result.err) == (1, "agent-doc: no such document: mine\n"), other
        assert agent("doc", "log", "mine").code == 1
        assert agent("doc", "ls", "-q").out == ""
        assert agent("doc", "rm", "mine").code == 1
        result = agent("doc", "put", "mine", "overwrite?")
        assert (result.code, result.err) == (
            3, "agent-doc: mine: the name is taken by a document you can't see\n")
    as_(monkeypatch, None)                                     # the operator sees all
    assert agent("doc", "get", "mine").out == "secret\n"
    row = json.loads(agent("doc", "ls", "--format", "json").out)[0]
    assert (row["owner"], row["visibility"], row["version"]) == (tree["w1"], "private", 1)


def test_subtree_is_the_owner_and_its_descendants(tree, monkeypatch):
    as_(monkeypatch, "w1")
    agent("doc", "put", "-v", "subtree", "plan", "step 1")
    as_(monkeypatch, "w1a")                                    # a descendant reads and writes
    assert agent("doc", "get", "plan").out == "step 1\n"
    assert agent("doc", "put", "plan", "step 1\nstep 2").out == "2\n"
    for other in ("lead", "w2", "stranger"):                   # parent, sibling, stranger
        as_(monkeypatch, other)
        assert agent("doc", "get", "plan").code == 1, other
        assert agent("doc", "ls", "-q").out == "", other
    as_(monkeypatch, None)
    result = agent("doc", "log", "--format", "jsonl", "-o", "version,author,owner", "plan")
    assert [json.loads(line) for line in result.lines] == [
        {"version": 1, "author": tree["w1"], "owner": tree["w1"]},
        {"version": 2, "author": tree["w1a"], "owner": tree["w1"]}]


def test_only_the_owner_may_remove_or_change_visibility(tree, monkeypatch):
    as_(monkeypatch, "lead")
    agent("doc", "put", "-v", "subtree", "plan", "v1")
    as_(monkeypatch, "w1")
    result = agent("doc", "rm", "plan")
    assert (result.code, result.err) == (3, "agent-doc: plan: only its owner may remove it\n")
    result = agent("doc", "put", "-v", "global", "plan", "v2")
    assert (result.code, result.err) == (
        3, "agent-doc: plan: only its owner may change its visibility\n")
    assert agent("doc", "put", "-v", "subtree", "plan", "v2").out == "2\n"   # the same one
    as_(monkeypatch, "lead")
    assert agent("doc", "put", "-v", "global", "plan", "v3").out == "3\n"
    as_(monkeypatch, "stranger")
    assert agent("doc", "get", "plan").out == "v3\n"
    assert agent("doc", "get", "-V", "1", "plan").out == "v1\n"      # the change covers history
    as_(monkeypatch, None)                                     # the operator may do anything
    assert agent("doc", "put", "-v", "private", "plan", "v4").out == "4\n"
    as_(monkeypatch, "lead")                                   # still the owner
    assert agent("doc", "get", "plan").out == "v4\n"
    assert agent("doc", "rm", "plan").code == 0


def test_operator_documents_are_private_or_everyones(tree, monkeypatch):
    agent("doc", "put", "ops/secret", "s")
    agent("doc", "put", "-v", "subtree", "ops/team", "t")
    agent("doc", "put", "-v", "global", "ops/all", "a")
    as_(monkeypatch, "w1a")
    assert agent("doc", "ls", "-q").out == "ops/all\nops/team\n"
    assert agent("doc", "get", "ops/secret").code == 1
    assert agent("doc", "put", "ops/team", "t2").out == "2\n"
    assert agent("doc", "rm", "ops/team").code == 3


def test_a_name_created_again_hides_its_earlier_generation(tree, monkeypatch):
    as_(monkeypatch, "w1")
    agent("doc", "put", "scratch", "w1's private notes")
    agent("doc", "rm", "scratch")
    as_(monkeypatch, "stranger")
    assert agent("doc", "put", "-v", "global", "scratch", "mine now").out == "3\n"
    as_(monkeypatch, "w2")
    assert agent("doc", "get", "scratch").out == "mine now\n"
    assert agent("doc", "log", "-q", "scratch").out == "3\n"
    assert agent("doc", "get", "-V", "1", "scratch").code == 1
    as_(monkeypatch, "w1")                                     # its own generation stays its own
    assert agent("doc", "get", "-V", "1", "scratch").out == "w1's private notes\n"
    assert agent("doc", "log", "-q", "scratch").out == "1\n2\n3\n"


def test_an_unknown_agent_id_is_exit_1(monkeypatch):
    fork("-n", "someone")
    monkeypatch.setenv("AGENT_ID", "ghost")
    result = agent("doc", "ls")
    assert (result.code, result.err) == (1, "agent-doc: AGENT_ID=ghost: no such agent\n")


def test_the_tools_through_agent_run(conn, tmp_path):
    lead_model = script(tmp_path, calling([
        ("doc_put", {"name": "plans/survey", "body": "# Survey\n- WAL", "visibility": "subtree"}),
        ("doc_put", {"name": "lead/private", "body": "mine"})]), name="lead.jsonl")
    lead = fork("-n", "lead", "-m", lead_model, "plan it")
    child = fork("-p", "lead", "-n", "w1", "-m", script(tmp_path, calling([
        ("doc_ls", {}), ("doc_get", {"name": "plans/survey"}),
        ("doc_put", {"name": "plans/survey", "body": "# Survey\n- WAL\n- w1: done"}),
        ("doc_get", {"name": "plans/survey", "version": 1}),
        ("doc_get", {"name": "lead/private"}), ("doc_rm", {"name": "plans/survey"}),
        ("doc_get", {"name": "plans/survey", "version": 1.5})]), name="w1.jsonl"), "read it")
    stranger = fork("-n", "stranger", "-m", script(tmp_path, calling([
        ("doc_ls", {}), ("doc_get", {"name": "plans/survey"}),
        ("doc_put", {"name": "plans/survey", "body": "hijack"}),
        ("doc_put", {"name": "mine", "body": "x", "visibility": "world"})]), name="s.jsonl"),
                     "snoop")
    assert agent("run", "lead").code == 0
    assert tool_results(conn, lead) == ["plans/survey: version 1", "lead/private: version 1"]
    assert agent("run", "w1").code == 0
    assert tool_results(conn, child) == [
        f"\"plans/survey\" version 1 subtree owner lead ({lead}) 14 bytes",
        f"[DOCUMENT \"plans/survey\" version 1 by lead ({lead}), subtree]\n# Survey\n- WAL",
        "plans/survey: version 2",
        f"[DOCUMENT \"plans/survey\" version 1 by lead ({lead}), subtree]\n# Survey\n- WAL",
        "error: no such document: lead/private",
        "error: plans/survey: only its owner may remove it",
        "error: version must be an integer"]
    assert agent("run", "stranger").code == 0
    assert tool_results(conn, stranger) == [
        "no documents", "error: no such document: plans/survey",
        "error: plans/survey: the name is taken by a document you can't see",
        "error: visibility must be one of private, subtree, global"]
    # what the tools wrote is what the program reads: one implementation
    assert agent("doc", "get", "plans/survey").out == "# Survey\n- WAL\n- w1: done\n"
    log = agent("doc", "log", "--format", "tsv", "--no-headers", "-o", "version,author",
                "plans/survey")
    assert log.out == f"1\t{lead}\n2\t{child}\n"



def test_a_model_reads_whose_a_document_is_by_id_not_only_name(conn, tmp_path, monkeypatch):
    """A name is free again once its agent is reaped: the header names the id too."""
    assert agent("doc", "put", "-v", "global", "rules", "v1").code == 0      # the operator
    first = fork("-n", "lead")
    as_(monkeypatch, first)
    assert agent("doc", "put", "-v", "global", "plan", "build X").code == 0
    as_(monkeypatch, None)
    agent("kill", "lead")
    agent("wait", "lead")
    again = fork("-n", "lead")
    step = calling([("doc_get", {"name": "plan"}), ("doc_get", {"name": "rules"}),
                    ("doc_ls", {})])
    reader = fork("-n", "reader", "-m", script(tmp_path, step, name="r.jsonl"), "read")
    assert agent("run", "reader").code == 0
    assert tool_results(conn, reader) == [
        f"[DOCUMENT \"plan\" version 1 by lead ({first}), global]\nbuild X",
        "[DOCUMENT \"rules\" version 1 by the operator, global]\nv1",
        f"\"plan\" version 1 global owner lead ({first}) 7 bytes\n"
        "\"rules\" version 1 global owner the operator 2 bytes"]
    assert again != first

def test_pipelines_from_the_man_page():
    script = """
    set -e
    printf '# plan\\n' | AGENT_ID=lead agent-doc put -v subtree plans/survey >/dev/null
    AGENT_ID=lead agent-doc get plans/survey | AGENT_ID=lead agent-doc put -v global plans/survey
    AGENT_ID=stranger agent-doc get plans/survey
    for w in 1 2 3; do agent-doc put "findings/w$w" "w$w found it" >/dev/null; done
    agent-doc put 'findings/with space' x >/dev/null
    agent-doc ls -0 findings/ | xargs -0 agent-doc rm
    agent-doc ls -q
    """
    fork("-n", "lead")
    fork("-n", "stranger")
    result = shell(script)
    assert (result.code, result.err) == (0, "")
    assert result.out == "2\n# plan\nplans/survey\n"


def test_concurrent_compare_and_swap_lets_exactly_one_writer_win():
    agent("doc", "put", "counter", "0")
    result = shell("for i in 1 2 3 4 5 6; do "
                   "(agent-doc put --if-version 1 counter $i >/dev/null 2>&1; echo rc=$?) & "
                   "done; wait")
    assert sorted(result.out.split()) == ["rc=0"] + ["rc=3"] * 5
    assert agent("doc", "log", "-q", "counter").out == "1\n2\n"


def test_bash_completes_document_names_the_actor_can_see():
    from .conftest import ROOT
    agent("doc", "put", "plans/a", "x")
    agent("doc", "put", "plans/b", "x")
    agent("doc", "put", "notes", "x")
    fork("-n", "w")

    def complete(*words, env=None):
        line = " ".join(["agent-doc", *words])
        script = (f"source {ROOT}/completions/bash/agent-doc; COMP_WORDS=({line}); "
                  f"COMP_CWORD={len(words)}; _agent_doc_completion agent-doc; "
                  "printf '%s\\n' \"${COMPREPLY[@]}\"")
        return shell(script, env=env).out.split()
    assert complete("get", "pl") == ["plans/a", "plans/b"]
    assert complete("rm", "n") == ["notes"]
    assert complete("get", "pl", env={"AGENT_ID": "w"}) == []     # private to the operator
