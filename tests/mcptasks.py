"""A Streamable HTTP MCP server on 127.0.0.1 that makes tasks of tool calls (revision
2025-11-25), written by hand since the SDK's server makes none: its tool `build`
requires a task (execution.taskSupport), `quick` is called plainly. A task runs until
the test says finish(); every message it was sent is in `methods`."""

import itertools
import json

from .localhttp import Handler, LocalServer

TOOLS = [{"name": "build", "description": "Build, for a long time.",
          "inputSchema": {"type": "object", "properties": {"what": {"type": "string"}}},
          "execution": {"taskSupport": "required"}},
         {"name": "quick", "description": "At once.", "inputSchema": {"type": "object"}}]


class TaskServer(LocalServer):
    def __init__(self):
        self.methods, self.tasks, self.done = [], {}, False
        self.ids = itertools.count(1)
        super().__init__(_Handler)
        self.url += "/mcp"

    def finish(self):
        self.done = True

    def task(self, task_id):
        task = self.tasks[task_id]
        if self.done and task["status"] == "working":
            task["status"] = "completed"
        return {"taskId": task_id, "status": task["status"], "ttl": task["ttl"],
                "pollInterval": 100, "createdAt": "2026-11-29T00:00:00Z",
                "lastUpdatedAt": "2026-11-29T00:00:00Z"}


class _Handler(Handler):
    def post(self, owner, body):
        message = json.loads(body)
        method, params = message.get("method"), message.get("params") or {}
        owner.methods.append(method or "-")
        if "id" not in message:
            return self.answer(202)
        if method != "initialize" and self.headers.get("Mcp-Session-Id") != "s1":
            return self.answer(404, b"no such session", "text/plain")
        result, error = None, None
        if method == "initialize":
            result = {"protocolVersion": "2025-11-25", "serverInfo": {"name": "t", "version": "1"},
                      "capabilities": {"tools": {}, "tasks": {"cancel": {}, "requests": {
                          "tools": {"call": {}}}}}}
        elif method == "tools/list":
            result = {"tools": TOOLS}
        elif method == "tools/call" and params.get("name") == "quick":
            result = {"content": [{"type": "text", "text": "quick"}]}
        elif method == "tools/call" and "task" not in params:
            error = {"code": -32601, "message": "build is called as a task"}
        elif method == "tools/call":
            task_id = f"task-{next(owner.ids)}"
            owner.tasks[task_id] = {"status": "working", "ttl": params["task"].get("ttl"),
                                    "what": params.get("arguments", {}).get("what")}
            result = {"task": owner.task(task_id)}
        elif method in ("tasks/get", "tasks/result", "tasks/cancel") and \
                params.get("taskId") not in owner.tasks:
            error = {"code": -32602, "message": f"no task {params.get('taskId')}"}
        elif method == "tasks/get":
            result = owner.task(params["taskId"])
        elif method == "tasks/cancel":
            owner.tasks[params["taskId"]]["status"] = "cancelled"
            result = owner.task(params["taskId"])
        elif method == "tasks/result":
            what = owner.tasks[params["taskId"]]["what"]
            result = {"content": [{"type": "text", "text": f"built {what}"}]}
        else:
            error = {"code": -32601, "message": f"no method {method}"}
        reply = {"jsonrpc": "2.0", "id": message["id"]}
        reply.update({"error": error} if error else {"result": result})
        self.answer(200, json.dumps(reply).encode(), "application/json",
                    headers=[("Mcp-Session-Id", "s1")] if method == "initialize" else ())
