"""Benchmark: an MCP tool call through the host against the same call made directly with the ``mcp`` SDK.

Our host runs as ``python -m core serve`` on an initialised SQLite data dir; the MCP
server is the tests' FastMCP fixture (``tests/mcp/servers/fixture_server.py``), over
STDIO (the host and the direct client each spawn their own) and over streamable HTTP
(one server on a loopback port that both use). The direct client is a plain asyncio
program (this script with ``--direct``) holding one SDK ``ClientSession``; the host is
called with ``POST /api/mcp/servers/{id}/call`` on a keep-alive connection. Blocks of
calls alternate between the paths so that background load hits them alike.

* Added latency: p50 of ``echo`` through the host minus p50 of ``echo`` direct. Target < 1 ms.
  A third path, the direct program with the host's session class (which keeps one
  compiled validator per output schema, where the SDK re-checks the schema on every
  call), isolates what the REST hop and the bridge cost.
* CPU per call of each process, from ``/proc/<pid>/stat`` (waiting for a core not counted).
* Concurrency: calls/s of ``sleep(0.1)`` (and of ``echo``) with 32 concurrent callers
  against 1. Serialised callers would gain nothing; the target is at least 8x for sleep.

    python tests/perf/bench_mcp.py [--blocks 20] [--block-calls 30] [--concurrent-calls 640]
    python tests/perf/bench_mcp.py --compare-loops [--rounds 5]

``--compare-loops`` measures the two places the asyncio loop could live (issue 6: its
own OS thread, which the host uses; DESIGN 3: a greenlet of the main thread driving
the loop through gevent's selector) in one gevent-patched process against the same
STDIO server: empty round trip, echo p50, 32 concurrent callers of a 100 ms tool, and
the largest stall of a 1 ms ticker greenlet while 32 callers run.
"""
import sys

if "--compare-loops-child" in sys.argv:  # that mode runs patched, like the host
    from gevent import monkey

    monkey.patch_all()

import argparse
import asyncio
import http.client
import json
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as c  # noqa: E402

FIXTURE = str(c.REPO / "tests" / "mcp" / "servers" / "fixture_server.py")
TARGET_ADDED_MS = 1.0
TARGET_SPEEDUP = 8.0
SLEEP = 0.1
CALLERS = 32


# -- the direct client: a plain asyncio program -------------------------------------------------

async def direct_main(transport, url, kept):
    """Serve commands from stdin: ``seq TOOL N`` and ``conc TOOL CALLERS TOTAL``; answer JSON lines.

    ``kept``: use the host's session class (the SDK's, keeping one compiled validator per
    output schema), so that the difference to the host is its REST hop and bridge alone.
    """
    if kept:
        from builtin_plugins.mcp.sessions import _Session as ClientSession
    else:
        from mcp import ClientSession

    async with open_transport(transport, url) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            await session.list_tools()
            loop = asyncio.get_running_loop()
            reader = asyncio.StreamReader()
            await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
            print(json.dumps({"ready": True}), flush=True)
            while line := (await reader.readline()).decode().split():
                if line[0] == "quit":
                    break
                tool, args = line[1], _arguments(line[1])
                if line[0] == "seq":
                    samples = []
                    for _ in range(int(line[2])):
                        t0 = time.perf_counter()
                        result = await session.call_tool(tool, args)
                        samples.append(time.perf_counter() - t0)
                        assert not result.isError
                    print(json.dumps({"samples": samples}), flush=True)
                else:
                    callers, total = int(line[2]), int(line[3])
                    left = [total]

                    async def caller():
                        while left[0] > 0:
                            left[0] -= 1
                            await session.call_tool(tool, args)

                    t0 = time.perf_counter()
                    await asyncio.gather(*(caller() for _ in range(callers)))
                    print(json.dumps({"seconds": time.perf_counter() - t0}), flush=True)


def open_transport(transport, url):
    from mcp import StdioServerParameters
    from mcp.client.stdio import stdio_client
    from mcp.client.streamable_http import streamable_http_client

    if transport == "stdio":
        return stdio_client(StdioServerParameters(command=sys.executable, args=[FIXTURE, "--transport", "stdio"]))
    return _FirstTwo(streamable_http_client(url))


class _FirstTwo:
    """streamable_http_client yields (read, write, get_session_id); the session needs the first two."""

    def __init__(self, cm):
        self.cm = cm

    async def __aenter__(self):
        read, write, _ = await self.cm.__aenter__()
        return read, write

    async def __aexit__(self, *exc):
        return await self.cm.__aexit__(*exc)


