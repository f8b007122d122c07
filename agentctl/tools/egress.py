"""The egress proxy (agentctl(7), NETWORK): a sandbox's one way out. A call given hosts
runs in a network of its own with no route out, made before its sandbox (netns.py),
whose listener on its loopback at PORT (where the proxy variables point its programs)
is handed here, to agent-run, outside, over the socket of its list (`socket_for`, in
agent-run's private directory: no sandbox sees it), with the tool's standard error, a
pidfd of its bwrap and the watch's descriptor (netwatch.py). Here each connection is
accepted from that listener and read and written from here: the bytes cross one
proxy, spliced between the tool's socket and the host's (_pump). Each request is
judged against the list of hosts of the sandbox (agentctl.hosts): HTTPS by CONNECT
HOST:PORT (no TLS is opened here), plain HTTP by its absolute URL; the name is
resolved here (there is no DNS inside), the address checked, and connected to as
resolved (a name can't be made to lead elsewhere between the check and the
connection). Every connection, allowed or refused, is a record (drain()) that the turn
writes to the event log; a refused one is also one line on the tool's standard error.
A call's listener is served until its bwrap has ended.
"""

import fcntl
import os
import select
import shutil
import socket
import tempfile
import threading
import time

from agentctl import hosts, paths
from agentctl.text import host_port
from agentctl.tools import netns, netwatch
from agentctl.tools.netns import PORT

HEAD_MOST = 64 * 1024       # the bytes of a request's head
HEAD_SECONDS = 30.0         # to send it
CONNECT_SECONDS = 30.0      # to reach the host
CHUNK = 1 << 16            # the bytes read at once of a head
SPLICED = 1 << 20          # the bytes a splice moves at most
F_SETPIPE_SZ = 1031
PROXY_URL = f"http://127.0.0.1:{PORT}"
OWN = {("tcp", PORT)}       # what listens in a call's network while it lives (netwatch)
# What a sandbox's programs read to find the proxy (curl reads http_proxy in lower case
# only; node's fetch the variables only with NODE_USE_ENV_PROXY). NO_PROXY is left
# unset: every connection goes through the proxy, the host's loopback too (refused
# unless named by address).
VARIABLES = {name: PROXY_URL for name in ("http_proxy", "HTTP_PROXY", "https_proxy",
                                          "HTTPS_PROXY", "all_proxy", "ALL_PROXY")}
VARIABLES["NODE_USE_ENV_PROXY"] = "1"


