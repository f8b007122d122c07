"""Shared documents (agentctl(7), Documents): markdown text under a name, with
an owner and a visibility, read and written by agent-doc(1) and the doc_*
tools alike.

Every put and every rm inserts a version row; nothing is updated or deleted.
The newest version of a name is the document; a newest version with a NULL
body means it was removed, and the name is free to be created again.

Who may see what (the operator, actor None, sees everything):
  private  the owner only (an operator-owned one: the operator only)
  subtree  the owner and its descendants by lifecycle parent
           (an operator-owned one: everyone, the operator being every tree's root)
  global   everyone
A document an agent can't see behaves as if it did not exist. The versions
up to a removal form one generation, whose access is that of its last row,
so recreating a name never opens its earlier history to the new owner's
readers.
"""

from agentctl.errors import NotFound, Refused, UsageError
from agentctl.ops.mail import check_body
from agentctl.store import documents, registry

VISIBILITIES = ("private", "subtree", "global")
MAX_NAME = 255
MAX_PATTERN = 1024
def check_name(name):
    if not name or not name.isprintable() or name.startswith("-") or len(name) > MAX_NAME:
        raise UsageError(f"bad document name: {name!r} (want printable text, not starting "
                         f"with -, at most {MAX_NAME} characters)")
    if "\ufffd" in name:       # what bytes that are not UTF-8 became: two names would be one
        raise UsageError(f"bad document name: {name!r} (not valid UTF-8)")


def check_visibility(visibility):
    if visibility not in VISIBILITIES:
        raise UsageError(f"unknown visibility: {visibility} (one of {', '.join(VISIBILITIES)})")


class Viewer:
    """What one actor may see; the ancestor walk is done once."""

    def __init__(self, conn, actor_id):
        self.actor_id = actor_id
        self.above = registry.ancestors(conn, actor_id) if actor_id else set()

    def sees(self, row):
        owner, visibility = row["owner_id"], row["visibility"]
        if self.actor_id is None or owner == self.actor_id or visibility == "global":
            return True
        if owner is None:
            return visibility != "private"
        return visibility == "subtree" and owner in self.above

    def may_manage(self, row):
        """Remove it, or change its visibility: the owner or the operator."""
        return self.actor_id is None or row["owner_id"] == self.actor_id


def _visible_versions(viewer, rows):
    """The rows the viewer may see: each generation by its last row."""
    seen, generation = [], []
    for row in rows:
        generation.append(row)
        if row["removed"] or row is rows[-1]:
            if viewer.sees(row):
                seen += generation
            generation = []
    return seen


def _current(conn, viewer, name):
    """The newest row of `name` when it is a document the viewer can see."""
    check_name(name)
    row = documents.newest(conn, name)
    if row is None or row["removed"] or not viewer.sees(row):
        return None, row
    return row, row


def put(conn, actor_id, name, body, visibility=None, if_version=None):
    """Write a new version of `name` (creating it, owned by the actor, private
    unless told otherwise); returns its version. The caller holds the
    transaction and has checked the body."""
    check_body(body)
    if visibility is not None:
        check_visibility(visibility)
    viewer = Viewer(conn, actor_id)
    current, newest = _current(conn, viewer, name)
    if newest is not None and not newest["removed"] and current is None:
        # One namespace: the name is taken, and that is all that shows.
        raise Refused(f"{name}: the name is taken by a document you can't see")
    if if_version is not None:
        now = current["version"] if current else 0
        if now != if_version:
            raise Refused(f"{name}: is at version {now}, not {if_version}")
    if current is None:
        owner, visibility = actor_id, visibility or "private"
    else:
        owner = current["owner_id"]
        if visibility is not None and visibility != current["visibility"] \
                and not viewer.may_manage(current):
            raise Refused(f"{name}: only its owner may change its visibility")
        visibility = visibility or current["visibility"]
    version = newest["version"] + 1 if newest else 1
    documents.insert(conn, name, version, owner, visibility, body, actor_id)
    return version


def get(conn, actor_id, name, version=None):
    """The row (body included) of the document, or of one of its versions."""
    viewer = Viewer(conn, actor_id)
    current, _ = _current(conn, viewer, name)
    if version is None:
        if current is None:
            raise NotFound(f"no such document: {name}")
        wanted = current["version"]
    else:
        if version not in {r["version"] for r in _visible_versions(viewer, documents.versions(conn, name))}:
            raise NotFound(f"no such document: {name} version {version}")
        wanted = version
    row = documents.version(conn, name, wanted)
    if row["removed"]:
        raise NotFound(f"{name}: version {version} removed it")
    return row


def rm(conn, actor_id, name):
    """Remove the document: a version with no body. Returns that version."""
    viewer = Viewer(conn, actor_id)
    current, _ = _current(conn, viewer, name)
    if current is None:
        raise NotFound(f"no such document: {name}")
    if not viewer.may_manage(current):
        raise Refused(f"{name}: only its owner may remove it")
    version = current["version"] + 1
    documents.insert(conn, name, version, current["owner_id"], current["visibility"], None,
                     actor_id)
    return version


def listing(conn, actor_id, pattern=None):
    """The documents the actor can see, by name; `pattern` is a GLOB, and one
    ending in / stands for everything under it."""
    if pattern is not None:
        if len(pattern) > MAX_PATTERN:      # SQLite refuses long ones as "too complex"
            raise UsageError(f"pattern too long: {len(pattern)} characters "
                             f"(at most {MAX_PATTERN})")
        pattern = pattern + "*" if pattern.endswith("/") else pattern
    rows = documents.current(conn, pattern)
    viewer = Viewer(conn, actor_id)
    return [row for row in rows if viewer.sees(row)]


def versions(conn, actor_id, name):
    """Every version of `name` the actor may see, oldest first."""
    check_name(name)
    rows = _visible_versions(Viewer(conn, actor_id), documents.versions(conn, name))
    if not rows:
        raise NotFound(f"no such document: {name}")
    return rows


def who(row, key, full=False):
    """The owner or author of a row (`key`): for people (registry.named), or with
    `full`, for a model (registry.signed)."""
    return (registry.signed if full else registry.named)(row[f"{key}_id"], row[f"{key}_name"])
