"""The network by allowlist (agentctl(7), NETWORK): a sandbox has no route out but the
egress proxy's listener on its loopback, which lets through only what the agent's
--net list names. Real programs (curl, pip, git) in the sandbox reach fixtures on
127.0.0.1, named by address; what a model would try beyond the list (other hosts, the loopback database,
names that lead to loopback or the metadata address, abstract sockets, raw UDP, DNS)
is refused, and every connection is in the event log."""

import http.server
import json
import os
import socket
import subprocess
import sys
import threading
import zipfile

import pytest

from agentctl import hosts
from agentctl.errors import UsageError
from agentctl.store.db import connect
from agentctl.tools import egress, mcp

from .conftest import agent, fork, needs, shell
from .test_sandbox import attempt, world  # noqa: F401 (fixture)

PYTHON = sys.executable


# -- the rules of a list (agentctl.hosts)

@pytest.mark.parametrize("text, kind", [
    ("pypi.org", "name"), ("*.github.com:443", "suffix"), ("*", "all"), ("*:443", "all"),
    ("192.0.2.7", "net"), ("10.0.0.0/8", "net"), ("[2001:db8::1]:443", "net"),
    ("[fd00::/8]", "net"), ("Files.PythonHosted.org", "name")])
def test_a_pattern_is_read(text, kind):
    assert hosts.pattern(text).kind == kind


@pytest.mark.parametrize("text", ["fix the bug", "pypi.org:0", "pypi.org:99999", "::1",
                                  "*.*.com", "a..b", "-a.com", "*foo.com", "host:port"])
def test_a_bad_pattern_is_a_usage_error_that_names_it(text):
    with pytest.raises(UsageError, match="bad net"):
        hosts.parse(text)


def test_yes_and_no_are_every_public_host_and_none():
    assert hosts.parse("yes") == ["*"] and hosts.parse("off") == []


@pytest.mark.parametrize("new, old, within", [
    ("pypi.org", "*", True), ("api.github.com", "*.github.com", True),
    ("*.api.github.com", "*.github.com", True), ("github.com", "*.github.com", False),
    ("pypi.org:443", "pypi.org", True), ("pypi.org", "pypi.org:443", False),
    ("10.1.0.0/16", "10.0.0.0/8", True), ("10.0.0.0/8", "10.1.0.0/16", False),
    ("127.0.0.1", "*", False), ("8.8.8.8", "*", True), ("*", "pypi.org", False),
    ("pypi.org\nexample.com", "pypi.org", False)])
def test_a_list_within_another(new, old, within):
    assert hosts.within(new, old) is within


def test_a_name_is_reached_only_at_a_public_address_unless_named_by_address():
    listed = hosts.read("*\n10.0.0.5:80")
    public = hosts.address_of("93.184.216.34")
    assert hosts.reachable(listed, public, 443)
    for private in ("127.0.0.1", "169.254.169.254", "10.0.0.9", "100.64.0.1", "::1",
                    "::ffff:127.0.0.1", "fe80::1"):
        assert not hosts.reachable(listed, hosts.address_of(private), 443), private
    assert hosts.reachable(listed, hosts.address_of("10.0.0.5"), 80)
    assert not hosts.reachable(listed, hosts.address_of("10.0.0.5"), 443)


@pytest.mark.parametrize("address, says", [("127.0.0.1", "loopback"),
                                           ("169.254.169.254", "link-local"),
                                           ("10.1.2.3", "private")])
def test_a_name_that_resolves_to_a_private_address_is_refused(monkeypatch, address, says):
    """DNS under an attacker's control: a name in the list that resolves to the
    metadata address, loopback or a private network is refused, and what is connected
    to is the address checked, never a second resolution."""
    monkeypatch.setattr(socket, "getaddrinfo",
                        lambda *a, **k: [(socket.AF_INET, socket.SOCK_STREAM, 6, "",
                                          (address, 443))])
    refusal, _ = egress._decide(hosts.read("*.example.com"), "evil.example.com", 443)
    assert refusal and says in refusal and "evil.example.com resolves to" in refusal
    refusal, chosen = egress._decide(hosts.read(f"*.example.com\n{address}"),
                                     "evil.example.com", 443)
    assert refusal is None and str(chosen) == address


