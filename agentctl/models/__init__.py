"""Models: turn a conversation into one reply.

    get_model("openai:gpt-4o-mini").complete(messages, tools, on_text=None, cache=None) -> Reply

Messages and tools are always in OpenAI Chat Completions form; each provider converts. Provider
modules are imported only by get_model, so importing this package costs no network library.
"""

from ..errors import UsageError
from ..modelspec import EXPECTED, check_name
from .base import Cache, Model, ModelError, Reply, ToolCall

__all__ = ["Cache", "Model", "ModelError", "Reply", "ToolCall", "get_model"]


def get_model(spec):
    """The Model named by `spec`; UsageError for a name no provider answers to."""
    check_name(spec)
    if spec == "echo":
        from .offline import EchoModel           # (start-up: a provider's module only when named)
        return EchoModel()
    provider, colon, rest = (spec or "").partition(":")
    if colon and rest.strip() == rest and rest:
        if provider == "openai":
            from .openai import OpenAIModel      # (start-up)
            return OpenAIModel(rest)
        if provider == "anthropic":
            from .anthropic import AnthropicModel    # (start-up)
            return AnthropicModel(rest)
        if provider == "scripted":
            from .offline import ScriptedModel   # (start-up)
            return ScriptedModel(rest)
    raise UsageError(f"unknown model: {spec} ({EXPECTED})")