class Server:
    """The egress proxy of one turn's sandboxes: a socket per list of hosts (the
    agent's, each MCP server's) in `dir`, agent-run's private directory, where each
    call given that list hands its network (netns.Stage), served until its bwrap has
    ended. `dir` is removed at close."""

    VARIABLES = VARIABLES
    MOST = 256                  # connections at once, of all its calls

    def __init__(self, directory, grant):
        self.dir = directory
        self.grant = grant          # (list, pattern, who) -> the grant that would allow it
        self.lock = threading.Lock()
        self.listeners = {}         # (list as stored, who) -> (socket, its path)
        self.records = []
        self.closed = False
        self.slots = threading.BoundedSemaphore(self.MOST)
        self.networks = set()       # the calls' networks being served (netns.Network)

    @classmethod
    def made(cls, hosts, agent):
        """The egress proxy of `agent`'s sandboxes (its label; `hosts` its list as
        stored), in a new private directory of the run-time directory (one that a
        crash leaves is swept as the program proxy's are)."""
        directory = tempfile.mkdtemp(prefix=f"proxy-{os.getpid()}-net-",
                                     dir=paths.runtime(make=True))

        def grant(stored, wanted, who):
            """What would allow a host refused: the agent's list with it (agent-set), or
            an MCP server's "net" with it."""
            if who is not None:
                return f'add "{wanted}" to the "net" of MCP server {who} to allow it'
            given = ",".join((hosts.split("\n") if hosts else []) + [wanted])
            return (f"agent-set {agent} net={given} would allow it (given by an ancestor "
                    "or the operator)")
        return cls(directory, grant)

    def socket_for(self, stored, who):
        """The path of the socket where a call given the list `stored` (one pattern a
        line) of `who` (the agent's: None; an MCP server's name) hands its network."""
        key = (stored, who)
        with self.lock:
            if key not in self.listeners:
                path = os.path.join(self.dir, str(len(self.listeners)))
                listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                listener.bind(path)
                listener.listen(64)
                self.listeners[key] = (listener, path)
                threading.Thread(target=self._accept, args=(listener, stored, who),
                                 daemon=True, name="agentctl-egress").start()
            return self.listeners[key][1]

    def drain(self):
        """The connections ended since the last drain, each a dict of the net event's
        fields (eventkinds)."""
        with self.lock:
            records, self.records = self.records, []
        return records

    def settle(self, seconds):
        """Wait, at most `seconds`, for the connections in flight to end (their tools or
        servers stopped), so that drain() has them all."""
        deadline, taken = time.monotonic() + seconds, 0
        try:
            while taken < self.MOST:
                left = deadline - time.monotonic()
                if left <= 0 or not self.slots.acquire(timeout=left):
                    break
                taken += 1
        finally:
            for _ in range(taken):
                self.slots.release()

    def close(self):
        """Its sockets shut down and closed, and its directory removed; each call's
        listener shut down (its thread ends, and closes it: a descriptor is closed by
        the thread that polls it, never under it)."""
        self.closed = True
        with self.lock:
            own = [s for s, _ in self.listeners.values()]
            listeners = own + [n.listener for n in self.networks]
        for listener in listeners:
            try:
                listener.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for listener in own:
            listener.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _accept(self, listener, stored, who):
        """The networks of the calls given the list `stored`, each served by a thread
        of its own."""
        patterns = hosts.read(stored)
        while not self.closed:
            try:
                door, _ = listener.accept()
            except OSError:
                if self.closed:
                    return
                time.sleep(0.05)
                continue
            try:
                door.settimeout(HEAD_SECONDS)
                network = netns.received(door)
            except (OSError, ValueError):
                continue
            finally:
                door.close()
            with self.lock:
                if self.closed:
                    network.close()
                    return
                self.networks.add(network)
            threading.Thread(target=self._network, args=(network, stored, patterns, who),
                             daemon=True, name="agentctl-egress-call").start()

    def _network(self, network, stored, patterns, who):
        """Serve one call's network until its bwrap has ended (or the proxy closes):
        each connection to its listener, each question of its watch."""
        poller = select.poll()
        listener = network.listener.fileno()
        for fd in (listener, network.pidfd, network.watch):
            if fd is not None:
                poller.register(fd, select.POLLIN)
        listed = stored.replace("\n", ",")
        try:
            while True:
                for fd, event in poller.poll():
                    if fd == network.pidfd or fd == listener and event & ~select.POLLIN:
                        return          # (its bwrap has ended, or the proxy closed)
                    if fd == network.watch:
                        if event & (select.POLLHUP | select.POLLERR):
                            poller.unregister(fd)
                        else:
                            netwatch.answer(fd, network.say, listed, OWN)
                        continue
                    try:
                        conn, _ = network.listener.accept()
                    except OSError:
                        continue
                    if not self.slots.acquire(blocking=False):
                        conn.close()    # (too many at once: the tool sees a reset)
                        continue
                    threading.Thread(target=self._serve, daemon=True, args=(
                        conn, network.say, stored, patterns, who)).start()
        finally:
            with self.lock:
                self.networks.discard(network)
            network.close()

    def _note(self, record):
        with self.lock:
            self.records.append(record)

    def _serve(self, conn, say, stored, patterns, who):
        started = time.monotonic()
        try:
            conn.settimeout(HEAD_SECONDS)
            head, rest = _head(conn)
            request = _request(head)
            if request is None:
                conn.sendall(_response(400, "agentctl: net: not an HTTP proxy request\n"))
                return
            method, host, port, forwarded = request
            refusal, address = _decide(patterns, host, port)
            record = {"host": host, "port": port, "by": who}
            if refusal is not None:
                wanted = host_port(str(address or host))
                line = (f"agentctl: net: refused {host_port(host, port)}: {refusal}; "
                        f"{self.grant(stored, wanted, who)}\n")
                say(line)
                self._note(dict(record, outcome="refused", reason=refusal, sent=0,
                                received=0, seconds=round(time.monotonic() - started, 3)))
                conn.sendall(_response(403, line))      # (noted first: the call's own)
                return
            record["address"] = str(address)
            try:
                upstream = socket.create_connection((str(address), port), CONNECT_SECONDS)
            except OSError as e:
                why = f"can't connect to {address}: {e.strerror or e}"
                self._note(dict(record, outcome="failed", reason=why, sent=0, received=0,
                                seconds=round(time.monotonic() - started, 3)))
                conn.sendall(_response(502, f"agentctl: net: {host_port(host, port)}: {why}\n"))
                return
            with upstream:
                conn.settimeout(None)
                upstream.settimeout(None)
                if method == "CONNECT":
                    conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                    first = rest
                else:
                    first = forwarded + rest
                sent, received = _relay(conn, upstream, first)
            self._note(dict(record, outcome="allowed", sent=sent, received=received,
                            seconds=round(time.monotonic() - started, 3)))
        except (OSError, ValueError):
            pass            # the client went away, or its head never came whole
        finally:
            conn.close()
            self.slots.release()


