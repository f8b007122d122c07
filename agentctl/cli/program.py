"""What makes a program: the decorator (-h, --version, --db), the acting agent,
and run(), the one place where errors become `program: message` and an exit status."""

import gc
import os
import sys

import click

from agentctl import __version__, paths
from agentctl.cli import THRESHOLDS
from agentctl.cli.stdio import (Interrupted, OutputFault, PipeClosed, discard_output, warn,
                                whole_writes)
from agentctl.errors import SOFTWARE, USAGE, AgentctlError, NotFound, UsageError
from agentctl.store import db, registry
from agentctl.text import valid

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


def _show_help(ctx, param, value):
    if value and not ctx.resilient_parsing:
        click.echo(ctx.get_help(), color=ctx.color)
        ctx.exit()


def _short_first(parser):
    """`parser` (click's) matching a short option (-q, -s KILL, -aq) as one at once.
    click tries every option as a long one first, and the error it makes when that
    fails looks for close matches (importing difflib, reading the translations) before
    it is thrown away: 1 ms of an `agent-ps -q`. The same options match, the same way;
    a click without the parts named here is left as it is."""
    process = getattr(parser, "_process_opts", None)
    short = getattr(parser, "_match_short_opt", None)
    prefixes, longs = getattr(parser, "_opt_prefixes", None), getattr(parser, "_long_opt", None)
    if None in (process, short, prefixes, longs) or parser.ctx.token_normalize_func:
        return parser

    def process_opts(arg, state):
        if arg[:2] not in prefixes and "=" not in arg and arg not in longs:
            return short(arg, state)
        return process(arg, state)
    parser._process_opts = process_opts
    return parser


def _ours(cls):
    """`cls` with what click's main would mishandle passed on to run(), and what click
    does at every start made cheaper: its own -h and --version read the translations
    of their help, which imports locale (1 ms)."""
    class Command(cls):
        def invoke(self, ctx):
            try:
                return super().invoke(ctx)
            except BrokenPipeError as e:
                raise PipeClosed() from e
            except KeyboardInterrupt as e:
                raise Interrupted() from e

        def get_help_option(self, ctx):
            names = self.get_help_option_names(ctx)
            if not names or not self.add_help_option:
                return None
            if getattr(self, "help_option", None) is None:
                self.help_option = click.Option(
                    names, is_flag=True, expose_value=False, is_eager=True,
                    callback=_show_help, help="Show this message and exit.")
            return self.help_option

        def make_parser(self, ctx):
            return _short_first(super().make_parser(ctx))

    if issubclass(cls, click.Group):
        Command.command_class = _ours(click.Command)
    return Command


def _version(name):
    """The --version option."""
    def show(ctx, param, value):
        if value and not ctx.resilient_parsing:
            click.echo(f"{name} (agentctl) {__version__}", color=ctx.color)
            ctx.exit()
    return click.option("--version", is_flag=True, expose_value=False, is_eager=True,
                        callback=show, help="Show the version and exit.")


def program(name, cls=click.Command, hint=None, **kwargs):
    """A click command with -h/--help, --version and --db. `hint(word)`: what to type
    instead of an option the program doesn't have (another program's spelling), or
    None."""
    def decorate(fn):
        fn = click.option("--db", "db_path", metavar="PATH",
                          help="The database: a file, or a postgresql:// URL (default "
                               "$AGENTCTL_DB, else $XDG_DATA_HOME/agentctl/agents.db).")(fn)
        fn = _version(name)(fn)
        command = click.command(name, cls=_ours(cls), context_settings=CONTEXT,
                                **kwargs)(fn)
        command.hint = hint
        return command
    return decorate


def _hint(command, error, argv):
    """The error of an unknown option with what the program's hint says of the word it
    came from (-KILL, not click's -K), or None."""
    hint = getattr(command, "hint", None)
    if not isinstance(error, click.NoSuchOption) or hint is None:
        return None
    word = next((w for w in argv if w.startswith(error.option_name)), error.option_name)
    word = word.partition("=")[0]
    said = hint(word)
    return said and f"no such option: {word}: {said}"


_opened = []     # the database this program opened, for run() to check when a bug shows


