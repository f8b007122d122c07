"""One writer of the soak test: OPS operations through the programs' own
entry points (each opens the database afresh, as a shell loop would).

    python soak_writer.py WRITER OPS OUTPUT AGENT...

Sends mail to the AGENTs (most operations), forks children, counts mail and
lists the table; writes one JSON line per operation to OUTPUT: what it did,
its exit status, stdout and stderr.
"""

import contextlib
import io
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from agentctl.cli import fork, mail, ps, send  # noqa: E402


def call(module, argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = module.main(argv)
    return code, out.getvalue(), err.getvalue()


def main():
    writer, ops, output, agents = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
    with open(output, "w") as f:
        for n in range(ops):
            kind = ("send", "send", "send", "send", "send", "send", "fork", "count", "ps",
                    "send")[n % 10]
            to = agents[(n * 7 + int(writer)) % len(agents)]
            body = f"w{writer}-{n}"
            if kind == "send":
                argv, module = [to, body], send
            elif kind == "fork":
                argv, module = ["-p", agents[0]], fork
            elif kind == "count":
                argv, module = ["-c", to], mail
            else:
                argv, module = ["-q"], ps
            code, out, err = call(module, argv)
            f.write(json.dumps({"kind": kind, "to": to, "body": body, "code": code,
                                "out": out, "err": err}) + "\n")


if __name__ == "__main__":
    main()
