"""The edges where the host meets the sandbox (agentctl(7), SANDBOX), attacked as a
model steering an agent's tools would: links and swaps, renames of a parent, the
database however it was named, secrets in the environment, persistence in a writable
working directory, the kernel's knobs and syscalls, probes of the host's paths. Each
attack is shown to work without the rule (--unconfined, or a control that the rule
lets through) and to fail with it."""

import os
import sys

import pytest

from agentctl.store.db import connect

from .conftest import agent, calling, fork, script, shell, tool_results
from .test_sandbox import MODES, attempt, flags, world  # noqa: F401 (fixtures)

ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (CI runs as root)")


def run_of(name, *extra):
    ran = shell(f"agent-run {' '.join(extra)} {name}")
    assert ran.code == 0, ran.err
    conn = connect(os.environ["AGENTCTL_DB"])
    found = tool_results(conn, name)
    conn.close()
    return found


# -- paths: links, swaps and renames ----------------------------------------------------

def test_an_agent_cant_set_its_cwd_through_a_link_that_leads_out(world, tmp_path):
    (tmp_path / "victim").mkdir()
    result = attempt(world, tmp_path,
                     'ln -s ../victim out && mkdir sub && '
                     'agent-set "$AGENT_ID" cwd="$PWD/out"; echo "link: $?"; '
                     'agent-set "$AGENT_ID" cwd="$PWD/sub"; echo "sub: $?"', "--shared")
    assert "link: 3" in result and "sub: 0" in result, result
    shown = dict(line.split() for line in agent("ps", "-o", "name,cwd").out.splitlines())
    assert shown["a"] == str(tmp_path / "work" / "sub")


@pytest.mark.parametrize("option", ["--cwd", "--ro"])
def test_a_child_cant_be_given_a_link_that_leads_out(world, tmp_path, option):
    (tmp_path / "home" / "notes").mkdir()
    result = attempt(world, tmp_path,
                     f'ln -s {tmp_path}/home out && mkdir in && '
                     f'agent-fork {option} "$PWD/out" -n c1; echo "link: $?"; '
                     f'agent-fork {option} "$PWD/in" -n c2 >/dev/null; echo "in: $?"',
                     "--shared")
    assert "link: 3" in result and "in: 0" in result, result


def test_a_cwd_swapped_for_a_link_between_turns_is_refused(world, tmp_path):
    """The parent's tools may rename in its own directory: the child's cwd, checked at
    fork, is checked again (and bound by handle) at every call."""
    victim = tmp_path / "victim"
    victim.mkdir()
    child = tmp_path / "work" / "child"
    child.mkdir()
    first = attempt(world, tmp_path, "echo mine > f && echo wrote", "--shared", cwd=child,
                    name="c")
    assert first == "wrote\n" and (child / "f").exists()
    child.rename(tmp_path / "work" / "was-child")
    child.symlink_to(victim)
    fork("-p", "c", "-n", "d", "--allow", "attempt",
         "-m", script(tmp_path, calling([("attempt", {})]), name="d.jsonl"), "go")
    result, = run_of("d")
    assert result.startswith("error:") and "symbolic link" in result, result
    assert not (victim / "f").exists()


@pytest.mark.parametrize("mode", MODES)
def test_a_protected_path_cant_be_renamed_away_through_a_parent(world, tmp_path, mode,
                                                                 monkeypatch):
    """A read-only bind moves with its parent: so every directory between the cwd and
    a protected path is a mount point too (EBUSY), and the tool path stays the
    operator's."""
    project = tmp_path / "project"
    (project / "conf" / "tools").mkdir(parents=True)
    (project / "other").mkdir()
    monkeypatch.setenv("AGENTCTL_TOOLS", f"{world}:{project}/conf/tools")
    result = attempt(world, tmp_path,
                     "mv conf conf2 && mkdir -p conf/tools && echo planted > conf/tools/x "
                     "&& echo moved; mv other other2 && echo control", *flags(mode),
                     cwd=project)
    assert "control" in result
    if mode == "unconfined":
        assert "moved" in result and (project / "conf" / "tools" / "x").exists()
    else:
        assert "moved" not in result and not (project / "conf2").exists()


# -- what no tool touches ---------------------------------------------------------------

