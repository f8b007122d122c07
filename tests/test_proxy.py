"""The proxy through which a sandboxed tool's agentctl programs act as its agent
(agentctl(7), SANDBOX): a real Server in this process, real forwarders as programs of
their own. Each check is shown refusing what it is there to refuse, next to the same
request that it lets through: the key and the peer's uid, the private directory of
the socket, the limits and the timeout, what only the operator may do. No descriptor
a request brings is kept, and no directory of a server killed outright stays.
"""

import gc
import json
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import tempfile

import pytest

from agentctl import paths
from agentctl.tools import proxy
from agentctl.tools.forward import forward

from .conftest import PATIENCE, PROGRAMS, agent, fork, needs, wait_until

REFUSAL = "agentctl: a sandboxed tool's request was refused\n"


@pytest.fixture(autouse=True)
def runtime(monkeypatch):
    """$XDG_RUNTIME_DIR of the test's own, short (a socket's path has at most 107
    bytes: a pytest tmp_path is too long), not yet swept."""
    where = tempfile.mkdtemp(prefix="rt-", dir="/tmp")
    monkeypatch.setenv("XDG_RUNTIME_DIR", where)
    monkeypatch.setattr(proxy, "_swept", set())
    yield where
    shutil.rmtree(where, ignore_errors=True)


@pytest.fixture
def lead(tmp_path):
    """An agent, and its working directory."""
    work = tmp_path / "work"
    work.mkdir()
    return fork("-n", "lead", "--cwd", str(work), "-m", "echo"), str(work)


def serve(lead, **kwargs):
    agent_id, work = lead
    return proxy.Server(dict(os.environ, AGENT_ID=agent_id), work, **kwargs)


@pytest.fixture
def server(lead):
    s = serve(lead)
    yield s
    s.close()


def address(server):
    """The socket, as the host sees it (a sandbox sees it at MOUNT)."""
    return os.path.join(server.dir, proxy.SOCKET)


def forwarder(server, program, *args, key=True, env=(), **kwargs):
    """agent-PROGRAM as a sandboxed tool runs it (the forwarder), started; key: True for
    the server's, None for none, else the key given; env: more of the tool's environment."""
    env = {**dict(env), **server.inside(), "AGENTCTL_SOCKET": address(server)}
    if key is None:
        del env[proxy.KEY]
    elif key is not True:
        env[proxy.KEY] = key
    return subprocess.Popen([os.path.join(server.dir, proxy.PROGRAMS_DIR, f"agent-{program}"),
                             *args], env=env, cwd=server.cwd, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kwargs)


def forwarded(server, program, *args, **kwargs):
    """agent-PROGRAM through the proxy, run to its end: (status, stdout, stderr)."""
    proc = forwarder(server, program, *args, **kwargs)
    out, err = proc.communicate(timeout=PATIENCE)
    return proc.returncode, out, err


def request(server, **fields):
    """A request as the forwarder makes it, with the server's key unless given."""
    body = {"program": "ps", "argv": [], "cwd": server.cwd, "key": server.key, **fields}
    return json.dumps({k: v for k, v in body.items() if v is not None}).encode()


def raw(server, message, fds=3):
    """Send `message` over a connection of its own with `fds` descriptors (the write
    ends of pipes): the status answered (None if none), and what came out of each pipe
    once every copy of its write end is closed."""
    pipes = [os.pipe() for _ in range(fds)]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as s:
            s.settimeout(PATIENCE)
            s.connect(address(server))
            if fds:
                socket.send_fds(s, [message], [w for _, w in pipes])
            else:
                s.send(message)
            answer = s.recv(4)
    finally:
        for _, w in pipes:
            os.close(w)
    said = [drained(r) for r, _ in pipes]
    return (int.from_bytes(answer, "big", signed=True) if answer else None), said


def drained(fd, text=True):
    """All a pipe gives until its end (a descriptor the server kept would hold it open:
    the test fails saying so)."""
    chunks = []
    try:
        while True:
            if not select.select([fd], [], [], PATIENCE)[0]:
                pytest.fail("a pipe sent to the server was never closed", pytrace=False)
            chunk = os.read(fd, 65536)
            if not chunk:
                data = b"".join(chunks)
                return data.decode() if text else data
            chunks.append(chunk)
    finally:
        os.close(fd)


def running(server):
    """The programs the server runs now."""
    with server.lock:
        return list(server.running)


def descriptors():
    """How many descriptors this process has open (after closing what is garbage)."""
    gc.collect()
    return len(os.listdir("/proc/self/fd"))


