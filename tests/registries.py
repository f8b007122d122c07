"""Package registries on 127.0.0.1, for the tests of MCP servers that a launcher installs
as a user's configuration says (`npx -y PACKAGE`, `uvx PACKAGE`), with no network: what
they serve was got once per machine by make test.

- npm_registry: an npm registry serving every package of tests/npm/package-lock.json
  (the official MCP reference servers and all their dependencies): GET /NAME (and
  /@SCOPE%2fNAME, /@SCOPE/NAME) gives the package's document, its versions' manifests
  read from their tarballs; GET of a tarball's URL gives its bytes, from the npm cache
  that tests/npm/install.sh fills beside the installed servers.
- python_index: a PEP 503 "simple" index serving the wheels of the official MCP SDK and
  its whole dependency tree (tests/wheels/install.py gets them, at the versions the
  project's .venv has), and of agentctl-test-mcp, a two-tool server built here
  (tests/wheels/agentctl_test_mcp.py, console script agentctl-test-mcp), with each
  wheel's metadata (PEP 658) so that no installer needs a range request.

Each fixture yields its server: .url, .env (what a launcher's environment needs to use
it), .asked (the paths requested, in order). OFFLINE is an environment in which anything
but 127.0.0.1 fails (a proxy on a closed port); installing_from(server ...) is a whole
environment for a launcher: these, and nothing of the user's npm or uv settings."""

import base64
import hashlib
import json
import os
import re
import sys
import tarfile
import urllib.parse
import zipfile

import pytest

from .localhttp import Handler, LocalServer

HERE = os.path.dirname(os.path.abspath(__file__))
ENVIRON = dict(os.environ)      # (as the session began: the tests change theirs)

# Anything but 127.0.0.1 goes to a proxy on a port nothing listens on, and fails.
OFFLINE = {name: "http://127.0.0.1:9" for name in
           ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy")}
OFFLINE.update(NO_PROXY="127.0.0.1", no_proxy="127.0.0.1")

TEST_PACKAGE = "agentctl-test-mcp"


def installing_from(*registries, **more):
    """The environment of a launcher that installs from `registries` (the fixtures'
    servers) alone: this process's, without its npm, uv and proxy settings, with each
    registry's .env, OFFLINE and `more`."""
    own = ("npm_config_", "uv_") + tuple(name.lower() for name in OFFLINE)
    env = {name: value for name, value in os.environ.items()
           if not name.lower().startswith(own)}
    env.update(OFFLINE)
    for registry in registries:
        env.update(registry.env)
    env.update(more)
    return env


class Answering(Handler):
    """Answers each GET with the owner's get(path): (status, bytes, content type)."""

    def do_GET(self):
        owner = self.server.owner
        path = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path)
        owner.asked.append(path)
        status, data, kind = owner.get(path)
        self.answer(status, data, kind)


NOT_FOUND = (404, b'{"error": "Not found"}', "application/json")


# -- npm --------------------------------------------------------------------------------------

def version_key(version):
    """Semantic versions in order: a release after its pre-releases."""
    match = re.match(r"(\d+)\.(\d+)\.(\d+)(?:-([^+]*))?", version)
    if match is None:
        return ((0, 0, 0), 0, version)
    release = tuple(int(n) for n in match.group(1, 2, 3))
    return (release, 0 if match.group(4) else 1, match.group(4) or "")


def tarball_manifest(path):
    """The package.json in an npm tarball (at its top folder, package/ as a rule)."""
    with tarfile.open(path) as tar:
        for member in tar:
            parts = member.name.split("/")
            if len(parts) == 2 and parts[1] == "package.json" and member.isfile():
                return json.load(tar.extractfile(member))
    raise LookupError(f"{path}: no package.json")


def npm_packages(directory, lock):
    """{name: {version: (manifest, integrity, file)}} of every package in the lock, read
    from the tarballs that npm's cache in `directory` holds."""
    from .npm.npmdir import cached
    packages = {}
    for where, entry in lock["packages"].items():
        if not where or "integrity" not in entry:
            continue                    # (the project itself)
        name = entry.get("name") or where.rsplit("node_modules/", 1)[1]
        path = cached(directory, entry["integrity"])
        manifest = tarball_manifest(path)
        if isinstance(manifest.get("bin"), str):        # as the registry gives it
            manifest["bin"] = {name.rsplit("/", 1)[-1]: manifest["bin"]}
        packages.setdefault(name, {})[entry["version"]] = (manifest, entry["integrity"], path)
    return packages


