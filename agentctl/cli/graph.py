"""agent-ps --format dot: the process table as a Graphviz graph (agent-ps(1)), so that
`agent-ps -a --format dot | dot -Tsvg > tree.svg` is a picture of a whole run.

A node per agent listed, labelled with its name, STAT and role and filled by its
state, in agent-top's colours (ops.proctable.COLOURS), with a legend of the states
drawn; a solid arrow from the agent it was forked from (its fork edge), a dotted one
from its lifecycle parent when that is another (after a reparenting), and a dashed
blue one, labelled with the count, for the mail one listed agent wrote another
(agentctl's own notices, of an exit or a hold, are not drawn: they follow the tree).
"""

import sys

from agentctl.ids import short
from agentctl.ops import proctable
from agentctl.store import mailbox

# the light shade of each of agent-top's colours that a box is filled with
FILLS = {"green": "palegreen", "yellow": "lightgoldenrod1", "red": "lightpink",
         "magenta": "plum", "blue": "lightblue"}


def fill(state):
    return FILLS.get(proctable.COLOURS.get(state), "white")


def quoted(text):
    """`text` as a DOT string: its quotes and backslashes escaped, a line break as \\n."""
    text = str(text).replace("\\", "\\\\").replace('"', '\\"')
    return '"' + text.replace("\r", "").replace("\n", "\\n") + '"'


def graph(conn, rows):
    """The DOT text of `rows` (agent-ps's rows, each with its status as read)."""
    listed = {row["id"] for row in rows}
    lines = ["digraph agents {", "  rankdir=TB;",
             '  node [shape=box, style="rounded,filled", fontname="Helvetica"];',
             '  edge [fontname="Helvetica", fontsize=10];']
    for row in rows:
        name = row["name"] or short(row["id"])
        label = f"{name}\n{proctable.stat_text(row)} {row['role']}"
        style = ', style="rounded,filled,dashed"' if row["status"] in ("Z", "X") else ""
        lines.append(f"  {quoted(row['id'])} [label={quoted(label)}, "
                     f"fillcolor={quoted(fill(proctable.state(row)))}{style}];")
    drawn = [s for s in proctable.STATES if s in {proctable.state(r) for r in rows}]
    lines += ["  subgraph cluster_legend {", '    label="STAT"; fontname="Helvetica";',
              *(f"    {quoted('legend ' + s)} [label={quoted(s + ' ' + proctable.STATES[s])}, "
                f"fillcolor={quoted(fill(s))}, class=legend];" for s in drawn),
              "  }"]
    for row in rows:
        source, parent = row["forked_from"], row["parent_id"]
        if source in listed and source != row["id"]:
            lines.append(f"  {quoted(source)} -> {quoted(row['id'])} [class=fork];")
        if parent in listed and parent not in (source, row["id"]):
            lines.append(f"  {quoted(parent)} -> {quoted(row['id'])} "
                         "[class=parent, style=dotted, arrowhead=odot];")
    for sender, recipient, count in mailbox.flows(conn):
        if sender in listed and recipient in listed:
            lines.append(f"  {quoted(sender)} -> {quoted(recipient)} [class=mail, "
                         f"style=dashed, color=blue, fontcolor=blue, constraint=false, "
                         f"label={quoted(count)}];")
    lines.append("}")
    sys.stdout.write("\n".join(lines) + "\n")
