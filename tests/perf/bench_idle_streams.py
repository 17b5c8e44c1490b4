"""Benchmark 3: resident memory of 500 idle notification streams held by one host process.

Our host runs as ``python -m core serve`` on an initialised SQLite data dir; the floor is
``floor_app.py``'s bare SSE stream (a generator waiting on a gevent queue) served the
same way; runs alternate. After a warm-up (a few streams opened and closed, so lazily
imported code is loaded), VmRSS is read from /proc; then 500 streams are opened (on our
host each with its own ticket) and held idle, and VmRSS is read again. Per-stream cost
is the difference over 500; the target is under 40 KB per stream for our host.

    python tests/perf/bench_idle_streams.py [--streams 500] [--repeats 3]
"""
from gevent import monkey

monkey.patch_all()

import argparse  # noqa: E402
import shutil  # noqa: E402

import gevent  # noqa: E402

import _common as c  # noqa: E402
from _streams import Api, Target, open_streams  # noqa: E402

TARGET_KB = 40.0


def settle(host):
    """VmRSS once it stops moving (the host finishes what the last requests started)."""
    last = host.rss_kb()
    for _ in range(20):
        gevent.sleep(0.25)
        now = host.rss_kb()
        if now == last:
            return now
        last = now
    return last


def one_run(server, floor, count):
    with server() as srv:
        target = Target(srv.port, floor)
        if not floor:
            api = Api(srv.port)
            for _ in range(3):
                api.call("GET", "/api/notifications?limit=5")
            api.close()
        for s in open_streams(target, 20):  # warm-up, then closed
            s.close()
        gevent.sleep(0.5)
        idle = settle(srv)
        streams = open_streams(target, count)
        held = settle(srv)
        for s in streams:
            s.close()
    return idle, held


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    print("machine:", c.machine())
    data_dir = c.init_data_dir()
    servers = {"agenthost": (lambda: c.host_server(data_dir), False),
               "bare flask": (c.floor_server, True)}
    rows = []
    try:
        for r in range(args.repeats):
            order = list(servers) if r % 2 == 0 else list(reversed(servers))
            for name in order:
                idle, held = one_run(*servers[name], args.streams)
                rows.append([r + 1, name, idle, held, (held - idle) / args.streams])
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
    rows.sort(key=lambda row: (row[0], row[1]))
    print(f"\n{args.streams} idle notification streams on one server process (VmRSS, KB)")
    c.table(["run", "server", "idle", f"with {args.streams} streams", "KB per stream"], rows)
    cost = {name: c.median([row[4] for row in rows if row[1] == name]) for name in servers}
    print(f"\nper-stream resident memory (median of runs): agenthost {cost['agenthost']:.1f} KB, "
          f"bare flask {cost['bare flask']:.1f} KB "
          f"(ratio {cost['agenthost'] / cost['bare flask']:.2f}); "
          f"target < {TARGET_KB:.0f} KB (agenthost at {cost['agenthost'] / TARGET_KB:.2f} of it): "
          f"{c.verdict(cost['agenthost'] < TARGET_KB)}")


if __name__ == "__main__":
    main()
