"""Standard input and output as the programs use them: the input rules (ids from
arguments, else from stdin when it carries data; - for a body on stdin), writes
to stdout that are whole or fail, and one-line messages on stderr."""

import io
import os
import stat
import sys
import time

from agentctl.errors import DATABASE, AgentctlError, UsageError


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


def whole_writes():
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


def discard_output():
    """What is still buffered for standard output can't go out either: send it
    to /dev/null, so that flushing at exit raises nothing."""
    if not isinstance(sys.stdout, _Closed):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def stdin_is_data():
    """The one input rule: stdin carries data when it is a pipe or a file;
    not when it is a terminal, /dev/null (as under cron) or closed."""
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


def reader_gone(seconds):
    """Wait up to `seconds`; whether standard output's reader went away meanwhile (a
    pipe whose other end closed reports POLLERR at once: `agent-log -f | head -3`
    ends though nothing more is written). A file or a terminal never wakes it."""
    import select  # (start-up: 0.15 ms, only for agent-log -f)
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), 0)      # errors and hang-ups only
    except (AttributeError, ValueError, OSError, io.UnsupportedOperation):
        time.sleep(seconds)
        return False
    return bool(poller.poll(seconds * 1000))


def warn(name, message):
    """`name: message` on one line, whatever the message quotes: a control
    character or line break in it is written as its escape (\\n, \\x00)."""
    line = f"{name}: {message.translate(LINE_BREAKS)}\n"
    sys.stderr.buffer.write(line.encode("utf-8", errors="backslashreplace"))
    sys.stderr.flush()




# cat -v's notation: ^[ for ESC, ^? for DEL, M-^[ for the C1 codes; newline and tab
# stay what they are.
CARET = {c: f"^{chr(c + 64)}" for c in range(32) if c not in (9, 10)}
CARET[127] = "^?"
CARET.update({c: f"M-^{chr(c - 128 + 64)}" for c in range(0x80, 0xa0)})


def for_terminal(text, stream=None):
    """`text` as it may be shown: on a terminal, every control character that a
    terminal would act on (OSC 52 sets the clipboard, others the title or the
    screen) in cat -v's notation; to a pipe or a file, the exact text."""
    stream = stream or sys.stdout
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):
        tty = False
    return text.translate(CARET) if tty else text
