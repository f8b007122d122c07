"""The longest tests start first: with -n (pytest-xdist's --dist load), a worker that
asks for work gets the longest test not yet started, one at a time, while any test
known to take LONG seconds or more is left; then the others, in the order collected,
in chunks as --dist load hands them out. In collection order, a test of a minute found
late held a pass up at its end while the other workers sat idle.

How long each test took is in tests/durations.txt, by backend, written by a pass run
with --record-durations (`pytest -n 4 tests --record-durations`, and the same with
--backend postgresql and the Makefile's PG_SKIP), merged into what the file held. A
test it doesn't name counts as short, and runs in the order collected: a stale file
orders the tests less well, never runs one less or twice. Tests that share a fixture of
their module's (scope="module": a make install, a database made once), or that wait for
one another (marked xdist_group), are one unit of work, named by a group in the file:
one worker makes the fixture once, or runs them one after the other."""

import os

import pytest

FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "durations.txt")
LONG = 1.0          # seconds: a unit this long is handed out longest first (and a test
                    # this long is written down, as is every one of a group)
HEADER = ("# seconds, backend, test, the group of its unit (if any); tab-separated\n"
          "# (tests/order.py: the longest start first; pytest --record-durations writes it)\n")


def read(path=FILE):
    """{(backend, test id): (seconds, group or "")} from the file; {} without it."""
    known = {}
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return known
    for line in lines:
        if line and not line.startswith("#"):
            seconds, backend, nodeid, group = (line.split("\t") + [""])[:4]
            known[(backend, nodeid)] = (float(seconds), group)
    return known


def write(known, path=FILE):
    rows = sorted(known.items(), key=lambda kv: (kv[0][0], -kv[1][0], kv[0][1]))
    with open(path + ".new", "w", encoding="utf-8") as f:
        f.write(HEADER)
        for (backend, nodeid), (seconds, group) in rows:
            f.write("\t".join([f"{seconds:.1f}", backend, nodeid] + ([group] if group else []))
                    + "\n")
    os.replace(path + ".new", path)


def plan(collection, known):
    """The order in which to hand out `collection` (test ids): their indices, the long
    units first, longest first, then every other test in the order collected; and the
    sizes of those long units, in that order."""
    units = {}
    for index, nodeid in enumerate(collection):
        units.setdefault(known.get(nodeid, (0.0, ""))[1] or nodeid, []).append(index)
    timed = [(sum(known.get(collection[i], (0.0, ""))[0] for i in unit), unit)
             for unit in units.values()]
    head = sorted((u for u in timed if u[0] >= LONG), key=lambda u: -u[0])
    first = [i for _, unit in head for i in unit]
    taken = set(first)
    return first + [i for i in range(len(collection)) if i not in taken], \
        [len(unit) for _, unit in head]


def group(item):
    """The group pytest-xdist's xdist_group mark names (tests that wait for each other,
    run one after the other by one worker), else the fixtures of scope "module" the test
    uses: its module's path and their names; or "" for none."""
    marked = item.get_closest_marker("xdist_group")
    if marked:
        return str(marked.args[0] if marked.args else marked.kwargs.get("name", "default"))
    info = getattr(item, "_fixtureinfo", None)
    names = sorted(name for name, defs in (info.name2fixturedefs.items() if info else ())
                   if defs and defs[-1].scope == "module")
    return f"{item.nodeid.split('::')[0]}::{','.join(names)}" if names else ""


def pytest_addoption(parser):
    parser.addoption("--record-durations", action="store_true",
                     help=f"write how long each test took into {os.path.basename(FILE)} "
                          "(tests/order.py), which orders the next runs")


def pytest_collection_modifyitems(items):
    for item in items:
        found = group(item)
        if found:       # (to the recorder, with the test's reports)
            item.user_properties.append(("group", found))


class Timings:
    """What the reports of this run say, for --record-durations."""

    def __init__(self):
        self.seconds, self.groups = {}, {}

    def pytest_runtest_logreport(self, report):
        self.seconds[report.nodeid] = self.seconds.get(report.nodeid, 0.0) + report.duration
        for name, value in report.user_properties:
            if name == "group":
                self.groups[report.nodeid] = value

    def merged(self, backend, known):
        known = dict(known)
        for nodeid, seconds in self.seconds.items():
            known.pop((backend, nodeid), None)
            if seconds >= LONG or nodeid in self.groups:
                known[(backend, nodeid)] = (seconds, self.groups.get(nodeid, ""))
        return known


def pytest_configure(config):
    if config.getoption("--record-durations") and not hasattr(config, "workerinput"):
        config.pluginmanager.register(Timings(), "record-durations")   # (pytest-xdist's
                                                                        # controller: all reports)


def pytest_sessionfinish(session):
    timings = session.config.pluginmanager.get_plugin("record-durations")
    if timings is not None and timings.seconds:
        write(timings.merged(session.config.getoption("--backend"), read()))


try:
    from xdist.scheduler import LoadScheduling
except ImportError:         # (no pytest-xdist: the tests run in the order collected)
    pass
else:
    class LongestFirst(LoadScheduling):
        """--dist load, but the long units first, one to each worker that needs work."""

        def __init__(self, config, log=None):
            super().__init__(config, log)
            backend = config.getoption("--backend")
            self.known = {nodeid: value for (b, nodeid), value in read().items()
                          if b == backend}
            self.units = []     # the sizes of the long units at the front of .pending

        def schedule(self):
            if self.collection is not None or not self._check_nodes_have_same_collection():
                return super().schedule()
            self.collection = next(iter(self.node2collection.values()))
            self.pending[:], self.units = plan(self.collection, self.known)
            if self.maxschedchunk is None:      # (as --dist load: no limit given, none)
                self.maxschedchunk = len(self.collection)
            for least in (1, 2):        # a unit each in turn, then a second each
                for node in self.nodes:
                    if len(self.node2pending[node]) < least:
                        self.check_schedule(node)
            if not self.pending:
                for node in self.nodes:
                    node.shutdown()

        def check_schedule(self, node, duration=0):
            if not self.units:
                return super().check_schedule(node, duration)
            if not node.shutting_down and len(self.node2pending[node]) < 2:
                self._send_tests(node, self.units.pop(0))

    @pytest.hookimpl(tryfirst=True)
    def pytest_xdist_make_scheduler(config, log):
        if config.getvalue("dist") == "load":
            return LongestFirst(config, log)
        return None
