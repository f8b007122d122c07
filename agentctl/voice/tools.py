"""agentctl's voice to the model (agentctl/voice): what the results of external tools
say besides their own output (tools/calls.py, tools/mcp.py). Its names are voice's
too (voice.timed_out): one home for the model's words."""


def timed_out(seconds, killed=False):
    return f"timed out after {seconds:g} s" + (" (killed)" if killed else "")


def exit_status(code, tail):
    """A program tool that exited non-zero, with the tail of its stderr."""
    return f"exit status {code}" + (f": {tail}" if tail else "")


def cant_run(path, why):
    return f"can't run {path}: {why}"


def sandbox_failed(why):
    """A call that did not run: its sandbox could not be made (why names the fix)."""
    return f"not run: {why}"


def output_cut(cap):
    """What follows a tool's output cut at `cap` bytes."""
    return f"\n[output cut at {cap} bytes]"


def media_note(kind, mime, data):
    """What stands in a tool's text result for content that is not text (its base64
    `data`): an image (the model gets it as an image where its provider takes one) or
    what it can't get."""
    data = data or ""
    size = len(data) * 3 // 4 - data[-2:].count("=")
    return f"[{kind}{' ' + mime if mime else ''}, {size} bytes]"


def mcp_resource(uri, text):
    """A text resource an MCP tool returned."""
    return f"[resource {uri}]\n{text}"


def mcp_link(uri, name=None):
    """A link to a resource an MCP tool returned."""
    return f"[resource link {uri}{' (' + name + ')' if name else ''}]"


def media_from(tools):
    """What introduces the images tools returned (a user message after their results)."""
    names = ", ".join(dict.fromkeys(tools))
    return f"[what {names} returned besides text: {len(tools)} image(s)]"


def mcp_tool_gone(server, tool):
    """A call of a tool its server no longer has."""
    return (f"MCP server {server} has no tool {tool} any more: your next turn is offered "
            "what it has now")


MCP_FAILED = "the server said the call failed"
