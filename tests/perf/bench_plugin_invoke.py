"""Runtime-plugin invoke benchmarks: in-process call, pipelining, HTTP invoke and cold spawn, each beside its floor.

Four measures, each side by side with its floor in the same run (interleaved, so
background load hits both alike), repeated in rounds and summarised by medians:

1. latency: ``host.service("workers").invoke(id, "ping", {})`` on the hello example
   against a raw newline-delimited JSON-RPC round trip over pipes to a tiny echo child
   (the floor); calls alternate one by one. Target: p50 added over the floor < 100 us.
   The same call path to a plugin whose worker *is* the floor's echo child is shown
   too: it separates the host's share from the hello worker's own (a thread per call).
2. pipelining: 32 concurrent greenlet callers vs one caller, same number of calls on
   one hello worker (echo plugin and raw pipe beside it, with CPU per call of each end).
   Target: >= 3x the one-at-a-time throughput.
3. HTTP: ``POST /api/plugin-runtime/{id}/invoke`` on ``python -m core serve`` vs a bare
   Flask POST route served the same way (pywsgi, a Pool, listener from
   ``core.launcher.bind``), each in its own subprocess, loaded by ``wrk`` with 32
   keep-alive connections, alternating rounds (the echo plugin through our route too, as
   a diagnostic). Target: >= 60 % of the floor's req/s.
4. cold spawn: a fresh app (worker not running) to the first ``ping`` result, against
   spawning the echo child and reading its first answer. Target: < 300 ms.

    python tests/perf/bench_plugin_invoke.py [--rounds 5] [--calls 2000] [--seconds 3]
                                             [--connections 32] [--cold 10]
                                             [--only latency,pipelining,http,cold]
                                             [--profile SECONDS]

``--profile`` then samples the host with py-spy (pip install py-spy) under the HTTP load.

Traffic stays on 127.0.0.1; needs ``wrk`` for the HTTP part (apt-get install -y wrk).
"""
from gevent import monkey

monkey.patch_all()

import argparse  # noqa: E402
import io  # noqa: E402
import itertools  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import zipfile  # noqa: E402
from pathlib import Path  # noqa: E402

import gevent  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import _common as c  # noqa: E402

HELLO_DIR = c.REPO / "examples" / "plugins" / "hello-worker"
HELLO_ID = "com.example.hello"
ECHO_ID = "perf.echo"
CONCURRENCY = 32
TARGET_ADDED_US = 100
TARGET_PIPELINE = 3.0
TARGET_HTTP_SHARE = 0.60
TARGET_COLD_MS = 300

# The floor's child: the least a JSON-RPC peer can do (parse a line, answer a line). It also
# answers ``initialize`` so that the very same file can be installed as a plugin.
ECHO_CHILD = r'''
import json, sys
out = sys.stdout
for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg:
        continue
    if msg.get("method") == "initialize":
        result = {"protocolVersion": "2025-06-18", "capabilities": {}, "serverInfo": {"name": "echo"}}
    else:
        result = {}
    out.write(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}) + "\n")
    out.flush()
'''

# wrk: a JSON POST with the token, and its summary as one JSON line.
LUA = r"""
wrk.method = "POST"
wrk.body = '{"method":"ping","params":{}}'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["X-Service-Token"] = "%s"
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRKJSON {"requests":%%d,"duration_us":%%d,"p50_us":%%d,"p99_us":%%d,' ..
    '"non2xx":%%d,"socket_errors":%%d}\n',
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99),
    e.status, e.connect + e.read + e.write + e.timeout))
end
"""


# -- the floors ------------------------------------------------------------------------------