def test_an_address_literal_needs_an_address_pattern_or_a_public_address():
    assert egress._decide(hosts.read("*"), "169.254.169.254", 80)[0]
    assert egress._decide(hosts.read("pypi.org"), "151.101.0.223", 443)[0]
    assert egress._decide(hosts.read("*"), "151.101.0.223", 443)[0] is None


def test_a_proxy_request_is_read_and_its_absolute_url_made_a_path():
    method, host, port, forwarded = egress._request(
        b"GET http://Example.com:8080/a?b HTTP/1.1\r\nHost: example.com:8080\r\n"
        b"Proxy-Authorization: x\r\n\r\n")
    assert (method, host, port) == ("GET", "example.com", 8080)
    assert forwarded.startswith(b"GET /a?b HTTP/1.1\r\n") and b"Proxy-" not in forwarded
    assert egress._request(b"CONNECT [::1]:443 HTTP/1.1\r\n\r\n")[1:3] == ("::1", 443)
    assert egress._request(b"GET https://x/ HTTP/1.1\r\n\r\n") is None
    assert egress._request(b"CONNECT x HTTP/1.1\r\n\r\n") is None


@pytest.mark.parametrize("given, hosts_, error", [
    (True, ["*"], None), (False, [], None), (["registry.npmjs.org"], ["registry.npmjs.org"],
                                                 None),
    (["not a host"], None, '"net": '), ("pypi.org", None, '"net" is a list')])
def test_an_mcp_servers_net_is_a_list_or_true(given, hosts_, error):
    if error:
        with pytest.raises(ValueError, match=error):
            mcp.hosts({"net": given})
    else:
        assert mcp.hosts({"net": given}) == hosts_


# -- in the sandbox

@pytest.fixture(autouse=False)
def site(tmp_path):
    """A web server on 127.0.0.1 serving tmp_path/site: a file, a package index with
    one wheel, and a git repository over git's plain HTTP."""
    root = tmp_path / "site"
    (root / "simple" / "tinypkg").mkdir(parents=True)
    (root / "hello.txt").write_text("hello through the proxy\n")
    wheel = root / "simple" / "tinypkg" / "tinypkg-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("tinypkg/__init__.py", "")
        z.writestr("tinypkg-1.0.dist-info/METADATA",
                   "Metadata-Version: 2.1\nName: tinypkg\nVersion: 1.0\n")
        z.writestr("tinypkg-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: test\n"
                   "Root-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr("tinypkg-1.0.dist-info/RECORD", "")
    (root / "simple" / "tinypkg" / "index.html").write_text(
        f'<a href="{wheel.name}">{wheel.name}</a>\n')
    git = needs("git", "git")
    work = tmp_path / "repo"
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@t")
    for args in (["init", "-q", str(work)], ["-C", str(work), "commit", "-q", "--allow-empty",
                                              "-m", "first through the proxy"],
                 ["clone", "-q", "--bare", str(work), str(root / "repo.git")],
                 ["-C", str(root / "repo.git"), "update-server-info"]):
        subprocess.run([git, *args], check=True, env=env, capture_output=True)

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *a, **k):
            super().__init__(*a, directory=str(root), **k)

        def log_message(self, *a):
            pass
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def net_events(name):
    shown = agent("log", "--kind", "net", "--format", "json", name)
    assert shown.code == 0, shown.err
    return [json.loads(line) if isinstance(line, str) else line
            for line in json.loads(shown.out)]