# -- which programs -----------------------------------------------------------------------------

def test_every_program_is_offered_or_refused():
    """Each program of the table (agentctl/programs.py) is, to a sandboxed tool, offered or
    refused: one of them, never both, never neither."""
    assert sorted(proxy.PROGRAMS + proxy.REFUSED) == sorted(PROGRAMS)


def test_the_operators_programs_are_refused_and_say_so(capsys):
    assert {"run", "db", "top"} <= set(proxy.REFUSED)
    for name in proxy.REFUSED:
        assert forward(name, []) == 2
        assert capsys.readouterr().err.startswith(
            f"agent-{name}: not offered to a sandboxed tool (only agent-fork, ")


# -- the key, and the peer ----------------------------------------------------------------------

def test_only_a_request_with_the_key_is_served(server, lead):
    inside = server.inside()
    assert inside == {"AGENTCTL_SOCKET": f"{proxy.MOUNT}/socket", "AGENTCTL_PROXY_KEY": server.key}
    assert len(server.key) == 64
    code, out, err = forwarded(server, "ps")
    assert code == 0 and "lead" in out, err
    for key in (None, "", "0" * 64, server.key[:-1], server.key + "0", "é" * 64):
        assert forwarded(server, "ps", key=key) == (2, "", REFUSAL)
    # (a forwarder of another sandbox: another server's key)
    other = serve(lead)
    try:
        assert forwarded(server, "ps", key=other.key) == (2, "", REFUSAL)
    finally:
        other.close()


def test_the_program_runs_as_the_agent_not_as_the_tool_says(server, lead, tmp_path):
    other = str(tmp_path / "other.db")
    code, out, err = forwarded(server, "fork", "-n", "kid", "-m", "echo",
                               env={"AGENT_ID": "init", "AGENTCTL_DB": other})
    assert code == 0, err
    assert not os.path.exists(other)
    rows = {r["name"]: r for r in json.loads(agent("ps", "-a", "--format", "json").out)}
    assert rows["kid"]["parent"] == lead[0]


def as_uid(server, uid, message):
    """Send `message` from a child of this process that became `uid` (not a new program:
    `uid` may not be allowed to run this Python) and reached the socket from the
    server's directory (the base is the operator's alone): (status, what the program
    wrote, what was said on the standard error)."""
    answer_r, answer_w = os.pipe()
    pipes = [os.pipe() for _ in range(3)]
    pid = os.fork()
    if pid == 0:
        try:
            os.chdir(server.dir)
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as s:
                s.connect(proxy.SOCKET)
                socket.send_fds(s, [message], [pipes[0][0], pipes[1][1], pipes[2][1]])
                os.write(answer_w, s.recv(4))
        finally:
            os._exit(0)
    for fd in (answer_w, pipes[0][0], pipes[0][1], pipes[1][1], pipes[2][1]):
        os.close(fd)
    os.waitpid(pid, 0)
    answer = drained(answer_r, text=False)
    return ((int.from_bytes(answer, "big", signed=True) if answer else None),
            drained(pipes[1][0]), drained(pipes[2][0]))


@pytest.mark.skipif(os.geteuid() != 0, reason="a process of another uid needs root")
def test_a_process_of_another_uid_is_refused_unless_a_tool_runs_as_it(lead):
    """A process of uid 65534 (nobody) with the key: refused by a server whose tools run
    as the operator, served by one whose tools run as 65534."""
    refused = serve(lead)
    try:
        assert as_uid(refused, 65534, request(refused)) == (2, "", REFUSAL)
    finally:
        refused.close()
    served = serve(lead, peer_uids={65534})
    try:
        status, out, err = as_uid(served, 65534, request(served))
    finally:
        served.close()
    assert status == 0 and "lead" in out, err


# -- what is refused, and what is kept ----------------------------------------------------------

