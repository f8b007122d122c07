"""agent-fork: create a child agent that inherits its parent's conversation."""

import os
import stat

import click

from agentctl.cli.options import Count, complete_agents, setting_options
from agentctl.cli.program import actor, connect, program, run
from agentctl.cli.stdio import read_body, warn
from agentctl.errors import UsageError
from agentctl import paths, settings
from agentctl.ids import INIT_ID
from agentctl.ops import authority, lifecycle
from agentctl.store import registry
from agentctl.store.db import transaction


@program("agent-fork")
@click.option("-p", "--parent", metavar="PARENT", shell_complete=complete_agents, help="Fork this agent (default self, else init).")
@click.option("-n", "--name", metavar="NAME", help="The child's name, [a-z][a-z0-9._-]*.")
@click.option("--at", "at", type=Count(0), metavar="MSG",
              help="Fork point: a message id in the parent's history (default its latest).")
@setting_options
@click.argument("prompt", required=False)
def cli(db_path, parent, name, at, prompt, **options):
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
    given = {s.key: s.given(options[s.name], options.get(f"no_{s.name}", False))
             for s in settings.SETTINGS}
    grants = (given["allow"] or []) + (given["ask"] or [])
    catalog = None
    if grants:      # the tools a grant may name, found before taking the lock
        from agentctl.tools.catalog import Catalog  # (start-up: 5.5 ms, only for a fork that grants)
        catalog = Catalog()
    conn = connect(db_path)
    with transaction(conn):
        me = actor(conn)
        source = registry.resolve(conn, parent) if parent else (me or registry.get(conn, INIT_ID))
        authority.check(conn, me, source, "fork")
        if given["cwd"] is None and not source["cwd"]:    # the parent's, else this one,
            given["cwd"] = _this_directory()            # shared (agentctl(7), WORKSPACES)
            given["shared"] = True if given["shared"] is None else given["shared"]
        child = lifecycle.fork(conn, source, name=name, at=at, prompt=body,
                               actor=me["id"] if me else None,
                               tool_names=catalog and catalog.names, **given)
    for pattern in catalog.unmatched(grants) if catalog else ():
        warn("agent-fork", f"{pattern}: matches no tool that exists now (a grant may name "
                           "tools installed later)")
    if os.geteuid() == 0 and given["allow"] and not given["unconfined"]:    # (tools that write)
        _sandbox_user_can_write(given["cwd"] or source["cwd"])
    click.echo(child)


def _sandbox_user_can_write(cwd):
    """As root, the child's tools run as the sandbox's user (agentctl(7), SANDBOX): say so
    when its working directory is not that user's to write."""
    from agentctl.tools import runas  # (start-up: 3 ms, only for root's forks)
    try:
        uid, gid = runas.user()
        st = os.stat(cwd)
    except (runas.Unavailable, OSError):
        return          # (its first call says why)
    bit = stat.S_IWUSR if st.st_uid == uid else stat.S_IWGRP if st.st_gid == gid \
        else stat.S_IWOTH
    if not st.st_mode & bit:
        warn("agent-fork", f"{cwd}: as root, its tools run as uid {uid} "
                           f"(${runas.USER}, else nobody), who can't write there: give it "
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