@pytest.mark.parametrize("mode", MODES)
def test_the_database_named_by_db_is_covered(world, tmp_path, mode, home, monkeypatch):
    """agent-run --db (not $AGENTCTL_DB) names the database the sandbox covers."""
    if str(home).startswith("postgresql://"):
        pytest.skip("a PostgreSQL database is no file")
    fork("-n", "a", "--allow", "attempt", "--cwd", str(tmp_path), *flags(mode),
         "-m", script(tmp_path, calling([("attempt", {})]), name="a.jsonl"), "go")
    from .test_external_tools import make_tool
    make_tool(world, "attempt", f"{sys.executable} -c \"import os; "
              f"os.close(os.open('{home}', os.O_WRONLY | os.O_APPEND)); print('opened')\"")
    monkeypatch.setenv("AGENTCTL_DB", str(tmp_path / "elsewhere.db"))
    ran = shell(f"agent-run --db {home} a")
    assert ran.code == 0, ran.err
    conn = connect(str(home))
    result, = tool_results(conn, "a")
    conn.close()
    assert ("opened" in result) == (mode == "unconfined"), result


def test_the_file_tools_refuse_the_database_and_say_so(world, tmp_path, home):
    if str(home).startswith("postgresql://"):
        pytest.skip("a PostgreSQL database is no file")
    fork("-n", "w", "--allow", "write_file", "--cwd", str(tmp_path),
         "-m", script(tmp_path, calling([("write_file", {"path": "agents.db", "content": "x"})]),
                      name="w.jsonl"), "go")
    result, = run_of("w")
    assert result.startswith("error:") and "not for tools" in result, result
    assert agent("ps").code == 0


@pytest.mark.parametrize("mode", MODES)
def test_the_prices_inside_a_cwd_cant_be_lowered(world, tmp_path, mode, monkeypatch):
    prices = tmp_path / "work" / "prices.json"
    prices.write_text("")
    monkeypatch.setenv("AGENTCTL_PRICES", str(prices))
    result = attempt(world, tmp_path, "echo 'cheap 0 0' >> prices.json && echo wrote",
                     *flags(mode))
    assert ("wrote" in result) == (mode == "unconfined"), result


# -- persistence in a writable directory --------------------------------------------------

PLANTS = (".git/hooks/pre-commit", ".git/config", ".mcp.json", ".envrc", ".vscode/tasks.json")


@pytest.mark.parametrize("mode", MODES + ["sandboxed --rw .git"])
def test_what_makes_git_and_editors_run_programs_is_read_only(world, tmp_path, mode):
    project = tmp_path / "project"
    (project / ".git" / "hooks").mkdir(parents=True)
    (project / ".git" / "config").write_text("[core]\n")
    body = "; ".join(f"(mkdir -p $(dirname {p}) && echo planted >> {p} && echo 'wrote {p}')"
                     for p in PLANTS)
    result = attempt(world, tmp_path, body + "; echo ok > mine && echo 'wrote mine'",
                     *flags(mode, "--shared"), *(["--rw", ".git"] if "--rw" in mode else []),
                     cwd=project)
    assert "wrote mine" in result
    for plant in PLANTS:
        written = f"wrote {plant}" in result
        if mode == "unconfined" or (mode.endswith(".git") and plant.startswith(".git/")):
            assert written, (plant, result)
        else:
            assert not written, (plant, result)
    if mode == "sandboxed":     # the placeholders of what was missing are gone
        assert sorted(os.listdir(project)) == [".git", "mine"]


@pytest.mark.parametrize("mode", MODES)
def test_a_home_given_as_cwd_keeps_its_start_up_files(world, tmp_path, mode):
    home = tmp_path / "home"
    (home / "project").mkdir()
    (home / ".config").mkdir()
    plants = (".bashrc", ".profile", ".ssh/authorized_keys", ".config/autostart/x.desktop",
              ".config/systemd/user/x.service")
    body = "; ".join(f"(mkdir -p $(dirname {p}) && echo planted >> {p} && echo 'wrote {p}')"
                     for p in plants)
    result = attempt(world, tmp_path, body + "; echo ok > project/mine && echo 'wrote mine'",
                     *flags(mode), cwd=home)
    assert "wrote mine" in result
    for plant in plants:
        assert (f"wrote {plant}" in result) == (mode == "unconfined"), (plant, result)


