"""Benchmark 4: start-up time, from process spawn to the ``SERVICE_PORT`` line.

Our host is ``python -m core serve`` on the embedded SQLite default after ``core init``.
Side by side, alternating, the floors: the bare Flask server of ``floor_app.py`` (same
launcher socket, same announcement), the imports alone (``gevent`` patched, ``flask``
and ``gevent.pywsgi`` imported), and the bare interpreter. Then one run of the real
steps timed one by one and the heaviest imports (``python -X importtime``) show where
the time goes. The target is our median under 1.5 s.

    python tests/perf/bench_startup.py [--runs 10]
"""
import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile

import _common as c

TARGET_S = 1.5

IMPORTS_FLOOR = ("from gevent import monkey; monkey.patch_all(); import flask, gevent.pywsgi; "
                 "print('SERVICE_PORT=0', flush=True)")


def candidates(data_dir):
    return {
        "agenthost (core serve)": lambda: c.host_server(data_dir),
        "bare flask server": c.floor_server,
        "imports: gevent+flask": lambda: c.Server([sys.executable, "-c", IMPORTS_FLOOR], "imports"),
        "python -c pass": lambda: c.Server(
            [sys.executable, "-c", "print('SERVICE_PORT=0', flush=True)"], "python"),
    }


# What the host cannot start without; each heavy optional import is timed on top of this.
IMPORT_BASE = ("from gevent import monkey; monkey.patch_all(); "
               "import flask, sqlalchemy.orm, marshmallow, pluggy")
HEAVY_IMPORTS = ("mcp", "alembic.runtime.environment", "requests", "jsonschema")


def extra_import_cost(runs):
    """Seconds each heavy import adds over IMPORT_BASE (fresh interpreters, interleaved).

    Fastest run of each, not the median: a busy machine only ever adds time, and the
    difference of two medians of noisy runs can even come out negative.
    """
    def spawn(extra):
        code = IMPORT_BASE + (f"; import {extra}" if extra else "") + \
            "; print('SERVICE_PORT=0', flush=True)"
        with c.Server([sys.executable, "-c", code], extra or "base") as proc:
            return proc.startup_seconds

    names = [None, *HEAVY_IMPORTS]
    times = {name: [] for name in names}
    for i in range(runs):
        for name in (names if i % 2 == 0 else list(reversed(names))):
            times[name].append(spawn(name))
    base = min(times[None])
    return base, [(name, min(times[name]) - base) for name in HEAVY_IMPORTS]


def import_profile(data_dir, top=15):
    """Import time of ``core serve`` per distribution root (self times summed, one run)."""
    argv = [sys.executable, "-X", "importtime", "-m", "core", "serve", "--port", "0",
            "--token", c.TOKEN, "--data-dir", data_dir]
    # stderr to a file: importtime writes more than a pipe holds before the port line.
    with tempfile.TemporaryFile("w+") as log:
        proc = subprocess.Popen(argv, cwd=c.REPO, env=c._env(), stdout=subprocess.PIPE,
                                stderr=log, text=True)
        c.wait_for_port(proc, 30)
        proc.terminate()
        proc.wait(timeout=15)
        log.seek(0)
        err = log.read()
    totals = {}
    for line in err.splitlines():
        m = re.match(r"import time:\s+(\d+) \|\s+(\d+) \| *(\S+)", line)
        if m:
            # Self times add up without double counting; nested imports land on their own root.
            root = m.group(3).split(".")[0]
            totals[root] = totals.get(root, 0) + int(m.group(1))
    return sorted(totals.items(), key=lambda kv: -kv[1])[:top]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()

    print("machine:", c.machine())
    data_dir = c.init_data_dir()
    try:
        spawn = candidates(data_dir)
        times = {name: [] for name in spawn}
        for i in range(args.runs):
            names = list(spawn) if i % 2 == 0 else list(reversed(spawn))
            for name in names:
                with spawn[name]() as server:
                    times[name].append(server.startup_seconds)
        print(f"\nspawn -> SERVICE_PORT line, {args.runs} runs each, alternating (seconds)")
        ours = c.median(times["agenthost (core serve)"])
        c.table(["process", "median", "min", "max", "ours minus this"],
                [[name, c.median(v), min(v), max(v), ours - c.median(v)]
                 for name, v in times.items()])

        out = subprocess.run([sys.executable, str(c.PERF / "_startup_phases.py"), data_dir],
                             cwd=c.REPO, env=c._env(), capture_output=True, text=True, check=True)
        marks = json.loads(out.stdout.strip().splitlines()[-1])
        print("\nwhere the time goes: serve's steps timed in one process (seconds)")
        c.table(["step", "seconds"], [[name, secs] for name, secs in marks])

        out = subprocess.run([sys.executable, str(c.PERF / "_startup_phases.py"), data_dir,
                              "--profile-boot"],
                             cwd=c.REPO, env=c._env(), capture_output=True, text=True, check=True)
        parts = json.loads(out.stdout.strip().splitlines()[-1])
        print("\nhost.boot's parts under cProfile (cumulative seconds; cProfile inflates them)")
        c.table(["part", "seconds"], [[name, secs] for name, secs in parts])

        base, extra = extra_import_cost(max(3, args.runs // 2))
        print(f"\nwhat single imports add on top of gevent+flask+sqlalchemy+marshmallow+pluggy "
              f"({base:.3f} s), fastest of fresh interpreters (seconds)")
        c.table(["import", "adds"], extra)

        print("\nheaviest packages imported by `core serve` (python -X importtime, self ms summed "
              "per top-level package; importtime itself inflates these)")
        c.table(["package", "ms"], [[name, us / 1000] for name, us in import_profile(data_dir)])
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
    print(f"\nstart-up to SERVICE_PORT (median): {ours:.3f} s; target < {TARGET_S} s "
          f"(ratio {ours / TARGET_S:.2f}): {c.verdict(ours < TARGET_S)}")


if __name__ == "__main__":
    main()
