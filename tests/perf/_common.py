"""Shared helpers of the benchmarks: spawn servers, read RSS and CPU, summarise, print tables."""
import os
import platform
import re
import select
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PERF = Path(__file__).resolve().parent
TOKEN = "perf-token-" + "p" * 24
LOOPBACK = "127.0.0.1"


def machine():
    """One line describing where the figures came from."""
    load = os.getloadavg()
    return (f"nproc={os.cpu_count()} python={platform.python_version()} "
            f"load(1/5/15)={load[0]:.2f}/{load[1]:.2f}/{load[2]:.2f}")


def init_data_dir():
    """A fresh data directory initialised with ``core init`` (the embedded SQLite default)."""
    path = tempfile.mkdtemp(prefix="agenthost-perf-")
    done = subprocess.run([sys.executable, "-m", "core", "init", "--data-dir", path], cwd=REPO,
                          capture_output=True, text=True, env=_env())
    if done.returncode:
        raise RuntimeError("core init failed:\n" + done.stdout + done.stderr)
    return path


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


class Server:
    """A server subprocess that prints ``SERVICE_PORT=<n>`` once it accepts connections."""

    def __init__(self, argv, label, *, timeout=30):
        self.label = label
        t0 = time.perf_counter()
        self.proc = subprocess.Popen(argv, cwd=REPO, env=_env(), stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True, bufsize=1)
        self.port = wait_for_port(self.proc, timeout)
        self.startup_seconds = time.perf_counter() - t0
        self.pid = self.proc.pid

    def rss_kb(self):
        return rss_kb(self.pid)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def wait_for_port(proc, timeout):
    """Read the child's stdout until the ``SERVICE_PORT`` line; returns the port."""
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            proc.kill()
            raise RuntimeError("no SERVICE_PORT line within %.0f s" % timeout)
        ready, _, _ = select.select([proc.stdout], [], [], left)
        if not ready:
            continue
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError("server exited before announcing its port (rc=%s)" % proc.wait())
        match = re.match(r"SERVICE_PORT=(\d+)", line)
        if match:
            return int(match.group(1))


def host_server(data_dir, *, python_args=()):
    """Our host as a user starts it: ``python -m core serve`` on an initialised data dir."""
    argv = [sys.executable, *python_args, "-m", "core", "serve", "--port", "0", "--token", TOKEN,
            "--data-dir", data_dir]
    return Server(argv, "agenthost")


def floor_server():
    """The bare Flask floor, served the same way (pywsgi on a listener from core.launcher.bind)."""
    return Server([sys.executable, str(PERF / "floor_app.py")], "bare flask")


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS for pid %s" % pid)


def cpu_seconds(pid):
    """User plus system CPU time the process has used so far (from /proc/<pid>/stat)."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def percentile(values, pct):
    """Nearest-rank percentile (no interpolation: p99 of 200 samples is the 198th)."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    rank = max(1, -(-len(ordered) * pct // 100))
    return ordered[int(rank) - 1]


median = statistics.median


def table(headers, rows):
    """Print a plain fixed-width table (also valid Markdown)."""
    cells = [[str(h) for h in headers]] + [[_fmt(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    line = lambda r: "| " + " | ".join(c.rjust(w) for c, w in zip(r, widths)) + " |"  # noqa: E731
    print(line(cells[0]))
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for r in cells[1:]:
        print(line(r))


def _fmt(value):
    if isinstance(value, float):
        return f"{value:.3f}" if abs(value) < 10 else f"{value:.1f}"
    return str(value)


def verdict(ok):
    return "PASS" if ok else "MISS"
