"""The package registries on 127.0.0.1 (tests/registries.py) that an MCP launcher installs
from with no network: uvx installs agentctl-test-mcp and the MCP SDK from the Python
index into an empty cache, with every other host behind a proxy that refuses (OFFLINE);
nothing reaches another host; each serves exactly what its lock or pins say. (npx
installing the reference servers from the npm registry, and uvx again, are
tests/test_mcp_launchers.py's, in the sandbox, as a user's configuration says.)"""

import base64
import hashlib
import io
import json
import os
import shutil
import tarfile
import urllib.error
import urllib.request
import zipfile

import pytest

from .conftest import PATIENCE, ROOT
from .mcpstdio import Stdio
from .npm.npmdir import cached
from .registries import TEST_PACKAGE, NpmRegistry, installing_from, uvx, version_key, \
    wheel_metadata

EVERYTHING = "@modelcontextprotocol/server-everything"
INSTALLING = 3 * PATIENCE       # (a first start installs: 10 s on a quiet machine)


def get(url):
    with urllib.request.urlopen(url, timeout=PATIENCE) as reply:
        return reply.read()


# -- npm ---------------------------------------------------------------------------------------

def everything_version(registry):
    return max(registry.packages[EVERYTHING], key=version_key)


def elsewhere(server):
    """The server's URL by another name than 127.0.0.1: a host OFFLINE sends to its proxy."""
    return server.url.replace("127.0.0.1", "localhost")


def test_npx_reaches_no_other_host(npm_registry, tmp_path):
    """The control: the registry named otherwise, npx goes to the proxy and fails, and
    the registry is asked nothing (without OFFLINE it would install from it)."""
    since = len(npm_registry.asked)
    env = installing_from(npm_registry, npm_config_cache=str(tmp_path / "cache"),
                          npm_config_registry=elsewhere(npm_registry) + "/",
                          npm_config_fetch_retries="0")
    with Stdio([shutil.which("npx"), "-y", EVERYTHING], env, str(tmp_path / "err")) as server:
        assert server.close() != 0
    assert "proxy" in server.stderr()
    assert npm_registry.asked[since:] == []


def test_the_npm_registry_serves_every_package_of_the_lock_as_locked(npm_registry):
    with open(os.path.join(ROOT, "tests", "npm", "package-lock.json")) as f:
        lock = json.load(f)["packages"]
    for where, entry in lock.items():
        if not where:
            continue
        name = where.rsplit("node_modules/", 1)[1]
        document = json.loads(get(f"{npm_registry.url}/{name.replace('/', '%2f')}"))
        manifest = document["versions"][entry["version"]]
        assert manifest["name"] == name and manifest["version"] == entry["version"]
        for field in ("dependencies", "peerDependencies", "peerDependenciesMeta", "engines"):
            assert (manifest.get(field) or None) == entry.get(field), (name, field)
        assert set(manifest.get("bin", {})) == set(entry.get("bin", {})), name
        assert manifest["dist"]["integrity"] == entry["integrity"]
        data = get(manifest["dist"]["tarball"])
        digest = base64.b64encode(hashlib.sha512(data).digest()).decode()
        assert entry["integrity"] == f"sha512-{digest}", name
    scoped = json.loads(get(f"{npm_registry.url}/{EVERYTHING}"))
    assert scoped["dist-tags"]["latest"] == everything_version(npm_registry)
    two = json.loads(get(f"{npm_registry.url}/content-type"))
    assert two["dist-tags"]["latest"] == max(two["versions"], key=version_key)
    assert len(two["versions"]) == 2
    with pytest.raises(urllib.error.HTTPError) as missing:
        get(f"{npm_registry.url}/left-pad")
    assert missing.value.code == 404


def test_a_string_bin_is_served_as_the_registry_serves_it(tmp_path):
    manifest = json.dumps({"name": "@me/tool", "version": "1.0.0", "bin": "cli.js"}).encode()
    body = io.BytesIO()
    with tarfile.open(fileobj=body, mode="w:gz") as tar:
        member = tarfile.TarInfo("package/package.json")
        member.size = len(manifest)
        tar.addfile(member, io.BytesIO(manifest))
    data = body.getvalue()
    integrity = "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()
    path = cached(str(tmp_path), integrity)
    os.makedirs(os.path.dirname(path))
    with open(path, "wb") as f:
        f.write(data)
    lock = tmp_path / "lock.json"
    lock.write_text(json.dumps({"packages": {"": {}, "node_modules/@me/tool": {
        "version": "1.0.0", "integrity": integrity}}}))
    registry = NpmRegistry(str(tmp_path), str(lock))
    try:
        document = json.loads(get(f"{registry.url}/@me%2Ftool"))
        assert document["versions"]["1.0.0"]["bin"] == {"tool": "cli.js"}
        assert get(document["versions"]["1.0.0"]["dist"]["tarball"]) == data
    finally:
        registry.close()


# -- Python ------------------------------------------------------------------------------------

def test_uvx_installs_the_test_server_and_the_sdk_into_an_empty_cache_and_it_answers(
        python_index, tmp_path):
    env = installing_from(python_index, UV_CACHE_DIR=str(tmp_path / "uv-cache"))
    with Stdio([uvx(), TEST_PACKAGE], env, str(tmp_path / "stderr")) as server:
        assert server.initialize(INSTALLING)["serverInfo"]["name"] == TEST_PACKAGE
        added = server.request("tools/call", {"name": "add", "arguments": {"a": 2, "b": 40}})
        assert server.close() == 0
    assert "42" in json.dumps(added)
    assert "serving over stdio" in server.stderr()
    wheels = [p for p in python_index.asked if p.endswith(".whl")]
    assert any(p.startswith("/files/agentctl_test_mcp-") for p in wheels)
    assert any(p.startswith("/files/mcp-") for p in wheels)


def test_uvx_reaches_no_other_host(python_index, tmp_path):
    """The control: the index named otherwise, uvx goes to the proxy and fails, and the
    index is asked nothing (without OFFLINE it would install from it)."""
    since = len(python_index.asked)
    simple = elsewhere(python_index) + "/simple/"
    env = installing_from(python_index, UV_CACHE_DIR=str(tmp_path / "uv-cache"),
                          UV_DEFAULT_INDEX=simple, UV_INDEX_URL=simple, UV_HTTP_RETRIES="0")
    with Stdio([uvx(), TEST_PACKAGE], env, str(tmp_path / "err")) as server:
        assert server.close() != 0
    assert "Failed to fetch" in server.stderr()
    assert python_index.asked[since:] == []


def test_the_index_serves_each_wheel_with_its_hash_and_metadata(python_index):
    page = get(f"{python_index.url}/simple/MCP_types/").decode()     # (normalized)
    assert "mcp_types-" in page
    for file, (path, digest, metadata) in python_index.files.items():
        data = get(f"{python_index.url}/files/{file}")
        assert hashlib.sha256(data).hexdigest() == digest
        assert get(f"{python_index.url}/files/{file}.metadata") == metadata
        assert f"/files/{file}#sha256={digest}" in \
            get(f"{python_index.url}/simple/{file.split('-')[0]}/").decode()
    built = next(p for f, (p, _, _) in python_index.files.items()
                 if f.startswith("agentctl_test_mcp-"))
    assert b"Requires-Dist: mcp==" in wheel_metadata(built)
    with zipfile.ZipFile(built) as wheel:
        assert wheel.testzip() is None
    with pytest.raises(urllib.error.HTTPError) as missing:
        get(f"{python_index.url}/simple/left-pad/")
    assert missing.value.code == 404