def _arguments(tool):
    return {"text": "ping"} if tool == "echo" else {"seconds": SLEEP}


class Direct:
    """The direct asyncio client as a child process, driven one command at a time."""

    def __init__(self, transport, url=None, kept=False):
        argv = [sys.executable, __file__, "--direct", transport, url or "-", "kept" if kept else "sdk"]
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1,
                                     cwd=c.REPO, env=c._env())
        self.pid = self.proc.pid
        assert json.loads(self.proc.stdout.readline())["ready"]

    def ask(self, *words):
        self.proc.stdin.write(" ".join(map(str, words)) + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def sequential(self, tool, n):
        return self.ask("seq", tool, n)["samples"]

    def concurrent(self, tool, callers, total):
        return total / self.ask("conc", tool, callers, total)["seconds"]

    def close(self):
        try:
            self.ask("quit")
        except Exception:
            pass
        self.proc.stdin.close()
        self.proc.wait(10)


# -- the host path ------------------------------------------------------------------------------

class Host:
    """POST /api/mcp/servers/{id}/call over keep-alive connections to ``core serve``."""

    def __init__(self, port, pid, server_id):
        self.port, self.pid, self.path = port, pid, f"/api/mcp/servers/{server_id}/call"
        self.headers = {"X-Service-Token": c.TOKEN, "Content-Type": "application/json"}

    def connection(self):
        conn = http.client.HTTPConnection(c.LOOPBACK, self.port, timeout=60)
        conn.connect()
        conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return conn

    def call(self, conn, tool):
        body = json.dumps({"tool": tool, "arguments": _arguments(tool)})
        conn.request("POST", self.path, body=body, headers=self.headers)
        resp = conn.getresponse()
        data = resp.read()
        if resp.status != 200 or json.loads(data)["isError"]:
            raise SystemExit(f"host call failed: {resp.status} {data[:300]!r}")

    def sequential(self, tool, n):
        conn, samples = self.connection(), []
        for _ in range(n):
            t0 = time.perf_counter()
            self.call(conn, tool)
            samples.append(time.perf_counter() - t0)
        conn.close()
        return samples

    def concurrent(self, tool, callers, total):
        left, lock = [total], threading.Lock()
        conns = [self.connection() for _ in range(callers)]

        def caller(conn):
            while True:
                with lock:
                    if left[0] <= 0:
                        return
                    left[0] -= 1
                self.call(conn, tool)

        threads = [threading.Thread(target=caller, args=(conn,)) for conn in conns]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        seconds = time.perf_counter() - t0
        for conn in conns:
            conn.close()
        return total / seconds


def post_json(port, path, body):
    conn = http.client.HTTPConnection(c.LOOPBACK, port, timeout=60)
    conn.request("POST", path, body=json.dumps(body),
                 headers={"X-Service-Token": c.TOKEN, "Content-Type": "application/json"})
    resp = conn.getresponse()
    data = json.loads(resp.read())
    conn.close()
    return resp.status, data


def start_http_fixture():
    proc = subprocess.Popen([sys.executable, FIXTURE, "--transport", "streamable-http", "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=c.REPO, env=c._env())
    port = int(proc.stdout.readline().strip().split("=", 1)[1])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            conn = http.client.HTTPConnection(c.LOOPBACK, port, timeout=2)
            conn.request("GET", "/stats")
            if conn.getresponse().status == 200:
                break
        except OSError:
            time.sleep(0.1)
    return proc, f"http://{c.LOOPBACK}:{port}/mcp"


# -- where the loop lives ---------------------------------------------------------------------

def compare_loops(rounds):
    """Child mode (gevent-patched): the host's OS-thread bridge against a greenlet-driven loop."""
    import statistics

    import gevent
    from gevent.event import AsyncResult

    from core.asyncio_bridge import async_imports, bridge

    with async_imports():
        from mcp import ClientSession, StdioServerParameters
        from mcp.client.stdio import stdio_client

    greenlet_loop = asyncio.new_event_loop()  # gevent's selector: the loop idles in the hub
    gevent.spawn(greenlet_loop.run_forever)

    def greenlet_run(coro):
        result = AsyncResult()

        def start():
            task = greenlet_loop.create_task(coro)
            task.add_done_callback(lambda t: result.set_exception(t.exception()) if t.exception()
                                   else result.set(t.result()))
        greenlet_loop.call_soon_threadsafe(start)
        return result.get()

    def open_session(run):
        box = {}

        async def opener():
            box["ready"] = asyncio.get_running_loop().create_future()

            async def actor():
                params = StdioServerParameters(command=sys.executable, args=[FIXTURE, "--transport", "stdio"])
                async with stdio_client(params) as (read, write):
                    async with ClientSession(read, write) as session:
                        await session.initialize()
                        box["session"] = session
                        box["ready"].set_result(True)
                        await asyncio.Event().wait()
            box["task"] = asyncio.ensure_future(actor())
            await box["ready"]
        run(opener())
        return box["session"]

    models = {"OS thread (host)": bridge().run, "greenlet loop": greenlet_run}
    sessions = {name: open_session(run) for name, run in models.items()}

    async def empty():
        return None

    def p50_ms(fn, n):
        samples = []
        for _ in range(n):
            t0 = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - t0)
        return statistics.median(samples) * 1000

    figures = {name: {"rtt": [], "echo": []} for name in models}
    for _ in range(rounds):
        for name, run in models.items():
            session = sessions[name]
            figures[name]["rtt"].append(p50_ms(lambda: run(empty()), 500))
            figures[name]["echo"].append(p50_ms(lambda: run(session.call_tool("echo", {"text": "x"})), 200))
    for name, run in models.items():
        session = sessions[name]
        t0 = time.perf_counter()
        callers = [gevent.spawn(lambda: [run(session.call_tool("sleep", {"seconds": 0.1})) for _ in range(5)])
                   for _ in range(CALLERS)]
        gevent.joinall(callers)
        figures[name]["sleep"] = CALLERS * 5 / (time.perf_counter() - t0)
        gaps, stop = [], []

        def ticker():
            last = time.perf_counter()
            while not stop:
                gevent.sleep(0.001)
                now = time.perf_counter()
                gaps.append(now - last)
                last = now
        tick = gevent.spawn(ticker)
        callers = [gevent.spawn(lambda: [run(session.call_tool("echo", {"text": "x"})) for _ in range(20)])
                   for _ in range(CALLERS)]
        gevent.joinall(callers)
        stop.append(True)
        tick.join()
        figures[name]["stall"] = max(gaps) * 1000
    print(json.dumps(figures), flush=True)
    import os
    os._exit(0)  # the sessions' child processes die with their pipes


def print_loop_comparison(rounds):
    print("machine:", c.machine())
    out = subprocess.run([sys.executable, __file__, "--compare-loops-child", "--rounds", str(rounds)],
                         capture_output=True, text=True, cwd=c.REPO, env=c._env(), timeout=600)
    line = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else ""
    if not line.startswith("{"):
        raise SystemExit("comparison failed:\n" + out.stdout + out.stderr)
    figures = json.loads(line)
    print(f"\nWhere the asyncio loop lives, {rounds} rounds (per-round p50s), same STDIO server")
    c.table(["loop", "empty round trip ms", "echo p50 ms", f"sleep(0.1) x{CALLERS} calls/s",
             "largest 1 ms-ticker stall ms"],
            [[name, " ".join(f"{x:.3f}" for x in f["rtt"]), " ".join(f"{x:.2f}" for x in f["echo"]),
              f["sleep"], f["stall"]] for name, f in figures.items()])


# -- the run ------------------------------------------------------------------------------------

def measure(label, host, direct, kept, args):
    paths = {"host": host, "direct": direct, "kept": kept}
    for _ in range(2):  # warm every path (imports, pools, caches)
        for path in paths.values():
            path.sequential("echo", 50)
    samples = {name: [] for name in paths}
    diffs = {"direct": [], "kept": []}
    # Each process idles while the other paths run, so its CPU time over all blocks is its
    # cost for its own calls (read once: /proc counts in 10 ms ticks).
    start = {name: c.cpu_seconds(path.pid) for name, path in paths.items()}
    # Short alternating blocks: load that comes and goes hits every path alike.
    for _ in range(args.blocks):
        block = {name: path.sequential("echo", args.block_calls) for name, path in paths.items()}
        for name in paths:
            samples[name] += block[name]
        for name in diffs:
            diffs[name].append(c.median(block["host"]) - c.median(block[name]))
    calls = len(samples["host"])
    cpu = {name: (c.cpu_seconds(path.pid) - start[name]) / calls * 1e6 for name, path in paths.items()}
    throughput = {}
    for tool, total in (("sleep", CALLERS * 5), ("echo", args.concurrent_calls)):
        for callers in (1, CALLERS):
            n = total if callers > 1 else max(10, total // 16)
            throughput[("host", tool, callers)] = host.concurrent(tool, callers, n)
            throughput[("direct", tool, callers)] = direct.concurrent(tool, callers, n)
    return {
        "label": label, "samples": samples, "cpu_us": cpu, "throughput": throughput,
        "added_ms": {name: (c.median(samples["host"]) - c.median(samples[name])) * 1000 for name in diffs},
        "block_diff_ms": {name: c.median(d) * 1000 for name, d in diffs.items()},
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=20, help="alternating blocks per path")
    parser.add_argument("--block-calls", type=int, default=30, help="sequential calls per block")
    parser.add_argument("--concurrent-calls", type=int, default=640, help="calls per concurrency run (echo)")
    parser.add_argument("--compare-loops", action="store_true", help="compare the two places the loop could live")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of --compare-loops")
    parser.add_argument("--direct", nargs="+", help=argparse.SUPPRESS)
    parser.add_argument("--compare-loops-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.compare_loops_child:
        compare_loops(args.rounds)
        return
    if args.compare_loops:
        print_loop_comparison(args.rounds)
        return
    if args.direct:
        transport, url, mode = args.direct
        asyncio.run(direct_main(transport, None if url == "-" else url, mode == "kept"))
        return

    print("machine:", c.machine())
    data_dir = c.init_data_dir()
    http_proc, url = start_http_fixture()
    results = []
    try:
        with c.host_server(data_dir) as server:
            for transport, definition in (
                    ("STDIO", {"name": "bench-stdio", "transport": "STDIO", "command": sys.executable,
                               "args": [FIXTURE, "--transport", "stdio"]}),
                    ("STREAMABLE_HTTP", {"name": "bench-http", "transport": "STREAMABLE_HTTP", "url": url})):
                status, created = post_json(server.port, "/api/mcp/servers", definition)
                if status != 201 or created["state"] != "connected":
                    raise SystemExit(f"could not add the {transport} server: {created}")
                kind, where = ("stdio", None) if transport == "STDIO" else ("http", url)
                direct, kept = Direct(kind, where), Direct(kind, where, kept=True)
                try:
                    results.append(measure(transport, Host(server.port, server.pid, created["id"]), direct, kept,
                                           args))
                finally:
                    direct.close()
                    kept.close()
    finally:
        http_proc.kill()
        http_proc.wait()
        shutil.rmtree(data_dir, ignore_errors=True)

    names = {"host": "POST .../call", "direct": "SDK direct", "kept": "SDK direct, validator kept"}
    print(f"\nLatency of one trivial call (echo), {args.blocks} alternating blocks x {args.block_calls} calls per path")
    rows = []
    for r in results:
        for name, title in names.items():
            s = r["samples"][name]
            rows.append([r["label"], title, len(s), c.percentile(s, 50) * 1000, c.percentile(s, 90) * 1000,
                         c.percentile(s, 99) * 1000])
    c.table(["transport", "path", "calls", "p50 ms", "p90 ms", "p99 ms"], rows)

    print("\nAdded latency of the host at p50 (host p50 - direct p50; and the median of the blocks' differences)")
    c.table(["transport", "against", "added p50 ms", "median block diff ms", "target", "verdict"],
            [[r["label"], names[name], r["added_ms"][name], r["block_diff_ms"][name], f"< {TARGET_ADDED_MS:g}",
              c.verdict(r["added_ms"][name] < TARGET_ADDED_MS)] for r in results for name in ("direct", "kept")])

    print("\nCPU time per call (utime+stime from /proc; waiting for a core is not counted)")
    c.table(["transport", "host process µs", "SDK direct µs", "validator kept µs", "host - kept µs"],
            [[r["label"], r["cpu_us"]["host"], r["cpu_us"]["direct"], r["cpu_us"]["kept"],
              r["cpu_us"]["host"] - r["cpu_us"]["kept"]] for r in results])

    print(f"\nThroughput, 1 caller vs {CALLERS} concurrent callers (sleep = a tool that awaits {SLEEP * 1000:g} ms)")
    rows = []
    for r in results:
        for path in ("host", "direct"):
            for tool in ("sleep", "echo"):
                one = r["throughput"][(path, tool, 1)]
                many = r["throughput"][(path, tool, CALLERS)]
                ok = many / one >= TARGET_SPEEDUP if tool == "sleep" else True
                rows.append([r["label"], path, tool, one, many, many / one,
                             c.verdict(ok) if tool == "sleep" else "-"])
    c.table(["transport", "path", "tool", "calls/s x1", f"calls/s x{CALLERS}", "speedup", "verdict"], rows)


if __name__ == "__main__":
    main()
