"""What agent-merge would do (agent-merge(1)): where a child's changes go (its
parent's layer, or the real directory), which of its changed paths conflict with
what changed there since the fork, and the steps that make the target show the
child's entries, path by path. Reads only.

The .git rule (agent-merge(1), The .git directory): the derived files (the index,
locks, the reflogs, FETCH_HEAD ...) are never merged and never conflict; objects are
named by their content, so they are only ever added (a union: never a conflict,
never deleted); refs, HEAD and packed-refs are paths like any other (a branch both
sides moved is a conflict); a git directory's configuration and hooks are never
written, at any depth (.git/config, .git/hooks, sub/.git/hooks, .git/modules/M/config),
nor any name of the read-only set the child was not granted, nor agentctl's own
files."""

import os
import stat

from agentctl import paths, settings
from agentctl.errors import UsageError
from agentctl.store import layers as rows
from agentctl.workspace import changed, journal, view

DERIVED = ("index", "FETCH_HEAD", "ORIG_HEAD", "COMMIT_EDITMSG", "logs", "gc.log",
           "AUTO_MERGE", "MERGE_MSG")


def _runs(path):
    """Whether `path` is in a git directory's hooks or is its configuration, at any
    depth: the working directory's .git, a nested repository's (sub/.git), a
    submodule's or a worktree's (.git/modules/M/hooks, .git/worktrees/W/config)."""
    parts = path.split("/")
    for i, part in enumerate(parts):
        if part == ".git":
            rest = parts[i + 1:]
            if rest[:1] in (["objects"], ["refs"], ["logs"]):
                return False
            return any(p == "hooks" for p in rest) or rest[-1:] in (["config"],
                                                                     ["config.worktree"])
    return False


class Plan:
    """The merge of `child` (a row): `target` ("layer" or "base"), `parent` (the
    row of the agent whose layer it goes to, or None), `layer` (that agent's own
    layer row), `stack` (that agent's stack, for a layer), `steps` ([(path, what,
    entry)]: what "delete", "dir" or "put" (a file or link, entry: its path on disk
    and lstat), in the order they apply), `conflicts` (paths), `skipped` ([(path,
    why)])."""


def _fork_point(views):
    return views.fork["id"] if views.fork is not None else None


def target(conn, child, views):
    """Where the child's changes go: (its parent's row, the parent's own layer row)
    when its parent has a layer it was forked on (the layer at the child's fork is in
    the parent's stack), and that stack; else (None, None, None): the real
    directory."""
    parent_id = child["forked_from"]
    if parent_id is None:
        return None, None, None
    own = rows.own(conn, parent_id)
    if own is None or own["base"] != views.base:
        return None, None, None
    point = _fork_point(views)
    stack = rows.stack(conn, own["id"])
    if point is not None and point not in [r["id"] for r in stack]:
        return None, None, None
    return parent_id, own, stack


def _git(path):
    """How the .git rule takes `path`: "derived", "object", "never" or None (a path
    like any other)."""
    if _runs(path):
        return "never"
    if path != ".git" and not path.startswith(".git/"):
        return None
    rest = path[len(".git/"):]
    first = rest.split("/")[0]
    if first in DERIVED or path.endswith(".lock"):
        return "derived"
    if first == "objects":
        return "object"
    return None


def _refused(path, granted, base, hidden):
    """Why `path` is never written by a merge, or None."""
    top = path.split("/")[0]
    if _git(path) == "never":
        return "git runs what it holds"
    if top in paths.READ_ONLY_SET and top not in granted:
        return f"{top} is read-only to the agent's tools (agent-fork --rw)"
    if paths.inside(os.path.join(base, path), hidden):
        return "agentctl's own"
    return None


def _wanted(path, only):
    return not only or paths.inside(path, only)


