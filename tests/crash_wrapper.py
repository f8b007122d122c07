"""Run agent-run with a kill -9 injected at a chosen point, for the crash tests.

    python crash_wrapper.py POINT N [agent-run arguments...]
    CRASH_PROGRAM=answer python crash_wrapper.py POINT N [agent-answer arguments...]

POINT is where the process kills itself with SIGKILL (no cleanup, no
rollback, exactly as `kill -9` from outside):
  before   just before the Nth COMMIT (that transaction is lost)
  after    just after the Nth COMMIT
  model    inside the Nth model call, before it returns

When the run never reaches that point it ends normally with agent-run's own
exit status. Nothing in the product knows about this: the wrapper replaces
agentctl.store.db.transaction before the modules that use it are imported.
"""

import os
import signal
import sys
from contextlib import contextmanager

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from agentctl.store import db  # noqa: E402

POINT, AT = sys.argv[1], int(sys.argv[2])
commits = 0
model_calls = 0


def die():
    os.kill(os.getpid(), signal.SIGKILL)


@contextmanager
def transaction(conn):
    global commits
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    commits += 1
    if POINT == "before" and commits == AT:
        die()
    conn.execute("COMMIT")
    if POINT == "after" and commits == AT:
        die()


def main():
    already = [m for m in ("agentctl.turn.runner", "agentctl.ops.turns", "agentctl.turn.builtin")
               if m in sys.modules]
    assert not already, f"imported before the patch: {already}"
    db.transaction = transaction
    from agentctl.models import offline
    real = offline.ScriptedModel.complete

    def complete(self, *args, **kwargs):
        global model_calls
        model_calls += 1
        if POINT == "model" and model_calls == AT:
            die()
        return real(self, *args, **kwargs)

    offline.ScriptedModel.complete = complete
    if os.environ.get("CRASH_PROGRAM", "run") == "answer":
        from agentctl.cli.answer import main as answer
        return answer(sys.argv[3:])
    from agentctl.cli.run import main as run
    return run(sys.argv[3:])


if __name__ == "__main__":
    sys.exit(main())
