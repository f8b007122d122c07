"""How a model is named (agentctl(7), Models): PROVIDER:MODEL, or echo; and the providers
that answer to the names, one table (PROVIDERS). Apart from the models package, so that
agent-fork, agent-ps and agent-set check a name at start-up without importing any provider."""

import os
from types import SimpleNamespace

from agentctl.errors import UsageError

# Model options (agentctl(7), Models: agent-fork -o KEY=VALUE, agent-set options=...), in
# agentctl's words, with the values each may have: (kind, least, most) for a number ("number"
# or "whole"; None: no bound), ("choice", words...), or ("text",). The model's class puts
# them in its API's form (models/openai.py, models/anthropic.py).
EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh", "max")
CHAT_COMPLETIONS = {
    "temperature": ("number", 0, 2), "top_p": ("number", 0, 1),
    "max_tokens": ("whole", 1, None), "seed": ("whole", None, None),
    "frequency_penalty": ("number", -2, 2), "presence_penalty": ("number", -2, 2),
    "stop": ("text",), "reasoning_effort": ("choice",) + EFFORTS,
    "verbosity": ("choice", "low", "medium", "high"),
}
MESSAGES = {
    "max_tokens": ("whole", 1, None), "stop": ("text",),
    "effort": ("choice", "low", "medium", "high", "xhigh", "max"),
}


# The providers, a row each: a provider is its module in models/ and its row here, read
# by models.get_model (the class a name makes), keys.VARIABLES (the values redacted and
# kept from tools), models/api.py (where a call goes), models/limits.py (the headers a
# response's limits are read from), EXPECTED and OPTIONS below, and the tests
# (tests/test_providers.py fails when one of them misses a row). A row's fields:
# - name: before the colon; names: what its models' names look like, PROVIDER:WHAT, or
#   its name alone for one that takes no model (echo);
# - module, model_class: the class that speaks its API, imported by get_model alone and
#   made as Class(MODEL, row);
# - key, url_variable, url: an API's key variable, base URL variable and the URL when
#   that is unset (None: no API);
# - options: the model options it takes, {name: kind} (None: every one, used by none:
#   the offline models);
# - limits: its rate-limit headers, a pattern with {field} (limit, remaining, reset) and
#   {kind} (requests, tokens ...) (None: it sends none).
# A row is a SimpleNamespace: no class to make at every program's start.
def provider_row(name, names, module, model_class, *, key=None, url_variable=None, url=None,
                 options=None, limits=None):
    return SimpleNamespace(name=name, names=names, module=module, model_class=model_class,
                           key=key, url_variable=url_variable, url=url, options=options,
                           limits=limits)


PROVIDERS = (
    provider_row("openai", "openai:NAME", "agentctl.models.openai", "OpenAIModel",
                 key="OPENAI_API_KEY", url_variable="OPENAI_BASE_URL",
                 url="https://api.openai.com/v1", options=CHAT_COMPLETIONS,
                 limits="x-ratelimit-{field}-{kind}"),
    provider_row("anthropic", "anthropic:NAME", "agentctl.models.anthropic", "AnthropicModel",
                 key="ANTHROPIC_API_KEY", url_variable="ANTHROPIC_BASE_URL",
                 url="https://api.anthropic.com", options=MESSAGES,
                 limits="anthropic-ratelimit-{kind}-{field}"),
    # Offline: no key, no network.
    provider_row("echo", "echo", "agentctl.models.offline", "EchoModel"),
    provider_row("scripted", "scripted:FILE", "agentctl.models.offline", "ScriptedModel"),
)
BY_NAME = {p.name: p for p in PROVIDERS}

_NAMES = [p.names for p in PROVIDERS]
EXPECTED = f"expected {', '.join(_NAMES[:-1])} or {_NAMES[-1]}"
# The options each provider takes, by its row. The offline models take every one, and use
# none.
OPTIONS = {p.name: p.options for p in PROVIDERS if p.options is not None}
_LARGEST = 2 ** 63 - 1


def check_name(spec):
    """UsageError unless some provider answers to `spec`: PROVIDER:MODEL, MODEL neither empty
    nor starting or ending with a space; or a name alone where that is its row's (echo)."""
    row, model = BY_NAME.get(provider(spec)), (spec or "").partition(":")[2]
    if row is None or (spec != row.name if ":" not in row.names
                       else not model or model.strip() != model):
        raise UsageError(f"unknown model: {spec} ({EXPECTED})")


def chosen(agent, override=None):
    """The model a turn of `agent` calls: the one given (-m), else the agent's own, else
    $AGENTCTL_MODEL; None when there is none."""
    return override or agent["model"] or os.environ.get("AGENTCTL_MODEL") or None


def provider(spec):
    """The provider of a model's name: openai, anthropic, scripted or echo."""
    return (spec or "").partition(":")[0]


def locality(url):
    """Where the API at `url` is served: "loopback" (this machine: localhost, *.localhost,
    127.0.0.0/8, ::1), "private" (a private network: *.local, a private or link-local
    address), or None (anywhere else). A loopback server may need no key
    (agentctl/endpoint.py); a loopback or private one has no public price (ops/prices.py)."""
    import ipaddress  # (start-up: 0.9 ms, only to call or price a model)
    from urllib.parse import urlsplit  # (start-up: 0.8 ms, only to call or price a model)
    host = (urlsplit(url).hostname or "").rstrip(".")
    if host == "localhost" or host.endswith(".localhost"):
        return "loopback"
    if host.endswith(".local"):
        return "private"
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return None
    address = getattr(address, "ipv4_mapped", None) or address     # ::ffff:127.0.0.1
    if address.is_loopback:
        return "loopback"
    return "private" if address.is_private or address.is_link_local else None


def known_options(spec):
    """{option: its values} a model takes: its provider's, or every one for an offline
    model (and for no model yet: it is checked again when one is given)."""
    given = OPTIONS.get(provider(spec))
    if given is not None:
        return given
    merged = {}
    for table in OPTIONS.values():
        for name, kind in table.items():
            merged.setdefault(name, kind)
    return merged


def option_value(name, text, kind):
    """The value of option `name` from `text`, as its `kind` says; UsageError for none."""
    if kind[0] == "text":
        if not text:
            raise UsageError(f"option {name}: empty")
        return text
    if kind[0] == "choice":
        if text not in kind[1:]:
            raise UsageError(f"option {name}: {text!r} is not one of {', '.join(kind[1:])}")
        return text
    try:
        value = int(text) if kind[0] == "whole" else float(text)
    except ValueError:
        value = None
    least, most = kind[1], kind[2]
    if value is None or value != value or abs(value) > _LARGEST \
            or (least is not None and value < least) or (most is not None and value > most):
        bounds = f"from {least}" if most is None and least is not None else \
            f"from {least} to {most}" if least is not None else "any"
        raise UsageError(f"option {name}: {text!r} is not a {'whole ' if kind[0] == 'whole' else ''}"
                         f"number ({bounds})")
    return value


def parse_options(lines, spec):
    """{name: value} of options given as KEY=VALUE texts, checked against what the model
    `spec` takes: a UsageError that names an unknown one and the ones it knows."""
    known = known_options(spec)
    values = {}
    for line in lines:
        name, equals, text = line.partition("=")
        name = name.strip()
        if not equals or not name:
            raise UsageError(f"option {line!r}: want KEY=VALUE")
        if name not in known:
            whose = f"model {spec}" if provider(spec) in OPTIONS else "any provider"
            raise UsageError(f"unknown option {name} for {whose} "
                             f"(known: {', '.join(sorted(known))})")
        values[name] = option_value(name, text.strip(), known[name])
    return values
