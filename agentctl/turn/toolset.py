"""What one turn offers: the built-in tools (builtin.py) and the external tools its
agent may use (tools.catalog), and how one call runs: paused for a question or an
approval, or run.

A call to the outside can't be rolled back, so it runs at most once: its
run is recorded as started (committed) before it runs, and its result after; a
resumed turn that finds a run started and never ended kills what is left of it and
gives the model "interrupted, outcome unknown" instead of running it again.
"""

import json
import os
import time

from agentctl import voice
from agentctl.ops import asks, elicitation, grants, lease
from agentctl.store import asks as asks_store, db, events, toolruns
from agentctl.turn import builtin as tools, requests
from agentctl.turn.requests import Paused  # noqa: F401 (the runner's: a call's request waits)
from agentctl.workspace import layers

SETTLE_SECONDS = 5      # for the connections its MCP servers leave, at the turn's end

# The external tools' modules (tools/) are imported where a turn uses one: a turn of an
# agent with no grant, or that calls none of its external tools, loads none of them.


def _peers():
    """Who a sandboxed tool's process is: the operator, or as root the sandbox's user."""
    from agentctl.tools import runas  # (start-up: 3 ms, only for a sandboxed call)
    if os.geteuid() != 0:
        return {os.getuid()}
    try:
        return {runas.user()[0]}
    except runas.Unavailable:
        return {os.getuid()}        # (the call says why it can't be made)


class TaskWaits(Exception):
    """A call's MCP task still runs: kept with its run (args[0], as stored), the turn
    waits."""


class Asked(Exception):
    """An MCP server asked a question the call had no answer for (args[0], its params)."""


