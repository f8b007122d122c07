"""A stdio MCP server written by hand, for what the SDK's won't do: `mcpfake.py LOG`
writes each message it receives to the file LOG (a JSON line each) and answers as
$FAKE says (letters, any of them):
  j  a line that is not JSON on its standard output before each answer
  p  a ping of its own before answering tools/call (answered, it goes on)
  c  notifications/tools/list_changed before answering tools/call
  g  tools/list in two pages (nextCursor)
  s  tools/call never answered (a tool that hangs)
  d  deaf: its input's end and SIGTERM ignored
  m  initialize refused (-32601: a server of the 2026-07-28 revision alone)"""

import json
import signal
import sys

FAKE = __import__("os").environ.get("FAKE", "")
LOG = sys.argv[1]


def say(message):
    if "j" in FAKE:
        sys.stdout.write("starting up, please wait\n")
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def answer(number, result):
    say({"jsonrpc": "2.0", "id": number, "result": result})


def main():
    if "d" in FAKE:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    for line in sys.stdin:
        message = json.loads(line)
        with open(LOG, "a") as f:
            f.write(json.dumps(message) + "\n")
        method, number = message.get("method"), message.get("id")
        if method == "initialize":
            if "m" in FAKE:
                say({"jsonrpc": "2.0", "id": number,
                     "error": {"code": -32601, "message": "Method not found"}})
            else:
                answer(number, {"protocolVersion": "2025-06-18", "capabilities": {
                    "tools": {"listChanged": True}}, "serverInfo": {"name": "f", "version": "1"}})
        elif method == "tools/list":
            tools = [{"name": "one", "inputSchema": {"type": "object"}},
                     {"name": "two", "description": "Two.", "inputSchema": {"type": "object"}}]
            cursor = (message.get("params") or {}).get("cursor")
            if "g" not in FAKE:
                answer(number, {"tools": tools})
            elif cursor is None:
                answer(number, {"tools": tools[:1], "nextCursor": "page2"})
            else:
                answer(number, {"tools": tools[1:]})
        elif method == "tools/call":
            if "s" in FAKE:
                continue
            if "p" in FAKE:
                say({"jsonrpc": "2.0", "id": "srv-1", "method": "ping"})
                while True:
                    reply = sys.stdin.readline()
                    with open(LOG, "a") as f:
                        f.write(reply)
                    if json.loads(reply).get("id") == "srv-1":
                        break
            if "c" in FAKE:
                say({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
            answer(number, {"content": [{"type": "text", "text": "called"}]})
        elif number is not None and method is not None:
            say({"jsonrpc": "2.0", "id": number, "error": {"code": -32601, "message": "no"}})
    while "d" in FAKE:
        signal.pause()          # (until SIGKILL, which it can't ignore)


main()
