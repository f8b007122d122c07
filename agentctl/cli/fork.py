"""agent-fork: create a child agent that inherits its parent's conversation."""

import os

import click

from agentctl.cli.options import BudgetType, Count, Duration, complete_agents, complete_words
from agentctl.cli.program import actor, connect, program, run
from agentctl.cli.stdio import read_body, warn
from agentctl.errors import UsageError
from agentctl import limits, modelspec, paths, settings
from agentctl.ids import INIT_ID, ROLES
from agentctl.ops import authority, lifecycle
from agentctl.store import registry
from agentctl.store.db import transaction


@program("agent-fork")
@click.option("-p", "--parent", metavar="PARENT", shell_complete=complete_agents, help="Fork this agent (default self, else init).")
@click.option("-n", "--name", metavar="NAME", help="The child's name, [a-z][a-z0-9._-]*.")
@click.option("-r", "--role", default="agent", metavar="ROLE", show_default=True,
              shell_complete=complete_words(ROLES),
              help="agent, task, worker, lead, architect or daemon.")
@click.option("-m", "--model", metavar="MODEL", help="The child's model (default: the parent's).")
@click.option("-s", "--system", metavar="SYSTEM",
              help="The child's system prompt (default: the parent's).")
@click.option("--at", "at", type=Count(0), metavar="MSG",
              help="Fork point: a message id in the parent's history (default its latest).")
@click.option("-w", "--context-window", "window", type=Count(1), metavar="TOKENS",
              help="Compact the child's context beyond this many tokens (default: the parent's).")
@click.option("--budget", type=BudgetType(), metavar="BUDGET",
              help="The child's own budget, TOKENS or dollars ('$2.50' or 2.50usd), carved "
                   "out of the parent's account (in its unit).")
@click.option("--restart", type=click.Choice(settings.RESTART_POLICIES), metavar="POLICY",
              help="never, on-failure or always (default: always for a daemon, else never).")
@click.option("--max-restarts", type=Count(0), metavar="N",
              help=f"Give up after N restarts within the window "
                   f"(default {lifecycle.DEFAULT_MAX_RESTARTS}).")
@click.option("--restart-window", type=Duration(), metavar="DURATION",
              help="The window --max-restarts counts in (default 1h).")
@click.option("--reap-after", type=Duration(), metavar="DURATION",
              help="Reap the child this long after it exits, if nobody waits for it "
                   "(default: the parent's, else $AGENTCTL_REAP_AFTER, else 24h).")
@click.option("--idle-exit", type=Duration(), metavar="DURATION",
              help="The child exits after this long without input.")
@click.option("--max-children", type=Count(0), metavar="N",
              help="At most N children alive or not yet collected at once "
                   "(default: the parent's; a worker's 4).")
@click.option("--allow", multiple=True, metavar="PATTERN",
              help="Grant the external tools whose names match (a shell glob; repeat it), "
                   "within what the parent may use.")
@click.option("--ask", multiple=True, metavar="PATTERN",
              help="Calls of matching tools need approval before they run (repeatable).")
@click.option("--cwd", metavar="DIR",
              help="The child's working directory, where its tools run and may write "
                   "(default: the parent's, else this one), within the parent's.")
@click.option("--ro", multiple=True, metavar="PATH",
              help="A path its tools may read besides its working directory, within what "
                   "the parent's may (repeatable; inherited).")
@click.option("--rw", multiple=True, metavar="NAME",
              help="Its tools may write NAME of the read-only set at the top of their "
                   "working directory (.git, .vscode ...: agentctl(7), SANDBOX), if the "
                   "parent's may (repeatable; inherited).")
@click.option("--env", "env_names", multiple=True, metavar="NAME",
              help="Its tools get agent-run's variable NAME, which they don't by default "
                   "(a token, a password ...), if the parent's do (repeatable; inherited).")
@click.option("--net/--no-net", default=None,
              help="Its tools may use the network (default: the parent's; a child of an "
                   "agent without it can't have it).")
@click.option("--limit", "limit", multiple=True, metavar="KEY=VALUE,...",
              help="Limits on each tool call: cpu=SECONDS, mem=SIZE, procs=N, fsize=SIZE, "
                   "files=N, at most the parent's (repeatable; inherited).")
@click.option("--unconfined", is_flag=True, default=None,
              help="Its tools run with the operator's whole power, outside the sandbox; "
                   "only the operator gives it, and no child inherits it.")
