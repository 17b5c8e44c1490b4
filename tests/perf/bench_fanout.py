"""Benchmark 2: one ``POST /api/notifications`` fanned out to 200 live stream clients.

Our host runs as ``python -m core serve`` on an initialised SQLite data dir; the floor is
``floor_app.py``'s bare SSE fan-out (no auth, no database, no hooks) served the same way.
Runs alternate between the two. This process holds the 200 streams (raw sockets, one
greenlet each; on our host each stream is opened with its own ticket) and sends the posts.
Latency is from just before the POST is sent to the moment a client's socket hands over
the ``notification`` frame, on one clock. The target is our p99 under 50 ms.

    python tests/perf/bench_fanout.py [--clients 200] [--posts 20] [--repeats 3]
"""
from gevent import monkey

monkey.patch_all()

import argparse  # noqa: E402
import shutil  # noqa: E402
import time  # noqa: E402

import gevent  # noqa: E402

import _common as c  # noqa: E402
from _streams import Api, Target, open_streams  # noqa: E402

TARGET_P99_MS = 50.0


def one_run(server, floor, clients, posts):
    """``clients`` streams on a fresh server, ``posts`` notifications; returns per-post figures."""
    arrivals = {}
    with server() as srv:
        target = Target(srv.port, floor)
        streams = open_streams(target, clients, arrivals)
        for s in streams:
            s.listen()
        api = Api(srv.port)
        results = []
        try:
            for i in range(posts + 1):  # the first post warms the path and is not counted
                t0 = time.perf_counter()
                note_id = target.post(api, f"perf {i}")
                t_post = time.perf_counter() - t0
                deadline = time.monotonic() + 10
                while len(arrivals.get(note_id, ())) < clients:
                    if time.monotonic() > deadline:
                        raise SystemExit(f"post {i}: only {len(arrivals.get(note_id, ()))} of "
                                         f"{clients} clients got notification {note_id}")
                    gevent.sleep(0.001)
                lat = [(t - t0) * 1000 for t in arrivals[note_id]]
                if i:
                    results.append({"post_ms": t_post * 1000, "lat": lat})
                gevent.sleep(0.05)  # let the server go idle between posts
        finally:
            api.close()
            for s in streams:
                s.close()
    return results


def summarise(run, name, results):
    every = [x for res in results for x in res["lat"]]
    return [run, name, len(every), c.median([x["post_ms"] for x in results]),
            c.percentile(every, 50), c.percentile(every, 99), max(every),
            c.median([max(x["lat"]) - min(x["lat"]) for x in results])]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--posts", type=int, default=20)
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
                server, floor = servers[name]
                results = one_run(server, floor, args.clients, args.posts)
                rows.append(summarise(r + 1, name, results))
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
    rows.sort(key=lambda row: (row[0], row[1]))
    print(f"\n{args.clients} stream clients, {args.posts} posts per run; latency = POST sent -> "
          "frame received; spread = first to last client of one post (median over posts)")
    c.table(["run", "server", "deliveries", "POST ms (med)", "p50 ms", "p99 ms", "max ms",
             "spread ms"], rows)
    p99 = {name: c.median([row[5] for row in rows if row[1] == name]) for name in servers}
    print(f"\np99 delivery latency (median of runs): agenthost {p99['agenthost']:.1f} ms, "
          f"bare flask {p99['bare flask']:.1f} ms "
          f"(ratio {p99['agenthost'] / p99['bare flask']:.2f}); "
          f"target < {TARGET_P99_MS:.0f} ms (agenthost at {p99['agenthost'] / TARGET_P99_MS:.2f} "
          f"of it): {c.verdict(p99['agenthost'] < TARGET_P99_MS)}")


if __name__ == "__main__":
    main()
