"""Shell completion: the checked-in scripts are fresh, and bash really
offers agent names, signals and roles."""

import os
import subprocess

import pytest

from .conftest import PROGRAMS, ROOT, fork, shell


def test_checked_in_completions_are_fresh(tmp_path):
    fresh = tmp_path / "completions"
    result = subprocess.run([os.path.join(ROOT, "completions", "generate"), str(fresh)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    # one a program of the table (agentctl/programs.py) in each shell's, and no other
    for d, form in (("bash", "agent-{}"), ("zsh", "_agent-{}"), ("fish", "agent-{}.fish")):
        names = sorted(os.listdir(fresh / d))
        assert names == sorted(form.format(p) for p in PROGRAMS)
        assert sorted(os.listdir(os.path.join(ROOT, "completions", d))) == names
        for name in names:
            assert open(os.path.join(ROOT, "completions", d, name)).read() == \
                (fresh / d / name).read_text(), f"completions/{d}/{name} is stale: run completions/generate"


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
    ids = [fork("-n", "scout"), fork("-n", "scribe")]

    def names(words):          # a random id may begin with "sc" too (one run in 2,000)
        return [w for w in words if w not in ids]
    assert names(complete(program, "sc")) == ["scout", "scribe"]
    assert names(complete(program, "scr")) == ["scribe"]


def test_bash_offers_signals_and_roles():
    assert complete("agent-kill", "-s", "S") == ["STOP"]
    assert complete("agent-fork", "-r", "ta") == ["task"]
    fork("-n", "lead")
    assert complete("agent-fork", "-p", "le") == ["lead"]
