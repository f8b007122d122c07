"""MCP servers started by a package launcher as their READMEs paste them (agent-run(1),
MCP servers): npx, bunx, uvx, pipx run get a package cache of their server's own and
their registry, as the operator configured it, and its hosts alone by default."""

import json
import os
import stat
import sys
import time

import pytest

from agentctl.store.db import connect
from agentctl.tools import launchers

from .conftest import agent, calling, fork, script, tool_results
from .registries import TEST_PACKAGE, uvx
from .test_external_tools import work_dir
from .test_mcp import configure


def db():
    return connect(os.environ["AGENTCTL_DB"])


def test_a_launcher_gets_its_cache_and_the_public_registry_by_default(tmp_path):
    env, hosts = launchers.given("npx", {}, str(tmp_path))
    assert env == {"npm_config_cache": "/run/agentctl-cache/npm"}
    assert hosts == ["registry.npmjs.org"]
    env, hosts = launchers.given("/usr/local/bin/uvx", {}, str(tmp_path))
    assert env == {"UV_CACHE_DIR": "/run/agentctl-cache/uv"}
    assert hosts == ["pypi.org", "files.pythonhosted.org"]
    assert launchers.given("node", {"npm_config_registry": "http://x"}, str(tmp_path)) \
        == ({}, [])


def test_the_operators_registry_is_passed_on_and_its_host_alone_allowed(tmp_path):
    env, hosts = launchers.given("npx", {"npm_config_registry": "http://127.0.0.1:4873/"},
                                 str(tmp_path))
    assert env["npm_config_registry"] == "http://127.0.0.1:4873/"
    assert hosts == ["127.0.0.1:4873"]
    (tmp_path / ".npmrc").write_text("@corp:registry=https://npm.corp.example/\n"
                                     "registry = https://mirror.example/npm/\n")
    env, hosts = launchers.given("bunx", {}, str(tmp_path))
    assert env["npm_config_registry"] == "https://mirror.example/npm/"
    assert hosts == ["mirror.example"]
    env, hosts = launchers.given("uvx", {"UV_DEFAULT_INDEX": "https://[fd00::7]:8443/simple",
                                         "PIP_INDEX_URL": "https://pip.example/simple"},
                                 str(tmp_path))
    assert hosts == ["[fd00::7]:8443", "pip.example"]
    assert env["PIP_INDEX_URL"] == "https://pip.example/simple"
    # what names no http(s) host leaves the public registry's; NAME=URL is the URL
    assert launchers.given("uvx", {"UV_INDEX_URL": "file:///srv/wheels"}, str(tmp_path))[1] \
        == ["pypi.org", "files.pythonhosted.org"]
    assert launchers.given("uv", {"UV_INDEX": "corp=https://corp.example:8443/simple"},
                           str(tmp_path))[1] == ["corp.example:8443"]


@pytest.fixture
def fake_npx(tmp_path, monkeypatch):
    """An `npx` on PATH (in a directory its sandbox shows) that reports what it was
    given: its cache variable, whether that is a directory it may write, its registry,
    then fails as a launcher whose package can't be had."""
    bin_dir = work_dir(tmp_path) / "bin"
    bin_dir.mkdir()
    npx = bin_dir / "npx"
    npx.write_text(f"""#!{sys.executable}
import os, sys
cache = os.environ.get("npm_config_cache", "")
try:
    os.makedirs(cache, exist_ok=True)
    open(os.path.join(cache, "a-package"), "w").close()
    writable = True
except OSError:
    writable = False
sys.stderr.write(f"cache={{cache}} writable={{writable}} "
                 f"registry={{os.environ.get('npm_config_registry')}}\\n")
sys.exit(1)
""")
    npx.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    return npx


def test_a_pasted_npx_entry_gets_a_cache_of_its_own_it_alone_writes(fake_npx, tmp_path,
                                                                    monkeypatch):
    configure(tmp_path, monkeypatch, {"everything": {
        "command": "npx", "args": ["-y", "@modelcontextprotocol/server-everything"]}})
    monkeypatch.setenv("npm_config_registry", "http://127.0.0.1:9/")
    fork("-n", "w", "--allow", "everything__*", "-m", "echo", "hi")
    listed = agent("run", "--list-tools", "w")
    assert "cache=/run/agentctl-cache/npm writable=True registry=http://127.0.0.1:9/" \
        in listed.err, listed.err
    own = tmp_path / "cache" / "agentctl" / "mcp" / "everything.cache"
    assert (own / "npm" / "a-package").exists()         # kept for its next start
    assert stat.S_IMODE(os.stat(own).st_mode) == 0o700
    if os.geteuid() == 0:           # the user its tools run as, not root
        assert os.stat(own).st_uid != 0


