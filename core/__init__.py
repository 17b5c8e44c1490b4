"""agenthost core: the small kernel every feature area plugs into."""