class PipeFloor:
    """A raw JSON-RPC peer over two pipes: blocking os.write / os.read, no framework in between."""

    def __init__(self, script):
        # Spawned as the supervisor spawns workers: the same interpreter, a script path, a minimal env.
        self.proc = subprocess.Popen([sys.executable, script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     env={"PATH": os.environ.get("PATH", ""), "PYTHONUNBUFFERED": "1"},
                                     close_fds=True)
        # gevent made the pipes non-blocking for its file objects; the floor uses the bare fds, blocking.
        self.w, self.r = self.proc.stdin.fileno(), self.proc.stdout.fileno()
        os.set_blocking(self.w, True)
        os.set_blocking(self.r, True)
        self.buf = b""
        self.ids = itertools.count(1)

    def send(self, method="ping"):
        os.write(self.w, (json.dumps({"jsonrpc": "2.0", "id": next(self.ids), "method": method,
                                      "params": {}}) + "\n").encode())

    def receive(self):
        while b"\n" not in self.buf:
            chunk = os.read(self.r, 65536)
            if not chunk:
                raise RuntimeError("the echo child closed its output")
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        return json.loads(line)

    def call(self, method="ping"):
        self.send(method)
        return self.receive()

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(5)
        self.proc.stdout.close()


def floor_server():
    """The HTTP floor: one bare Flask JSON POST route, served exactly as core.launcher serves ours."""
    from flask import Flask, jsonify, request
    from gevent.event import Event
    from gevent.pool import Pool
    from gevent.pywsgi import WSGIServer

    from core.launcher import _ErrorLog, bind

    app = Flask("floor")

    @app.post("/invoke")
    def invoke():
        body = request.get_json()
        return jsonify({} if body.get("method") == "ping" else None)

    listener = bind(0)
    WSGIServer(listener, app, spawn=Pool(), log=None, error_log=_ErrorLog()).start()
    sys.stdout.write(f"SERVICE_PORT={listener.getsockname()[1]}\n")
    sys.stdout.flush()
    Event().wait()


# -- our side --------------------------------------------------------------------------------

def zip_folder(folder):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(Path(folder).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                zf.write(path, path.relative_to(folder).as_posix())
    return buf.getvalue()


def echo_plugin_zip():
    manifest = {"id": ECHO_ID, "name": "Echo", "version": "1.0.0", "runtime": "python", "main": "main.py"}
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("plugin.json", json.dumps(manifest))
        zf.writestr("main.py", ECHO_CHILD)
    return buf.getvalue()


def new_app(data_dir):
    from core import datasource
    from core.app import create_app

    if datasource.read(data_dir) is None:
        datasource.write(data_dir, {"type": "sqlite", "params": {}})
    return create_app({"service.auth.token": c.TOKEN, "service.data-dir": str(data_dir),
                       "service.log-level": "ERROR"}, load_entry_points=False)


def install_in_process(app, data):
    client = app.test_client()
    resp = client.post("/api/plugin-packages/upload", headers={"X-Service-Token": c.TOKEN},
                       data={"file": (io.BytesIO(data), "plugin.zip"), "confirmPermissions": "true"},
                       content_type="multipart/form-data")
    if resp.status_code != 201:
        raise SystemExit(f"install failed: {resp.status_code} {resp.get_data(as_text=True)}")


def install_over_http(port, data):
    import requests

    resp = requests.post(f"http://{c.LOOPBACK}:{port}/api/plugin-packages/upload",
                         headers={"X-Service-Token": c.TOKEN},
                         files={"file": ("plugin.zip", data)}, data={"confirmPermissions": "true"}, timeout=60)
    if resp.status_code != 201:
        raise SystemExit(f"install over HTTP failed: {resp.status_code} {resp.text}")


def us(seconds):
    return seconds * 1e6


# -- 1. latency ------------------------------------------------------------------------------

def latency(workers, floor, rounds, calls):
    """Alternate floor / hello / echo-plugin calls one by one; p50 and p99 per round."""
    names = ["raw pipe (floor)", "invoke: hello", "invoke: echo plugin"]
    callers = [floor.call, lambda: workers.invoke(HELLO_ID, "ping", {}),
               lambda: workers.invoke(ECHO_ID, "ping", {})]
    for call in callers:  # warm-up: workers spawned, caches filled
        for _ in range(200):
            call()
    rows, added, added_echo = [], [], []
    for r in range(rounds):
        samples = [[] for _ in callers]
        for _ in range(calls):
            for i, call in enumerate(callers):
                t0 = time.perf_counter()
                call()
                samples[i].append(time.perf_counter() - t0)
        p50 = [us(c.percentile(s, 50)) for s in samples]
        p99 = [us(c.percentile(s, 99)) for s in samples]
        added.append(p50[1] - p50[0])
        added_echo.append(p50[2] - p50[0])
        for i, name in enumerate(names):
            rows.append([r + 1, name, p50[i], p99[i], p50[i] - p50[0]])
    print(f"\n1. latency: {calls} calls per path per round, alternating call by call")
    c.table(["round", "path", "p50 us", "p99 us", "p50 added us"], rows)
    med = {name: c.median([row[2] for row in rows if row[1] == name]) for name in names}
    p99 = {name: c.median([row[3] for row in rows if row[1] == name]) for name in names}
    print()
    c.table(["path", "median p50 us", "median p99 us"], [[n, med[n], p99[n]] for n in names])
    value = c.median(added)
    print(f"in-process invoke on hello adds {value:.0f} us at p50 over the raw pipe "
          f"(echo plugin: {c.median(added_echo):.0f} us); target < {TARGET_ADDED_US} us: "
          f"{c.verdict(value < TARGET_ADDED_US)}")
    return value


# -- 2. pipelining ---------------------------------------------------------------------------

def pipelining(workers, floor, rounds, calls):
    """Throughput of 32 concurrent callers vs one caller on the same worker (and the raw pipe's ceiling).

    CPU per call of both ends is shown beside it: on two cores, concurrent throughput cannot
    pass 1 / (the busier end's CPU per call), however many calls are in flight.
    """
    calls = calls - calls % CONCURRENCY
    in_flight = [0]

    def measure(fn, child_pid):
        cpu0, child0, t0 = time.process_time(), c.cpu_seconds(child_pid), time.perf_counter()
        fn()
        wall = time.perf_counter() - t0
        return (calls / wall, us(time.process_time() - cpu0) / calls,
                us(c.cpu_seconds(child_pid) - child0) / calls)

    def one_at_a_time(plugin_id):
        for _ in range(calls):
            workers.invoke(plugin_id, "ping", {})

    def concurrent(plugin_id):
        pending = workers.get(plugin_id).worker.pending

        def caller():
            for _ in range(calls // CONCURRENCY):
                workers.invoke(plugin_id, "ping", {})
                in_flight[0] = max(in_flight[0], len(pending))
        gevent.joinall([gevent.spawn(caller) for _ in range(CONCURRENCY)], raise_error=True)

    def raw_serial():
        for _ in range(calls):
            floor.call()

    def raw_pipelined():
        for _ in range(calls // CONCURRENCY):
            for _ in range(CONCURRENCY):
                floor.send()
            for _ in range(CONCURRENCY):
                floor.receive()

    paths = [("raw pipe (floor)", raw_serial, raw_pipelined, floor.proc.pid)]
    for name, plugin_id in (("invoke: hello", HELLO_ID), ("invoke: echo plugin", ECHO_ID)):
        pid = workers.status(plugin_id)["pid"]
        paths.append((name, lambda p=plugin_id: one_at_a_time(p), lambda p=plugin_id: concurrent(p), pid))
    rows, ratios = [], {name: [] for name, *_ in paths}
    cpu = {name: [0.0, 0.0] for name, *_ in paths}  # caller, worker CPU us per call at x32, summed over rounds
    for r in range(rounds):
        for name, serial, piped, pid in paths:
            s1, s32 = measure(serial, pid), measure(piped, pid)
            ratios[name].append(s32[0] / s1[0])
            cpu[name][0] += s32[1] / rounds
            cpu[name][1] += s32[2] / rounds
            rows.append([r + 1, name, round(s1[0]), round(s32[0]), s32[0] / s1[0]])
    print(f"\n2. pipelining: {calls} calls per measure, 1 caller vs {CONCURRENCY} concurrent greenlets "
          f"(raw pipe: {CONCURRENCY} lines written, then {CONCURRENCY} read)")
    c.table(["round", "path", "calls/s x1", f"calls/s x{CONCURRENCY}", "ratio"], rows)
    print(f"\nCPU per call at x{CONCURRENCY} (caller: this process, incl. the host's reader greenlets; worker: "
          "/proc, 10 ms ticks, averaged over the rounds) and the throughput ceiling it allows")
    c.table(["path", "median ratio", "caller CPU us", "worker CPU us", "ceiling calls/s"],
            [[name, c.median(ratios[name]), cpu[name][0], cpu[name][1], round(1e6 / max(cpu[name]))]
             for name, *_ in paths])
    med = {name: c.median(v) for name, v in ratios.items()}
    value = med["invoke: hello"]
    print(f"most calls in flight at once on one worker: {in_flight[0]}")
    print(f"hello: {CONCURRENCY} concurrent callers reach {value:.2f}x one-at-a-time (echo plugin "
          f"{med['invoke: echo plugin']:.2f}x, raw pipe {med['raw pipe (floor)']:.2f}x); "
          f"target >= {TARGET_PIPELINE:.0f}x: {c.verdict(value >= TARGET_PIPELINE)}")
    return value


# -- 3. HTTP ---------------------------------------------------------------------------------

def run_wrk(url, seconds, connections, script, pids=()):
    # One wrk thread: on two cores the other one belongs to the server under test.
    argv = ["wrk", "-t", "1", "-c", str(connections), "-d", f"{seconds}s", "--timeout", "10s", "-s", script, url]
    cpu0 = [c.cpu_seconds(p) for p in pids]
    out = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=seconds + 30).stdout
    cpu = [c.cpu_seconds(p) - t for p, t in zip(pids, cpu0)]
    line = next(ln for ln in out.splitlines() if ln.startswith("WRKJSON "))
    result = json.loads(line[len("WRKJSON "):])
    if result["non2xx"] or result["socket_errors"]:
        raise SystemExit(f"{url}: {result['non2xx']} non-2xx responses, {result['socket_errors']} socket errors")
    result["rps"] = result["requests"] / (result["duration_us"] / 1e6)
    result["cpu_us"] = [us(t) / result["requests"] for t in cpu]
    return result


def profile(pid, url, seconds, connections, script):
    """Sample the host with py-spy while wrk loads it; print where its time goes (share of samples)."""
    import collections

    if not shutil.which("py-spy"):
        raise SystemExit("--profile needs py-spy: pip install py-spy")
    out = script + ".pyspy.txt"
    spy = subprocess.Popen(["py-spy", "record", "-p", str(pid), "-d", str(seconds), "-r", "250", "-f", "raw",
                            "-o", out], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    run_wrk(url, seconds, connections, script)
    spy.wait()
    inclusive, own, total = collections.Counter(), collections.Counter(), 0
    with open(out) as fh:
        for line in fh:
            stack, count = line.rsplit(" ", 1)
            frames = [f.split(" (")[0] + " (" + f.split(" (")[-1].split(":")[0].split("site-packages/")[-1]
                      .replace(str(c.REPO) + "/", "") for f in stack.split(";")]
            total += int(count)
            own[frames[-1]] += int(count)
            for frame in set(frames):
                inclusive[frame] += int(count)
    print(f"\npy-spy: {total} samples of the host process under the same load")
    ours = [(f, n) for f, n in inclusive.most_common() if "core/" in f or "builtin_plugins/" in f][:20]
    c.table(["our function (inclusive)", "share"], [[f, f"{n / total:.1%}"] for f, n in ours])
    print()
    c.table(["function (self)", "share"], [[f, f"{n / total:.1%}"] for f, n in own.most_common(20)])


def http(rounds, seconds, connections, script_dir, profile_seconds=0):
    """wrk against our invoke route (hello, and the echo plugin as a diagnostic) and the bare Flask route."""
    if not shutil.which("wrk"):
        raise SystemExit("wrk is required for the HTTP part: apt-get install -y wrk")
    import requests

    data_dir = c.init_data_dir()
    script = os.path.join(script_dir, "invoke.lua")
    Path(script).write_text(LUA % c.TOKEN)
    floor_argv = [sys.executable, str(Path(__file__).resolve()), "--floor-server"]
    try:
        with c.host_server(data_dir) as ours, c.Server(floor_argv, "bare flask") as floor:
            base = f"http://{c.LOOPBACK}:{ours.port}"
            install_over_http(ours.port, zip_folder(HELLO_DIR))
            install_over_http(ours.port, echo_plugin_zip())
            targets = {"agenthost: hello": f"{base}/api/plugin-runtime/{HELLO_ID}/invoke",
                       "agenthost: echo plugin": f"{base}/api/plugin-runtime/{ECHO_ID}/invoke",
                       "bare flask": f"http://{c.LOOPBACK}:{floor.port}/invoke"}
            for url in targets.values():  # warm-up; spawns the workers
                run_wrk(url, 2, connections, script)

            def worker_pid(plugin_id):
                return requests.get(f"{base}/api/plugin-runtime/{plugin_id}/status",
                                    headers={"X-Service-Token": c.TOKEN}, timeout=10).json()["pid"]
            pids = {"agenthost: hello": [ours.pid, worker_pid(HELLO_ID)],
                    "agenthost: echo plugin": [ours.pid, worker_pid(ECHO_ID)], "bare flask": [floor.pid]}
            rows, shares, echo_shares = [], [], []
            for r in range(rounds):
                order = list(targets) if r % 2 == 0 else list(reversed(targets))
                got = {name: run_wrk(targets[name], seconds, connections, script, pids[name]) for name in order}
                shares.append(got["agenthost: hello"]["rps"] / got["bare flask"]["rps"])
                echo_shares.append(got["agenthost: echo plugin"]["rps"] / got["bare flask"]["rps"])
                for name in targets:
                    g = got[name]
                    rows.append([r + 1, name, round(g["rps"]), g["p50_us"] / 1000, g["p99_us"] / 1000,
                                 g["cpu_us"][0], g["cpu_us"][1] if len(g["cpu_us"]) > 1 else "-"])
            print(f"\n3. HTTP invoke: wrk -t1 -c{connections}, {rounds} x {seconds} s per target, alternating; "
                  "CPU per request from /proc")
            c.table(["round", "target", "req/s", "p50 ms", "p99 ms", "server CPU us", "worker CPU us"], rows)
            print()
            c.table(["target", "median req/s", "median server CPU us", "median worker CPU us"],
                    [[n, round(c.median([row[2] for row in rows if row[1] == n])),
                      c.median([row[5] for row in rows if row[1] == n]),
                      c.median([row[6] for row in rows if row[1] == n]) if n != "bare flask" else "-"]
                     for n in targets])
            value = c.median(shares)
            print(f"agenthost invoking hello reaches {value:.0%} of the floor's req/s (median of per-round "
                  f"ratios; echo plugin: {c.median(echo_shares):.0%}); target >= {TARGET_HTTP_SHARE:.0%}: "
                  f"{c.verdict(value >= TARGET_HTTP_SHARE)}")
            if profile_seconds:
                profile(ours.pid, targets["agenthost: hello"], profile_seconds, connections, script)
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
    return value


# -- 4. cold spawn ---------------------------------------------------------------------------

def cold(data_dir, echo_script, samples):
    """Fresh app (no worker) to the first ping result, alternating with a fresh echo child's first answer."""
    rows, floor_ms, ours_ms = [], [], []
    for i in range(samples):
        t0 = time.perf_counter()
        floor = PipeFloor(echo_script)
        floor.call()
        floor_ms.append((time.perf_counter() - t0) * 1000)
        floor.close()

        app = new_app(data_dir)
        host = app.extensions["agenthost"]
        workers = host.service("workers")
        status = workers.status(HELLO_ID)
        assert status is None or status.get("pid") is None, status
        t0 = time.perf_counter()
        workers.invoke(HELLO_ID, "ping", {})
        ours_ms.append((time.perf_counter() - t0) * 1000)
        host.stop()
        rows.append([i + 1, floor_ms[-1], ours_ms[-1]])
    print(f"\n4. cold spawn to first result, {samples} samples alternating (ours: fresh app, worker not "
          "running; includes initialize and tools/list)")
    c.table(["sample", "echo child ms (floor)", "hello via host ms"], rows)
    value = c.median(ours_ms)
    print(f"median: floor {c.median(floor_ms):.1f} ms, hello {value:.1f} ms; target < {TARGET_COLD_MS} ms: "
          f"{c.verdict(value < TARGET_COLD_MS)}")
    return value


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=2000, help="calls per path per round (1; 2 uses twice as many)")
    parser.add_argument("--seconds", type=int, default=3, help="wrk seconds per server per round (3)")
    parser.add_argument("--connections", type=int, default=CONCURRENCY)
    parser.add_argument("--cold", type=int, default=10, help="cold-spawn samples (4)")
    parser.add_argument("--only", default="latency,pipelining,http,cold")
    parser.add_argument("--profile", type=int, default=0, metavar="SECONDS",
                        help="then sample the host with py-spy under HTTP load")
    args = parser.parse_args()
    only = set(args.only.split(","))

    print("machine:", c.machine())
    scratch = tempfile.mkdtemp(prefix="agenthost-perf-invoke-")
    echo_script = os.path.join(scratch, "echo_child.py")
    Path(echo_script).write_text(ECHO_CHILD)
    data_dir = os.path.join(scratch, "data")
    summary = []
    try:
        if only & {"latency", "pipelining", "cold"}:
            app = new_app(data_dir)
            install_in_process(app, zip_folder(HELLO_DIR))
            install_in_process(app, echo_plugin_zip())
            host = app.extensions["agenthost"]
            workers = host.service("workers")
            for plugin_id in (HELLO_ID, ECHO_ID):
                workers.invoke(plugin_id, "ping", {})  # spawns the worker
            floor = PipeFloor(echo_script)
            try:
                if "latency" in only:
                    v = latency(workers, floor, args.rounds, args.calls)
                    summary.append(["in-process invoke, p50 added over raw pipe", f"{v:.0f} us",
                                    f"< {TARGET_ADDED_US} us", c.verdict(v < TARGET_ADDED_US)])
                if "pipelining" in only:
                    # Twice the calls: a throughput over a second or two, not a few stalls' worth.
                    v = pipelining(workers, floor, args.rounds, 2 * args.calls)
                    summary.append([f"{CONCURRENCY} concurrent vs 1-at-a-time", f"{v:.2f}x",
                                    f">= {TARGET_PIPELINE:.0f}x", c.verdict(v >= TARGET_PIPELINE)])
            finally:
                floor.close()
                host.stop()
        if "http" in only:
            v = http(args.rounds, args.seconds, args.connections, scratch, args.profile)
            summary.append(["HTTP invoke vs bare Flask route (req/s)", f"{v:.0%}",
                            f">= {TARGET_HTTP_SHARE:.0%}", c.verdict(v >= TARGET_HTTP_SHARE)])
        if "cold" in only:
            v = cold(data_dir, echo_script, args.cold)
            summary.append(["cold spawn to first result", f"{v:.0f} ms", f"< {TARGET_COLD_MS} ms",
                            c.verdict(v < TARGET_COLD_MS)])
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print("\nsummary (medians)")
    c.table(["measure", "value", "target", "verdict"], summary)
    print("machine:", c.machine())


if __name__ == "__main__":
    if "--floor-server" in sys.argv:
        floor_server()
    else:
        main()
        # Everything is cleaned up by now. Interpreter teardown would free Flask's logging handler
        # after gevent's hub is gone and print a harmless "greenlet is being finalized" traceback.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