def test_no_silent_home_or_root_as_a_cwd(world, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path / "home")
    forked = agent("fork", "-n", "x", "-m", "echo")
    assert forked.code == 2 and "holds your home" in forked.err and "--cwd" in forked.err
    explicit = agent("fork", "-n", "y", "--cwd", str(tmp_path / "home"), "-m", "echo")
    assert explicit.code == 0, explicit.err
    for path in ("/", "/usr"):
        refused = agent("fork", "--cwd", path, "-m", "echo")
        assert refused.code == 2 and "holds the system" in refused.err


# -- the environment ----------------------------------------------------------------------

SECRETS = {"PGPASSWORD": "pg-secret-1", "GITHUB_TOKEN": "ghp-secret-2",
           "AWS_SECRET_ACCESS_KEY": "aws-secret-3"}


@pytest.mark.parametrize("mode", MODES + ["sandboxed --env GITHUB_TOKEN"])
def test_secrets_in_the_environment_reach_a_tool_only_when_granted(world, tmp_path, mode,
                                                                   monkeypatch):
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    grant = ["--env", "GITHUB_TOKEN"] if "--env" in mode else []
    result = attempt(world, tmp_path, "env", *flags(mode), *grant)
    for name, value in SECRETS.items():
        seen = value in result
        assert seen == (mode == "unconfined" or (bool(grant) and name == "GITHUB_TOKEN")), \
            (name, result)
    assert "PATH=" in result


def test_an_env_grant_narrows_down_the_tree(world, tmp_path):
    fork("-n", "p", "--cwd", str(tmp_path / "work"), "--env", "GITHUB_TOKEN", "-m", "echo")
    wider = agent("fork", "-p", "p", "--env", "PGPASSWORD", "-m", "echo")
    assert wider.code == 3, "below p, not even the operator gives what p doesn't hold"
    assert agent("fork", "--env", "PGPASSWORD", "-m", "echo").code == 0     # below init
    result = attempt(world, tmp_path, "agent-fork --env PGPASSWORD -n c1; echo \"pg: $?\"; "
                     "agent-fork --env GITHUB_TOKEN -n c2 >/dev/null; echo \"gh: $?\"",
                     "--env", "GITHUB_TOKEN")
    assert "pg: 3" in result and "gh: 0" in result, result


# -- the kernel ---------------------------------------------------------------------------

@ROOT_ONLY
@pytest.mark.parametrize("mode", MODES)
def test_proc_sys_is_read_only_and_tools_are_not_root(world, tmp_path, mode):
    """(Where the machine refuses root /proc/sys itself, as a container may, only the
    sandboxed side can be shown.)"""
    result = attempt(world, tmp_path, f"id -u; {sys.executable} -c \"import os; "
                     "os.close(os.open('/proc/sys/kernel/core_pattern', os.O_WRONLY)); "
                     "print('opened')\" 2>&1; true", *flags(mode))
    if mode == "unconfined":
        assert result.startswith("0\n")
        assert ("opened" in result) == os.access("/proc/sys/kernel/core_pattern", os.W_OK)
    else:
        assert result.startswith("65534\n") and "opened" not in result, result


KEYCTL = ("import ctypes, os; libc = ctypes.CDLL(None, use_errno=True); "
          "r = libc.syscall(250, 0, -3, 0); "      # keyctl(GET_KEYRING_ID, SESSION)
          "print('keyring', r if r >= 0 else os.strerror(ctypes.get_errno()))")


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="x86_64 syscall numbers")
@pytest.mark.parametrize("mode", MODES)
def test_the_session_keyring_is_out_of_reach(world, tmp_path, mode):
    result = attempt(world, tmp_path, f"{sys.executable} -c \"{KEYCTL}\"", *flags(mode))
    if mode == "unconfined":
        assert result.split()[1].isdigit(), result
    else:
        assert "Operation not permitted" in result, result


# -- probing the host through agentctl's programs ----------------------------------------

