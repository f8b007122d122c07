"""Work done in an agent's workspace as its tools see it, outside any call
(agent-merge(1)): its stack mounted on its working directory's path in a mount
namespace of a child process's own (with a user namespace that maps the operator's
user alone, unprivileged), where a function runs and the child ends. So what is
written there is written by the kernel's overlay into the agent's own layer, in
its own form: a deletion a whiteout, a directory made anew opaque, which an
unprivileged process could not write into an upper directory itself (a whiteout is
a character device 0:0, which only root may make; the kernel's other form, an empty
file with an overlay.whiteout attribute, written by hand into an upper directory,
hides its name at the top but not in a directory below it, where the name is still
listed and fails to open: measured on Linux 6.18, agent-merge(1)).

The agent's layer is held alone for the time (its lock taken exclusively, as a fork
waits for a frozen layer's writers): a call of the agent's in flight makes it fail
at once (TempFail, try again), and a call that starts meanwhile waits."""

import ctypes
import fcntl
import os
import signal

from agentctl.errors import DATABASE, AgentctlError, Refused
from agentctl.workspace import lifetime, mount

PR_SET_PDEATHSIG = 1


class Held:
    """The agent's stack (layer rows, `agent_id`'s own first) ready to be mounted, its
    own layer held alone until close(): Refused when no layer can be mounted here
    (mount.Unavailable's line); TempFail when a call of the agent's holds its layer."""

    def __init__(self, stack, agent_id):
        try:
            self.mount = mount.Mount(stack, agent_id)
        except mount.Unavailable as e:
            raise Refused(str(e)) from None
        try:
            fcntl.flock(self.mount.lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.mount.close()
            raise lifetime.busy(stack[0]) from None

    def run(self, work):
        """`work(directory)` run where the stack is mounted on its working directory, in
        a child process. AgentctlError with the child's one line when it fails."""
        _run(self.mount, work)

    def close(self):
        self.mount.close()


def within(stack, agent_id, work):
    """`work(directory)` run in the stack mounted (Held, then let go)."""
    held = Held(stack, agent_id)
    try:
        held.run(work)
    finally:
        held.close()


def _run(held, work):
    libc = ctypes.CDLL(None, use_errno=True)
    maps = mount._maps()
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:        # (the child: the namespaces, the mount, the work, its end)
        code = 0
        try:
            os.close(reader)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)    # (it dies with its parent)
            flags = mount.CLONE_NEWNS | (mount.CLONE_NEWUSER if maps else 0)
            if libc.unshare(flags) != 0:
                raise OSError(ctypes.get_errno(), "can't make a namespace: "
                              + os.strerror(ctypes.get_errno()))
            for path, text in maps:
                fd = os.open(path, os.O_WRONLY)
                os.write(fd, text)
                os.close(fd)
            held.made(libc)
            work(held.target)
        except BaseException as e:
            code = 1
            try:
                os.write(writer, (str(e) or type(e).__name__).encode("utf-8", "replace")[:2000])
            except OSError:
                pass
        finally:
            os._exit(code)
    os.close(writer)
    said = b""
    with os.fdopen(reader, "rb") as r:
        said = r.read()
    status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    if status != 0:
        why = said.decode("utf-8", "replace").splitlines()[0] if said.strip() else (
            f"killed by signal {-status}" if status < 0 else f"exit status {status}")
        raise AgentctlError(f"the work in the workspace failed: {why}", code=DATABASE)
