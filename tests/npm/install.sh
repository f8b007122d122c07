#!/bin/sh
# The official MCP reference servers that tests/test_mcp.py runs, installed once per
# machine from the committed lock (npm ci) into the cache, where the tests find them,
# with npm's cache of their tarballs beside them (npm-cache/: tests/registries.py serves
# it as an npm registry on 127.0.0.1): the registry is asked once, never by a test.
# Without node and npm, or offline, it says so and the tests that need the servers are
# skipped, loudly.
set -u
here=$(cd "$(dirname "$0")" && pwd)
dir=$("${PYTHON:-python3}" -c 'import sys; sys.path.insert(0, sys.argv[1]); from npmdir import where; print(where())' "$here")
[ -f "$dir/.installed" ] && exit 0
if ! command -v npm >/dev/null 2>&1 || ! command -v node >/dev/null 2>&1; then
    echo "tests/npm/install.sh: node and npm are not installed: the tests of the MCP reference servers will be SKIPPED" >&2
    exit 0
fi
mkdir -p "$dir" && cp "$here/package.json" "$here/package-lock.json" "$dir/" &&
    (cd "$dir" && npm ci --cache "$dir/npm-cache" --no-audit --no-fund --loglevel=error >/dev/null) &&
    touch "$dir/.installed" && echo "tests/npm/install.sh: the MCP reference servers are in $dir" ||
    echo "tests/npm/install.sh: npm ci failed in $dir: the tests of the MCP reference servers will be SKIPPED" >&2
exit 0
