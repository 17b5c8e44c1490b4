"""A worker with tools that fail in each way a tool can: an error result, a JSON-RPC error, a crash."""
import os

import wire

TOOLS = [{"name": name, "description": f"{name} tool", "inputSchema": {"type": "object"}}
         for name in ("error_result", "rpc_error", "crash")]


def handle(method, params):
    if method == "initialize":
        return wire.initialize_result(tools=True)
    if method == "tools/list":
        return {"tools": TOOLS}
    if method == "tools/call":
        name = params.get("name")
        if name == "error_result":
            return {"content": [{"type": "text", "text": "disk is full"}], "isError": True}
        if name == "rpc_error":
            raise wire.RpcError(-32602, "bad arguments for rpc_error")
        if name == "crash":
            os._exit(9)
    return wire.standard(method, params)


if __name__ == "__main__":
    wire.serve(handle)