def _decide(patterns, host, port):
    """(None, the address to connect to), or (why it is refused, None, or the address
    refused when the list names the host but not that address)."""
    if not hosts.named(patterns, host, port):
        return f"not in its list ({','.join(p.text for p in patterns)})", None
    literal = hosts.address_of(host)
    if literal is not None:
        if hosts.reachable(patterns, literal, port):
            return None, literal
        return (f"{literal} is {hosts.describe(literal)}: only its list naming it by "
                f"address reaches it ({','.join(p.text for p in patterns)})"), literal
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as e:
        return f"can't resolve {host}: {getattr(e, 'strerror', None) or e}", None
    addresses = [hosts.address_of(info[4][0]) for info in found]
    for address in addresses:
        if hosts.reachable(patterns, address, port):
            return None, address
    return (f"{host} resolves to {addresses[0]}, which is {hosts.describe(addresses[0])}: "
            f"only its list naming it by address reaches it "
            f"({','.join(p.text for p in patterns)})"), addresses[0]


def _head(conn):
    """The request's head and what came after it."""
    buffer = bytearray()
    while b"\r\n\r\n" not in buffer:
        if len(buffer) > HEAD_MOST:
            raise ValueError("a head too long")
        more = conn.recv(CHUNK)
        if not more:
            raise ValueError("the head never ended")
        buffer += more
    end = buffer.index(b"\r\n\r\n") + 4
    return bytes(buffer[:end]), bytes(buffer[end:])


def _request(head):
    """(method, host, port, the head to send on) of a proxy request, or None."""
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/"):
        return None
    method, target, version = parts
    if method == "CONNECT":
        host, port = _split(target, None)
        return (method, host, port, b"") if host and port else None
    if not target.lower().startswith("http://"):
        return None         # (https:// goes by CONNECT)
    authority, slash, path = target[7:].partition("/")
    host, port = _split(authority.rpartition("@")[2], 80)
    if not host or not port:
        return None
    kept = [line for line in lines[1:] if line and not line.lower().startswith("proxy-")]
    forwarded = "\r\n".join([f"{method} {slash + path or '/'} {version}"] + kept) + "\r\n\r\n"
    return method, host, port, forwarded.encode("latin-1")


def _split(authority, default):
    """(host, port) of HOST:PORT, [V6]:PORT, HOST (port `default`); (None, None): bad."""
    if authority.startswith("["):
        host, _, rest = authority[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else (None if rest else default)
    else:
        host, colon, port = authority.rpartition(":")
        if not colon:
            host, port = authority, default
    try:
        port = int(port)
    except (TypeError, ValueError):
        return None, None
    return (host.lower(), port) if host and 0 < port < 65536 else (None, None)


def _response(status, text):
    reason = {400: "Bad Request", 403: "Forbidden", 502: "Bad Gateway"}[status]
    body = text.encode("utf-8", "replace")
    return (f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode() + body


def _relay(client, upstream, first):
    """Carry bytes both ways until both sides are done: (sent, received)."""
    counts = [0, 0]
    if first:
        upstream.sendall(first)
        counts[0] += len(first)
    back = threading.Thread(target=_pump, args=(upstream, client, counts, 1), daemon=True)
    back.start()
    _pump(client, upstream, counts, 0)
    back.join()
    return counts[0], counts[1]


def _pump(source, target, counts=None, index=0):
    """Copy `source` to `target` until its end, then end `target`'s writing, adding the
    bytes to counts[index]: spliced through a pipe (no copy through Python)."""
    r, w = os.pipe()
    try:
        try:
            fcntl.fcntl(w, F_SETPIPE_SZ, SPLICED)     # (64 KiB a splice else)
        except OSError:
            pass
        while True:
            n = os.splice(source.fileno(), w, SPLICED)
            if not n:
                break
            if counts is not None:
                counts[index] += n
            while n:
                n -= os.splice(r, target.fileno(), n)
    except OSError:
        pass
    finally:
        os.close(r)
        os.close(w)
        for sock, how in ((target, socket.SHUT_WR), (source, socket.SHUT_RD)):
            try:
                sock.shutdown(how)
            except OSError:
                pass