@click.option("-o", "--model-option", "options", multiple=True, metavar="KEY=VALUE",
              help="A model option (temperature=0.2, max_tokens=800 ...: agentctl(7), "
                   "Models); repeatable (default: the parent's).")
@click.option("--schema", metavar="FILE|JSON",
              help="The child's final reply must be a JSON value that fits this JSON "
                   "Schema (a file, or the JSON itself).")
@click.argument("prompt", required=False)
def cli(db_path, parent, name, role, model, system, at, window, budget, restart, max_restarts,
        restart_window, reap_after, idle_exit, max_children, allow, ask, cwd, ro, rw,
        env_names, net, limit, unconfined, options, schema, prompt):
    """Create a child of PARENT and print its id.

    With PROMPT (or - to read it from stdin) the prompt is the child's first
    new message and the child has input pending; without one, parent and
    child both wait for input. With --budget the child's model calls may
    spend at most BUDGET (tokens, or dollars at the models' prices), taken
    from what the parent's account has left.
    """
    body = read_body(prompt) if prompt is not None else None
    if prompt is not None and (body is None or not body.strip()):
        raise UsageError("empty prompt")
    if model is not None:
        modelspec.check_name(model)
    if schema is not None:
        schema = settings.get("schema").parse(schema)
    limits_given = limits.parse(limit) if limit else None
    catalog = None
    if allow or ask:    # the tools a grant may name, found before taking the lock
        from agentctl.tools.catalog import Catalog  # (start-up: only a fork that grants)
        catalog = Catalog()
    conn = connect(db_path)
    with transaction(conn):
        me = actor(conn)
        source = registry.resolve(conn, parent) if parent else (me or registry.get(conn, INIT_ID))
        authority.check(conn, me, source, "fork")
        if cwd is None:     # the parent's, else this one
            cwd = source["cwd"] or _this_directory()
        child = lifecycle.fork(conn, source, name=name, role=role, model=model, system=system,
                               at=at, prompt=body, actor=me["id"] if me else None,
                               context_window=window, budget=budget,
                               restart=restart, max_restarts=max_restarts,
                               restart_window=restart_window, reap_after=reap_after,
                               idle_exit=idle_exit, max_children=max_children,
                               allow=list(allow), ask=list(ask), cwd=cwd,
                               ro=list(ro) or None, rw=list(rw) or None,
                               env=list(env_names) or None, net=net, limits=limits_given,
                               unconfined=unconfined,
                               model_options=list(options) or None, schema=schema,
                               tool_names=catalog and catalog.names)
    for pattern in catalog.unmatched(list(allow) + list(ask)) if catalog else ():
        warn("agent-fork", f"{pattern}: matches no tool that exists now (a grant may name "
                           "tools installed later)")
    if os.geteuid() == 0 and allow and not unconfined:     # (tools that may write)
        _sandbox_user_can_write(cwd)
    click.echo(child)


def _sandbox_user_can_write(cwd):
    """As root, the child's tools run as the sandbox's user (agentctl(7), SANDBOX): say so
    when its working directory is not that user's to write."""
    import stat
    from agentctl.tools import sandbox  # (start-up: root's forks only)
    try:
        uid, gid = sandbox.user()
        st = os.stat(cwd)
    except (sandbox.Unavailable, OSError):
        return          # (its first call says why)
    bit = stat.S_IWUSR if st.st_uid == uid else stat.S_IWGRP if st.st_gid == gid \
        else stat.S_IWOTH
    if not st.st_mode & bit:
        warn("agent-fork", f"{cwd}: as root, its tools run as uid {uid} "
                           f"(${sandbox.USER}, else nobody), who can't write there: give it "
                           f"the directory (chown -R {uid} DIR) or name another user")


def _this_directory():
    """The directory agent-fork runs in, for a child of init given no --cwd: never the
    home or what holds it, / or the system's, silently (its tools would write there)."""
    here = os.path.realpath(os.getcwd())
    why = paths.refused_workdir(here) or (
        f"it holds your home, {paths.home()}" if paths.inside(paths.home(), [here]) else None)
    if why:
        raise UsageError(f"no --cwd, and this directory can't be the child's working "
                         f"directory (where its tools write): {why}: give --cwd DIR")
    return here


def main(argv=None):
    return run(cli, argv)
