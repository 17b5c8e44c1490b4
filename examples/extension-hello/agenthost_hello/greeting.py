"""The logic every entry (route, tool, command) shares: no Flask, no click."""

MAX_NAME = 100


def greet(name):
    """``Hello, <name>!`` for a name of 1 to MAX_NAME characters (surrounding spaces dropped)."""
    name = (name or "").strip()
    if not name or len(name) > MAX_NAME:
        raise ValueError(f"name must be 1 to {MAX_NAME} characters")
    return f"Hello, {name}!"
