"""Helpers of the tests that start a background run and wait for its task's end."""


def start_plan(client, plan):
    """Start an unattended run of ``plan``; returns its run id."""
    resp = client.post("/api/agent/run", json={"goal": "g", "config": {"plan": plan, "planApproval": "auto"}})
    assert resp.status_code == 201, resp.json
    return resp.json["runId"]


def finished_task(host, client, run_id):
    """The run's task once terminal (long-poll)."""
    task_id = host.tasks.for_run(run_id)["taskId"]
    task = client.get(f"/api/agent/tasks/{task_id}?timeoutMs=20000").json
    assert task["state"] in ("succeeded", "failed", "cancelled"), task
    return task
