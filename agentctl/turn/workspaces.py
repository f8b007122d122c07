"""The built-in tools `diff` and `merge` (agentctl(7), TOOLS; agent-diff(1),
agent-merge(1)): what an agent's descendant changed in its workspace, and its
work taken into the agent's own layer, through the programs' library functions.
Each runs before its call's transaction (a merge mounts, copies, and records its
own event): builtin.execute gives its result to the handler, which only returns it."""

from agentctl import voice
from agentctl.errors import AgentctlError
from agentctl.store import registry
from agentctl.workspace import changed, merge as merging, patch

LIMIT = 100_000         # characters of a diff the model is given (it says so past them)


def diff(conn, agent_id, args, descendant):
    """The diff of a descendant (or the caller itself), as agent-diff prints it:
    --stat with `stat`, against the real directory with `base`."""
    target = registry.resolve(conn, args["agent"])
    if target["id"] != agent_id:
        target = descendant(conn, agent_id, args["agent"])
    files = changed.files(changed.views(conn, target, "base" if args.get("base") else "fork"))
    if not files:
        return voice.NO_CHANGES
    if args.get("stat"):
        return patch.stat(files)
    text = patch.diff(files).decode("utf-8", "replace")
    return text if len(text) <= LIMIT else voice.cut_diff(text[:LIMIT], len(text))


def merge(conn, agent_id, args, descendant):
    """A child's work merged into the caller's layer (or the real directory): the
    paths changed; a conflict an error that lists them."""
    child = descendant(conn, agent_id, args["agent"])
    side = "theirs" if args.get("theirs") else "ours" if args.get("ours") else None
    try:
        made = merging.merge(conn, registry.get(conn, agent_id), child,
                             only=args.get("only", ()), side=side)
    except merging.Conflict as e:
        raise AgentctlError(voice.conflicts(str(e), e.paths), code=e.code) from None
    return voice.merged([p for p, _, _ in made.steps], [p for p, _ in made.skipped])
