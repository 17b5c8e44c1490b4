"""Background task endpoints: snapshots, capacity, long-poll and cancel over core.tasks."""