class Toolset:
    """What one turn of `agent` offers."""

    def __init__(self, conn, agent, warn=None, prompt=None):
        self.conn, self.agent, self.prompt, self.warn = conn, agent, prompt, warn
        self.turn_id = self.tool = None     # the turn of its last call, and its tool
        self.warnings = []
        self.allowance = grants.Allowance(conn, agent["id"])
        self.builtin = {s["function"]["name"]: s for s in tools.specs()
                        if not (agent["role"] == "task" and s["function"]["name"] == "fork")}
        self.programs, self.mcp_tools, self.servers = {}, {}, None
        self.mcp_states = {}        # server name -> (transport, state, error): mcp_servers()
        self.proxy = self._sandbox = self._environment = None
        if agent["allow"]:          # no grant, no search of the tool path
            from agentctl.tools.catalog import Catalog  # (start-up: 3 ms, only with a grant)
            usable = Catalog(self.warnings).usable(conn, agent["id"], self.builtin)
            self.programs = usable.programs
            self._mcp(usable)
        for line in self.warnings:
            if warn:
                warn(line)

    def environment(self):
        """The environment of its tools (and of the programs they call, through the
        proxy): the operator's, without the keys, as the agent."""
        if self._environment is None:
            from agentctl.tools import programs  # (start-up: 0.5 ms, only for an external tool)
            self._environment = programs.environment(self.agent["id"], db.path_of(self.conn))
        return self._environment

    def sandbox(self):
        """The sandbox its calls and MCP servers run in, with the proxy through which
        they call agentctl's programs; None for an agent the operator made
        --unconfined. Made at the first use."""
        if self.agent["unconfined"]:
            return None
        if self._sandbox is None:
            from agentctl.tools import proxy, sandbox  # (start-up: 6 ms, only for a sandboxed call)
            self.proxy = proxy.Server(self.environment(), self.agent["cwd"] or os.getcwd(),
                                      peer_uids=_peers())
            self._sandbox = sandbox.Sandbox(self.agent, self.environment(), self.proxy,
                                            db.path_of(self.conn),
                                            lambda: layers.stack(self.conn, self.agent))
        return self._sandbox

    def _mcp(self, usable):
        """The tools of the MCP servers its grants reach: what each offered when it was
        last listed (no server is started for a turn that calls none of its tools), or,
        never listed (or its entry or program changed since), listed now. A server
        that can't be started is a warning, and offers nothing this turn."""
        if not usable.servers:
            return
        from agentctl.tools import mcp  # (start-up: 3 ms, only with MCP servers)
        for server, entry in usable.servers.items():
            offered = mcp.cached(entry, self.environment())
            self.mcp_states[server] = (entry.transport, "cached", None)
            if offered is None:
                from agentctl.tools import mcpsession  # (start-up: 6 ms, only to list a server)
                try:
                    offered = self._servers().tools(entry)
                except mcpsession.Failed as e:
                    self.warnings.append(str(e))
                    self.mcp_states[server] = (entry.transport, "failed", str(e))
                    continue
                self.mcp_states[server] = (entry.transport, "started", None)
            for tool, description, schema in offered:
                name = usable.mcp_name(server, tool)
                if name is not None:
                    self.mcp_tools[name] = (entry, tool, description, schema)

    def _servers(self):
        """The turn's MCP servers, made at the first that is listed or called: a turn
        that calls none of the tools it was offered from the cache loads no session."""
        if self.servers is None:
            from agentctl.tools import mcpsession  # (start-up: 6 ms, only to list or call a server)
            self.servers = mcpsession.Servers(self.cwd(), self.environment(), self.sandbox,
                                              self.warn)
        return self.servers

    def check(self):
        """(name, transport, tools, seconds, error) of every MCP server the configuration
        names, whether the agent's grants reach it or not: each contacted now, as the
        agent's tools would be (its sandbox), and listed again (the list kept); tools
        None and `error` why, for one that fails; seconds, its start and listing's."""
        from agentctl.tools import mcp, mcpsession  # (start-up: 3 ms, only with MCP servers)
        warnings = []
        entries = mcp.servers(warnings)
        for line in warnings:
            self.warn(line)
        rows = []
        for name, entry in entries.items():
            try:        # (contacted already when the turn's listing needed it)
                found, error = len(self._servers().tools(entry)), None
            except mcpsession.Failed as e:
                found, error = None, str(e)
            rows.append((name, entry.transport, found, self.servers.took[name], error))
        return rows

    def cwd(self):
        return self.agent["cwd"] or None

    def specs(self):
        offered = list(self.builtin.values())
        offered += [p.spec() for p in self.programs.values()]
        offered += [{"type": "function", "function": {"name": n, "description": d,
                                                      "parameters": s or {"type": "object"}}}
                    for n, (_, _, d, s) in self.mcp_tools.items()]
        return offered

    def listing(self):
        """(name, source, where, confined, description, schema) of every tool offered,
        in the order specs() offers them: its source built-in (where None), program
        (where its path) or mcp (where its server's name); an external tool is confined
        when its calls run in the sandbox (unless the agent is --unconfined; never an
        HTTP or SSE server's: it runs elsewhere)."""
        confined = not self.agent["unconfined"]
        rows = [(n, "built-in", None, True, s["function"]["description"],
                 s["function"]["parameters"]) for n, s in self.builtin.items()]
        rows += [(n, "program", str(p.path), confined, p.description, p.parameters)
                 for n, p in self.programs.items()]
        rows += [(n, "mcp", entry.name, confined and entry.transport == "stdio", d, s)
                 for n, (entry, _, d, s) in self.mcp_tools.items()]
        return rows

    def mcp_servers(self):
        """(name, transport, state, error) of each MCP server the agent's grants reach,
        as this turn's start left it: cached (its tools as last listed; not started, it
        starts at its first call), started (listed now: no list was kept, or its entry
        or program changed; running), failed (it could not be started or listed:
        `error` says why; it offers nothing this turn)."""
        return [(name, *state) for name, state in self.mcp_states.items()]

    def sandbox_problem(self):
        """Why its external tools' sandbox can't be made here (the fix named), or None:
        for agent-run --list-tools to say loudly."""
        if self.agent["unconfined"] or not (self.programs or self.mcp_tools):
            return None
        from agentctl.tools import sandbox  # (start-up: 3 ms, only for a tool's sandbox)
        return sandbox.problem() or (sandbox.mount.problem() if layers.layered(self.agent)
                                     else None)

    def is_external(self, name):
        return name in self.programs or name in self.mcp_tools

    def close(self):
        if self.servers is not None:
            self.servers.close()
            self.servers = None
        self._servers_connections()     # (and a call's that ended after its drain)
        if self.proxy is not None:
            self.proxy.close()
            self.proxy = None
        if self._sandbox is not None:
            self._sandbox.close()

    def execute(self, conn, agent_id, turn_id, call):
        """Run one call, built-in or external; returns the result text. A question (the
        ask tool) or a call that needs approval pauses the turn (Paused) until its
        request is decided; then the answer is its result, or it runs, or it is an
        error the model sees."""
        name = call["tool_name"]
        self.turn_id, self.tool = turn_id, name
        if name == "ask" or self.allowance.needs_approval(name):
            row = asks_store.of_call(conn, turn_id, call["tool_call_id"])   # (an ask's)
            if row is None:
                row = self._ask(conn, agent_id, turn_id, call)
                if row is None:
                    return None         # a bad call: an error result, recorded
            if row["decision"] is None:
                raise Paused(row["id"])
            text = asks.result(row)
            if text is not None:        # answered, denied, expired
                with lease.holding(conn, agent_id):
                    tools.record_result(conn, agent_id, turn_id, call, text, time.monotonic(),
                                        "error" if voice.is_error(text) else "ok")
                return text
        if not self.is_external(name):
            if name not in self.builtin:    # the model is told every tool it has
                offered = list(self.builtin) + list(self.programs) + list(self.mcp_tools)
                return tools.record_error(conn, agent_id, turn_id, call,
                                          voice.tool_error(voice.unknown_tool(name, offered)),
                                          time.monotonic())
            return tools.execute(conn, agent_id, turn_id, call)
        return self._external(conn, agent_id, turn_id, call)

    def arguments(self, call):
        """A call's arguments, checked against its tool's parameters (a built-in tool's,
        a program's; an MCP server checks its own tools'): ToolError, the error the model
        sees, when they don't fit."""
        name = call["tool_name"]
        if name in self.builtin:
            return tools.validate(name, call["content"])
        program = self.programs.get(name)
        return tools.arguments(call["content"], program and program.parameters)

    def _ask(self, conn, agent_id, turn_id, call):
        """Open the call's request; ask at the terminal when agent-run may (then it is
        decided at once). None when the call itself is bad (a tool error): a question
        that is none, or arguments that don't fit, are put to no one."""
        name = call["tool_name"]
        try:
            arguments = self.arguments(call)
        except tools.ToolError as e:
            tools.record_error(conn, agent_id, turn_id, call, voice.tool_error(e),
                               time.monotonic())
            return None
        return requests.opened(conn, agent_id, turn_id, call,
                               "question" if name == "ask" else "approval", self.prompt,
                               self.warn, question=arguments.get("question") if name == "ask"
                               else None, seconds=self.allowance.ask_seconds(name))

    def _external(self, conn, agent_id, turn_id, call):
        from agentctl.tools import calls  # (start-up: 3 ms, only for an external tool's call)
        started = time.monotonic()
        left = toolruns.unfinished(conn, turn_id, call["tool_call_id"])
        task = json.loads(left["task"]) if left is not None and left["task"] else None
        if left is not None and task is None:   # a run that died with its agent-run
            if left["host"] == lease.host():
                calls.kill_run(left["pgid"], agent_id, left["id"])
            with lease.holding(conn, agent_id):
                toolruns.end(conn, left["id"], "unknown")
                tools.record_result(conn, agent_id, turn_id, call, voice.INTERRUPTED, started,
                                    "error")
            return voice.INTERRUPTED
        try:        # arguments that don't fit: an error the model sees, and nothing runs
            arguments = self.arguments(call)
        except tools.ToolError as e:
            return tools.record_error(conn, agent_id, turn_id, call, voice.tool_error(e),
                                      started)
        answers = requests.answers(conn, turn_id, call) if call["tool_name"] in \
            self.mcp_tools else ()
        with lease.holding(conn, agent_id):
            lease.check_not_killed(conn, agent_id)
            run_id = left["id"] if task is not None else toolruns.start(
                conn, agent_id, turn_id, call["tool_call_id"], call["tool_name"], lease.host())
        media = None
        try:
            text, media = self._run(conn, agent_id, call, arguments, run_id, answers, task)
            outcome = "ok"
        except calls.ToolFailed as e:
            text, outcome = voice.tool_error(e), "error"
        except Asked as e:          # (an MCP server's question: the turn pauses)
            with lease.holding(conn, agent_id):
                toolruns.end(conn, run_id, "asked")
            question, form = elicitation.question(e.args[0])
            row = requests.opened(conn, agent_id, turn_id, call, elicitation.KIND,
                                  self.prompt, self.warn, question=question, form=form)
            if row["decision"] is not None:
                return self._external(conn, agent_id, turn_id, call)    # (answered here)
            raise Paused(row["id"]) from None
        except TaskWaits as e:      # (its next run polls it)
            with lease.holding(conn, agent_id):
                toolruns.wait_for_task(conn, run_id, e.args[0])
            raise
        with lease.holding(conn, agent_id):
            toolruns.end(conn, run_id, outcome)
            tools.record_result(conn, agent_id, turn_id, call, text, started, outcome, media)
            self._connections(conn, agent_id, turn_id, call["tool_name"])
        return text

    def _servers_connections(self):
        """The connections its MCP servers made that ended with them (a launcher's to
        its registry, kept open while the server lived), and a call's that ended after
        the call's own were written, in the event log with the turn's last call's. (A
        record of what happened: written after the turn's end, which released the
        agent, so not under its lease.)"""
        if self._sandbox is None or self.turn_id is None:
            return
        left = self._sandbox.connections(settle=SETTLE_SECONDS)
        if left:
            with db.transaction(self.conn):
                for made in left:
                    by = made.pop("by", None)
                    events.record(self.conn, self.agent["id"], "net", turn=self.turn_id,
                                  tool=by or self.tool, **made)

    def _connections(self, conn, agent_id, turn_id, tool):
        """The connections its tools made through the egress proxy since the last call
        ended, in the event log (an MCP server's by the server's name)."""
        if self._sandbox is None:
            return
        for made in self._sandbox.connections():
            by = made.pop("by", None)
            events.record(conn, agent_id, "net", turn=turn_id, tool=by or tool, **made)

    def _run(self, conn, agent_id, call, arguments, run_id, answers=(), task=None):
        from agentctl.tools import calls, sandbox  # (start-up: 3 ms, only for an external call)
        poll = lambda: lease.check_not_killed(conn, agent_id)  # noqa: E731
        name = call["tool_name"]
        if name in self.programs:
            program = self.programs[name]
            try:
                running = calls.Call(program, json.dumps(arguments), self.environment(),
                                     self.cwd(), run_id, self.sandbox())
            except sandbox.Unavailable as e:
                raise calls.ToolFailed(voice.sandbox_failed(e))
            except OSError as e:
                raise calls.ToolFailed(voice.cant_run(program.path, e.strerror or e))
            with lease.holding(conn, agent_id):
                toolruns.set_group(conn, run_id, running.pgid)
            return running.wait(poll), None
        from agentctl.tools import mcpsession, mcptasks  # (start-up: 0 ms, only for an MCP call)
        entry, tool, _, _ = self.mcp_tools[name]
        timeout, cap = calls.settings(None)
        try:
            text, media = self._servers().resume(entry, tool, task, timeout, poll) if task \
                else self._servers().call(entry, tool, arguments, timeout, poll, answers)
        except mcpsession.Elicited as e:
            raise Asked(e.params) from None
        except mcptasks.Waits as e:
            raise TaskWaits(e.stored()) from None
        cut = text.encode()[:cap]
        return (text if len(cut) == len(text.encode()) else
                cut.decode("utf-8", "ignore") + voice.output_cut(cap)), media
