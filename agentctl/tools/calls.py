"""One call of a program tool (agentctl(7), TOOLS): PROG runs with the arguments as one
JSON object on stdin, in the agent's working directory, in a process group of its
own; stdout is the result, a non-zero exit a tool error with the tail of stderr. A
timeout and a KILL kill the whole group; what a crash left is found by its
environment (kill_run).
"""

import os
import selectors
import signal
import subprocess
import time

from agentctl import env, voice
from agentctl.tools import bwrap
from agentctl.tools.programs import RUN_MARK, command

DEFAULT_TIMEOUT = 60.0          # seconds a call may run (AGENTCTL_TOOL_TIMEOUT; per tool)
DEFAULT_OUTPUT = 64 * 1024      # bytes of stdout the model gets (AGENTCTL_TOOL_OUTPUT)
STDERR_TAIL = 2000
POLL = 0.25                     # seconds between two looks for a KILL during a call


def settings(program):
    timeout = env.number("AGENTCTL_TOOL_TIMEOUT", DEFAULT_TIMEOUT, minimum=0.001)
    if program is not None and program.timeout is not None:
        timeout = program.timeout
    cap = int(env.number("AGENTCTL_TOOL_OUTPUT", DEFAULT_OUTPUT, minimum=1, whole=True))
    return timeout, cap


