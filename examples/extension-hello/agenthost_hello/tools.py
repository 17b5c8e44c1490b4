"""The ``hello_greet`` tool: the same greeting for the AI chat and the agent."""
from core.tools import Tool, ToolError

from .greeting import MAX_NAME, greet

PARAMETERS = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": MAX_NAME,
                 "description": "Who to greet."},
    },
    "required": ["name"],
    "additionalProperties": False,
}


def _handle(arguments, ctx):
    try:
        return {"greeting": greet(arguments["name"])}
    except ValueError as exc:  # a name of spaces only passes the schema
        raise ToolError(str(exc)) from None


def greet_tool():
    """A fresh Tool per app: the host stamps its source (extension:hello) on it."""
    return Tool(
        name="hello_greet",
        description="Greet someone by name.",
        parameters=PARAMETERS,
        handler=_handle,
        retry_safe=True,
    )
