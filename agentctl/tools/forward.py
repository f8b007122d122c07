"""The forwarding side of agentctl's programs in a sandbox (proxy.py): agent-PROGRAM
sends its arguments, its working directory, its standard input, output and error (the
descriptors themselves) and the sandbox's key over the socket to agent-run, and exits
with the status it gets back. The standard library only, and as little of it as will
do: it starts for every agentctl program a sandboxed tool runs. So what both sides of
the socket agree on is declared here, and agent-run's side (proxy.py, which imports
far more) takes it from here.
"""

import _socket      # (not socket: socket.py takes longer to import than the rest together)
import errno
import json
import os
import sys

from agentctl.programs import OFFERED as PROGRAMS

KEY = "AGENTCTL_PROXY_KEY"  # the sandbox's proof that it is this server's
FDS = 3                     # standard input, output and error
MAX_REQUEST = 1 << 20       # the bytes of a request
USAGE, TEMPFAIL = 2, 75     # the exit statuses of a request refused, of a server out of reach


def forward(program, argv=None):
    """Run agent-`program` through agent-run's socket; its exit status."""
    argv = sys.argv[1:] if argv is None else argv
    if program not in PROGRAMS:
        sys.stderr.write(f"agent-{program}: not offered to a sandboxed tool (only "
                         f"{', '.join('agent-' + p for p in PROGRAMS)})\n")
        return USAGE
    try:
        cwd = os.getcwd()
    except OSError:             # removed: the server takes the agent's
        cwd = ""
    request = json.dumps({"program": program, "argv": argv, "cwd": cwd,
                          "key": os.environ.get(KEY, "")},
                         ensure_ascii=False, default=str).encode("utf-8", "surrogateescape")
    if len(request) > MAX_REQUEST:
        sys.stderr.write(f"agent-{program}: arguments too long for a sandboxed tool\n")
        return USAGE
    fds = b"".join(fd.to_bytes(4, sys.byteorder) for fd in range(FDS))
    try:
        s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_SEQPACKET)
        try:
            s.connect(os.environ["AGENTCTL_SOCKET"])
            s.sendmsg([request], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, fds)])
            status = s.recv(4)
        finally:
            s.close()
    except OSError as e:
        if e.errno == errno.EMSGSIZE:
            sys.stderr.write(f"agent-{program}: arguments too long for a sandboxed tool\n")
            return USAGE
        sys.stderr.write(f"agent-{program}: agent-run can't be reached from this sandbox: "
                         f"{e.strerror or e}\n")
        return TEMPFAIL
    if len(status) != 4:
        sys.stderr.write(f"agent-{program}: agent-run ended before the program did\n")
        return TEMPFAIL
    return int.from_bytes(status, "big", signed=True)
