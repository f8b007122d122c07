"""make bench: what the egress proxy costs (agentctl(7), NETWORK). A web server on
127.0.0.1, a process of its own as a host is (not one whose GIL the proxy shares),
serves a small file and a 100 MB one; curl fetches each directly and through the
outlet and the egress proxy (as a sandboxed call given hosts does, here without the
sandbox, whose own cost tools.py measures): the outlet hands each connection to the
egress proxy, which splices between it and the server's, one hop. The outlet's start
and a connection's set-up in ms, and the 100 MB download as a ratio of the direct
one, the outlet's start included (the goal's figure) and not (an outlet started
before: the bytes' one hop alone), pairs of runs in one run."""

import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench import line  # noqa: E402  (bench/bench.py, beside this file)
from agentctl import spawn  # noqa: E402
from agentctl.tools import egress, outlet  # noqa: E402
from tests import localhttp  # noqa: E402

PAIRS = int(os.environ.get("BENCH_RUNS", "15"))
BIG = 100 * 1000 * 1000


def main():
    curl = shutil.which("curl")
    if curl is None:
        print("N. skipped: no curl")
        return
    with tempfile.TemporaryDirectory() as tmp:
        site = os.path.join(tmp, "site")
        os.mkdir(site)
        with open(os.path.join(site, "small"), "wb") as f:
            f.write(b"x" * 1000)
        with open(os.path.join(site, "big"), "wb") as f:
            f.truncate(BIG)
        port = localhttp.free_port()
        server = subprocess.Popen([sys.executable, "-m", "http.server", "-b", "127.0.0.1",
                                   "-d", site, str(port)], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
        sockets = os.path.join(tmp, "net")
        os.mkdir(sockets)
        proxy = egress.Server(sockets, lambda *a: "")
        try:
            _wait_for(port)
            directory, inside = proxy.socket_for(f"127.0.0.1:{port}", None)
            path = inside.replace(egress.SOCKET_DIR, directory)
            small, started, big, hop = _measure(curl, port,
                                                spawn.script(outlet.__file__, path,
                                                             f"127.0.0.1:{port}", "--"))
        finally:
            proxy.close()
            server.terminate()
            server.wait()
    outlet_ms = statistics.median(started) * 1000
    setup_ms = statistics.median(p - d for d, p in small) * 1000
    print(f"N1. a small fetch: {statistics.median(d for d, _ in small) * 1000:.1f} ms "
          f"directly, {statistics.median(p for _, p in small) * 1000:.1f} ms through the "
          f"outlet and the egress proxy")
    line("N1. what the outlet's start adds to a call given hosts (ms)", outlet_ms,
         lambda v: (v <= 25, "<= 25 ms"), unit=" ms")
    line("N1. a connection's set-up through the proxy, outlet's start aside (ms)",
         setup_ms - outlet_ms, lambda v: (v <= 5, "<= 5 ms"), unit=" ms")
    ratios = [p / d for d, p in big]
    print(f"N2. 100 MB: {statistics.median(d for d, _ in big) * 1000:.0f} ms directly, "
          f"{statistics.median(p for _, p in big) * 1000:.0f} ms through the proxy")
    line("N2. a 100 MB download through the proxy / directly", statistics.median(ratios),
         lambda v: (v <= 1.3, "<= 1.3x"), spread=(min(ratios), max(ratios)))
    line("N2. the same, the outlet started before (one hop alone)",
         statistics.median(hop), spread=(min(hop), max(hop)))


def _measure(curl, port, through):
    """(small: pairs of seconds, directly and through `through`, the outlet's argv; the
    outlet's start, seconds; big: pairs; hop: ratios through an outlet started before).
    One outlet at a time: it listens on its fixed port, outside a sandbox too."""
    def fetch(name, proxied, started=False):
        argv = [curl, "-sS", "-o", os.devnull, f"http://127.0.0.1:{port}/{name}"]
        if proxied:
            argv = ([] if started else through) + argv[:1] + [
                "-x", f"http://127.0.0.1:{outlet.PORT}"] + argv[1:]
        start = time.perf_counter()
        subprocess.run(argv, check=True)
        return time.perf_counter() - start

    def start_only():
        start = time.perf_counter()
        subprocess.run(through + ["true"], check=True)
        return time.perf_counter() - start

    small, big, started = [], [], []
    for _ in range(PAIRS):
        direct, proxied = fetch("small", False), fetch("small", True)
        small.append((direct, proxied))
        bare = time.perf_counter()
        subprocess.run(["true"], check=True)
        bare = time.perf_counter() - bare
        started.append(start_only() - bare)
    for _ in range(PAIRS):
        big.append((fetch("big", False), fetch("big", True)))
    held = subprocess.Popen(through + ["sleep", "3600"])
    try:
        _wait_for(outlet.PORT)
        hop = [fetch("big", True, started=True) / fetch("big", False) for _ in range(PAIRS)]
    finally:
        held.terminate()
        held.wait()
    return small, started, big, hop


def _wait_for(port):
    """Until something accepts on 127.0.0.1:`port` (10 s at most)."""
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), 1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)


if __name__ == "__main__":
    main()