def test_curl_pip_and_git_reach_a_host_the_list_names(world, tmp_path, site):  # noqa: F811
    """The three everyday programs work as they are (they honour the proxy variables),
    and every connection is in agent-log with its bytes."""
    needs("curl", "curl")
    body = (f"curl -fsS http://127.0.0.1:{site}/hello.txt && "
            f"{PYTHON} -m pip download -q --no-deps --no-cache-dir --disable-pip-version-check"
            f" --index-url http://127.0.0.1:{site}/simple/ -d /tmp/got tinypkg && ls /tmp/got && "
            f"git clone -q http://127.0.0.1:{site}/repo.git /tmp/r && git -C /tmp/r log "
            "--format=%s")
    result = attempt(world, tmp_path, body, "--net", f"127.0.0.1:{site}")
    assert "hello through the proxy" in result, result
    assert "tinypkg-1.0-py3-none-any.whl" in result, result
    assert "first through the proxy" in result, result
    events = net_events("a")
    assert len(events) >= 4 and all(e["data"]["outcome"] == "allowed" for e in events)
    assert all(e["data"]["host"] == "127.0.0.1" and e["data"]["port"] == site for e in events)
    assert sum(e["data"]["received"] for e in events) > 1000
    shown = agent("log", "--kind", "net", "a").out
    assert f"net 127.0.0.1:{site} (127.0.0.1)" in shown and "attempt" in shown


def test_a_host_outside_the_list_is_refused_with_a_line_that_names_the_list_and_the_grant(
        world, tmp_path, site):  # noqa: F811
    needs("curl", "curl")
    result = attempt(world, tmp_path, f"curl -fsS http://127.0.0.1:{site}/hello.txt",
                     "--net", "pypi.org,*.github.com")
    assert "hello" not in result
    line = [x[x.index("agentctl: net"):] for x in result.splitlines() if "agentctl: net" in x]
    assert line == [f"agentctl: net: refused 127.0.0.1:{site}: not in its list "
                    f"(pypi.org,*.github.com); agent-set a net=pypi.org,*.github.com,127.0.0.1 "
                    "would allow it (given by an ancestor or the operator)"], result
    event, = net_events("a")
    assert event["data"]["outcome"] == "refused" and "not in its list" in event["data"]["reason"]
    why = agent("why", "a").out
    assert f"its tools' last connection was refused (turn 1, by attempt): 127.0.0.1:{site}: " \
           "not in its list (pypi.org,*.github.com)" in why, why
    assert "last minute: " in agent("top").out and "1 connection (1 refused)" in agent("top").out


def test_a_listed_host_that_does_not_answer_is_a_failed_connection(world, tmp_path):  # noqa: F811
    """Allowed, but nothing listens there: 502 with why, and a net event 'failed'."""
    needs("curl", "curl")
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()              # (a port just freed: nothing listens on it)
    result = attempt(world, tmp_path, f"curl -fsS -m 20 http://127.0.0.1:{port}/",
                     "--net", f"127.0.0.1:{port}")
    assert "error: exit status 22" in result, result
    event, = net_events("a")
    assert event["data"]["outcome"] == "failed" and event["data"]["tool"] == "attempt", event
    assert "can't connect to 127.0.0.1" in event["data"]["reason"], event


@pytest.mark.parametrize("target, says", [
    ("http://localhost:{port}/hello.txt", "localhost resolves to 127.0.0.1, which is loopback"),
    ("http://169.254.169.254/latest/meta-data/", "169.254.169.254 is link-local"),
    ("http://127.0.0.1:{port}/hello.txt", "127.0.0.1 is loopback")])
def test_every_public_host_still_leaves_out_loopback_and_the_metadata_address(
        world, tmp_path, site, target, says):  # noqa: F811
    """--net alone (every public host) or a name of the list: the host's loopback (its
    database, its MCP and dev servers) and the metadata address stay out of reach."""
    needs("curl", "curl")
    listed = "*,localhost" if "localhost" in target else "*"
    result = attempt(world, tmp_path, f"curl -fsS -m 20 {target.format(port=site)}",
                     "--net", listed)
    assert "hello" not in result and f"agentctl: net: refused" in result, result
    assert says in result, result


