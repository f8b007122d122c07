"""An MCP tool call its server makes a task (the tasks of revision 2025-11-25:
agent-run(1), MCP servers): where the server says it makes tasks of tool calls and the
tool's execution.taskSupport is "optional" or "required", the call asks for one; the
server answers at once with the task, which is polled (tasks/get, at the interval it
asks, 0.5 to 30 s) until it is done, then its result taken (tasks/result).

A Streamable HTTP server's task outlives the turn's process: polled for
AGENTCTL_MCP_TASK_WAIT (default 30 s), then kept with the call's run (Waits:
tool_runs.task), agent-run ends its run and the agent's next run polls it again, its
session resumed. A stdio server ends with its turn: its task is polled for the call's
time, then cancelled (tasks/cancel)."""

import json
import time

from agentctl import env

TTL_SECONDS = 24 * 3600         # asked of the server: how long it keeps the task
TERMINAL = ("completed", "failed", "cancelled")
POLL_RANGE = (0.5, 30.0)        # seconds between two polls, whatever the server asks


class Waits(Exception):
    """The task still runs when the turn's wait is over: kept with the call's run."""

    def __init__(self, server, task_id, poll):
        super().__init__(f"MCP server {server}: task {task_id} still runs")
        self.server, self.task_id, self.poll = server, task_id, poll

    def stored(self):
        """What the call's run keeps: the task as the server's Task says it, and whose."""
        return json.dumps({"server": self.server, "taskId": self.task_id,
                           "pollInterval": int(self.poll * 1000)})


class Ended(Exception):
    """The server cancelled the task, or no longer knows it."""


def wait_seconds():
    """$AGENTCTL_MCP_TASK_WAIT: how long a run polls a Streamable HTTP server's task."""
    return env.duration("AGENTCTL_MCP_TASK_WAIT", 30.0)


def support(listed, tool):
    """Whether `tool` (by the tools' listing, MCP's dicts) may be called as a task."""
    for each in listed:
        if each.get("name") == tool:
            execution = each.get("execution")
            return isinstance(execution, dict) and \
                execution.get("taskSupport") in ("optional", "required")
    return False


def awaited(session, server, task, timeout, poll, poll_seconds, keep, resumed=False):
    """The result (tasks/result) of the task `task` (the server's Task, or Waits.stored's)
    once it is done; `keep`: Waits once wait_seconds() have passed (else the call's
    `timeout`: then it is cancelled, and TimeoutError). `poll()` is asked while it
    waits; what it raises gives the task up (cancelled). `resumed`: polled at once."""
    task_id = task.get("taskId")
    if not isinstance(task_id, str) or not 0 < len(task_id) <= 256:
        raise Ended("the server's task has no usable id")
    status = task.get("status", "working")
    deadline = time.monotonic() + (wait_seconds() if keep else timeout)
    interval, got = _interval(task), task
    try:
        while status not in TERMINAL and status != "input_required":
            if not resumed:
                if time.monotonic() >= deadline:
                    if keep:
                        raise Waits(server, task_id, interval)
                    raise TimeoutError(f"no result in {timeout:g} s")
                _wait(min(interval, max(0.0, deadline - time.monotonic())), poll,
                      poll_seconds)
            resumed = False
            got = session.request("tasks/get", {"taskId": task_id}, 30)
            status, interval = got.get("status"), _interval(got, interval)
    except (Waits, Ended):
        raise
    except BaseException:
        _cancel(session, task_id)
        raise
    if status == "cancelled":
        raise Ended(f"the server cancelled its task {task_id}" +
                    (f": {got.get('statusMessage')}" if got.get("statusMessage") else ""))
    return session.request("tasks/result", {"taskId": task_id}, timeout, poll, poll_seconds)


def _interval(task, default=1.0):
    asked = task.get("pollInterval")
    seconds = asked / 1000 if isinstance(asked, (int, float)) and asked > 0 else default
    return min(max(seconds, POLL_RANGE[0]), POLL_RANGE[1])


def _wait(seconds, poll, poll_seconds):
    """`seconds` passed, `poll()` asked meanwhile."""
    until = time.monotonic() + seconds
    while True:
        left = until - time.monotonic()
        if left <= 0:
            return
        time.sleep(min(left, poll_seconds))
        if poll is not None:
            poll()


def _cancel(session, task_id):
    try:
        session.request("tasks/cancel", {"taskId": task_id}, 5)
    except Exception:
        pass        # (a server gone, or one that can't: nothing more to do)
