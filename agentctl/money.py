"""Money as agentctl keeps it (agentctl(7), COST): whole millionths of a US dollar
("micros"), so that budgets carve and add up exactly; read from text as people write
it ($2.50, 2.50usd) and written back as they read it."""

import re

from agentctl.errors import UsageError

MICROS = 1_000_000              # micros in a dollar
LARGEST = 2 ** 63 - 1           # what an INTEGER column holds
# A pattern as text: re compiles it at its first use, not at every program's start.
DOLLARS = (r"(?i)\$\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)|([0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
           r"\s*(?:usd|\$)")


def is_money(text):
    """Whether `text` is written as an amount of dollars ($2.50, 2.50usd, 2.50$)."""
    return re.fullmatch(DOLLARS, text.strip()) is not None


def parse(text, what="budget"):
    """The micros of `text` written as dollars; a usage error for anything else, for
    less than a micro, or for more than a column holds."""
    found = re.fullmatch(DOLLARS, text.strip())
    if found is None:
        raise UsageError(f"bad {what}: {text!r} (want dollars such as '$2.50' or 2.50usd)")
    whole, _, fraction = (found.group(1) or found.group(2)).partition(".")
    if len(fraction.rstrip("0")) > 6:
        raise UsageError(f"bad {what}: {text!r} (at most 6 decimals: a millionth of a dollar)")
    micros = int(whole or "0") * MICROS + int((fraction + "000000")[:6])
    if not 0 < micros <= LARGEST:
        raise UsageError(f"bad {what}: {text!r} (out of range: want more than $0 and less "
                         f"than ${LARGEST // MICROS})")
    return micros


def of_dollars(dollars):
    """The micros of a number of dollars (a model's fork call), rounded to the nearest."""
    return int(round(dollars * MICROS))


def dollars(micros):
    """Micros as a number of dollars, for programs (JSON); None stays None."""
    return None if micros is None else round(micros / MICROS, 6)


def shown(micros):
    """Micros as people read dollars: two decimals from $1 on, four below it, six for
    an amount too small for four (a cost that is not nothing is never shown as $0.00)."""
    sign, micros = ("-", -micros) if micros < 0 else ("", micros)
    if micros >= MICROS:
        text = f"{micros / MICROS:,.2f}"
    elif micros >= 100 or micros == 0:
        text = f"{micros / MICROS:.4f}"
    else:
        text = f"{micros / MICROS:.6f}"
    return f"{sign}${text}"


def cost_text(micros, unpriced):
    """A cost as people read it: dollars, + ? when some calls had no price, unpriced
    when none had one, - when there was no call."""
    if micros is None:
        return "unpriced" if unpriced else "-"
    return shown(micros) + ("+?" if unpriced else "")
