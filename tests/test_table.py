"""The table every listing program prints is tabulate's "plain" format, byte for
byte, written without importing tabulate (its import costs more than the rest of
agent-ps's start-up)."""

from hypothesis import given, settings, strategies as st
from tabulate import tabulate

from agentctl.cli.output import UNPRINTABLE, shown_column, plain_table

# What reaches the table: printable text (control characters are already ?), with
# the spaces, tabs and wide or combining characters that names and subjects hold.
cell = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12).map(
    lambda text: text.translate(UNPRINTABLE).replace("\n", "?"))


@settings(max_examples=400, deadline=None)
@given(st.integers(1, 5).flatmap(lambda n: st.tuples(
    st.lists(st.lists(cell, min_size=n, max_size=n), min_size=1, max_size=6),
    st.one_of(st.just(()), st.lists(cell, min_size=n, max_size=n)))))
def test_the_table_is_tabulates_plain_format(case):
    rows, headers = case
    assert plain_table(rows, headers) == tabulate(
        rows, headers=headers, tablefmt="plain", disable_numparse=True,
        preserve_whitespace=True)


def test_a_table_as_agent_ps_prints_it():
    assert plain_table([["a", "bb  x"], ["ccc", "d"]], ["H1", "HEADER2"]) == \
        "H1    HEADER2\na     bb  x\nccc   d"


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(st.characters(blacklist_categories=("Cs",)), max_size=8), max_size=6))
def test_a_column_shows_as_each_of_its_cells_would(texts):
    """A column whose cells are all printable is shown as it is, with no translate of
    each (agent-ps's 100,000): the same text as each cell translated."""
    assert shown_column(texts) == [text.translate(UNPRINTABLE) for text in texts]
