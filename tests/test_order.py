"""The order in which pytest-xdist's workers get the tests (tests/order.py): the long ones
first, longest first, a module's fixture's tests together, the rest as collected."""

import pytest

from .order import group, plan, read, write


def test_the_long_units_go_first_longest_first_and_the_rest_as_collected():
    collection = ["a::short", "a::long", "b::one", "b::two", "c::longest", "c::new", "a::tie"]
    known = {"a::long": (5.0, ""), "c::longest": (30.0, ""), "a::tie": (5.0, ""),
             "b::one": (0.8, "b::fixture"), "b::two": (0.7, "b::fixture"), "a::short": (0.2, "")}
    order, units = plan(collection, known)
    assert [collection[i] for i in order] == \
        ["c::longest", "a::long", "a::tie", "b::one", "b::two", "a::short", "c::new"]
    assert units == [1, 1, 1, 2]        # the group is one unit: 1.5 s together
    assert sorted(order) == list(range(len(collection)))


def test_nothing_known_is_the_order_collected():
    assert plan(["x", "y", "z"], {}) == ([0, 1, 2], [])


def test_the_file_reads_back_what_was_written(tmp_path):
    path = str(tmp_path / "durations.txt")
    assert read(path) == {}
    known = {("sqlite", "tests/test_a.py::test_b[x y]"): (2.5, ""),
             ("postgresql", "tests/test_a.py::test_c"): (1.0, "tests/test_a.py::made")}
    write(known, path)
    assert read(path) == known


class Item:
    """What group() reads of a collected test."""

    def __init__(self, nodeid, mark=None, **scopes):
        self.nodeid, self.mark = nodeid, mark
        self._fixtureinfo = type("Info", (), {"name2fixturedefs": {
            name: [type("Def", (), {"scope": scope})] for name, scope in scopes.items()}})

    def get_closest_marker(self, name):
        return self.mark if name == "xdist_group" else None


def test_a_group_is_named_by_xdist_group_else_by_the_modules_fixtures(request):
    assert group(request.node) == ""        # (tmp_path, monkeypatch ...: none of a module's)
    assert group(Item("tests/a.py::t", made="module", tmp_path="function")) == "tests/a.py::made"
    assert group(Item("tests/a.py::t", b="module", a="module", s="session")) == "tests/a.py::a,b"
    assert group(Item("tests/a.py::t", pytest.mark.xdist_group("make").mark,
                      made="module")) == "make"
