"""Benchmark: webhook delivery admission on the embedded default, 50 concurrent clients.

A real ``python -m core serve`` on an initialised SQLite data directory (the embedded
default) gets a published one-step workflow and a webhook trigger; ``wrk`` then posts
deliveries over 50 keep-alive connections in two modes:

- ``unique``: every request carries a new ``X-Service-Event-Id`` (the claim row, the run
  row and the task are written in one transaction);
- ``duplicate``: every request repeats one already-admitted event id (the 200 path).

A delivery counts as admitted when it answers 202 (new event) or 200 (duplicate). 429s
(the background queue is full) are counted separately and are not admissions. The target
is at least 500 admitted deliveries/s on the 2-core machine.

Sustained unique admissions can only go as fast as the host runs the admitted workflow
runs: the owner's share of queued non-interactive tasks is 24, so once 24 wait every
further delivery gets 429 until one starts. The ``burst`` figure shows the admission
path's own rate: 24 new events sent at once onto an empty queue, timed from the first
request to the last answer.

    python tests/perf/bench_webhooks.py [--rounds 3] [--seconds 5] [--connections 50]
                                        [--bursts 20] [--profile SECONDS]

``--profile`` samples the host with py-spy under the unique-id load and prints where
its time goes.
"""
import argparse
import collections
import http.client
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

import _common as c

TARGET = 500
BURST = 24  # the owner's share of queued non-interactive tasks: the most one burst can admit

# Each request gets a fresh event id (unique mode) or the one fixed id (duplicate mode);
# the response callback counts statuses, and done() prints them as one JSON line.
LUA = r"""
local counter = 0
local threads = {}
statuses = {}  -- a global: done() reads it through thread:get
local mode = os.getenv("BENCH_MODE")
local prefix = os.getenv("BENCH_PREFIX")
local secret = os.getenv("BENCH_SECRET")
local body = '{"n": 1}'

function setup(thread)
  table.insert(threads, thread)
end

function init(args)
  statuses = {}
end

function request()
  counter = counter + 1
  local event = mode == "duplicate" and (prefix .. "-dup") or (prefix .. "-" .. counter)
  return wrk.format("POST", nil, {
    ["Content-Type"] = "application/json",
    ["X-Service-Webhook-Secret"] = secret,
    ["X-Service-Event-Id"] = event,
  }, body)
end

function response(status, headers, body)
  statuses[status] = (statuses[status] or 0) + 1
end

done = function(summary, latency, requests)
  local merged = {}
  for _, thread in ipairs(threads) do
    local s = thread:get("statuses")
    for code, n in pairs(s) do
      merged[tostring(code)] = (merged[tostring(code)] or 0) + n
    end
  end
  local parts = {}
  for code, n in pairs(merged) do
    table.insert(parts, string.format('"%s":%d', code, n))
  end
  io.write(string.format(
    'WRKJSON {"requests":%d,"duration_us":%d,"p50_us":%d,"p99_us":%d,"max_us":%d,' ..
    '"socket_errors":%d,"statuses":{%s}}\n',
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99),
    latency.max, summary.errors.connect + summary.errors.read + summary.errors.write +
    summary.errors.timeout, table.concat(parts, ",")))
end
"""

WORKFLOW = {
    "name": "Bench hook",
    "inputSchema": {"type": "object", "properties": {"n": {"type": "integer"}}},
    "plan": {"goal": "bench", "steps": [
        {"id": "pick", "tool": "json_extract", "arguments": {"value": {"n": "{{inputs.n}}"}, "path": "n"}}]},
}


def call(base, method, path, body=None):
    req = urllib.request.Request(base + path, method=method, data=json.dumps(body).encode() if body else None,
                                 headers={"X-Service-Token": c.TOKEN, "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())


def prepare(base):
    """A published workflow and a trigger on it; returns (hook URL, secret)."""
    wf = call(base, "POST", "/api/workflows", WORKFLOW)
    call(base, "POST", f"/api/workflows/{wf['id']}/publish", {"published": True})
    trigger = call(base, "POST", "/api/agent/webhook-triggers", {"workflowId": wf["id"]})
    return base + trigger["hookPath"], trigger["secret"]


def run_wrk(url, seconds, connections, script, mode, prefix, secret):
    # One wrk thread is enough for a gevent server on one core; the other core stays with the host.
    argv = ["wrk", "-t", "1", "-c", str(connections), "-d", f"{seconds}s", "--timeout", "10s",
            "-s", script, url]
    env = {**os.environ, "BENCH_MODE": mode, "BENCH_PREFIX": prefix, "BENCH_SECRET": secret}
    out = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=seconds + 60, env=env).stdout
    line = next(ln for ln in out.splitlines() if ln.startswith("WRKJSON "))
    result = json.loads(line[len("WRKJSON "):])
    seconds_run = result["duration_us"] / 1e6
    statuses = collections.Counter({int(k): v for k, v in result["statuses"].items()})
    admitted = statuses[202] + statuses[200]
    result.update(seconds=seconds_run, statuses=statuses, admitted=admitted, admitted_rps=admitted / seconds_run,
                  rps=result["requests"] / seconds_run)
    return result


def burst(url, secret, n, prefix):
    """``n`` new events sent at once on ``n`` open connections; returns (seconds, status counts).

    The clock runs from the first request sent to the last answer read, so this is the
    admission path's own rate while the queue still has room (n = the owner's share).
    """
    parsed = urllib.parse.urlsplit(url)
    conns = [http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=30) for _ in range(n)]
    for conn in conns:
        conn.connect()
    body = b'{"n": 1}'
    t0 = time.perf_counter()
    for i, conn in enumerate(conns):
        conn.request("POST", parsed.path, body=body, headers={
            "Content-Type": "application/json", "X-Service-Webhook-Secret": secret,
            "X-Service-Event-Id": f"{prefix}-{i}"})
    statuses = collections.Counter()
    for conn in conns:
        resp = conn.getresponse()
        resp.read()
        statuses[resp.status] += 1
    seconds = time.perf_counter() - t0
    for conn in conns:
        conn.close()
    return seconds, statuses