class Call:
    """One run of a program tool: started (in `sandbox`, unless None: an unconfined
    agent's), then waited for (`poll` is called every 0.25 s: it raises to cut the
    call short, which kills the process group). Unavailable when the sandbox can't be
    made."""

    def __init__(self, program, arguments, env, cwd, run_id=None, sandbox=None):
        self.program = program
        self.timeout, self.cap = settings(program)
        env = dict(env if sandbox is None else sandbox.environment)
        if run_id is not None:      # what finds its processes after a crash (kill_run)
            env[RUN_MARK] = str(run_id)
        argv, self.status, self.prepared, fds = command(program.path), None, None, ()
        if sandbox is not None:
            self.status, status_w = os.pipe()
            fds = (status_w,)
            try:
                self.prepared = sandbox.wrap(argv, status_w, program.path)
                env.update(self.prepared.env)
                argv, handles = self.prepared.opened()
            except BaseException:
                self._close_sandbox(status_w)
                raise
            fds += tuple(handles)
            cwd = None          # (bwrap's --chdir: the host's path is not looked up again)
        try:
            self.proc = popen(argv, self.prepared and self.prepared.stage, cwd=cwd, env=env,
                              pass_fds=fds)
        except BaseException:
            self._close_sandbox(*fds)
            raise
        for fd in fds:
            os.close(fd)
        self.pgid = self.proc.pid
        self.arguments = arguments
        if self.prepared is not None:
            try:
                self.prepared.started()     # (as root: its user namespace's maps)
            except BaseException:
                self.kill()
                raise

    def _close_sandbox(self, *fds):
        for fd in fds + ((self.status,) if self.status is not None else ()):
            os.close(fd)
        self.status = None
        if self.prepared is not None:
            self.prepared.close()
            self.prepared = None

    def _sandbox_failed(self, stderr):
        """Whether the sandbox could not be made (bwrap never ran the command): its
        status says no exit code."""
        if self.status is None:
            return False
        with os.fdopen(os.dup(self.status), "rb") as f:
            os.set_blocking(f.fileno(), False)
            said = f.read() or b""
        return b'"exit-code"' not in said

    def wait(self, poll):
        """The result text, or raise ToolFailed; the group is killed on a timeout and
        on whatever `poll` (asked every POLL seconds) raises. One loop over the three
        pipes: the arguments go in as the tool reads them, its output comes out as it
        writes it (kept up to the cap, the rest read and dropped; of its standard
        error, the tail), and the end of its output is seen at once. The call ends
        when the tool does: what it left running in its group is killed then (before
        the tool is reaped, so that its group id can't be another's), and output
        still held open by a process that left the group is waited for no longer
        than a second."""
        proc = self.proc
        out, err = bytearray(), bytearray()
        data, sent = memoryview(self.arguments.encode()), 0
        deadline = time.monotonic() + self.timeout
        polled = time.monotonic()
        ended = False
        pidfd = _pidfd(proc.pid)    # readable when it ends: seen at once, not by polling
        try:
            with selectors.DefaultSelector() as selector:
                if pidfd is not None:
                    selector.register(pidfd, selectors.EVENT_READ)
                if data:
                    os.set_blocking(proc.stdin.fileno(), False)
                    selector.register(proc.stdin, selectors.EVENT_WRITE)
                else:
                    proc.stdin.close()
                for pipe in (proc.stdout, proc.stderr):
                    selector.register(pipe, selectors.EVENT_READ)
                while selector.get_map():
                    now = time.monotonic()
                    if now >= deadline:
                        if ended:
                            break           # it ended; a stranger holds its output
                        raise ToolFailed(voice.timed_out(self.timeout, killed=True))
                    if now - polled >= POLL:
                        poll()
                        polled = now
                    if not ended and self._exited():
                        ended = True
                        kill_group(self.pgid)
                        deadline = min(deadline, now + 1.0)
                    for key, _ in selector.select(min(POLL, max(0.0, deadline - now))):
                        pipe = key.fileobj
                        if pipe is pidfd:
                            selector.unregister(pidfd)      # ended: seen at the loop's top
                            continue
                        if pipe is proc.stdin:
                            try:
                                sent += os.write(pipe.fileno(), data[sent:sent + 65536])
                            except BrokenPipeError:
                                sent = len(data)        # it did not read them: its business
                            if sent >= len(data):
                                selector.unregister(pipe)
                                pipe.close()
                            continue
                        chunk = os.read(pipe.fileno(), 65536)
                        if not chunk:
                            selector.unregister(pipe)
                        elif pipe is proc.stderr:
                            err += chunk
                            del err[:-STDERR_TAIL]
                        elif len(out) <= self.cap:
                            out += chunk[:self.cap + 1 - len(out)]
            delay = 0.0005
            while not ended:        # its output is closed: it is ending, or it went on
                if self._exited():
                    ended = True
                    kill_group(self.pgid)
                    break
                now = time.monotonic()
                if now >= deadline:
                    raise ToolFailed(voice.timed_out(self.timeout, killed=True))
                if now - polled >= POLL:
                    poll()
                    polled = now
                time.sleep(min(delay, deadline - now))
                delay = min(delay * 2, 0.05)
            proc.wait()
        except BaseException:
            self.kill()
            raise
        finally:
            if pidfd is not None:
                os.close(pidfd)
        try:
            failed = self._sandbox_failed(err)
        finally:
            self._close_sandbox()
        tail = err.decode("utf-8", "replace").strip()
        if failed:
            raise ToolFailed(voice.sandbox_failed(bwrap.explain(tail)))
        text = out[:self.cap].decode("utf-8", "replace")
        if len(out) > self.cap:
            text += voice.output_cut(self.cap)
        if proc.returncode != 0:
            raise ToolFailed(voice.exit_status(proc.returncode, tail))
        return text

    def _exited(self):
        """Whether the tool has ended (it is left unreaped: its group id stays its
        own while what it left in the group is killed)."""
        try:
            return os.waitid(os.P_PID, self.proc.pid,
                             os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
        except ChildProcessError:
            return True

    def kill(self):
        kill_group(self.pgid)
        try:
            self.proc.wait(5)
        except Exception:
            pass
        self._close_sandbox()


class ToolFailed(Exception):
    pass


def popen(argv, stage, **options):
    """The call's process (its three standard streams pipes, a session of its own);
    given hosts, its network made first (`stage`, netns.Stage): as root by a thread of
    agent-run, then started by vfork (no copy of agent-run's memory), the tool's
    standard error a pipe made here, whose write end the network holds too; else by
    the child, before it becomes bwrap."""
    options.update(stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True)
    if stage is None or not stage.threaded:
        return subprocess.Popen(argv, stderr=subprocess.PIPE, **options,
                                preexec_fn=stage.enter if stage is not None else None)
    r, w = os.pipe()
    try:
        proc = stage.spawned(lambda: subprocess.Popen(argv, stderr=w, **options), w)
    except BaseException:
        os.close(r)
        raise
    finally:
        os.close(w)
    proc.stderr = open(r, "rb")     # (as subprocess.PIPE makes it)
    return proc


def _pidfd(pid):
    """A descriptor that is readable when process `pid` ends (Linux 5.3), or None."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def kill_group(pgid):
    """SIGKILL a tool's whole process group; whether it was there."""
    try:
        os.killpg(pgid, signal.SIGKILL)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def kill_run(pgid, agent_id, run_id):
    """Kill what is left of a call whose agent-run died (its tool_runs row started and
    never ended). Its processes are known by their environment (AGENT_ID and
    AGENTCTL_TOOL_RUN, read in /proc): the recorded group is killed only if one of
    them is still in it (its id may be another's by now), and a call whose group was
    never recorded (agent-run died just after starting it) is found all the same.
    Without /proc, the recorded group is killed. Whether anything was killed."""
    marks = (f"AGENT_ID={agent_id}".encode(), f"{RUN_MARK}={run_id}".encode())
    try:
        pids = [int(n) for n in os.listdir("/proc") if n.isdigit()]
    except OSError:
        return bool(pgid) and kill_group(pgid)
    groups = set()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                entries = f.read().split(b"\0")
            if all(m in entries for m in marks):
                groups.add(os.getpgid(pid))
        except OSError:
            continue        # gone, or not the operator's
    return any([kill_group(g) for g in groups])
