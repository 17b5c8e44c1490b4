"""agenthost-hello: an example extension that greets through a route, a tool and a command."""
