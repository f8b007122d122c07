"""One turn of one agent: the loop, the tools it offers, the context it sends, compaction."""
