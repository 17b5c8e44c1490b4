"""The tool catalog endpoint: every tool the agent and chat can call."""