def test_no_route_but_the_proxy(world, tmp_path, site):  # noqa: F811
    """With a list, a direct connection to the host's loopback (the PostgreSQL port, a
    local MCP server), an abstract socket of the host, raw UDP and DNS all fail: the
    sandbox's network is its own; each is refused with its line on the tool's stderr."""
    abstract = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    abstract.bind(b"\0agentctl-test-abstract")
    abstract.listen(1)
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    udp.settimeout(0)
    code = (
        "import socket, sys\n"
        "def attempt(what, fn):\n"
        "    try:\n"
        "        fn(); print(what, 'reached', file=sys.stderr)\n"
        "    except OSError as e:\n"
        "        print(what, 'failed', e.__class__.__name__, file=sys.stderr)\n"
        "    sys.stderr.flush()\n"
        f"attempt('tcp', lambda: socket.create_connection(('127.0.0.1', {site}), 5))\n"
        "def abstract():\n"
        "    s = socket.socket(socket.AF_UNIX); s.connect(b'\\0agentctl-test-abstract')\n"
        "attempt('abstract', abstract)\n"
        "def udp():\n"
        f"    socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', ('127.0.0.1', "
        f"{udp.getsockname()[1]}))\n"
        "    socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', ('192.0.2.1', 53))\n"
        "attempt('udp', udp)\n"
        "attempt('dns', lambda: socket.getaddrinfo('pypi.org', 443))\n"
        "raise SystemExit(1)\n")     # (a failed call's result shows its stderr too)
    (tmp_path / "work").mkdir(exist_ok=True)
    script = tmp_path / "work" / "try.py"
    script.write_text(code)
    script.chmod(0o644)
    try:
        result = attempt(world, tmp_path, f"{PYTHON} {script}", "--net", f"*,127.0.0.1")
        abstract.settimeout(0)
        with pytest.raises(BlockingIOError):
            abstract.accept()
        with pytest.raises(BlockingIOError):
            udp.recvfrom(10)
    finally:
        abstract.close()
        udp.close()
    result = result.removeprefix("error: exit status 1: ")
    said = [line for line in result.splitlines() if line.startswith("agentctl: net: ")]
    lines = dict(line.split(" ", 1) for line in result.splitlines()
                 if not line.startswith("agentctl: "))
    assert all(v.startswith("failed") for v in lines.values()) and len(lines) == 4, result
    # each refused with its line (netwatch), naming the list
    for refusal in (f"refused a connection to 127.0.0.1:{site}: the sandbox's loopback is "
                    "its own", "refused abstract socket @agentctl-test-abstract",
                    "refused DNS to 192.0.2.1:53"):
        assert any(refusal in line for line in said), result
    assert sum("refused DNS to" in line for line in said) >= 2, result   # getaddrinfo's
    assert all("its list: *,127.0.0.1" in line for line in said
               if "abstract" not in line), result


def test_a_child_list_stays_within_its_parents(tmp_path):
    """A fork and agent-set by an ancestor give a list within the giver's; an agent
    narrows its own, never widens it."""
    fork("-n", "lead", "--net", "*.github.com,pypi.org:443")
    refused = agent("fork", "-p", "lead", "-n", "kid", "--net", "example.com")
    assert refused.code == 3 and "--net example.com: outside lead's list" in refused.err
    assert agent("fork", "-p", "lead", "-n", "kid", "--net", "pypi.org").code == 3
    fork("-p", "lead", "-n", "kid", "--net", "api.github.com,pypi.org:443")
    def as_(who, *words):
        return shell(f"AGENT_ID={who} agent-set " + " ".join(words))
    widened = as_("kid", "kid", "net=api.github.com,example.com")
    assert widened.code == 3 and "may only narrow its own" in widened.err, widened
    wider = as_("lead", "kid", "'net=*'")
    assert wider.code == 3 and "net=*: outside lead's list" in wider.err, wider
    assert as_("kid", "kid", "net=api.github.com").code == 0
    shown = agent("ps", "-o", "name,net").out
    assert "api.github.com" in shown and "*.github.com,pypi.org:443" in shown
    rows = {r["name"]: r for r in json.loads(agent("ps", "-o", "name,net", "--format",
                                                   "json").out)}
    assert rows["kid"]["net"] == ["api.github.com"] and rows["init"]["net"] == []


def test_net_alone_is_every_public_host_and_a_prompt_is_not_taken_for_a_list():
    fork("-n", "all", "--net", "--", "a prompt")
    rows = {r["name"]: r for r in json.loads(agent("ps", "-o", "name,net", "--format",
                                                   "json").out)}
    assert rows["all"]["net"] == ["*"]
    mistaken = agent("fork", "--net", "fix the bug")
    assert mistaken.code == 2 and "bad net: 'fix the bug'" in mistaken.err
    assert agent("fork", "--net", "a.com", "--no-net").code == 2


