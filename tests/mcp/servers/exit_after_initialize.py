"""A STDIO "server" that answers initialize, writes a last word to stderr and exits with code 3."""
import json
import sys

line = sys.stdin.readline()
request = json.loads(line)
sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": request["id"], "result": {
    "protocolVersion": request["params"]["protocolVersion"], "capabilities": {"tools": {}},
    "serverInfo": {"name": "short-lived", "version": "1.0"}}}) + "\n")
sys.stdout.flush()
sys.stdin.readline()  # notifications/initialized
sys.stderr.write("fatal: out of cheese\n")
sys.stderr.flush()
sys.exit(3)