def test_a_bad_request_is_refused_and_none_of_its_descriptors_kept(server, monkeypatch):
    """Each request is refused (status 2, and the refusal on its standard error when it
    sent three descriptors); the same request made right is served; afterwards the
    server holds no descriptor more than before."""
    long = request(server, argv=["x" * 300])
    said = raw(server, long)[1]
    assert said[2].startswith("agent-ps: Got unexpected extra argument"), said  # (it ran)
    before = descriptors()
    bad = [(b"not json", 3), (b"\xff\xfe\x00", 3), (b"[1, 2]", 3), (b"", 3),
           (request(server, key="0" * 64), 3), (request(server, key=None), 3),
           (request(server, key=7), 3), (request(server, program="db"), 3),
           (request(server, program="run"), 3), (request(server, program="top"), 3),
           (request(server, program=["ps"]), 3), (request(server, argv="-a"), 3),
           (request(server, argv=["a\0b"]), 3), (request(server, argv=[1]), 3),
           (request(server), 0), (request(server), 1), (request(server), 2),
           (request(server), 5)]
    for message, fds in bad:
        status, said = raw(server, message, fds)
        assert status == 2, (message, fds)
        if fds == 3:
            assert said[2] == REFUSAL, (message, said)
    monkeypatch.setattr(proxy, "MAX_REQUEST", 200)      # (too much: more than it)
    status, said = raw(server, long)
    assert status == 2 and said[2] == REFUSAL
    wait_until(lambda: server.active == 0, "the server to end every connection")
    assert descriptors() == before
    status, said = raw(server, request(server))
    assert status == 0 and "lead" in said[1] and said[2] == ""


@pytest.mark.parametrize("words", [["--prune-before", "0s"], ["--prune-before=0s"],
                                   ["--prune", "0s"], ["-n", "3", "--prune-b=0s"]])
def test_only_the_operator_prunes_the_event_log(server, words):
    fork("-p", "lead", "-n", "kid", "-m", "echo", "hello")
    listed = agent("log", "-q").out
    assert len(listed.split()) > 1
    code, out, err = forwarded(server, "log", *words)
    assert (code, out) == (2, "")
    assert err == ("agent-log: --prune-before: only the operator may prune the event log "
                   "(not a sandboxed tool)\n")
    assert agent("log", "-q").out == listed
    assert forwarded(server, "log", "-q")[:2] == (0, listed)    # (reading it is not refused)
    pruned = agent("log", "--prune-before", "0s")      # the operator may
    assert pruned.code == 0 and int(pruned.out) > 0
    assert len(agent("log", "-q").out.split()) < len(listed.split())


def test_click_takes_no_prefix_of_an_option():
    """What OPERATOR_ONLY's prefixes are refused for: click would have none."""
    result = agent("log", "--prune", "0s")
    assert result.code == 2 and "No such option" in result.err


# -- limits and timeouts ------------------------------------------------------------------------

def test_one_request_more_than_the_limit_is_told_to_try_again(server, monkeypatch):
    """MAX_CONNECTIONS connections that send no request (each held until REQUEST_TIMEOUT,
    made longer than the test) fill the server; a forwarder then gets 75 and why; once
    they close, it is served."""
    monkeypatch.setattr(proxy, "REQUEST_TIMEOUT", PATIENCE * 2)
    monkeypatch.setattr(proxy, "GRACE", PATIENCE)
    held = []
    try:
        for _ in range(proxy.MAX_CONNECTIONS):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            held.append(s)
            s.connect(address(server))
        wait_until(lambda: server.active == proxy.MAX_CONNECTIONS, "every connection served")
        assert forwarded(server, "ps") == (
            75, "", "agentctl: too many agentctl programs at once from this sandbox (at most "
                    "16): try again\n")
    finally:
        for s in held:
            s.close()
    wait_until(lambda: server.active == 0, "the held connections to be closed")
    code, out, err = forwarded(server, "ps")
    assert code == 0 and "lead" in out, err


def test_a_connection_that_sends_nothing_is_dropped(server, monkeypatch):
    monkeypatch.setattr(proxy, "REQUEST_TIMEOUT", 0.5)
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as s:
        s.connect(address(server))
        s.settimeout(PATIENCE)
        assert s.recv(4) == b""         # closed, unanswered
    wait_until(lambda: server.active == 0, "the connection to be dropped")


def test_a_program_runs_until_its_tool_goes_away(server):
    """agent-wait blocks on a child that never exits: it runs as long as its forwarder
    does, and is killed when the forwarder is."""
    fork("-p", "lead", "-n", "kid", "-m", "echo")
    waiter = forwarder(server, "wait", "kid")
    procs = wait_until(lambda: running(server), "agent-wait to start")
    assert waiter.poll() is None
    waiter.kill()
    waiter.communicate(timeout=PATIENCE)
    wait_until(lambda: not running(server) and server.active == 0, "agent-wait to be ended")
    assert procs[0].returncode == -signal.SIGKILL


# -- the directory of the socket ----------------------------------------------------------------

