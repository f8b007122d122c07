"""Operations: what the programs, the agent-side tools and the turn do to agents, mail,
turns, documents and budgets, each rule in one place."""
