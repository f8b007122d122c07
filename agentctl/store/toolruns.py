"""External tool calls' runs (agentctl(5), tool_runs): recorded as started, in a
committed transaction, before the program runs, and ended with its result, so that
a run interrupted by a crash is never started again (ops/turn: "outcome unknown")."""

from agentctl import clock


def start(conn, agent_id, turn_id, call_id, tool, host):
    return conn.execute(
        "INSERT INTO tool_runs (agent_id, turn_id, tool_call_id, tool, host, started_at) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        (agent_id, turn_id, call_id, tool, host, clock.now())).lastrowid


def set_group(conn, run_id, pgid):
    conn.execute("UPDATE tool_runs SET pgid = ? WHERE id = ?", (pgid, run_id))


def end(conn, run_id, outcome):
    conn.execute("UPDATE tool_runs SET ended_at = ?, outcome = ? WHERE id = ?",
                 (clock.now(), outcome, run_id))


def wait_for_task(conn, run_id, task):
    """The run waits for its MCP server's task (`task`, as JSON): it stays unfinished."""
    conn.execute("UPDATE tool_runs SET task = ? WHERE id = ?", (task, run_id))


def unfinished(conn, turn_id, call_id):
    """The run of this call that started and never ended, or None."""
    return conn.execute("SELECT * FROM tool_runs WHERE turn_id = ? AND tool_call_id = ? "
                        "AND ended_at IS NULL ORDER BY id DESC LIMIT 1",
                        (turn_id, call_id)).fetchone()