def test_a_path_outside_gets_one_answer_whether_it_exists_or_not(world, tmp_path):
    result = attempt(world, tmp_path,
                     f"for p in {tmp_path}/home/.ssh/id_ed25519 {tmp_path}/home/nothing; do "
                     "agent-fork --ro $p -n x >said 2>&1; echo \"ro $?\"; sed \"s|$p|P|\" said; "
                     "agent-fork --cwd $p -n x >said 2>&1; echo \"cwd $?\"; sed \"s|$p|P|\" said; "
                     "done")
    lines = result.splitlines()
    assert lines[:len(lines) // 2] == lines[len(lines) // 2:], result
    assert "no such" not in result and "not a directory" not in result


def test_the_event_log_is_pruned_by_the_operator_alone(world, tmp_path):
    result = attempt(world, tmp_path, "agent-log --prune-before 0s; echo \"prune: $?\"")
    assert "prune: 2" in result
    assert agent("log").out.strip()


def test_another_agents_proxy_is_out_of_reach(world, tmp_path, monkeypatch):
    """Its socket lives in agentctl's private run-time directory, which no sandbox
    shows, even one whose cwd holds it."""
    import tempfile
    short = tempfile.mkdtemp(prefix="rt-")      # (a socket's path is at most 107 bytes)
    os.chmod(short, 0o777)
    monkeypatch.setenv("XDG_RUNTIME_DIR", short)
    try:
        result = attempt(world, tmp_path, "ls -a agentctl-*; find . -name socket | wc -l",
                         cwd=short)
        assert result.split()[-1] == "0", result
        assert os.listdir(short) == [f"agentctl-{os.getuid()}"]
    finally:
        import shutil
        shutil.rmtree(short, ignore_errors=True)


@ROOT_ONLY
def test_root_is_told_when_the_sandbox_user_cant_write_the_cwd(tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir(mode=0o755)
    os.chmod(mine, 0o755)
    warned = agent("fork", "-n", "a", "--cwd", str(mine), "--allow", "run", "-m", "echo")
    assert warned.code == 0 and "as root, its tools run as uid 65534" in warned.err
    toolless = agent("fork", "-n", "b", "--cwd", str(mine), "-m", "echo")
    assert toolless.code == 0 and toolless.err == ""    # (no tool: nothing to write)
    os.chmod(mine, 0o777)
    quiet = agent("fork", "-n", "c", "--cwd", str(mine), "--allow", "run", "-m", "echo")
    assert quiet.code == 0 and quiet.err == ""


@pytest.mark.parametrize("mode", MODES)
def test_a_protected_path_that_is_a_link_refuses_the_call(world, tmp_path, mode):
    """A link can't be covered by a mount (it would cover its target): a link where the
    read-only set stands makes the call refused, naming it, rather than left open."""
    project = tmp_path / "project"
    project.mkdir()
    (tmp_path / "elsewhere.json").write_text("{}")
    (project / ".mcp.json").symlink_to(tmp_path / "elsewhere.json")
    result = attempt(world, tmp_path, "echo ran", *flags(mode), cwd=project)
    if mode == "unconfined":
        assert result == "ran\n"
    else:
        assert result.startswith("error: not run: ") and ".mcp.json is a symbolic link" \
            in result, result


@ROOT_ONLY
@pytest.mark.parametrize("user, said", [("0", "tools never run as root"),
                                         ("root", "tools never run as root"),
                                         ("no-such-user-x", "no such user")])
def test_the_sandbox_user_is_never_root(world, tmp_path, monkeypatch, user, said):
    monkeypatch.setenv("AGENTCTL_SANDBOX_USER", user)
    result = attempt(world, tmp_path, "id -u")
    assert result.startswith("error: not run: ") and said in result, result


def test_a_placeholder_is_removed_by_the_last_call_that_holds_it(tmp_path):
    """Two calls share a placeholder (a shared flock each): the first to end leaves it
    to the other, which removes it; a file of the operator's is never taken for one."""
    from agentctl.tools import cover
    path = str(tmp_path / ".envrc")
    first, second = cover.Placeholders(), cover.Placeholders()
    first.hold(path)
    second.hold(path)
    first.release()
    assert os.path.exists(path)
    second.release()
    assert not os.path.exists(path)
    with open(path, "w") as f:
        f.write("the operator's\n")
    with pytest.raises(cover.Unprotectable):
        cover.Placeholders().hold(path)
    assert open(path).read() == "the operator's\n"
