"""The programs, one table: each agentctl program (agent-NAME, its module
agentctl/cli/NAME.py) declared once, with what a sandboxed tool gets when it runs it
(tools/proxy.py): the program, run outside as its agent (OFFER), or a refusal that
says it is not offered (REFUSE).

Read by tools/proxy.py (what a sandbox offers), completions/generate and the Makefile
(install, uninstall), and the tests. What can't be made from it at install time is
kept beside it by hand, and a test fails when it has a program more or less than the
table: pyproject.toml's [project.scripts], the launchers in bin/, the man pages, the
completions. Imported at start-up (every forwarder in a sandbox, every make install):
it imports nothing.
"""

OFFER, REFUSE = "offer", "refuse"

# name, what a sandboxed tool's agent-NAME does
TABLE = (
    ("fork", OFFER),
    ("kill", OFFER),
    ("ps", OFFER),
    ("send", OFFER),
    ("mail", OFFER),
    ("replay", OFFER),
    ("run", REFUSE),        # runs turns: the operator's
    ("wait", OFFER),
    ("doc", OFFER),
    ("db", REFUSE),         # the database file itself
    ("log", OFFER),         # (but for what only the operator may: proxy.OPERATOR_ONLY)
    ("answer", OFFER),
    ("set", OFFER),
    ("why", OFFER),
    ("top", REFUSE),        # the operator's full screen
    ("diff", OFFER),
    ("merge", OFFER),
)

NAMES = tuple(name for name, _ in TABLE)
OFFERED = tuple(name for name, sandbox in TABLE if sandbox == OFFER)
REFUSED = tuple(name for name, sandbox in TABLE if sandbox == REFUSE)
