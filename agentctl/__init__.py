"""agentctl: run LLM agents the way Unix runs processes."""

__version__ = "0.1.0"