def make(conn, child, views, *, only=(), side=None):
    """The plan of merging `child` (a row) whose views are `views` (changed.views,
    against the fork); `only`: paths to merge (and what is under them), else all;
    `side`: "theirs" (the child's entry wins a conflict), "ours" (the target's
    does), or None (a conflict stops the merge: Plan.conflicts lists them)."""
    plan = Plan()
    plan.parent, plan.layer, plan.stack = target(conn, child, views)
    plan.target = "layer" if plan.layer is not None else "base"
    granted = set(settings.listed(child["rw"])) if child["rw"] else set()
    hidden = [p for p, how in paths.protected() if how == paths.HIDE]
    given = journal.given(child["id"])      # (what its earlier merges gave: candidates too,
    mine = [p for p in sorted(set(changed.paths(views)) | set(given))  # a path it made,
            if _wanted(p, only)]                # merged, then removed is no change to it)
    theirs = _theirs(plan, views)
    plan.conflicts, plan.skipped, wanted = [], [], []
    shown = view.directories(plan.stack) if plan.stack else [views.base]
    for path in mine:
        why = _refused(path, granted, views.base, hidden)
        rule = _git(path)
        if why:
            plan.skipped.append((path, why))
            continue
        if rule == "derived":
            continue                        # (git makes it again, there)
        new, old = changed.entry(views.new, path), changed.entry(views.old, path)
        now = changed.entry(shown, path)
        if _same_entry(now, new):
            continue                        # (already so: taken before, or by both)
        if rule == "object":
            if new is None or now is not None:
                continue                    # (a union: never deleted, never replaced)
        elif path in theirs(path, now) and not _as_given(given.get(path), now) \
                and side != "theirs":
            if side is None:
                plan.conflicts.append(path)
            continue
        wanted.append((path, new, old))
    plan.steps = _steps(wanted)
    return plan


def _as_given(gave, now):
    """Whether the target's entry `now` is still what an earlier merge of the child's
    gave it (journal.given): then the target did not change it on its own."""
    if gave is None:
        return False
    if not gave:
        return now is None
    return now is not None and not changed.is_dir(now) and [
        stat.S_IMODE(now[1].st_mode), now[1].st_size, now[1].st_mtime_ns] == gave


def _same_entry(a, b):
    if a is None or b is None:
        return a is b
    if changed.is_dir(a) or changed.is_dir(b):
        return changed.is_dir(a) and changed.is_dir(b)
    return changed.same(a, b)


def _theirs(plan, views):
    """A test of whether the target changed `path` since the fork: for a layer, the
    paths its agent's layers above the fork changed; for the real directory, an entry
    modified after the lineage began reading it (its modification time)."""
    if plan.target == "layer":
        point = _fork_point(views)
        above = []
        for r in plan.stack:
            if r["id"] == point:
                break
            above.append(r)
        touched = set(changed.paths(changed.Views(plan.stack, len(above))))
        return lambda path, now: {path} & touched
    since = views.since

    def modified(path, now):
        return {path} if now is not None and now[1].st_mtime > since else set()
    return modified


def _steps(wanted):
    """The steps that make the target show each wanted path's entry: deletions first,
    deepest first (a path under one that is replaced is not deleted on its own), then
    directories and files, shallowest first."""
    replaced = {p for p, new, _ in wanted if not changed.is_dir(new)}
    deletions, puts = [], []
    for path, new, old in wanted:
        parent = os.path.dirname(path)
        under = False
        while parent:
            if parent in replaced:
                under = True
                break
            parent = os.path.dirname(parent)
        if new is None:
            if not under:
                deletions.append((path, "delete", None))
        elif changed.is_dir(new):
            puts.append((path, "dir", new))
        elif stat.S_ISREG(new[1].st_mode) or stat.S_ISLNK(new[1].st_mode):
            puts.append((path, "put", new))
    return sorted(deletions, reverse=True) + sorted(puts)


def paths_given(only):
    for p in only:
        if os.path.isabs(p) or ".." in p.split("/"):
            raise UsageError(f"--only {p}: a path relative to the working directory, "
                             "without ..")
    return [p.strip("/") for p in only]
