"""Instructions per webhook delivery (with its run), counted by callgrind: a steady figure on a noisy machine.

Wall-clock and CPU time on the 2-core machine swing by ±10 % between runs minutes
apart, which hides a 3 % change. Instructions do not: two counts of one commit agree
within about 1 %. This builds the app in process on an SQLite file (checkpoints on),
delivers N new events from 20 greenlets through the test client, waits until the
queue drains, and does that under callgrind twice (N=50 and N=250), so that
(Ir(250) - Ir(50)) / 200 leaves start-up out.

    python tests/perf/count_instructions.py [REPO ...]      # needs valgrind; about 3 minutes per repo

Compare two commits by giving two checkouts (``git worktree add /tmp/wt-a <commit>``).
The test client costs more per request than the served host's WSGI handler, so the
figure is higher than what the host spends; compare figures with each other only.
"""
import os
import re
import subprocess
import sys
from pathlib import Path

SMALL, LARGE = 50, 250


def deliver_all(repo, n):
    """The measured body: runs in a fresh interpreter under callgrind."""
    sys.path.insert(0, repo)
    sys.path.insert(1, str(Path(repo) / "tests" / "perf"))
    from gevent import monkey
    monkey.patch_all()
    import logging
    import tempfile

    import gevent
    from gevent.pool import Pool

    import bench_webhooks
    from core import datasource
    from core.app import create_app
    from core.config import Config

    logging.disable(logging.WARNING)
    token = "t" * 32
    data = tempfile.mkdtemp()
    datasource.write(data, {"type": "sqlite", "params": {"path": "agenthost.db"}})
    # Nothing is refused under valgrind's slowdown: deliveries wait for a place instead.
    app = create_app(Config({"service.auth.token": token, "service.data-dir": data,
                             "webhooks.admission-wait-ms": 600000}), [])
    client = app.test_client()
    headers = {"X-Service-Token": token}
    wf = client.post("/api/workflows", json=bench_webhooks.WORKFLOW, headers=headers).json
    client.post(f"/api/workflows/{wf['id']}/publish", json={"published": True}, headers=headers)
    trigger = client.post("/api/agent/webhook-triggers", json={"workflowId": wf["id"]}, headers=headers).json
    codes = {}

    def deliver(i):
        resp = app.test_client().post(trigger["hookPath"], data='{"n": 1}', headers={
            "Content-Type": "application/json", "X-Service-Webhook-Secret": trigger["secret"],
            "X-Service-Event-Id": f"e{i}"})
        codes[resp.status_code] = codes.get(resp.status_code, 0) + 1

    pool = Pool(20)
    for i in range(n):
        pool.spawn(deliver, i)
    pool.join()
    while True:
        capacity = client.get("/api/agent/tasks/capacity", headers=headers).json
        if capacity["queued"] == 0 and capacity["running"] == 0:
            break
        gevent.sleep(0.01)
    print("statuses", codes)
    app.extensions["agenthost"].stop()


def instructions(repo, n):
    argv = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", os.path.realpath(sys.executable),
            __file__, "--child", repo, str(n)]
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stderr
    return int(re.search(r"Collected : (\d+)", out).group(1))


def main():
    if sys.argv[1:2] == ["--child"]:
        deliver_all(sys.argv[2], int(sys.argv[3]))
        return
    repos = sys.argv[1:] or [str(Path(__file__).resolve().parents[2])]
    for repo in repos:
        per = (instructions(repo, LARGE) - instructions(repo, SMALL)) / (LARGE - SMALL)
        print(f"{repo}: {per / 1e6:.2f} M instructions per delivery")


if __name__ == "__main__":
    main()
