"""Benchmark: an MCP tool call through the host against the same call made directly with the ``mcp`` SDK.

Our host runs as ``python -m core serve`` on an initialised SQLite data dir; the MCP
server is the tests' FastMCP fixture (``tests/mcp/servers/fixture_server.py``), over
STDIO (the host and the direct client each spawn their own) and over streamable HTTP
(one server on a loopback port that both use). The direct client is a plain asyncio
program (this script with ``--direct``) holding one SDK ``ClientSession``; the host is
called with ``POST /api/mcp/servers/{id}/call`` on a keep-alive connection. Rounds
alternate between the two so that background load hits both alike.

* Added latency: p50 of ``echo`` through the host minus p50 of ``echo`` direct. Target < 1 ms.
* Concurrency: calls/s of ``sleep(0.02)`` (and of ``echo``) with 32 concurrent callers
  against 1. Serialised callers would gain nothing; the target is at least 8x for sleep.

    python tests/perf/bench_mcp.py [--blocks 20] [--block-calls 30] [--concurrent-calls 640]
"""
import argparse
import asyncio
import http.client
import json
import shutil
import socket
import subprocess
import sys
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

async def direct_main(transport, url):
    """Serve commands from stdin: ``seq TOOL N`` and ``conc TOOL CALLERS TOTAL``; answer JSON lines."""
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

    def __init__(self, transport, url=None):
        argv = [sys.executable, __file__, "--direct", transport] + ([url] if url else [])
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1,
                                     cwd=c.REPO, env=c._env())
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


# -- the run ------------------------------------------------------------------------------------

def measure(label, host, direct, args):
    for _ in range(2):  # warm both paths (imports, pools, caches)
        host.sequential("echo", 50)
        direct.sequential("echo", 50)
    ours, theirs, diffs = [], [], []
    # Each process idles while the other path runs, so its CPU time over all blocks is its
    # cost for its own calls (read once: /proc counts in 10 ms ticks).
    start = {"host": c.cpu_seconds(host.pid), "direct": c.cpu_seconds(direct.proc.pid)}
    # Short alternating blocks: load that comes and goes hits both paths alike.
    for _ in range(args.blocks):
        a = host.sequential("echo", args.block_calls)
        b = direct.sequential("echo", args.block_calls)
        ours += a
        theirs += b
        diffs.append(c.median(a) - c.median(b))
    cpu = {"host": c.cpu_seconds(host.pid) - start["host"],
           "direct": c.cpu_seconds(direct.proc.pid) - start["direct"]}
    throughput = {}
    for tool, total in (("sleep", CALLERS * 5), ("echo", args.concurrent_calls)):
        for callers in (1, CALLERS):
            n = total if callers > 1 else max(10, total // 16)
            throughput[("host", tool, callers)] = host.concurrent(tool, callers, n)
            throughput[("direct", tool, callers)] = direct.concurrent(tool, callers, n)
    return {
        "label": label,
        "host": ours, "direct": theirs,
        "added_p50_ms": (c.median(ours) - c.median(theirs)) * 1000,
        "block_diff_ms": c.median(diffs) * 1000,
        "cpu_us": {path: cpu[path] / len(ours) * 1e6 for path in cpu},
        "throughput": throughput,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=20, help="alternating blocks per path")
    parser.add_argument("--block-calls", type=int, default=30, help="sequential calls per block")
    parser.add_argument("--concurrent-calls", type=int, default=640, help="calls per concurrency run (echo)")
    parser.add_argument("--direct", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.direct:
        asyncio.run(direct_main(args.direct[0], args.direct[1] if len(args.direct) > 1 else None))
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
                direct = Direct("stdio" if transport == "STDIO" else "http", None if transport == "STDIO" else url)
                try:
                    results.append(measure(transport, Host(server.port, server.pid, created["id"]), direct, args))
                finally:
                    direct.close()
    finally:
        http_proc.kill()
        http_proc.wait()
        shutil.rmtree(data_dir, ignore_errors=True)

    print(f"\nLatency of one trivial call (echo), {args.blocks} alternating blocks x {args.block_calls} calls per path")
    rows = []
    for r in results:
        for path in ("host", "direct"):
            s = r[path]
            rows.append([r["label"], "POST .../call" if path == "host" else "SDK direct", len(s),
                         c.percentile(s, 50) * 1000, c.percentile(s, 90) * 1000, c.percentile(s, 99) * 1000])
    c.table(["transport", "path", "calls", "p50 ms", "p90 ms", "p99 ms"], rows)

    print("\nAdded latency of the host at p50 (host p50 - direct p50; and the median of the blocks' differences)")
    c.table(["transport", "added p50 ms", "median block diff ms", "target", "verdict"],
            [[r["label"], r["added_p50_ms"], r["block_diff_ms"], f"< {TARGET_ADDED_MS:g}",
              c.verdict(r["added_p50_ms"] < TARGET_ADDED_MS)] for r in results])

    print("\nCPU time per call (utime+stime from /proc; waiting for a core is not counted)")
    c.table(["transport", "host process µs/call", "direct client µs/call", "added µs/call"],
            [[r["label"], r["cpu_us"]["host"], r["cpu_us"]["direct"], r["cpu_us"]["host"] - r["cpu_us"]["direct"]]
             for r in results])

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