def drain(base, timeout=60):
    """Wait until the background queue is empty, so every round starts alike."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        cap = call(base, "GET", "/api/agent/tasks/capacity")
        if cap["queued"] == 0 and cap["running"] == 0:
            return
        time.sleep(0.1)
    raise RuntimeError("the task queue did not drain")


def profile(server, url, seconds, connections, script, secret):
    if not shutil.which("py-spy"):
        sys.exit("--profile needs py-spy: pip install py-spy")
    out = tempfile.mktemp(suffix=".txt")
    spy = subprocess.Popen(["py-spy", "record", "-p", str(server.pid), "-d", str(seconds), "-r", "200",
                            "-f", "raw", "-o", out], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    run_wrk(url, seconds, connections, script, "unique", "profile", secret)
    spy.wait()
    inclusive, own, total = collections.Counter(), collections.Counter(), 0
    with open(out) as fh:
        for line in fh:
            stack, count = line.rsplit(" ", 1)
            frames = [f.split(" (")[0] + " (" + f.split(" (")[-1].split(":")[0].split("site-packages/")[-1]
                      for f in stack.split(";")]
            count = int(count)
            total += count
            own[frames[-1]] += count
            for frame in set(frames):
                inclusive[frame] += count
    os.unlink(out)
    print(f"\npy-spy, {total} samples of the host under the unique-id load (share of all samples)")
    c.table(["function (inclusive)", "share"],
            [[f, f"{n / total:.1%}"] for f, n in inclusive.most_common(40)
             if "core/" in f or "builtin_plugins/" in f or "sqlalchemy" in f or "sqlite" in f
             or "gevent" in f][:40])
    print()
    c.table(["function (self)", "share"], [[f, f"{n / total:.1%}"] for f, n in own.most_common(20)])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--connections", type=int, default=50)
    parser.add_argument("--bursts", type=int, default=20)
    parser.add_argument("--profile", type=int, default=0, metavar="SECONDS")
    args = parser.parse_args()
    if not shutil.which("wrk"):
        sys.exit("wrk is required: apt-get install -y wrk")

    print("machine:", c.machine())
    data_dir = c.init_data_dir()
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as fh:
        fh.write(LUA)
        script = fh.name
    try:
        with c.host_server(data_dir) as host:
            base = f"http://{c.LOOPBACK}:{host.port}"
            url, secret = prepare(base)
            run_wrk(url, 2, args.connections, script, "unique", "warm", secret)  # imports, caches, pool
            drain(base)
            # The duplicate mode repeats one event id that is admitted before the clock starts.
            run_wrk(url, 1, 1, script, "duplicate", "dup", secret)
            drain(base)
            rows = []
            summary = collections.defaultdict(list)
            for i in range(args.rounds):
                for mode in ("unique", "duplicate"):
                    cpu0 = c.cpu_seconds(host.pid)
                    r = run_wrk(url, args.seconds, args.connections, script, mode, f"r{i}", secret)
                    drain(base)  # the admitted runs' CPU counts too
                    cpu_ms = (c.cpu_seconds(host.pid) - cpu0) * 1000 / max(1, r["admitted"])
                    other = sum(n for code, n in r["statuses"].items() if code not in (200, 202, 429))
                    rows.append([i + 1, mode, round(r["rps"]), round(r["admitted_rps"]), r["statuses"][202],
                                 r["statuses"][200], r["statuses"][429], other, r["p50_us"] / 1000,
                                 r["p99_us"] / 1000, r["socket_errors"], round(cpu_ms, 2)])
                    summary[mode].append(r["admitted_rps"])
            rates, burst_codes = [], collections.Counter()
            for i in range(args.bursts):
                seconds, codes = burst(url, secret, BURST, f"b{i}")
                burst_codes.update(codes)
                rates.append(codes[202] / seconds)
                drain(base)
            print(f"\n{args.connections} concurrent clients (keep-alive), {args.rounds} x {args.seconds} s per mode")
            c.table(["round", "mode", "req/s", "admitted/s", "202", "200", "429", "other", "p50 ms", "p99 ms",
                     "sock err", "host CPU ms/admitted"], rows)
            print(f"\nbursts: {args.bursts} x {BURST} new events at once on an empty queue "
                  f"(statuses {dict(burst_codes)}): median {c.median(rates):.0f} admitted/s, "
                  f"min {min(rates):.0f}, max {max(rates):.0f}")
            print()
            for mode in ("unique", "duplicate"):
                med = c.median(summary[mode])
                print(f"{mode:9s}: median {med:.0f} admitted deliveries/s; target >= {TARGET}: "
                      f"{c.verdict(med >= TARGET)}")
            if args.profile:
                profile(host, url, args.profile, args.connections, script, secret)
    finally:
        os.unlink(script)
        shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
