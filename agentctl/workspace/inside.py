"""Work done in an agent's workspace as its tools see it, outside any call
(agent-merge(1)): a child process enters the mount namespace where its stack is
mounted on its working directory's path (space.py: this process's, made once for
the stack, as a call's is), runs a function there and ends. So what is
written there is written by the kernel's overlay into the agent's own layer, in
its own form: a deletion a whiteout, a directory made anew opaque, which an
unprivileged process could not write into an upper directory itself (a whiteout is
a character device 0:0, which only root may make; the kernel's other form, an empty
file with an overlay.whiteout attribute, written by hand into an upper directory,
hides its name at the top but not in a directory below it, where the name is still
listed and fails to open: measured on Linux 6.18, agent-merge(1)).

The agent's layer is held alone for the time (the lock of the Spaces that hold it,
space.py, taken exclusively): a turn of the agent's in another process makes it fail
at once (TempFail, try again), and a call that starts meanwhile waits. The agent's
own turn (the merge built-in) works in the Space its calls enter."""

import ctypes
import fcntl
import os
import signal

from agentctl.errors import DATABASE, AgentctlError, Refused
from agentctl.workspace import lifetime, mount, space

PR_SET_PDEATHSIG = 1


class Held:
    """The agent's stack (layer rows, `agent_id`'s own first) ready to be mounted, its
    own layer held alone until close(): Refused when no layer can be mounted here
    (mount.Unavailable's line); TempFail when a turn of the agent's holds its layer."""

    def __init__(self, stack, agent_id):
        before = space.holding()
        try:
            self.mount = mount.Mount(stack, agent_id)
        except mount.Unavailable as e:
            raise Refused(str(e)) from None
        self.made = self.mount.space not in before      # (else: this turn's own)
        try:
            fcntl.flock(self.mount.space.guard, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fcntl.flock(self.mount.space.guard, fcntl.LOCK_SH)  # (a failed change may drop it)
            self.close()
            raise lifetime.busy(stack[0], "a turn") from None

    def run(self, work):
        """`work(directory)` run where the stack is mounted on its working directory, in
        a child process. AgentctlError with the child's one line when it fails."""
        _run(self.mount, work)

    def close(self):
        """Let go: the Space this made (so none stays to go stale), or the turn's own,
        shared again."""
        if self.made:
            space.release()
        elif self.mount.space.guard is not None:
            fcntl.flock(self.mount.space.guard, fcntl.LOCK_SH)
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
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:        # (the child: the layer's namespaces entered, the work, its end)
        code = 0
        try:
            os.close(reader)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)    # (it dies with its parent)
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
