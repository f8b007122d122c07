"""MCP servers started by a package launcher as their READMEs paste them (agent-run(1),
MCP servers): npx, bunx, uvx, pipx run get a package cache of their server's own and
their registry, as the operator configured it, and its hosts alone by default."""

import os
import stat
import sys

import pytest

from agentctl.tools import launchers

from .conftest import agent, fork
from .test_external_tools import work_dir
from .test_mcp import configure


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
