"""What an agent changed, written as git writes a diff (agent-diff(1)): `diff --git`
headers, new and deleted file modes, old and new modes, index lines of git's blob
ids, unified hunks of three lines of context (difflib's), a link as its target with
no newline, a binary file (a NUL in its first 8000 bytes, git's rule) named, or
with `binary`, as git's binary patch (a literal, deflated, base 85), so that
`git apply` takes it; `patch -p1` takes the text."""

import base64
import difflib
import hashlib
import zlib

from agentctl.workspace.changed import content, kind, mode

NULL = "/dev/null"


def blob_id(data):
    """git's object id of a blob of `data`."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def binary(data):
    return b"\0" in data[:8000]


def _quoted(path):
    """A path as git names it in a header (quoted where it must be)."""
    if any(c in path for c in '"\\\t\n') or not path.isprintable():
        raw = path.encode("utf-8", "surrogateescape")
        inner = "".join(chr(b) if 32 <= b < 127 and chr(b) not in '"\\' else
                        {9: "\\t", 10: "\\n", 34: '\\"', 92: "\\\\"}.get(b, f"\\{b:03o}")
                        for b in raw)
        return f'"{inner}"'
    return path


def _name(prefix, path):
    return _quoted(prefix + path)


def _hunks(a, b):
    """The unified hunks between two texts (bytes), git's way: a last line with no
    newline marked so."""
    old = a.decode("latin-1").splitlines(keepends=True)
    new = b.decode("latin-1").splitlines(keepends=True)
    out = []
    for line in list(difflib.unified_diff(old, new, n=3))[2:]:
        out.append(line)
        if not line.endswith("\n"):
            out.append("\n\\ No newline at end of file\n")
    return "".join(out).encode("latin-1")


def _literal(data):
    """git's `literal` binary hunk: deflated, in lines of at most 52 bytes, each
    led by its length (A-Z: 1-26, a-z: 27-52), base 85."""
    packed = zlib.compress(data, 9)
    lines = [f"literal {len(data)}\n".encode()]
    for at in range(0, len(packed), 52):
        chunk = packed[at:at + 52]
        n = len(chunk)
        lines.append((chr(ord("A") + n - 1) if n <= 26 else chr(ord("a") + n - 27)).encode()
                     + base64.b85encode(chunk, pad=True) + b"\n")
    return b"".join(lines) + b"\n"


def _one(path, old, new, full):
    """The diff of one path whose entries are `old` and `new` (one of them may be
    None), of one type (a file or a link on both sides)."""
    a, b = content(old), content(new)
    ma, mb = mode(old), mode(new)
    head = [f"diff --git {_name('a/', path)} {_name('b/', path)}\n"]
    if old is None:
        head.append(f"new file mode {mb:o}\n")
    elif new is None:
        head.append(f"deleted file mode {ma:o}\n")
    elif ma != mb:
        head.append(f"old mode {ma:o}\nnew mode {mb:o}\n")
    if a == b and old is not None and new is not None:
        return "".join(head).encode()
    ids = (blob_id(a) if old else "0" * 40), (blob_id(b) if new else "0" * 40)
    if not full:
        ids = ids[0][:7], ids[1][:7]
    same = f" {ma:o}" if old is not None and new is not None and ma == mb else ""
    head.append(f"index {ids[0]}..{ids[1]}{same}\n")
    left = _name("a/", path) if old is not None else NULL
    right = _name("b/", path) if new is not None else NULL
    if binary(a) or binary(b):
        if not full:
            head.append(f"Binary files {left} and {right} differ\n")
            return "".join(head).encode()
        head.append("GIT binary patch\n")
        return "".join(head).encode() + _literal(b) + _literal(a)
    if not a and not b:
        return "".join(head).encode()
    head.append(f"--- {left}\n+++ {right}\n")
    return "".join(head).encode() + _hunks(a, b)


def diff(files, full=False):
    """The diff of `files` ([(path, old, new)], changed.files), bytes; `full`: binary
    files as binary patches (git's --binary), with full blob ids."""
    out = []
    for path, old, new in files:
        if kind(old, new) == "type":        # (as git: the old one deleted, the new added)
            out += [_one(path, old, None, full), _one(path, None, new, full)]
        else:
            out.append(_one(path, old, new, full))
    return b"".join(out)


def counts(old, new):
    """(lines added, lines deleted), or None for a binary file."""
    a, b = content(old), content(new)
    if binary(a) or binary(b):
        return None
    plus = minus = 0
    for line in _hunks(a, b).split(b"\n"):
        if line.startswith(b"+"):
            plus += 1
        elif line.startswith(b"-"):
            minus += 1
    return plus, minus


def stat(files, width=80):
    """git's --stat: a line a path, then the summary."""
    rows, plus_all, minus_all = [], 0, 0
    for path, old, new in files:
        n = counts(old, new)
        if n is None:
            size = (lambda e: 0 if e is None else e[1].st_size)
            rows.append((path, f"Bin {size(old)} -> {size(new)} bytes", 0, 0))
            continue
        plus_all, minus_all = plus_all + n[0], minus_all + n[1]
        rows.append((path, str(n[0] + n[1]), *n))
    if not rows:
        return ""
    wide = max(len(p) for p, *_ in rows)
    most = max([p + m for _, _, p, m in rows] + [1])
    room = max(10, width - wide - 12)
    lines = []
    for path, said, plus, minus in rows:
        scale = min(1.0, room / most)
        bar = "+" * round(plus * scale) + "-" * round(minus * scale)
        lines.append(f" {path.ljust(wide)} | {said}" + (f" {bar}" if bar else ""))
    summary = f" {len(rows)} file{'s' if len(rows) != 1 else ''} changed"
    if plus_all:
        summary += f", {plus_all} insertion{'s' if plus_all != 1 else ''}(+)"
    if minus_all:
        summary += f", {minus_all} deletion{'s' if minus_all != 1 else ''}(-)"
    return "\n".join(lines + [summary]) + "\n"


def record(path, old, new):
    """One path's change as --format json writes it."""
    a, b = content(old), content(new)
    return {"path": path, "change": kind(old, new), "binary": binary(a) or binary(b),
            "mode": f"{mode(new or old):o}",
            "old_mode": f"{mode(old):o}" if old is not None else None}