def connect(db_path, create=True):
    """The database; `create` False for a program that only reads (db.connect)."""
    if db_path is not None and os.environ.get("AGENTCTL_PROXIED"):
        raise UsageError("--db: a sandboxed tool's programs use its agent's database")
    _opened.append(db.resolve_path(db_path))
    conn = db.connect(db_path, create)
    if os.path.isdir(paths.merges()):
        _merges_finished(conn)
    return conn


def _merges_finished(conn):
    """A merge a crash left (agent-merge(1), Atomicity) finished, or thrown away, before
    anything else; what fails is said and left for the next program."""
    from agentctl.workspace import merge  # (start-up: 14 ms, only after a crashed merge)
    try:
        merge.recover(conn)
    except AgentctlError as e:
        warn(os.path.basename(sys.argv[0]) or "agentctl", str(e))


def actor(conn):
    """The acting agent: $AGENT_ID ("self"), or None for the operator."""
    ref = os.environ.get("AGENT_ID")
    if not ref:
        return None
    try:
        return registry.resolve(conn, ref)
    except NotFound:
        raise NotFound(f"AGENT_ID={valid(ref)}: no such agent")


def _valid_but_paths(argv):
    """Arguments made valid UTF-8 (text that is stored), but for a --db path, which
    names a file by its bytes and is kept exactly."""
    out, path_next = [], False
    for word in argv:
        if path_next or word.startswith("--db="):
            out.append(word)
        else:
            out.append(valid(word))
        path_next = word == "--db"
    return out


def run(command, argv=None):
    """Run a click command as a program: never a traceback (unless
    AGENTCTL_DEBUG=1), always a documented exit status."""
    name = command.name
    if argv is None:
        # This process is the program (its console script gives no argv): what it has
        # loaded lives as long as it does, and is frozen, so that neither a collection
        # nor the interpreter's exit looks through it again (5 ms of a start).
        gc.freeze()
    gc.set_threshold(*THRESHOLDS)
    if os.environ.get("AGENTCTL_SOCKET"):   # in a sandbox: the program runs as its agent
        from agentctl.tools.forward import forward  # (start-up: 1.5 ms, only in a sandbox)
        return forward(name.removeprefix("agent-"), argv)
    _opened.clear()
    paths.settle()
    argv = _valid_but_paths(sys.argv[1:] if argv is None else argv)
    try:
        whole_writes()
        status = command.main(args=argv, prog_name=name, standalone_mode=False)
        sys.stdout.flush()
        return status if isinstance(status, int) else 0
    except click.exceptions.Exit as e:
        return e.exit_code
    except click.UsageError as e:
        where = e.ctx.command_path if e.ctx else name     # a subcommand's own help
        warn(name, _hint(command, e, argv) or
             f"{e.format_message().rstrip('.')} (see {where} --help)")
        return USAGE
    except (BrokenPipeError, PipeClosed):
        # The reader went away (agent-ps | head): not an error of ours.
        discard_output()
        return 141
    except (KeyboardInterrupt, Exception) as e:
        if os.environ.get("AGENTCTL_DEBUG") == "1" and not isinstance(e, KNOWN):
            raise
        code, message, _ = failure(e)
        warn(name, message)
        if isinstance(e, OutputFault):
            discard_output()
        return code


KNOWN = (AgentctlError, db.Error, KeyboardInterrupt, Interrupted, click.Abort)  # not bugs


def failure(e):
    """What an error that ends a program makes of it: (its exit status, its one-line
    message, its kind: errors.KINDS, interrupted, bug). agent-run's stream tells the
    same (agent-run(1), The stream)."""
    if isinstance(e, db.Error):
        e = db.fault(e, _opened[-1] if _opened else None)
    if isinstance(e, AgentctlError):
        return e.code, str(e), e.kind
    if isinstance(e, (KeyboardInterrupt, Interrupted, click.Abort)):
        return 130, "interrupted", "interrupted"
    damaged = db.damage(e, _opened[-1]) if _opened else None
    if damaged:
        return damaged.code, str(damaged), damaged.kind
    return SOFTWARE, (f"internal error: {e.__class__.__name__}: {e} "
                      "(AGENTCTL_DEBUG=1 shows the details)"), "bug"