def test_an_old_yes_is_every_public_host(tmp_path):
    """0019_net_hosts: a database whose agents had the network (net = 1) gives them
    every public host, and those without (0 or none) none."""
    path = str(tmp_path / "agents.db")
    conn = connect(path)
    assert agent("fork", "--db", path, "-n", "a").code == 0
    assert agent("fork", "--db", path, "-n", "b").code == 0
    conn.execute("UPDATE agents SET net = CASE name WHEN 'a' THEN 1 WHEN 'b' THEN 0 END")
    conn.execute("DELETE FROM _sqlite_migrations WHERE name = '0019_net_hosts'")
    conn.execute("PRAGMA user_version = 18")
    conn.commit()
    conn.close()
    rows = {r["name"]: r["net"] for r in json.loads(
        agent("ps", "--db", path, "-o", "name,net", "--format", "json").out)}
    assert rows == {"init": [], "a": ["*"], "b": []}


def test_an_mcp_servers_net_list_is_its_way_out(tmp_path, monkeypatch, site):
    """A stdio server's "net" in the operator's configuration: the hosts it reaches
    besides its agent's (none here); a server without one reaches nothing, and its
    connections are its agent's net events, by the server's name."""
    from .test_mcp import configure, notes, work_dir
    from .conftest import calling, script, tool_results
    work = work_dir(tmp_path)
    url = f"http://127.0.0.1:{site}/hello.txt"
    configure(tmp_path, monkeypatch, {
        "open": notes(work / "one", net=[f"127.0.0.1:{site}"]),
        "shut": notes(work / "two")})
    model = script(tmp_path, calling([("open__fetch", {"url": url}),
                                      ("shut__fetch", {"url": url})]))
    fork("-n", "w", "--allow", "open__*", "--allow", "shut__*", "-m", model, "go")
    ran = agent("run", "w")
    assert ran.code == 0, ran.err
    opened, shut = tool_results(connect(os.environ["AGENTCTL_DB"]), "w")
    assert "MCP server" not in ran.err, ran.err
    assert opened == "hello through the proxy\n", opened
    assert shut.startswith("failed:") and "hello" not in shut, shut
    events = net_events("w")
    assert [(e["data"]["tool"], e["data"]["outcome"]) for e in events] == [("open", "allowed")]


STEAL = """
import glob, os, socket, stat
for path in glob.glob("/run/**", recursive=True):
    try:
        if not stat.S_ISSOCK(os.lstat(path).st_mode):
            continue
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(5)
        s.connect(path)
        s.sendall(b"\\0GET {url} HTTP/1.0\\r\\n\\r\\n")
        print(path, s.recv(4096).decode(errors="replace").splitlines()[-1:])
    except OSError as e:
        print(path, "failed", e)
print("looked")
"""


def test_a_tool_cant_borrow_an_mcp_servers_wider_list(tmp_path, monkeypatch, site):
    """An MCP server's socket to the egress proxy is bound into its own sandbox alone:
    the agent's tools, with no network of their own, find no way out through it."""
    from .test_mcp import configure, notes, work_dir
    from .conftest import script, tool_results
    work = work_dir(tmp_path)
    url = f"http://127.0.0.1:{site}/hello.txt"
    configure(tmp_path, monkeypatch, {"open": notes(work / "one", net=[f"127.0.0.1:{site}"])})
    steal = work / "steal.py"
    steal.write_text(STEAL.format(url=url))
    model = script(tmp_path, {"steps": [
        {"content": "", "tool_calls": [{"name": "open__fetch", "arguments": {"url": url}}]},
        {"content": "", "tool_calls": [{"name": "run",
                                        "arguments": {"command": f"{PYTHON} {steal}"}}]},
        {"content": "done"}]})
    fork("-n", "w", "--allow", "open__*", "--allow", "run", "-m", model, "go")
    ran = agent("run", "w")
    assert ran.code == 0, ran.err
    fetched, stolen = tool_results(connect(os.environ["AGENTCTL_DB"]), "w")
    assert fetched == "hello through the proxy\n", fetched
    assert "looked" in stolen and "hello through the proxy" not in stolen, stolen
