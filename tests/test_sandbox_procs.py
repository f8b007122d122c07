"""The process limit of a sandboxed call (agentctl(7), SANDBOX; agent-run(1), The
sandbox): RLIMIT_NPROC counted in a user namespace of the call's own, as root too
(its tools run as another user, in a namespace that maps root and that user alone),
so that each call has its whole limit whatever other calls of the same user hold; a
limit lifted leaves the call agent-run's own; the handshake that gives the namespace
its maps never waits for a bwrap that is gone.
"""

import os
import resource
import shutil
import subprocess
import sys
import tempfile

import pytest

from agentctl.store.db import connect

from .conftest import ROOT, calling, fork, needs, script, shell, tool_results
from .test_external_tools import make_tool
from .test_sandbox import FORK_LOOP, FORKS, attempt, world  # noqa: F401  (world: the fixture)

PYTHON = sys.executable

# Forks until refused, holding each child, then waits (at most 50 s) until every agent
# given the tool holds its own: what each got while the others held theirs.
HOLD = f"""{PYTHON} -c "
import glob, os, signal, time{FORK_LOOP}open('held-' + os.environ['AGENT_ID'], 'w').close()
deadline = time.monotonic() + 50
while len(glob.glob('held-*')) < 2 and time.monotonic() < deadline:
    time.sleep(0.01)
print('forked', n, 'while', len(glob.glob('held-*')), 'held')
" """


@pytest.fixture(autouse=True)
def bwrap():
    return needs("bwrap", "bubblewrap")


def as_root():
    if os.geteuid() != 0:
        pytest.skip("as root (CI's user): any other user's tools run as that user")


def test_as_root_a_calls_processes_are_counted_in_a_user_namespace_of_its_own(world,
                                                                              tmp_path):
    """Not in a pids cgroup made for each call (13-17 ms a call): RLIMIT_NPROC, which
    binds the tools' user where it would not bind root, in a namespace that maps no
    other user."""
    from agentctl.tools import runas
    as_root()
    uid, _ = runas.user()
    result = attempt(world, tmp_path, "cat /proc/self/uid_map; id -u; "
                     "grep 'Max processes' /proc/self/limits", "--limit", "procs=20")
    lines = [line.split() for line in result.splitlines()]
    assert sorted(lines[:2]) == sorted([["0", "0", "1"], [str(uid), str(uid), "1"]]), result
    assert lines[2] == [str(uid)] and lines[3][2:4] == ["20", "20"], result


def test_two_calls_at_once_each_have_their_whole_process_limit(world, tmp_path):
    """The same user's processes in two sandboxes are counted apart: neither call's
    bound is shared with the other's (a fork bomb in one leaves the other its own)."""
    make_tool(world, "hold", HOLD)
    for name in ("a", "b"):
        fork("--shared", "-n", name, "--allow", "hold", "--cwd", str(tmp_path / "work"), "--limit",
             "procs=20", "-m", script(tmp_path, calling([("hold", {})]), name=f"{name}.jsonl"),
             "go")
    ran = shell("agent-run a & agent-run b & wait", timeout=180)
    assert ran.code == 0, ran.err
    conn = connect(os.environ["AGENTCTL_DB"])
    for name in ("a", "b"):
        result, = tool_results(conn, name)
        words = result.split()
        assert words[0] == "forked" and words[3] == "2", result    # while both held
        assert 15 <= int(words[1]) < 20, result
    conn.close()


def shown(value):
    return "unlimited" if value == resource.RLIM_INFINITY else str(value)


def test_a_lifted_limit_leaves_the_call_agent_runs_own(world, tmp_path):
    """procs=unlimited and files=unlimited are not asked of prlimit (a process can't
    raise its hard limit, nor open files past the kernel's nr_open, even as root): the
    call has agent-run's own limits, and runs."""
    nproc, nofile = (resource.getrlimit(r) for r in (resource.RLIMIT_NPROC,
                                                      resource.RLIMIT_NOFILE))
    result = attempt(world, tmp_path, "grep -E 'Max (processes|open files)' "
                     "/proc/self/limits", "--limit", "procs=unlimited,files=unlimited")
    processes, files = (line.split()[-3:-1] for line in result.splitlines())
    assert processes == [shown(nproc[0]), shown(nproc[1])], result
    assert files == [shown(nofile[0]), shown(nofile[1])], result


