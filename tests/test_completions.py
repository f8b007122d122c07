"""Shell completion: the checked-in scripts are fresh, and bash really
offers agent names, signals and roles."""

import os
import subprocess

import pytest

from .conftest import ROOT, fork, shell


def test_checked_in_completions_are_fresh(tmp_path):
    copy = tmp_path / "tree"
    subprocess.run(["cp", "-r", os.path.join(ROOT, "completions"), str(copy)], check=True)
    before = {p: open(os.path.join(copy, p)).read()
              for p in (os.path.join(d, f) for d in ("bash", "zsh", "fish")
                        for f in os.listdir(os.path.join(copy, d)))}
    result = subprocess.run([os.path.join(ROOT, "completions", "generate")], cwd=ROOT,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    for path, text in before.items():
        assert open(os.path.join(ROOT, "completions", path)).read() == text, \
            f"completions/{path} is stale: run completions/generate"
    for d in ("bash", "zsh", "fish"):
        assert len(os.listdir(os.path.join(ROOT, "completions", d))) == 9


def complete(program, *words):
    function = "_" + program.replace("-", "_") + "_completion"
    line = " ".join([program, *words])
    script = (f"source {ROOT}/completions/bash/{program}; COMP_WORDS=({line}); "
              f"COMP_CWORD={len(words)}; {function} {program}; printf '%s\\n' \"${{COMPREPLY[@]}}\"")
    result = shell(script)
    assert result.code == 0, result.err
    return result.out.split()


@pytest.mark.parametrize("program", ["agent-kill", "agent-replay", "agent-run", "agent-wait"])
def test_bash_offers_agent_names(program):
    fork("-n", "scout")
    fork("-n", "scribe")
    assert complete(program, "sc") == ["scout", "scribe"]
    assert complete(program, "scr") == ["scribe"]


def test_bash_offers_signals_and_roles():
    assert complete("agent-kill", "-s", "S") == ["STOP"]
    assert complete("agent-fork", "-r", "ta") == ["task"]
    fork("-n", "lead")
    assert complete("agent-fork", "-p", "le") == ["lead"]
