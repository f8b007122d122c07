"""Agents that exited, as agent-wait lists them and agent-kill --wait does: their
columns, and the listing."""

from agentctl.cli.output import Column, pick, render
from agentctl.ops import lifecycle
from agentctl.shape import reply_value
from agentctl.text import first_line


def _status(r):
    return f"killed {r['exit_signal']}" if r["exit_signal"] else f"{r['how']} {r['exit_code']}"


COLUMNS = [
    Column("id", "ID"),
    Column("name", "NAME"),
    Column("status", "STATUS", human=_status, machine=lambda r: r["how"]),
    Column("exit_code", "CODE"),
    Column("signal", "SIGNAL", machine=lambda r: r["exit_signal"]),
    Column("result", "RESULT", human=lambda r: first_line(r["result"]) or "-"),
    # the result of an agent with a schema as the JSON value itself (agent-fork --schema)
    Column("value", "VALUE", machine=lambda r: reply_value(r["schema"], r["result"])),
]


def listed(rows, columns, default, **options):
    """The exited agents' rows (each with how it exited, lifecycle.how) listed in the
    columns named by -o (`columns`), else the `default` ones; `options` as render()
    takes them."""
    render([dict(r) | {"how": lifecycle.how(r)} for r in rows], pick(COLUMNS, columns, default),
           **options)
