"""Shell completion: the checked-in scripts are fresh, bash really offers agent names,
signals and roles, and make install's scripts complete in an interactive bash."""

import os
import subprocess
import sys

import pytest

from .conftest import PROGRAMS, ROOT, fork, make, needs, shell
from .tmux import Screen


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


# -- installed: what a user gets from make install, in an interactive bash ------------------------

BASH_COMPLETION = "/usr/share/bash-completion/bash_completion"     # (Debian's bash-completion)


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """make install PREFIX=~/.local for a fresh HOME (no DESTDIR: the launchers run where
    they are); the home, and what make install printed."""
    home = tmp_path_factory.mktemp("home")
    result = make(f"PREFIX={home}/.local", "install")
    assert result.returncode == 0, result.stderr
    # python3 for the launchers' #!: the one that installed, with no site-packages (the
    # venv's editable install would supply what the install left out)
    python = home / "python" / "python3"
    python.parent.mkdir()
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n')
    python.chmod(0o755)
    return home, result.stdout


class Bash(Screen):
    """An interactive bash (bash -i, its ~/.bashrc read) on a tmux pane of a tmux server
    of its own."""

    def __init__(self, tmux, home, env):
        self.tmux, self.socket = tmux, str(home / "tmux")
        subprocess.run([tmux, "-S", self.socket, "-f", "/dev/null", "new-session", "-d",
                        "-x", "200", "-y", "30", "bash", "-i"], env=env, cwd=home, check=True)


@pytest.mark.parametrize("loader", ["bash-completion", "the line make install prints"])
def test_installed_completions_complete_in_an_interactive_bash(installed, loader):
    """make install's completions, in bash -i with a fresh HOME: loaded by the
    bash-completion package from where it looks for PREFIX=~/.local, or, without it, by
    the line make install says to add to ~/.bashrc; agent-run TAB TAB lists the agents."""
    tmux = needs("tmux", "tmux")
    home, printed = installed
    if loader == "bash-completion":
        rc = f". {needs(BASH_COMPLETION, 'bash-completion')}\n"
    else:
        rc = next(line.strip() for line in printed.splitlines()
                  if "bash-completion/completions/agent-*" in line) + "\n"
    (home / ".bashrc").write_text(rc + "PS1='ready$ '\n")
    ids = [fork("-n", "scout"), fork("-n", "scribe")]
    # a fresh HOME's: where bash-completion looks is ~/.local/share and the defaults
    env = {k: v for k, v in os.environ.items() if k not in
           ("XDG_DATA_HOME", "XDG_DATA_DIRS", "BASH_COMPLETION_USER_DIR", "TMUX")}
    env.update(HOME=str(home), TERM="xterm",
               PATH=os.pathsep.join([str(home / ".local" / "bin"), str(home / "python"),
                                     os.environ["PATH"]]))
    bash = Bash(tmux, home, env)
    try:
        bash.shows("ready$")
        bash.keys("agent-run ", "Tab", "Tab")
        bash.shows("init", "scout", "scribe", *ids)
        bash.keys("C-u", "agent-run --ma", "Tab")
        bash.shows("ready$ agent-run --max-steps")
    finally:
        bash.close()