class NpmRegistry(LocalServer):
    def __init__(self, directory, lock_path=os.path.join(HERE, "npm", "package-lock.json")):
        with open(lock_path) as f:
            self.packages = npm_packages(directory, json.load(f))
        self.tarballs = {self.tarball(name, version): path
                         for name, versions in self.packages.items()
                         for version, (_, _, path) in versions.items()}
        self.asked = []
        super().__init__(Answering)
        self.env = {"npm_config_registry": self.url + "/",
                    # (no user's .npmrc: a scope's registry there would win)
                    "npm_config_userconfig": os.devnull,
                    "npm_config_audit": "false", "npm_config_fund": "false",
                    "npm_config_update_notifier": "false"}

    @staticmethod
    def tarball(name, version):
        return f"/{name}/-/{name.rsplit('/', 1)[-1]}-{version}.tgz"

    def packument(self, name):
        versions = {}
        for version, (manifest, integrity, _) in self.packages[name].items():
            versions[version] = dict(manifest, name=name, version=version, dist={
                "tarball": self.url + self.tarball(name, version), "integrity": integrity})
        latest = max(versions, key=version_key)
        return {"name": name, "dist-tags": {"latest": latest}, "versions": versions}

    def get(self, path):
        if path in self.tarballs:
            with open(self.tarballs[path], "rb") as f:
                return 200, f.read(), "application/octet-stream"
        name = path.strip("/")
        if name in self.packages:
            return 200, json.dumps(self.packument(name)).encode(), "application/json"
        return NOT_FOUND


# -- Python -----------------------------------------------------------------------------------

def normalized(name):
    """A project's name as PEP 503 compares it."""
    return re.sub(r"[-_.]+", "-", name).lower()


def wheel_metadata(path):
    """The METADATA of a wheel (its .dist-info's)."""
    with zipfile.ZipFile(path) as wheel:
        for name in wheel.namelist():
            top, _, file = name.partition("/")
            if top.endswith(".dist-info") and file == "METADATA":
                return wheel.read(name)
    raise LookupError(f"{path}: no METADATA")


def record_hash(data):
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def build_test_wheel(directory, mcp_version, version="1.0.0"):
    """The wheel of agentctl-test-mcp (tests/wheels/agentctl_test_mcp.py), which needs
    mcp==`mcp_version`, written in `directory`: its path."""
    module = "agentctl_test_mcp"
    info = f"{module}-{version}.dist-info"
    with open(os.path.join(HERE, "wheels", f"{module}.py"), "rb") as f:
        files = {f"{module}.py": f.read()}
    files[f"{info}/METADATA"] = (
        f"Metadata-Version: 2.1\nName: {TEST_PACKAGE}\nVersion: {version}\n"
        f"Summary: A two-tool MCP server for agentctl's tests\nRequires-Python: >=3.10\n"
        f"Requires-Dist: mcp=={mcp_version}\n").encode()
    files[f"{info}/WHEEL"] = (b"Wheel-Version: 1.0\nGenerator: agentctl-tests\n"
                              b"Root-Is-Purelib: true\nTag: py3-none-any\n")
    files[f"{info}/entry_points.txt"] = \
        f"[console_scripts]\n{TEST_PACKAGE} = {module}:main\n".encode()
    files[f"{info}/RECORD"] = "".join(
        f"{name},{record_hash(data)},{len(data)}\n" for name, data in files.items()
    ).encode() + f"{info}/RECORD,,\n".encode()
    path = os.path.join(directory, f"{module}-{version}-py3-none-any.whl")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as wheel:
        for name, data in files.items():
            wheel.writestr(zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0)), data)
    return path


