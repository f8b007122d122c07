"""The storage layer: the one place that writes SQL (agentctl(5) is its schema)."""
