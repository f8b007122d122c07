"""What every program shares: the decorator that makes a program, the shared
options, input rules, and the one place errors become `program: message`
and an exit status."""

import io
import os
import sqlite3
import sys

import click

from agentctl import __version__
from agentctl.errors import DATABASE, SOFTWARE, USAGE, AgentctlError, NotFound, UsageError

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


class PipeClosed(Exception):
    """Standard output's reader went away. Not an OSError: click's main turns
    EPIPE into exit 1, which here means "nothing", so run() must see it."""


class Interrupted(Exception):
    """^C. Not a KeyboardInterrupt: click's main writes an empty line for one,
    and an error is one line."""


class OutputFault(AgentctlError):
    """Standard output can't be written (a full disk): exit 74, EX_IOERR."""
    code = DATABASE


class _Whole(io.BufferedWriter):
    """Standard output whose writes are whole or raise. A pipe whose reader leaves
    mid-write takes part of a big write; CPython's BufferedWriter returns that
    count and TextIOWrapper drops the rest, so `agent-doc get big | head -c1`
    exited 0. A write that can't be done (a full disk) is exit 74, not a bug."""

    eager = False               # PYTHONUNBUFFERED: every write goes out at once

    def write(self, data):
        view, done = memoryview(data), 0
        while done < len(view):     # a short count: what is left goes again, or raises
            done += self._do(super().write, view[done:])
        if self.eager:
            self.flush()
        return done

    def flush(self):
        self._do(super().flush)

    @staticmethod
    def _do(call, *args):
        try:
            return call(*args)
        except (BrokenPipeError, BlockingIOError):
            raise
        except OSError as e:
            raise OutputFault(f"can't write standard output: {e.strerror or e}") from e

class _Closed(io.TextIOBase):
    """Standard output closed (`agent-ps >&-`): Python leaves sys.stdout None,
    and what writes to it fails as any output that can't be written does."""

    def writable(self):
        return True

    def write(self, text):
        raise OutputFault("can't write standard output: it is closed")


def _whole_writes():
    out = sys.stdout
    if out is None:
        sys.stdout = _Closed()
        return
    if out is not sys.__stdout__ or type(getattr(out, "buffer", None)) not in (
            io.BufferedWriter, io.FileIO):
        return                  # already ours, or replaced (a test, a caller)
    out.flush()
    whole = _Whole(io.FileIO(out.fileno(), "w", closefd=False))
    whole.eager = type(out.buffer) is io.FileIO
    sys.stdout = sys.__stdout__ = io.TextIOWrapper(
        whole, encoding=out.encoding, errors=out.errors, line_buffering=out.line_buffering,
        write_through=out.write_through)


def _discard_output():
    """What is still buffered for standard output can't go out either: send it
    to /dev/null, so that flushing at exit raises nothing."""
    if not isinstance(sys.stdout, _Closed):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _ours(cls):
    """`cls` with what click's main would mishandle passed on to run()."""
    class Command(cls):
        def invoke(self, ctx):
            try:
                return super().invoke(ctx)
            except BrokenPipeError as e:
                raise PipeClosed() from e
            except KeyboardInterrupt as e:
                raise Interrupted() from e
    return Command


def program(name, cls=click.Command, **kwargs):
    """A click command with -h/--help, --version and --db."""
    def decorate(fn):
        fn = click.option("--db", "db_path", metavar="PATH",
                          help="The database (default $AGENTCTL_DB, else "
                               "$XDG_DATA_HOME/agentctl/agents.db).")(fn)
        fn = click.version_option(__version__, "--version", prog_name=name,
                                  message="%(prog)s (agentctl) %(version)s")(fn)
        return click.command(name, cls=_ours(cls), context_settings=CONTEXT,
                             **kwargs)(fn)
    return decorate


def output_options(fn):
    """The output flags of every listing program (agentctl(7), OUTPUT)."""
    for option in reversed((
        click.option("--format", "fmt", default="table", metavar="FORMAT",
                     type=click.Choice(["table", "tsv", "json", "jsonl"]),
                     help="table (default), tsv, json or jsonl."),
        click.option("-o", "columns", metavar="COLS",
                     help="Comma-separated columns to show, in that order."),
        click.option("-q", "--quiet", is_flag=True, help="Print ids only, one per line."),
        click.option("-0", "--null", is_flag=True,
                     help="End records with NUL instead of newline (implies -q "
                          "unless the format is tsv or jsonl)."),
        click.option("--no-headers", is_flag=True, help="Leave out the header line."),
    )):
        fn = option(fn)
    return fn


class Count(click.IntRange):
    """A whole-number option (tokens, versions, message ids): at least `least`,
    and no more than an SQLite INTEGER holds."""

    def __init__(self, least):
        from agentctl.store.db import INTEGER_MAX
        super().__init__(min=least, max=INTEGER_MAX)


class Seconds(click.FloatRange):
    """A duration option: a number of seconds >= 0 (NaN is not one)."""

    def __init__(self):
        super().__init__(min=0)

    def convert(self, value, param, ctx):
        seconds = super().convert(value, param, ctx)
        if seconds != seconds:
            self.fail(f"{value!r} is not a number of seconds", param, ctx)
        return seconds


