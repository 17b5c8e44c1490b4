"""Running one builtin tool as a one-step agent run over real HTTP, and reading what it returned."""
from tests.agent.support import Api, Tools


def live_api(make_app, live_server, **config):
    tools = Tools()
    return tools, Api(live_server(make_app(plugins=[tools], config=config)))


def run_steps(api, steps, **config):
    """Run a plan to its end (no person in the loop); the run detail."""
    run_id = api.start({"steps": steps}, planApproval="auto", **config)
    return api.wait_status(run_id, "complete", "failed", "cancelled", timeout=20)


def run_tool(api, tool, arguments, **config):
    """One step: (status, result or None, error or None)."""
    detail = run_steps(api, [{"id": "t", "tool": tool, "arguments": arguments}], **config)
    step = detail["steps"][0] if detail["steps"] else {"result": None, "error": detail["error"]}
    return detail["status"], step["result"], step["error"] or detail["error"]
