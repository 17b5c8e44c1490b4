"""Task queue benchmarks: fairness of the dispatcher and the RQ executor's added latency.

Run: python tests/perf/bench_tasks.py   (needs Redis on 127.0.0.1:6379 for the RQ part)
"""
from gevent import monkey

monkey.patch_all()

import os  # noqa: E402
import secrets  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections import Counter  # noqa: E402

import gevent  # noqa: E402

from core import datasource  # noqa: E402
from core.app import create_app  # noqa: E402
from core.tasks import CapacityError, Limits, Task  # noqa: E402
from hookspecs import hookimpl  # noqa: E402

TOKEN = "bench"


class Recorder:
    __name__ = "bench_kinds"

    def __init__(self):
        self.starts = []

    @hookimpl
    def startup(self, host):
        def noop(task, ctx):
            self.starts.append((task["owner"], task["priority"], task["taskId"]))
            gevent.sleep(0.002)
            return None
        host.tasks.register_kind("noop", noop)


def make(config=None, plugins=()):
    data = tempfile.mkdtemp(prefix="ah-bench-")
    datasource.write(data, {"type": "sqlite", "params": {}})
    app = create_app({"service.auth.token": TOKEN, "service.data-dir": data, "service.log-level": "ERROR",
                      **(config or {})}, plugins, load_entry_points=False)
    return app.extensions["agenthost"], data


def fairness():
    rec = Recorder()
    host, _ = make({"tasks.max-running": 4}, [rec])
    floods = {"a": 400, "b": 200, "c": 100, "d": 50}  # attempts per owner, unequal on purpose

    def flood(owner, count):
        sent = 0
        while sent < count and len(rec.starts) < 200:
            try:
                host.tasks.admit(owner, "normal", "noop", {})
                sent += 1
            except CapacityError:
                gevent.sleep(0.001)

    gevent.joinall([gevent.spawn(flood, o, n) for o, n in floods.items()])
    with gevent.Timeout(120):
        while len(rec.starts) < 200:
            gevent.sleep(0.01)
    first = Counter(o for o, _, _ in rec.starts[:200])
    total = sum(first.values())
    equal = total / len({o for o in floods if first[o]})
    print("fairness: first", total, "starts by owner", dict(first))
    for owner, n in sorted(first.items()):
        print(f"  {owner}: {n} ({(n - equal) / equal:+.1%} vs equal share)")
    host.stop()

    # Interactive behind 100 queued batch tasks of the same owner (limits lifted for the experiment).
    rec = Recorder()
    host, _ = make({"tasks.max-running": 1}, [rec])
    host.tasks.limits = Limits(running=1, queued_global=1000, queued_owner=1000, batch_global=1000,
                               non_interactive_global=1000, owner_batch=1000, owner_non_interactive=1000,
                               owner_all=1000)
    host.tasks.stop()
    for _ in range(100):
        host.tasks.admit("a", "batch", "noop", {})
    inter = host.tasks.admit("a", "interactive", "noop", {})["taskId"]
    host.tasks._stopping = False  # stop() above only kept the dispatcher away while the queue filled
    host.tasks._loop = gevent.spawn(host.tasks._dispatch_loop)
    with gevent.Timeout(60):
        while inter not in [t for _, _, t in rec.starts]:
            gevent.sleep(0.005)
    position = [t for _, _, t in rec.starts].index(inter) + 1
    print(f"interactive behind 100 batch: started as dispatch #{position}")
    host.stop()


def rq_latency(n=200):
    plan = {"steps": [{"id": "x", "tool": "json_extract", "arguments": {"value": {"a": 1}, "path": "a"}}]}
    results = {}
    for executor in ("embedded", "rq"):
        config = {}
        worker = None
        if executor == "rq":
            ns = "bench" + secrets.token_hex(4)
            config = {"service.redis-url": "redis://127.0.0.1:6379/0", "service.redis-namespace": ns,
                      "tasks.poll-seconds": 0.5}
        host, data = make(config)
        if executor == "rq":
            worker = subprocess.Popen([sys.executable, "-m", "core", "worker", "--redis=redis://127.0.0.1:6379/0",
                                       f"--namespace={ns}", f"--data-dir={data}"],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(2)
        agent = host.service("agent")
        waits, totals = [], []
        for _ in range(n):
            t0 = time.perf_counter()
            run_id = agent.start_run("g", {"plan": plan, "planApproval": "auto"})
            task = host.tasks.for_run(run_id)
            done = host.tasks.wait(task["taskId"], "local", 30)
            totals.append(time.perf_counter() - t0)
            waits.append(done["queueWaitMs"])
        results[executor] = (statistics.median(waits), statistics.median(totals) * 1000,
                             sorted(totals)[int(0.99 * n) - 1] * 1000)
        if worker:
            worker.terminate()
            try:
                worker.wait(10)
            except subprocess.TimeoutExpired:  # seen once under heavy load: do not hang the benchmark
                worker.kill()
                worker.wait()
        host.stop()
    print(f"{'executor':<10} {'enqueue->start p50 ms':>22} {'admit->done p50 ms':>20} {'p99 ms':>8}")
    for name, (w, t, p99) in results.items():
        print(f"{name:<10} {w:>22.1f} {t:>20.2f} {p99:>8.2f}")
    print(f"RQ adds {results['rq'][1] - results['embedded'][1]:.2f} ms per task at p50")


if __name__ == "__main__":
    fairness()
    rq_latency(int(os.environ.get("BENCH_N", "200")))