def complete_agents(ctx, param, incomplete):
    """Shell completion: names and ids of agents not yet dead."""
    from click.shell_completion import CompletionItem
    from agentctl.ids import short
    try:
        from agentctl.store.db import connect as open_db
        conn = open_db(ctx.params.get("db_path"))
        rows = conn.execute("SELECT id, name, role FROM agents WHERE status != 'X' "
                            "ORDER BY created_at").fetchall()
    except Exception:
        return []
    items = []
    for agent_id, name, role in rows:
        for word in (name, agent_id):
            if word and word.startswith(incomplete):
                items.append(CompletionItem(word, help=f"{role} {short(agent_id)}"))
    return items


def complete_words(words):
    """Shell completion from a fixed list (signals, roles), any case."""
    def complete(ctx, param, incomplete):
        return [w for w in words if w.lower().startswith(incomplete.lower())]
    return complete


def connect(db_path):
    from agentctl.store.db import connect as open_db
    return open_db(db_path)


def actor(conn):
    """The acting agent: $AGENT_ID ("self"), or None for the operator."""
    ref = os.environ.get("AGENT_ID")
    if not ref:
        return None
    from agentctl.store.registry import resolve
    try:
        return resolve(conn, ref)
    except NotFound:
        from agentctl.text import valid
        raise NotFound(f"AGENT_ID={valid(ref)}: no such agent")


def stdin_is_data():
    """The one input rule: stdin carries data when it is a pipe or a file;
    not when it is a terminal, /dev/null (as under cron) or closed."""
    import stat
    if sys.stdin is None or sys.stdin.closed:
        return False
    try:
        mode = os.fstat(sys.stdin.fileno()).st_mode
    except (OSError, ValueError, AttributeError):     # not a real file (an embedding)
        return not sys.stdin.isatty()
    return stat.S_ISFIFO(mode) or stat.S_ISREG(mode) or stat.S_ISSOCK(mode)


def stdin_words(args, what="AGENT"):
    """Arguments, else whitespace-separated words from stdin when it carries
    data (`agent-ps -q | agent-kill`); an empty pipe gives none (as xargs -r:
    a pipeline that selected nothing has nothing to do, and that is no error)."""
    if args:
        return list(args)
    if not stdin_is_data():
        raise UsageError(f"missing {what} (give it, or pipe ids on stdin)")
    return read_words()


def read_words():
    """The whitespace-separated words of stdin; in any locale, bytes that are
    not UTF-8 are a usage error (no id or name can hold them)."""
    try:
        return sys.stdin.buffer.read().decode("utf-8").split()
    except UnicodeDecodeError:
        raise UsageError("stdin is not valid UTF-8")


def read_body(text):
    """A body from the argument, or from stdin for '-' (or no argument and a
    pipe). Invalid UTF-8 is kept, as replacement characters."""
    if text is not None and text != "-":
        return text
    if sys.stdin is None or sys.stdin.closed or (text is None and not stdin_is_data()):
        return None
    data = sys.stdin.buffer.read()
    return data.decode("utf-8", errors="replace")


LINE_BREAKS = {c: repr(chr(c))[1:-1] for c in (*range(32), 127, 0x85, 0x2028, 0x2029)
               if c != 9}


def warn(name, message):
    """`name: message` on one line, whatever the message quotes: a control
    character or line break in it is written as its escape (\\n, \\x00)."""
    line = f"{name}: {message.translate(LINE_BREAKS)}\n"
    sys.stderr.buffer.write(line.encode("utf-8", errors="backslashreplace"))
    sys.stderr.flush()


def run(command, argv=None):
    """Run a click command as a program: never a traceback (unless
    AGENTCTL_DEBUG=1), always a documented exit status."""
    name = command.name
    from agentctl.text import valid
    argv = [valid(a) for a in (sys.argv[1:] if argv is None else argv)]
    try:
        _whole_writes()
        status = command.main(args=argv, prog_name=name, standalone_mode=False)
        sys.stdout.flush()
        return status if isinstance(status, int) else 0
    except click.exceptions.Exit as e:
        return e.exit_code
    except click.UsageError as e:
        where = e.ctx.command_path if e.ctx else name     # a subcommand's own help
        warn(name, f"{e.format_message().rstrip('.')} (see {where} --help)")
        return USAGE
    except AgentctlError as e:
        warn(name, str(e))
        if isinstance(e, OutputFault):
            _discard_output()
        return e.code
    except sqlite3.Error as e:
        from agentctl.store.db import fault
        error = fault(e)
        warn(name, str(error))
        return error.code
    except (BrokenPipeError, PipeClosed):
        # The reader went away (agent-ps | head): not an error of ours.
        _discard_output()
        return 141
    except (KeyboardInterrupt, Interrupted, click.Abort):
        warn(name, "interrupted")
        return 130
    except Exception as e:
        if os.environ.get("AGENTCTL_DEBUG") == "1":
            raise
        warn(name, f"internal error: {e.__class__.__name__}: {e} "
                   "(AGENTCTL_DEBUG=1 shows the details)")
        return SOFTWARE

