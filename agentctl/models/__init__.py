"""Models: turn a conversation into one reply.

    get_model("openai:gpt-4o-mini").complete(messages, tools, on_text=None, cache=None) -> Reply

Messages and tools are always in OpenAI Chat Completions form; each provider converts. Provider
modules are imported only by get_model, so importing this package costs no network library.
"""

import importlib

from ..modelspec import BY_NAME, check_name, provider
from .base import Cache, Model, ModelError, Reply, ToolCall

__all__ = ["Cache", "Model", "ModelError", "Reply", "ToolCall", "get_model"]


def get_model(spec):
    """The Model named by `spec`, of the class its provider's row names (modelspec.PROVIDERS),
    made as Class(MODEL, row): MODEL the name after the colon ("" for echo). UsageError for a
    name no provider answers to."""
    check_name(spec)
    row = BY_NAME[provider(spec)]
    # (start-up: a provider's module only when named)
    model_class = getattr(importlib.import_module(row.module), row.model_class)
    return model_class(spec.partition(":")[2], row)