class PythonIndex(LocalServer):
    def __init__(self, wheels, python=sys.executable):
        self.files = {}             # file name: (path, sha256 of it, its METADATA)
        self.projects = {}          # normalized name: [file name]
        for path in wheels:
            file = os.path.basename(path)
            with open(path, "rb") as f:
                digest = hashlib.sha256(f.read()).hexdigest()
            self.files[file] = (path, digest, wheel_metadata(path))
            self.projects.setdefault(normalized(file.split("-")[0]), []).append(file)
        self.asked = []
        super().__init__(Answering)
        self.env = {"UV_DEFAULT_INDEX": self.url + "/simple/",
                    "UV_INDEX_URL": self.url + "/simple/",      # (its name before uv 0.4.23)
                    "UV_PYTHON": python, "UV_PYTHON_DOWNLOADS": "never",
                    # (no user's or system's uv.toml: an index there would be asked too)
                    "UV_NO_CONFIG": "1"}

    def page(self, project):
        links = []
        for file in sorted(self.projects[project]):
            _, digest, metadata = self.files[file]
            meta = "sha256=" + hashlib.sha256(metadata).hexdigest()
            links.append(f'<a href="/files/{file}#sha256={digest}" '
                         f'data-dist-info-metadata="{meta}" data-core-metadata="{meta}">'
                         f'{file}</a><br>')
        return html(project, links)

    def get(self, path):
        if path in ("/simple", "/simple/"):
            return 200, html("index", [f'<a href="/simple/{p}/">{p}</a><br>'
                                       for p in sorted(self.projects)]), "text/html"
        if path.startswith("/simple/"):
            project = normalized(path[len("/simple/"):].strip("/"))
            if project in self.projects:
                return 200, self.page(project), "text/html"
        if path.startswith("/files/"):
            file = path[len("/files/"):]
            if file.endswith(".metadata") and file[:-len(".metadata")] in self.files:
                return 200, self.files[file[:-len(".metadata")]][2], "text/plain"
            if file in self.files:
                with open(self.files[file][0], "rb") as f:
                    return 200, f.read(), "application/octet-stream"
        return 404, b"not found", "text/plain"


def html(title, links):
    return ("<!DOCTYPE html>\n<html><head><meta name=\"pypi:repository-version\" "
            f"content=\"1.0\"><title>{title}</title></head><body>\n"
            + "\n".join(links) + "\n</body></html>\n").encode()


# -- the fixtures -----------------------------------------------------------------------------

def wheels_dir():
    """Where tests/wheels/install.py put the wheels, and the pins they are of."""
    from .wheels.wheeldir import pins, where
    pinned = pins()
    return where(ENVIRON, pinned), pinned


@pytest.fixture(scope="session")
def npm_registry():
    """An npm registry on 127.0.0.1 (NpmRegistry) serving the packages of
    tests/npm/package-lock.json; skipped, loudly, without node and npm or their install."""
    from .conftest import NPM_SERVERS, needs, reference_servers
    reference_servers()
    needs("npx", "npm")
    registry = NpmRegistry(NPM_SERVERS)
    yield registry
    registry.close()


def uvx():
    """The uvx of the test extra (beside this Python), else the PATH's; without it the
    test is skipped, loudly."""
    from .conftest import needs
    beside = os.path.join(os.path.dirname(sys.executable), "uvx")
    return needs(beside if os.path.isfile(beside) else "uvx",
                 "uv, of the test extra (make venv)")


@pytest.fixture(scope="session")
def python_index(tmp_path_factory):
    """A Python package index on 127.0.0.1 (PythonIndex) serving agentctl-test-mcp and the
    MCP SDK's wheels; skipped, loudly, without them (tests/wheels/install.py)."""
    from .conftest import MISSING_PROGRAMS
    try:
        directory, pinned = wheels_dir()
    except (ImportError, LookupError) as e:     # (no mcp, or no packaging, here)
        MISSING_PROGRAMS["the MCP SDK (make venv)"] = f"the mcp extra: {e}"
        pytest.skip(f"the MCP SDK is not installed: {e}")
    if not os.path.exists(os.path.join(directory, ".installed")):
        MISSING_PROGRAMS["the wheels of the MCP SDK (tests/wheels/install.py, run by make "
                         "test)"] = "python3-pip, and the Python package index once"
        pytest.skip(f"the wheels of the MCP SDK are not in {directory}")
    mcp = next(p.partition("==")[2] for p in pinned if p.startswith("mcp=="))
    built = build_test_wheel(str(tmp_path_factory.mktemp("wheel")), mcp)
    wheels = [os.path.join(directory, f) for f in sorted(os.listdir(directory))
              if f.endswith(".whl")]
    index = PythonIndex([*wheels, built])
    yield index
    index.close()

