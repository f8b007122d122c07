"""Models: turn a conversation into one reply.

    get_model("openai:gpt-4o-mini").complete(messages, tools, on_text=None) -> Reply

Messages and tools are always in OpenAI Chat Completions form; each provider converts. Provider
modules are imported only by get_model, so importing this package costs no network library.
"""

from agentctl.errors import UsageError
from agentctl.models.base import Model, ModelError, Reply, ToolCall

__all__ = ["Model", "ModelError", "Reply", "ToolCall", "get_model"]

EXPECTED = "expected openai:NAME, anthropic:NAME, echo or scripted:FILE"


def get_model(spec):
    """The Model named by `spec`; UsageError for a name no provider answers to."""
    if spec == "echo":
        from agentctl.models.offline import EchoModel
        return EchoModel()
    provider, colon, rest = (spec or "").partition(":")
    if colon and rest.strip() == rest and rest:
        if provider == "openai":
            from agentctl.models.openai import OpenAIModel
            return OpenAIModel(rest)
        if provider == "anthropic":
            from agentctl.models.anthropic import AnthropicModel
            return AnthropicModel(rest)
        if provider == "scripted":
            from agentctl.models.offline import ScriptedModel
            return ScriptedModel(rest)
    raise UsageError(f"unknown model: {spec} ({EXPECTED})")
