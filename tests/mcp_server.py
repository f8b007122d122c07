"""A real MCP server, written with the official SDK, for the tests: started by
agent-run through the same configuration a user writes, over stdio, or run by a test
over Streamable HTTP or SSE (`mcp_server.py http|sse PORTFILE`: it listens on a free
port of 127.0.0.1 and writes the port there; with $MCP_TOKEN, a request without
"Authorization: Bearer $MCP_TOKEN" is refused as an OAuth-protected server refuses it;
with $MCP_METHODS, the method of each message POSTed to it is added to that file).

$MCP_STARTS counts its starts; with $MCP_EXTRA naming a file that holds "gone", it has
no tool `extra` (a server whose program changed since it was listed); with $MCP_CRASH
naming a file that exists, it writes the file's text on stderr and exits 3 at its start
(a server that broke since it was listed). Its tool `client` says who called it. Its tool `grow`
adds a tool `fresh` and sends notifications/tools/list_changed."""

import os
import sys
import time

from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("notes")


@server.tool(description="Add two numbers.")
def add(a: int, b: int) -> str:
    return str(a + b)


@server.tool(description="Say who and where the server is.")
def whoami() -> str:
    import resource
    return f"agent={os.environ.get('AGENT_ID')} cwd={os.getcwd()} " \
           f"key={'OPENAI_API_KEY' in os.environ} " \
           f"procs={resource.getrlimit(resource.RLIMIT_NPROC)[0]}"


@server.tool(description="GET a URL (through the proxy of the environment, if any).")
def fetch(url: str) -> str:
    import urllib.request
    try:
        with urllib.request.urlopen(url, timeout=20) as reply:
            return reply.read().decode()
    except Exception as e:      # (the refusal, as the model would see it)
        return f"failed: {e}"


@server.tool(description="Say the client's name and version, as it introduced itself.")
def client(ctx: Context) -> str:
    params = ctx.session.client_params
    info = params.client_info if params is not None else None
    return f"{info.name} {info.version}" if info is not None else "unknown"


@server.tool(description="Fail on purpose.")
def broken() -> str:
    raise ValueError("it broke")


@server.tool(description="Sleep, then say so.")
def nap(seconds: float) -> str:
    time.sleep(seconds)
    return "rested"


@server.tool(name="a_tool_whose_name_is_far_too_long_for_any_provider_to_take_it",
             description="Too long a name once prefixed.")
def long_name() -> str:
    return "never offered"


@server.tool(name="dotted.name", description="A name the providers refuse.")
def dotted_name() -> str:
    return "never offered"


@server.tool(description="A picture: a 1x1 PNG.")
def picture() -> list:
    from mcp.types import ImageContent, TextContent
    return [TextContent(type="text", text="here it is"),
            ImageContent(type="image", mime_type="image/png", data=PNG)]


PNG = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJ"
       "RU5ErkJggg==")


def extra() -> str:
    return "still here"


def fresh() -> str:
    return "new"


@server.tool(description="Ask for a name and an age (elicitation), then greet.")
async def greet(ctx: Context) -> str:
    from pydantic import BaseModel

    class Person(BaseModel):
        name: str
        age: int = 0
    asked = await ctx.elicit("Who is there?", Person)
    if asked.action == "accept":
        return f"hello {asked.data.name}, {asked.data.age}"
    return f"no one ({asked.action})"


@server.tool(description="Offer one more tool, and say that the list changed.")
async def grow(ctx: Context) -> str:
    server.tool(description="A tool added while the server ran.")(fresh)
    await ctx.notify_tools_changed()            # a subscriptions/listen stream (2026-07-28)
    if ctx.session.client_params is not None:   # the handshake's revisions: a notification
        await ctx.session.send_tool_list_changed()
    return "grown"


def _gone():
    try:
        with open(os.environ["MCP_EXTRA"]) as f:
            return f.read().strip() == "gone"
    except (KeyError, OSError):
        return False


if not _gone():
    server.tool(description="A tool that may go.")(extra)


def _guarded(app, token):
    """The ASGI app, refusing a request without the bearer token (401, as OAuth does)."""
    async def guarded(scope, receive, send):
        if scope["type"] == "http" and \
                dict(scope["headers"]).get(b"authorization") != f"Bearer {token}".encode():
            await send({"type": "http.response.start", "status": 401, "headers": [
                (b"www-authenticate", b'Bearer resource_metadata="http://127.0.0.1/.well-known"')]})
            await send({"type": "http.response.body", "body": b"unauthorized"})
            return
        await app(scope, receive, send)
    return guarded


def _logged(app, path):
    """The ASGI app, each POSTed message's method (a client's answer: "-") added to the
    file `path`, a line each."""
    import json

    async def logged(scope, receive, send):
        if scope["type"] != "http" or scope["method"] != "POST":
            return await app(scope, receive, send)
        body, more = b"", True
        while more:
            message = await receive()
            body, more = body + message.get("body", b""), message.get("more_body", False)
        try:
            method = json.loads(body).get("method", "-")
        except (ValueError, AttributeError):
            method = "?"
        with open(path, "a") as f:
            f.write(f"{method}\n")
        given = []

        async def again():
            if not given:
                given.append(True)
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()
        await app(scope, again, send)
    return logged


def serve_http(kind, portfile):
    import socket
    import uvicorn
    app = server.streamable_http_app() if kind == "http" else server.sse_app()
    if os.environ.get("MCP_TOKEN"):
        app = _guarded(app, os.environ["MCP_TOKEN"])
    if os.environ.get("MCP_METHODS"):
        app = _logged(app, os.environ["MCP_METHODS"])
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    with open(portfile + ".tmp", "w") as f:
        f.write(str(sock.getsockname()[1]))
    os.replace(portfile + ".tmp", portfile)
    uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[sock])


if __name__ == "__main__":
    if os.environ.get("MCP_STARTS"):         # counts the starts, for the tests
        with open(os.environ["MCP_STARTS"], "a") as f:
            f.write("start\n")
    if os.environ.get("MCP_CRASH") and os.path.exists(os.environ["MCP_CRASH"]):
        with open(os.environ["MCP_CRASH"]) as f:
            sys.stderr.write(f.read())
        sys.exit(3)
    if sys.argv[1:2] in (["http"], ["sse"]):
        serve_http(sys.argv[1], sys.argv[2])
    else:
        server.run()
