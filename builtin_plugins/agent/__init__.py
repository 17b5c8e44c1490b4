"""The plan-and-execute agent: runs, gates, the engine, persisted history and the agent stream."""
