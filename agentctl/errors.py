"""Errors that carry the exit status a script can branch on (see agentctl(7))."""

NOTHING = 1      # no such agent, no mail, nothing to do, a timeout
USAGE = 2        # bad arguments or input
REFUSED = 3      # the agent can't do that now: stopped, exited, over budget, not allowed
UNAVAILABLE = 69 # the model's API refused the request for good
SOFTWARE = 70    # a bug
DATABASE = 74    # I/O: the database can't be used (not a database, read-only, newer
                 # schema), or standard output can't be written
TEMPFAIL = 75    # try again later: claimed, locked, the model's API unreachable


# What went wrong, a word finer than the exit status, by the status (agent-run(1),
# The stream: an error line's kind). A raise that knows more gives its own kind:
# auth, claimed, throttled, unavailable, unreachable, timeout.
KINDS = {NOTHING: "nothing", USAGE: "usage", REFUSED: "refused", UNAVAILABLE: "rejected",
         SOFTWARE: "bug", DATABASE: "database", TEMPFAIL: "temporary"}


class AgentctlError(Exception):
    """An error with a one-line message, an exit status and a kind (KINDS)."""

    code = SOFTWARE
    kind = None         # a class's own kind; None: its status's

    def __init__(self, message, code=None, kind=None):
        super().__init__(message)
        if code is not None:
            self.code = code
        self.kind = kind or self.kind or KINDS.get(self.code, "bug")


class NotFound(AgentctlError):
    code = NOTHING


class UsageError(AgentctlError):
    code = USAGE


class Refused(AgentctlError):
    code = REFUSED


class DatabaseFault(AgentctlError):
    code = DATABASE


class TempFail(AgentctlError):
    code = TEMPFAIL
