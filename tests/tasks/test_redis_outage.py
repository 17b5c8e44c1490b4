"""Redis going away under the RQ executor: admissions fail clearly, nothing accepted is lost, service recovers."""
import os
import shutil
import socket
import subprocess
import sys
import time

import gevent
import pytest

from tests.conftest import HEADERS

PLAN = {"steps": [{"id": "pick", "tool": "json_extract", "arguments": {"value": {"a": 7}, "path": "a"}}]}


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class PrivateRedis:
    """A redis-server of this test's own, so stopping it disturbs nobody else."""

    def __init__(self, tmp_path):
        self.port = free_port()
        self.dir = tmp_path
        self.proc = None

    def start(self):
        self.proc = subprocess.Popen(["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                                      "--save", "", "--appendonly", "no", "--dir", str(self.dir)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                gevent.sleep(0.05)
        raise AssertionError("redis-server did not start")

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)

    @property
    def url(self):
        return f"redis://127.0.0.1:{self.port}/0"


@pytest.fixture
def private_redis(tmp_path):
    if shutil.which("redis-server") is None:
        pytest.fail("redis-server is required for this test")
    server = PrivateRedis(tmp_path)
    server.start()
    yield server
    server.stop()


def wait_for(predicate, timeout=20):
    with gevent.Timeout(timeout):
        while not predicate():
            gevent.sleep(0.05)


def test_an_outage_refuses_new_work_clearly_and_loses_nothing_admitted(make_app, data_dir, private_redis):
    app = make_app(config={"service.redis-url": private_redis.url, "service.redis-namespace": "outage",
                           "tasks.poll-seconds": 0.2})
    host = app.extensions["agenthost"]
    client = app.test_client()
    body = {"goal": "g", "config": {"plan": PLAN, "planApproval": "auto"}}
    accepted = client.post("/api/agent/run", json=body, headers=HEADERS)
    assert accepted.status_code == 201
    run_id = accepted.json["runId"]
    wait_for(lambda: host.tasks.for_run(run_id)["state"] == "running")  # handed to Redis, no worker yet

    private_redis.stop()
    gevent.sleep(1.1)  # past the executor's one-second health cache
    refused = client.post("/api/agent/run", json=body, headers=HEADERS)
    assert refused.status_code == 503
    assert refused.json["code"] == "executor_unavailable"
    assert host.tasks.for_run(run_id) is not None  # the accepted one is still on record

    private_redis.start()  # comes back empty: the job it held is gone
    wait_for(lambda: client.post("/api/agent/run", json=body, headers=HEADERS).status_code == 201)
    worker = subprocess.Popen([sys.executable, "-m", "core", "worker", f"--redis={private_redis.url}",
                               "--namespace=outage", f"--data-dir={data_dir}"],
                              env=dict(os.environ), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: host.service("agent").store.load(run_id).status == "complete", timeout=30)
    finally:
        worker.terminate()
        worker.wait(10)
    assert host.tasks.for_run(run_id)["state"] == "succeeded"