def test_the_socket_is_in_a_private_directory(server, runtime):
    assert paths.runtime() == os.path.join(runtime, f"agentctl-{os.getuid()}")
    assert os.path.dirname(server.dir) == paths.runtime()
    assert os.path.basename(server.dir).startswith(f"proxy-{os.getpid()}-")
    assert oct(os.stat(paths.runtime()).st_mode & 0o7777) == "0o700"
    assert oct(os.stat(server.dir).st_mode & 0o7777) == "0o755"
    assert oct(os.stat(address(server)).st_mode & 0o777) == "0o666"
    assert len(os.fsencode(address(server))) < proxy.SUN_PATH
    programs = os.listdir(os.path.join(server.dir, proxy.PROGRAMS_DIR))
    assert sorted(programs) == sorted(f"agent-{p}" for p in proxy.PROGRAMS + proxy.REFUSED)
    server.close()
    assert not os.path.exists(server.dir)


@pytest.mark.parametrize("value", [None, "", "relative/run"])
def test_without_a_runtime_directory_the_base_is_in_tmp(monkeypatch, value):
    if value is None:
        monkeypatch.delenv("XDG_RUNTIME_DIR")
    else:
        monkeypatch.setenv("XDG_RUNTIME_DIR", value)
    assert paths.runtime() == f"/tmp/agentctl-{os.getuid()}"


def _symlink(base, runtime):
    private = os.path.join(runtime, "elsewhere")
    os.mkdir(private, 0o700)            # as private as the base must be: but elsewhere
    os.symlink(private, base)
    return "a symbolic link"


def _file(base, runtime):
    with open(base, "w"):
        pass
    return "not a directory"


def _open(base, runtime):
    os.mkdir(base)
    os.chmod(base, 0o777)
    return "mode 0777, not 0700"


def _others(base, runtime):
    if os.geteuid() != 0:
        pytest.skip("making a directory of another uid needs root")
    os.mkdir(base, 0o700)
    os.chown(base, 65534, 65534)
    return f"owned by uid 65534, not {os.getuid()}"


@pytest.mark.parametrize("squat", [_symlink, _file, _open, _others])
def test_a_base_someone_else_could_reach_is_refused(lead, runtime, squat):
    """Another user made the base first (in /tmp, anyone may): no server is made."""
    reason = squat(paths.runtime(), runtime)
    before = sorted(os.listdir(runtime))
    with pytest.raises(OSError, match=re.escape(f"{paths.runtime()}: {reason}")):
        serve(lead)
    assert sorted(os.listdir(runtime)) == before
    if squat is _symlink:
        assert os.listdir(os.path.join(runtime, "elsewhere")) == []


def test_the_directories_of_dead_servers_are_swept_once(lead):
    dead = subprocess.Popen(["true"])
    dead.wait()
    alive = subprocess.Popen(["cat"], stdin=subprocess.PIPE)
    base = paths.runtime()
    os.mkdir(base, 0o700)
    names = [f"proxy-{dead.pid}-a1", f"proxy-{alive.pid}-b2", "proxy-x-c3", "other"]
    for name in names:
        os.mkdir(os.path.join(base, name))
        with open(os.path.join(base, name, "socket"), "w"):
            pass
    try:
        first = serve(lead)
    finally:
        alive.stdin.close()
        alive.wait()
    assert set(os.listdir(base)) == set(names[1:]) | {os.path.basename(first.dir)}
    os.mkdir(os.path.join(base, f"proxy-{dead.pid}-d4"))
    second = serve(lead)        # (this process swept this base already)
    assert f"proxy-{dead.pid}-d4" in os.listdir(base)
    first.close()
    second.close()
    assert set(os.listdir(base)) == set(names[1:]) | {f"proxy-{dead.pid}-d4"}


# -- in a sandbox ---------------------------------------------------------------------------------

def test_the_socket_is_reached_through_a_read_only_bind(server):
    """As sandbox.py binds it: read-only at MOUNT, the tool's environment from inside()."""
    bwrap = needs("bwrap", "bubblewrap")
    script = (f"{proxy.MOUNT}/bin/agent-ps; echo ps=$?; "
              f"touch {proxy.MOUNT}/x 2>/dev/null; echo touch=$?")
    proc = subprocess.run(
        [bwrap, "--unshare-all", "--unshare-user", "--die-with-parent", "--ro-bind", "/", "/",
         "--dev", "/dev", "--tmpfs", "/run", "--ro-bind", server.dir, proxy.MOUNT,
         "--chdir", server.cwd, "--", "sh", "-c", script],
        env={"PATH": os.environ["PATH"], **server.inside()}, capture_output=True, text=True,
        timeout=PATIENCE)
    assert "lead" in proc.stdout and "ps=0" in proc.stdout, proc.stderr
    assert "touch=1" in proc.stdout
    assert not os.path.exists(os.path.join(server.dir, "x"))
