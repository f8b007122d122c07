"""make bench: what the egress proxy costs (agentctl(7), NETWORK). A web server on
127.0.0.1, a process of its own as a host is (not one whose GIL the proxy shares),
serves a small file and a 100 MB one; curl fetches each directly and as a call given
hosts does (here without the sandbox, whose own cost tools.py measures): started as
agent-run starts a call (calls.popen) in a network made for it first (netns.Stage:
as root by a thread of this process, else by the child), on that network's loopback,
whose listener the egress proxy serves, splicing between each connection and the
server's, one hop. The network's making and a connection's set-up in ms, and the
100 MB download as a ratio of the direct one, the network's making included (the
goal's figure) and not (a listener on this loopback handed to the proxy: the bytes'
one hop alone), in the same rounds of runs in one run."""

import array
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
from agentctl.tools import calls, egress, netns  # noqa: E402
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
            path = proxy.socket_for(f"127.0.0.1:{port}", None)
            small, made, big, hop = _measure(curl, port, path)
        finally:
            proxy.close()
            server.terminate()
            server.wait()
    made_ms = statistics.median(made) * 1000
    setup_ms = statistics.median(p - d for d, p in small) * 1000
    print(f"N1. a small fetch: {statistics.median(d for d, _ in small) * 1000:.1f} ms "
          f"directly, {statistics.median(p for _, p in small) * 1000:.1f} ms in a call's "
          f"network, through the egress proxy")
    line("N1. what making a call's network adds to a call given hosts (ms)", made_ms,
         lambda v: (v <= 25, "<= 25 ms"), unit=" ms")
    line("N1. a connection's set-up through the proxy, the network's making aside (ms)",
         setup_ms - made_ms, lambda v: (v <= 5, "<= 5 ms"), unit=" ms")
    ratios = [p / d for d, p in big]
    print(f"N2. 100 MB: {statistics.median(d for d, _ in big) * 1000:.0f} ms directly, "
          f"{statistics.median(p for _, p in big) * 1000:.0f} ms through the proxy")
    line("N2. a 100 MB download through the proxy / directly", statistics.median(ratios),
         lambda v: (v <= 1.3, "<= 1.3x"), spread=(min(ratios), max(ratios)))
    line("N2. the same, the network made before (one hop alone)",
         statistics.median(hop), spread=(min(hop), max(hop)))


def _measure(curl, port, path):
    """(small: pairs of seconds, directly and in a call's network handed to the egress
    proxy at `path`; the network's making, seconds; big: pairs; hop: ratios through a
    listener on this loopback handed to the proxy before, each to the direct fetch of
    the same round)."""
    def run(argv, made):
        """The seconds `argv` takes, started as a call is: in a network made for it
        (`made`), or not."""
        stage = netns.Stage(path) if made else None
        start = time.perf_counter()
        try:
            proc = calls.popen(argv, stage)
            proc.communicate()
        finally:
            if stage is not None:
                stage.close()
        if proc.returncode != 0:
            raise SystemExit(f"bench/net.py: {argv}: exit status {proc.returncode}")
        return time.perf_counter() - start

    def fetch(name, at=None):
        """The seconds curl takes to fetch `name`: directly, or through the proxy at
        127.0.0.1:`at` (at PORT: in a network made for it)."""
        proxy = ["-x", f"http://127.0.0.1:{at}"] if at else []
        return run([curl, "-sS", "-o", os.devnull, *proxy, f"http://127.0.0.1:{port}/{name}"],
                   at == netns.PORT)

    small, big, made = [], [], []
    for _ in range(PAIRS):
        small.append((fetch("small"), fetch("small", netns.PORT)))
        made.append(run(["true"], True) - run(["true"], False))
    listener = socket.create_server(("127.0.0.1", 0))
    held = subprocess.Popen(["sleep", "3600"])     # (whose pidfd the proxy holds)
    try:
        _hand(path, listener, held.pid)
        at, hop = listener.getsockname()[1], []
        for _ in range(PAIRS):      # (the one hop in the same rounds: the same machine)
            direct = fetch("big")
            big.append((direct, fetch("big", netns.PORT)))
            hop.append(fetch("big", at) / direct)
    finally:
        held.terminate()
        held.wait()
        listener.close()
    return small, made, big, hop


def _hand(path, listener, pid):
    """A listener of this network handed to the proxy at `path` as Stage.enter hands
    one, served while process `pid` lives."""
    pidfd = os.pidfd_open(pid)
    with socket.socket(socket.AF_UNIX) as door:
        door.connect(path)
        door.sendmsg([b"\0"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array(
            "i", [listener.fileno(), 2, pidfd]).tobytes())])
    os.close(pidfd)


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