# -- the documented entries, pasted, from registries on 127.0.0.1 ------------------------------

def tarballs(registry):
    return [path for path in registry.asked if path.endswith(".tgz")]


def test_the_reference_servers_pasted_from_their_readmes_work_in_the_sandbox(
        npm_registry, tmp_path, monkeypatch):
    """npx for server-everything and server-filesystem, as their READMEs give them, with
    no "ro" or "net": the registry the operator configured is reached through the
    proxy, the packages are kept in the server's cache, the second start downloads
    nothing; a list without the registry runs the launcher from its cache alone."""
    for name, value in npm_registry.env.items():
        monkeypatch.setenv(name, value)
    work = work_dir(tmp_path)
    configure(tmp_path, monkeypatch, {
        "everything": {"command": "npx",
                       "args": ["-y", "@modelcontextprotocol/server-everything"]},
        "files": {"command": "npx",
                  "args": ["-y", "@modelcontextprotocol/server-filesystem", str(work)]}})
    (work / "note.txt").write_text("found it\n")
    model = script(tmp_path, calling([("everything__echo", {"message": "hi there"}),
                                      ("files__read_text_file",
                                       {"path": str(work / "note.txt")})]))
    fork("-n", "w", "--allow", "*", "-m", model, "go")
    checked = agent("run", "--list-tools", "--check", "--format", "json", "w")
    assert checked.code == 0, checked.err
    rows = {r["server"]: r for r in json.loads(checked.out)}
    assert rows["everything"]["status"] == rows["files"]["status"] == "ok", rows
    assert rows["everything"]["tools"] > 5 and rows["files"]["tools"] > 5
    downloaded = len(tarballs(npm_registry))
    assert downloaded > 50
    ran = agent("run", "w")
    assert ran.code == 0, ran.err
    results = tool_results(db(), "w")
    assert "hi there" in results[0] and "found it" in results[1], results
    assert len(tarballs(npm_registry)) == downloaded        # from their caches
    # the launchers' connections to the registry, ended with their servers, in the log
    port = npm_registry.url.rsplit(":", 1)[1].strip("/")
    logged = agent("log", "--kind", "net", "w").out
    assert f"127.0.0.1:{port}" in logged and "everything" in logged, logged

    # An entry that names its own "net" without the registry: its launcher is kept to
    # its cache, so what it has cached starts without asking the registry, and what it
    # has not fails at once (not when the start's time is up), saying what to add.
    entry = {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-everything"]}
    configure(tmp_path, monkeypatch, {"everything": dict(entry, net=["pypi.org"]),
                                      "fresh": dict(entry, net=False)})
    asked = len(npm_registry.asked)
    started = time.monotonic()
    checked = agent("run", "--list-tools", "--check", "--format", "json", "w")
    rows = {r["server"]: r for r in json.loads(checked.out)}
    assert rows["everything"]["status"] == "ok", checked.err      # from its cache
    assert rows["fresh"]["status"] == "failed" and checked.code == 1
    assert len(npm_registry.asked) == asked                       # nobody asked it
    assert rows["fresh"]["seconds"] < 20 and time.monotonic() - started < 60
    assert (f'its "net" leaves its registry out, so it ran from its cache alone: '
            f'"127.0.0.1:{port}" in its "net" would let it download') in rows["fresh"]["error"]


def test_a_pasted_uvx_entry_works_in_the_sandbox(python_index, tmp_path, monkeypatch):
    for name, value in python_index.env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("PATH", f"{os.path.dirname(uvx())}:{os.environ['PATH']}")
    configure(tmp_path, monkeypatch, {"test": {"command": "uvx", "args": [TEST_PACKAGE]}})
    model = script(tmp_path, calling([("test__add", {"a": 40, "b": 2})]))
    fork("-n", "w", "--allow", "test__*", "-m", model, "go")
    ran = agent("run", "w")
    assert ran.code == 0, ran.err
    assert tool_results(db(), "w") == ["42"], ran.err
    assert "MCP server" not in ran.err
