"""Benchmark 1: authenticated ``GET /api/settings`` vs a bare Flask JSON app, 50 connections.

Both servers run side by side as their own subprocesses (ours via ``python -m core serve``
on an initialised SQLite data dir, the floor via ``floor_app.py``); ``wrk`` drives them in
alternating rounds so that background load hits both alike. Overhead is the extra time
per request over the floor: ``floor_rps / our_rps - 1``; the target is under 25 %.
The server's CPU time per request (from /proc) is shown beside it: on a shared machine
it moves far less than throughput, since time the server spends waiting for a core
is not counted.

    python tests/perf/bench_settings.py [--rounds 10] [--seconds 3] [--connections 50]
                                        [--profile SECONDS]

``--profile`` then samples our host with py-spy (``pip install py-spy``) under the same
load and prints where its time goes.
"""
import argparse
import collections
import json
import os
import shutil
import subprocess
import sys
import tempfile

import _common as c

TARGET_OVERHEAD = 0.25

# wrk's own summary, as one JSON line, so nothing depends on its human-readable output.
LUA = r"""
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRKJSON {"requests":%d,"duration_us":%d,"p50_us":%d,"p99_us":%d,"max_us":%d,' ..
    '"non2xx":%d,"socket_errors":%d}\n',
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99),
    latency.max, e.status, e.connect + e.read + e.write + e.timeout))
end
"""


def run_wrk(url, seconds, connections, headers, script, pid=None):
    # One wrk thread is plenty for a single-core gevent server; the other core stays for the server.
    argv = ["wrk", "-t", "1", "-c", str(connections), "-d", f"{seconds}s", "--timeout", "10s",
            "-s", script]
    for name, value in headers.items():
        argv += ["-H", f"{name}: {value}"]
    cpu0 = c.cpu_seconds(pid) if pid else None
    out = subprocess.run(argv + [url], capture_output=True, text=True, check=True,
                         timeout=seconds + 30).stdout
    cpu = c.cpu_seconds(pid) - cpu0 if pid else None
    line = next(ln for ln in out.splitlines() if ln.startswith("WRKJSON "))
    result = json.loads(line[len("WRKJSON "):])
    if result["non2xx"]:
        raise SystemExit(f"{url}: {result['non2xx']} non-2xx responses:\n{out}")
    result["rps"] = result["requests"] / (result["duration_us"] / 1e6)
    result["cpu_us"] = cpu / result["requests"] * 1e6 if pid else None
    return result


def _frame_name(frame):
    """``func (path/in/package.py`` from py-spy's ``func (/abs/site-packages/path.py:line)``."""
    func, _, where = frame.partition(" (")
    return f"{func} ({where.split(':')[0].split('site-packages/')[-1]}"


def profile(server, url, headers, seconds, connections, script):
    """Sample the host with py-spy while wrk loads it; print inclusive and self shares."""
    if not shutil.which("py-spy"):
        sys.exit("--profile needs py-spy: pip install py-spy")
    out = tempfile.mktemp(suffix=".txt")
    spy = subprocess.Popen(["py-spy", "record", "-p", str(server.pid), "-d", str(seconds),
                            "-r", "200", "-f", "raw", "-o", out],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    run_wrk(url, seconds, connections, headers, script)
    spy.wait()
    inclusive, own, total = collections.Counter(), collections.Counter(), 0
    with open(out) as fh:
        for line in fh:
            stack, count = line.rsplit(" ", 1)
            frames = [_frame_name(f) for f in stack.split(";")]
            count = int(count)
            total += count
            own[frames[-1]] += count
            for frame in set(frames):
                inclusive[frame] += count
    os.unlink(out)
    print(f"\npy-spy, {total} samples of the host under load (share of all samples)")
    ours = [(f, n) for f, n in inclusive.most_common()
            if "core/" in f or "builtin_plugins/" in f][:15]
    c.table(["our function (inclusive)", "share"], [[f, f"{n / total:.1%}"] for f, n in ours])
    print()
    c.table(["function (self)", "share"],
            [[f, f"{n / total:.1%}"] for f, n in own.most_common(15)])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # Many short alternating rounds: on a shared machine background load comes and goes,
    # and the median of per-round ratios is what survives it.
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--seconds", type=int, default=3)
    parser.add_argument("--connections", type=int, default=50)
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
        with c.host_server(data_dir) as ours, c.floor_server() as floor:
            targets = {
                "agenthost": (f"http://{c.LOOPBACK}:{ours.port}/api/settings",
                              {"X-Service-Token": c.TOKEN}),
                "bare flask": (f"http://{c.LOOPBACK}:{floor.port}/hello", {}),
            }
            pids = {"agenthost": ours.pid, "bare flask": floor.pid}
            for url, headers in targets.values():  # warm-up: imports, caches, pool
                run_wrk(url, 2, args.connections, headers, script)
            rows, ratios, cpu_ratios = [], [], []
            for i in range(args.rounds):
                order = list(targets) if i % 2 == 0 else list(reversed(targets))
                got = {name: run_wrk(targets[name][0], args.seconds, args.connections,
                                     targets[name][1], script, pids[name])
                       for name in order}
                ratios.append(got["bare flask"]["rps"] / got["agenthost"]["rps"] - 1)
                cpu_ratios.append(got["agenthost"]["cpu_us"] / got["bare flask"]["cpu_us"] - 1)
                for name in targets:
                    r = got[name]
                    rows.append([i + 1, name, round(r["rps"]), r["cpu_us"], r["p50_us"] / 1000,
                                 r["p99_us"] / 1000, r["max_us"] / 1000, r["socket_errors"]])
            print(f"\n{args.connections} keep-alive connections, {args.rounds} x {args.seconds} s "
                  "per server, alternating")
            c.table(["round", "server", "req/s", "CPU us/req", "p50 ms", "p99 ms", "max ms",
                     "sock err"], rows)
            med = {name: c.median([r[2] for r in rows if r[1] == name]) for name in targets}
            cpu = {name: c.median([r[3] for r in rows if r[1] == name]) for name in targets}
            p99 = {name: c.median([r[5] for r in rows if r[1] == name]) for name in targets}
            overhead = c.median(ratios)
            cpu_overhead = c.median(cpu_ratios)
            print()
            c.table(["metric", "agenthost", "bare flask", "ratio"], [
                ["median req/s", round(med["agenthost"]), round(med["bare flask"]),
                 med["agenthost"] / med["bare flask"]],
                ["median CPU us/req", cpu["agenthost"], cpu["bare flask"],
                 cpu["agenthost"] / cpu["bare flask"]],
                ["median p99 ms", p99["agenthost"], p99["bare flask"],
                 p99["agenthost"] / p99["bare flask"]],
            ])
            print(f"\noverhead per request over the floor, median of per-round ratios: "
                  f"throughput {overhead:.1%}, CPU time {cpu_overhead:.1%}; "
                  f"target < {TARGET_OVERHEAD:.0%}: {c.verdict(overhead < TARGET_OVERHEAD)}")
            if args.profile:
                profile(ours, *targets["agenthost"], args.profile, args.connections, script)
    finally:
        os.unlink(script)
        shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
