"""An MCP tool call its server makes a task (tools/mcptasks.py): a Streamable HTTP
server's task is kept with the call's run when the run's wait is over, and the agent's
next run polls it, its session resumed, until its result is the call's."""

import json
import os

import pytest

from agentctl.store.db import connect

from .conftest import agent, calling, fork, script, status, tool_results
from .mcptasks import TaskServer
from .test_mcp import configure


@pytest.fixture
def tasks(tmp_path, monkeypatch):
    server = TaskServer()
    configure(tmp_path, monkeypatch, {"jobs": {"url": server.url}})
    monkeypatch.setenv("AGENTCTL_MCP_TASK_WAIT", "1s")
    try:
        yield server
    finally:
        server.close()


def test_a_task_outlives_the_run_and_the_next_run_takes_its_result(tasks, tmp_path):
    fork("-n", "w", "--allow", "jobs__*",
         "-m", script(tmp_path, calling([("jobs__build", {"what": "docs"})])), "go")
    conn = connect(os.environ["AGENTCTL_DB"])
    ran = agent("run", "w")
    assert ran.code == 0, ran.err
    assert ran.err == "agent-run: w: a call's MCP task still runs: the agent's next run " \
        "polls it\n"
    assert tool_results(conn, "w") == [] and status(conn, "w") == "S"
    task, = [json.loads(r[0]) for r in conn.execute("SELECT task FROM tool_runs")]
    assert (task["server"], task["taskId"], task["pollInterval"]) == ("jobs", "task-1", 500)
    call, = [m for m in tasks.methods if m == "tools/call"]
    assert agent("run", "w").code == 0              # still running: polled, kept
    assert tool_results(conn, "w") == []
    tasks.finish()
    ran = agent("run", "w")
    assert ran.code == 0, ran.err
    assert tool_results(conn, "w") == ["built docs"]
    assert tasks.methods.count("tools/call") == 1   # made once, whatever the runs
    assert tasks.methods.count("initialize") == 1   # its session resumed by each run
    assert tasks.methods[-1] == "tasks/result"
    assert conn.execute("SELECT outcome FROM tool_runs").fetchone()[0] == "ok"


def test_a_tool_without_task_support_is_called_plainly(tasks, tmp_path):
    fork("-n", "w", "--allow", "jobs__*",
         "-m", script(tmp_path, calling([("jobs__quick", {})])), "go")
    assert agent("run", "w").code == 0
    assert tool_results(connect(os.environ["AGENTCTL_DB"]), "w") == ["quick"]
    assert "tasks/get" not in tasks.methods


def test_a_task_the_server_forgot_is_an_error_the_model_sees(tasks, tmp_path):
    fork("-n", "w", "--allow", "jobs__*",
         "-m", script(tmp_path, calling([("jobs__build", {"what": "x"})])), "go")
    assert agent("run", "w").code == 0
    tasks.tasks.clear()                             # (as after the server's restart)
    ran = agent("run", "w")
    assert ran.code == 0, ran.err
    result, = tool_results(connect(os.environ["AGENTCTL_DB"]), "w")
    assert result.startswith("error: MCP server jobs: build: ") and "no task task-1" in result


def test_a_task_without_a_usable_id_or_polled_too_fast_is_held_to_bounds():
    from agentctl.tools import mcptasks

    class Session:
        def __init__(self):
            self.asked = []

        def request(self, method, params, timeout, *more):
            self.asked.append(method)
            return {"status": "completed"} if method == "tasks/get" else {"content": []}
    for bad in ({"taskId": ""}, {"taskId": "x" * 257}, {"taskId": 7}, {}):
        with pytest.raises(mcptasks.Ended, match="no usable id"):
            mcptasks.awaited(Session(), "jobs", bad, 30, None, 0.05, keep=False)
    session = Session()
    assert mcptasks.awaited(session, "jobs", {"taskId": "t", "status": "working",
                                              "pollInterval": 1}, 30, None, 0.05,
                            keep=False) == {"content": []}
    assert session.asked == ["tasks/get", "tasks/result"]
    assert mcptasks._interval({"pollInterval": 1}) == mcptasks.POLL_RANGE[0]
    assert mcptasks._interval({"pollInterval": 10 ** 9}) == mcptasks.POLL_RANGE[1]


def test_a_task_the_server_cancelled_is_an_error_the_model_sees(tasks, tmp_path):
    fork("-n", "w", "--allow", "jobs__*",
         "-m", script(tmp_path, calling([("jobs__build", {"what": "x"})])), "go")
    assert agent("run", "w").code == 0
    tasks.tasks["task-1"]["status"] = "cancelled"
    assert agent("run", "w").code == 0
    assert tool_results(connect(os.environ["AGENTCTL_DB"]), "w") == [
        "error: MCP server jobs: build: the server cancelled its task task-1"]


def test_a_task_not_kept_is_cancelled_when_the_calls_time_is_over():
    """A stdio server's task (keep=False: the server ends with the turn) is polled for
    the call's time, then cancelled on the server."""
    from agentctl.tools import mcptasks

    class Working:
        asked = []

        def request(self, method, params, timeout, *more):
            self.asked.append(method)
            return {"taskId": "t", "status": "working"}
    session = Working()
    with pytest.raises(TimeoutError, match="no result in 0.6 s"):
        mcptasks.awaited(session, "jobs", {"taskId": "t", "status": "working"}, 0.6, None,
                         0.05, keep=False)
    assert session.asked[-1] == "tasks/cancel" and "tasks/result" not in session.asked
