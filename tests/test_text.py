"""text.py: the one way a text is shortened for a reader (`cut`), and its first line
(`first_line`): every table cell, subject and quoted value is cut by them."""

from hypothesis import given, strategies as st

from agentctl.text import cut, first_line


def test_a_text_that_fits_is_whole_and_one_that_doesnt_ends_with_dots():
    assert cut("short", 10) == "short"
    assert cut("exactly10!", 10) == "exactly10!"
    assert cut("the quick brown fox jumps", 16) == "the quick..."    # at a space
    assert cut("x" * 50, 10) == "xxxxxxx..."        # one word: where the room ends
    assert cut("a " + "y" * 40, 12) == "a yyyyyyy..."    # a space too early is no place


def test_a_cut_at_a_space_leaves_no_dangling_punctuation():
    assert cut("first, second, third and more", 18) == "first, second..."


@given(st.text(), st.integers(4, 300))
def test_a_cut_is_never_longer_than_its_width_and_starts_the_text(text, width):
    shown = cut(text, width)
    assert len(shown) <= width
    assert shown == text or (shown.endswith("...") and
                             text.startswith(shown[:-3]))


def test_the_first_line_is_one_line_cut_like_any_text():
    assert first_line("  hello there\nsecond line") == "hello there"
    assert first_line("one\rtwo") == "one" and first_line("a\u2028b") == "a"
    assert first_line(None) == "" and first_line("") == ""
    long = "word " * 30
    assert first_line(long) == cut(long.strip(), 60) and len(first_line(long)) <= 60
    assert first_line(long, 20) == "word word word..."
