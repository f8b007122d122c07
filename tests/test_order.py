"""The order in which pytest-xdist's workers get the tests (tests/order.py): the long ones
first, longest first, a module's fixture's tests together, the rest as collected."""

from .order import plan, read, write


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