def test_the_handshake_waits_for_no_bwrap_that_is_gone():
    """bwrap that ended before it said its child's pid (a refused argument, a missing
    namespace): the handshake reads the end of its pipe, and returns."""
    from agentctl.tools import handles
    handshake = handles.Handshake((65534, 65534))
    for fd in handshake.theirs:
        os.close(fd)
    handshake.give()
    assert handshake.info is None and handshake.block is None


def test_a_limit_that_cant_be_set_runs_nothing(world, tmp_path):
    """More open files than the kernel allows any process (fs.nr_open): the call fails
    with why, and the tool never ran."""
    with open("/proc/sys/fs/nr_open") as f:
        beyond = int(f.read()) + 1
    result = attempt(world, tmp_path, "touch ran", "--limit", f"files={beyond}")
    assert result.startswith("error:") and "limit" in result.lower(), result
    assert not (tmp_path / "work" / "ran").exists()


def test_a_shipped_tool_is_not_bound_again(tmp_path):
    """A tool shipped with agentctl is in agentctl's code, bound read-only already: its
    call binds it no second time (a mount the fewer); a tool from elsewhere is bound."""
    from agentctl.tools import sandbox
    from .conftest import ROOT
    work = tmp_path / "work"
    work.mkdir()
    box = sandbox.Sandbox({"cwd": str(work), "ro": None, "net": None, "limits": None,
                           "rw": None, "env": None}, {"PATH": "/usr/bin:/bin"})
    shipped = os.path.join(ROOT, "agentctl", "toolbox", "read_file")
    other = make_tool(tmp_path, "other", "true")
    for program, binds in ((shipped, 0), (str(other), 1)):
        prepared = box.wrap([program], program=program)
        argv = prepared.argv
        try:
            assert sum(1 for n in range(2, len(argv)) if argv[n] == program
                       and argv[n - 2] == "--ro-bind-fd") == binds, argv
            assert argv[-1] == program
        finally:
            prepared.close()


NOBODY = """
import subprocess, sys
sys.path[:0] = [{root!r}]     # agentctl, and pyseccomp
from agentctl.tools import sandbox
box = sandbox.Sandbox({{"cwd": {work!r}, "ro": None, "net": None, "limits": "procs=10",
                       "rw": None, "env": None, "name": "a", "id": "a"}},
                      {{"PATH": "/usr/bin:/bin"}})
prepared = box.wrap(["/usr/bin/python3", "-c", {forks!r}])
argv, fds = prepared.opened()
assert prepared.handshake is None, "bwrap maps a user other than root itself"
print(subprocess.run(argv, capture_output=True, text=True, env=box.environment,
                     pass_fds=fds).stdout)
prepared.close()
"""


def as_nobody(code, **given):
    """Run `code` (formatted with `root`, agentctl's and pyseccomp's directory, `work`,
    a directory nobody may write, and `given`) as nobody by the system's Python, on a
    copy of agentctl that nobody can read (a checkout in root's home is not): its
    stdout. Skipped unless root (to become nobody) and /usr/bin/python3 is there."""
    setpriv = needs("setpriv", "util-linux")
    if os.geteuid() != 0 or not os.path.exists("/usr/bin/python3"):
        pytest.skip("needs root (to become nobody) and the system's /usr/bin/python3")
    work = tempfile.mkdtemp(prefix="agentctl-nobody-")
    try:
        os.chmod(work, 0o777)
        import pyseccomp
        package = os.path.join(work, "package")
        shutil.copytree(os.path.join(ROOT, "agentctl"), os.path.join(package, "agentctl"),
                        ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copy(pyseccomp.__file__, package)
        proc = subprocess.run([setpriv, "--reuid", "65534", "--regid", "65534",
                               "--clear-groups", "/usr/bin/python3", "-c",
                               code.format(root=package, work=work, **given)],
                              capture_output=True, text=True, timeout=120,
                              env={"PATH": "/usr/bin:/bin", "HOME": work}, cwd=work)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_the_process_limit_binds_a_user_other_than_root():
    """Not root: RLIMIT_NPROC, set in the sandbox's own user namespace (so that it counts
    the call's processes, not all of the user's)."""
    forks = FORKS.split('"', 1)[1].rsplit('"', 1)[0]
    forked = int(as_nobody(NOBODY, forks=forks).split()[-1])
    assert 0 < forked < 10, forked
