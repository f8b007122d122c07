"""How a sandboxed tool's agentctl programs act as its agent (agentctl(7), SANDBOX).

A sandboxed call sees no database. Inside, agent-send, agent-fork ... (the directory
PROGRAMS_DIR, first on its PATH) only forward: each sends its arguments, its
working directory and its standard input, output and error (the descriptors
themselves) over a socket to agent-run (`Server`), and exits with the status it
gets back. agent-run runs the real program outside the sandbox with the three
descriptors, as the agent: AGENT_ID and the database are agent-run's, whatever the
tool's environment says, no --db is taken (AGENTCTL_PROXIED), agent-run and agent-db
are not offered, and the programs' own rules say what an agent may do (only to
itself and its descendants: ops/authority.py). A program still running when its
tool's process goes away is killed.

The forwarding side (`forward`) is what runs in the sandbox: the standard library
only, so that it starts fast.
"""

import os
import socket
import struct
import sys

PROGRAMS = ("fork", "kill", "ps", "send", "mail", "replay", "wait", "doc", "log", "answer",
            "set", "why")
REFUSED = ("run", "db", "top")      # each says it is not offered
MAX_REQUEST = 1 << 20
SOCKET = "socket"
MOUNT = "/run/agentctl"     # where a sandbox finds the socket and the programs
PROGRAMS_DIR = "bin"


def forward(program, argv=None):
    """Run agent-`program` through agent-run's socket; its exit status."""
    import json
    argv = sys.argv[1:] if argv is None else argv
    if program not in PROGRAMS:
        sys.stderr.write(f"agent-{program}: not offered to a sandboxed tool (only "
                         f"{', '.join('agent-' + p for p in PROGRAMS)})\n")
        return 2
    request = json.dumps({"program": program, "argv": argv, "cwd": os.getcwd()},
                         ensure_ascii=False, default=str).encode("utf-8", "surrogateescape")
    if len(request) > MAX_REQUEST:
        sys.stderr.write(f"agent-{program}: arguments too long for a sandboxed tool\n")
        return 2
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as s:
            s.connect(os.environ["AGENTCTL_SOCKET"])
            socket.send_fds(s, [request], [0, 1, 2])
            status = s.recv(4)
    except OSError as e:
        sys.stderr.write(f"agent-{program}: agent-run can't be reached from this sandbox: "
                         f"{e.strerror or e}\n")
        return 75
    if len(status) != 4:
        sys.stderr.write(f"agent-{program}: agent-run ended before the program did\n")
        return 75
    return struct.unpack("!i", status)[0]


class Server:
    """agent-run's side: a socket in a private directory (bound into each sandbox at
    sandbox.PROXY), a thread that answers it, and the forwarding programs."""

    def __init__(self, environment, cwd):
        import tempfile
        import threading
        self.environment = dict(environment, AGENTCTL_PROXIED="1")
        self.environment.pop("AGENTCTL_SOCKET", None)
        self.cwd = cwd
        self.dir = tempfile.mkdtemp(prefix="agentctl-proxy-")
        os.chmod(self.dir, 0o755)
        self._programs()
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.listener.bind(os.path.join(self.dir, SOCKET))
        self.listener.listen(16)
        self.running = []
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _programs(self):
        """agent-PROGRAM in PROGRAMS_DIR: forward(PROGRAM), under this Python."""
        import shlex
        top = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        with open(os.path.join(self.dir, "forward.py"), "w") as f:
            f.write(f"import sys\nsys.path.insert(0, {top!r})\n"
                    "from agentctl.tools.proxy import forward\n"
                    "sys.exit(forward(sys.argv[1], sys.argv[2:]))\n")
        bin_dir = os.path.join(self.dir, PROGRAMS_DIR)
        os.mkdir(bin_dir)
        for name in PROGRAMS + REFUSED:
            path = os.path.join(bin_dir, f"agent-{name}")
            with open(path, "w") as f:
                f.write(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} -P "
                        f"{MOUNT}/forward.py {name} \"$@\"\n")
            os.chmod(path, 0o755)

    def _accept(self):
        import threading
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return          # closed
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        import json
        import select
        import subprocess
        fds = []
        with conn:
            try:
                data, fds, _, _ = socket.recv_fds(conn, MAX_REQUEST + 1, 3)
                request = json.loads(data.decode("utf-8", "surrogateescape"))
                program, argv = request["program"], request["argv"]
                if program not in PROGRAMS or len(fds) != 3 or not isinstance(argv, list) \
                        or not all(isinstance(a, str) for a in argv):
                    raise ValueError(program)
                cwd = os.path.abspath(str(request.get("cwd") or self.cwd))
                if not (cwd == self.cwd or cwd.startswith(self.cwd.rstrip("/") + "/")) \
                        or not os.path.isdir(cwd):
                    cwd = self.cwd
                proc = subprocess.Popen(
                    [sys.executable, "-P", "-c", "import sys; from agentctl.cli."
                     f"{program} import main; sys.exit(main())", *argv],
                    stdin=fds[0], stdout=fds[1], stderr=fds[2], env=self.environment,
                    cwd=cwd)
            except (OSError, ValueError, KeyError, TypeError, UnicodeError):
                if len(fds) == 3:
                    os.write(fds[2], b"agentctl: a sandboxed tool's request was refused\n")
                self._reply(conn, 2)
                return
            finally:
                for fd in fds:
                    os.close(fd)
            self.running.append(proc)
            while proc.poll() is None:
                readable, _, _ = select.select([conn], [], [], 0.1)
                if readable and not conn.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT):
                    proc.kill()         # the tool went away: so does its program
                    proc.wait()
                    break
            self.running.remove(proc)
            code = proc.returncode
            self._reply(conn, code if code >= 0 else 128 - code)

    @staticmethod
    def _reply(conn, code):
        try:
            conn.send(struct.pack("!i", code))
        except OSError:
            pass

    def close(self):
        import shutil
        if self.closed:
            return
        self.closed = True
        self.listener.close()
        for proc in list(self.running):
            proc.kill()
        shutil.rmtree(self.dir, ignore_errors=True)
