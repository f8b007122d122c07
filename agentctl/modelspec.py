"""How a model is named (agentctl(7), Models): PROVIDER:MODEL, or echo. Apart from
the models package, so that agent-fork can refuse a name no provider answers to
without importing any provider."""

from agentctl.errors import UsageError

PROVIDERS = ("openai", "anthropic", "scripted")
EXPECTED = "expected openai:NAME, anthropic:NAME, echo or scripted:FILE"


def check_name(spec):
    """UsageError unless some provider answers to `spec`."""
    provider, colon, rest = (spec or "").partition(":")
    if spec != "echo" and not (colon and rest and rest.strip() == rest
                               and provider in PROVIDERS):
        raise UsageError(f"unknown model: {spec} ({EXPECTED})")
