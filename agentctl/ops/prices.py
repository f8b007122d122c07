"""What a model call costs (agentctl(7), COST): its usage priced in whole millionths of
a dollar (agentctl.money), or None for a model without a price.

Two sources, the first that knows the model wins: the operator's file named by
$AGENTCTL_PRICES (a local server, a proxy, a negotiated rate), then the price database
of Pydantic's genai-prices package, which ships its data with it (no network: a newer
release of the package brings newer prices). The package is imported only when a call
is priced by it: it costs about 0.2 s, which no program's start may pay. A model that
neither knows (a local server) has no price: it is shown as unpriced, never as $0.

The operator's file: a line per model, `MODEL INPUT OUTPUT [CACHE_READ [CACHE_WRITE
[CACHE_WRITE_1H]]]`, MODEL a glob over agentctl's model names (openai:llama-3*,
scripted:*), or MODEL@TIER for the calls sold at a tier (openai:gpt-5*@batch), each
price in dollars per million tokens; a cache price left out is the
input price, the 1-hour write price the 5-minute one; # starts a comment. The first
line that matches prices the call."""

import fnmatch
import os

from agentctl import modelspec, paths
from agentctl.errors import UsageError

# decimal is imported where a price is read: this module comes with every program that
# can end a turn (agent-kill, agent-ps ...), which has fnmatch loaded already, and not it.
VARIABLE = "AGENTCTL_PRICES"
_parsed = {}                    # (path, mtime, size) -> [(glob, prices)]
_known = {}                     # (model, url) -> the genai_prices module, or None: unknown


def rules():
    """The operator's price lines [(glob, (input, output, read, write, write_1h))],
    [] without $AGENTCTL_PRICES; a usage error for a file that can't be read or a
    line that is not prices. Read again when the file changes."""
    path = paths.prices_file()
    if not path:
        return []
    try:
        stat = os.stat(path)
        key = (path, stat.st_mtime_ns, stat.st_size)
        if key not in _parsed:
            with open(path, encoding="utf-8") as f:
                _parsed.clear()
                _parsed[key] = parse(f.read(), path)
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"{VARIABLE}={path}: can't read it ({getattr(e, 'strerror', e)})")
    return _parsed[key]


def parse(text, where):
    from decimal import Decimal, InvalidOperation  # (start-up: 0.8 ms, only to read prices)
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        try:
            numbers = [Decimal(w) for w in words[1:]]
        except InvalidOperation:
            numbers = []
        if not 2 <= len(numbers) <= 5 or any(not n.is_finite() or n < 0 for n in numbers):
            raise UsageError(f"{VARIABLE}: {where}:{number}: want MODEL INPUT OUTPUT "
                             "[CACHE_READ [CACHE_WRITE [CACHE_WRITE_1H]]], prices in dollars "
                             "per million tokens")
        read = numbers[2] if len(numbers) > 2 else numbers[0]
        write = numbers[3] if len(numbers) > 3 else numbers[0]
        found.append((words[0], (numbers[0], numbers[1], read, write,
                                 numbers[4] if len(numbers) > 4 else write)))
    return found


def check():
    """A usage error now for a price file that is no price file (before a turn takes
    its input, as a bad context window is)."""
    rules()


def cost(model, url, usage):
    """The micros a call of `model` (agentctl's name, PROVIDER:NAME) at `url` (its
    API's base URL; "" for an offline model) cost, its `usage` as models.base makes
    it; None when no price is known. A call sold at a tier (usage's "tier": batch or
    flex, as the response said) is priced by the first of: the operator's line for
    MODEL@TIER; the operator's line for the model, at the provider's documented
    discount (DISCOUNT); genai-prices' price for the tier; its standard price at the
    discount."""
    tier = usage.get("tier")
    lines = rules()
    if tier:
        for glob, prices in lines:
            if "@" in glob and fnmatch.fnmatchcase(f"{model}@{tier}", glob):
                return _micros(usage, *prices)
    for glob, prices in lines:
        if "@" not in glob and fnmatch.fnmatchcase(model, glob):
            return _discounted(_micros(usage, *prices), tier)
    _, _, name = model.partition(":")
    if not url or not name or modelspec.locality(url):
        return None     # an offline model, or a server of one's own: no price to know
    database = _database_price(name, url)
    if database is None:
        return None
    standard = _priced(database, name, url, usage)
    for context in CONTEXTS.get(tier, ()):
        priced = _priced(database, name, url, usage, context)
        if priced != standard:
            return priced
    return _discounted(standard, tier)


# What the providers document: OpenAI's Batch API and Anthropic's Message Batches at
# half the standard price, OpenAI's flex at the Batch API's (prompt caching's prices
# stack on it); genai-prices names the variants by these contexts.
DISCOUNT = {"batch": 2, "flex": 2}      # the price divided by
CONTEXTS = {"batch": ({"processing": "batch"},),
            "flex": ({"service_tier": "flex"}, {"processing": "batch"})}


def _discounted(micros, tier):
    return micros if not tier or tier not in DISCOUNT else -(-micros // DISCOUNT[tier])


def _counts(usage):
    read = usage.get("cache_read_tokens", 0)
    written = usage.get("cache_write_tokens", 0)
    hour = min(usage.get("cache_write_1h_tokens", 0), written)
    fresh = max(usage.get("input_tokens", 0) - read - written, 0)
    return fresh, usage.get("output_tokens", 0), read, written - hour, hour


def _micros(usage, input_, output, read, write, write_1h):
    """The micros of `usage` at prices in dollars per million tokens (Decimals): the
    same number, since a micro is a millionth of a dollar."""
    fresh, out, cached, written, hour = _counts(usage)
    total = fresh * input_ + out * output + cached * read + written * write + hour * write_1h
    return int(total.to_integral_value())


def _database_price(name, url):
    """genai-prices' calc_price, or None when it is not installed or it knows neither
    the provider at that URL nor the model (remembered for the process)."""
    key = (name, url)
    if key not in _known:
        try:
            import genai_prices  # (start-up: 0.2 s, only to price a call)
            genai_prices.calc_price(genai_prices.Usage(input_tokens=0, output_tokens=0),
                                    name, provider_api_url=url)
            _known[key] = genai_prices
        except (ImportError, LookupError):
            _known[key] = None
    return _known[key]


def _priced(genai_prices, name, url, usage, context=None):
    fresh, out, read, written, hour = _counts(usage)
    counts = {"input_tokens": fresh + read + written + hour, "output_tokens": out,
              "cache_read_tokens": read, "cache_write_tokens": written + hour}
    if hour:
        counts.update(cache_write_1h_tokens=hour, cache_write_5m_tokens=written)
    price = genai_prices.calc_price(genai_prices.Usage(**counts), name, provider_api_url=url,
                                    price_context=context)
    return int((price.total_price * 1_000_000).to_integral_value())
