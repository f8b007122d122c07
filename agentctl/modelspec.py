"""How a model is named (agentctl(7), Models): PROVIDER:MODEL, or echo. Apart from
the models package, so that agent-fork can refuse a name no provider answers to
without importing any provider."""

import os

from agentctl.errors import UsageError

PROVIDERS = ("openai", "anthropic", "scripted")
EXPECTED = "expected openai:NAME, anthropic:NAME, echo or scripted:FILE"


def check_name(spec):
    """UsageError unless some provider answers to `spec`."""
    provider, colon, rest = (spec or "").partition(":")
    if spec != "echo" and not (colon and rest and rest.strip() == rest
                               and provider in PROVIDERS):
        raise UsageError(f"unknown model: {spec} ({EXPECTED})")


# Model options (agentctl(7), Models: agent-fork -o KEY=VALUE, agent-set options=...): the
# ones each provider takes, in agentctl's words, with the values each may have: (kind,
# least, most) for a number ("number" or "whole"; None: no bound), ("choice", words...), or
# ("text",). Each provider's module puts them in its own form (models/openai.py,
# models/anthropic.py). The offline models take every one, and use none.
EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh", "max")
OPTIONS = {
    "openai": {
        "temperature": ("number", 0, 2), "top_p": ("number", 0, 1),
        "max_tokens": ("whole", 1, None), "seed": ("whole", None, None),
        "frequency_penalty": ("number", -2, 2), "presence_penalty": ("number", -2, 2),
        "stop": ("text",), "reasoning_effort": ("choice",) + EFFORTS,
        "verbosity": ("choice", "low", "medium", "high"),
    },
    "anthropic": {
        "max_tokens": ("whole", 1, None), "stop": ("text",),
        "effort": ("choice", "low", "medium", "high", "xhigh", "max"),
    },
}
_LARGEST = 2 ** 63 - 1


def chosen(agent, override=None):
    """The model a turn of `agent` calls: the one given (-m), else the agent's own, else
    $AGENTCTL_MODEL; None when there is none."""
    return override or agent["model"] or os.environ.get("AGENTCTL_MODEL") or None


def provider(spec):
    """The provider of a model's name: openai, anthropic, scripted or echo."""
    return "echo" if spec == "echo" else (spec or "").partition(":")[0]


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
