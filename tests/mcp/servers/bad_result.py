"""A STDIO MCP server whose tool declares an outputSchema and answers structured content that breaks it."""
import json
import sys

TOOL = {"name": "count", "description": "Claims to return an integer.", "inputSchema": {"type": "object"},
        "outputSchema": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}}


def answer(request_id, result):
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": request_id, "result": result}) + "\n")
    sys.stdout.flush()


for line in sys.stdin:
    message = json.loads(line)
    method, request_id = message.get("method"), message.get("id")
    if request_id is None:
        continue  # notifications
    if method == "initialize":
        answer(request_id, {"protocolVersion": message["params"]["protocolVersion"], "capabilities": {"tools": {}},
                            "serverInfo": {"name": "bad-result", "version": "1.0"}})
    elif method == "tools/list":
        answer(request_id, {"tools": [TOOL]})
    elif method == "tools/call":
        answer(request_id, {"content": [{"type": "text", "text": "many"}], "structuredContent": {"n": "many"}})
    else:
        answer(request_id, {})
