"""Helpers of the MCP tests: fast timings, server definitions, loopback MCP servers in subprocesses, polling."""
import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import gevent

SERVERS = Path(__file__).with_name("servers")
FIXTURE = str(SERVERS / "fixture_server.py")
EXIT_AFTER_INITIALIZE = str(SERVERS / "exit_after_initialize.py")
BAD_RESULT = str(SERVERS / "bad_result.py")

# Small timeouts and backoffs: every fault test finishes in about a second.
FAST = {
    "mcp.connect-timeout-seconds": 15,
    "mcp.request-timeout-seconds": 10,
    "mcp.ping-seconds": 0.3,
    "mcp.backoff-base-seconds": 0.1,
    "mcp.backoff-cap-seconds": 0.4,
    "mcp.shutdown-seconds": 3,
    "secrets.keyring": "file",
}

TIME_SERVER = {"name": "time", "transport": "STDIO", "command": sys.executable, "args": ["-m", "mcp_server_time"]}
STDIO_FIXTURE = {"name": "fixture", "transport": "STDIO", "command": sys.executable,
                 "args": [FIXTURE, "--transport", "stdio"]}
FIXTURE_TOOLS = ["add", "crash", "echo", "fail", "getenv", "grow", "refuse", "sleep", "weird.name"]


def http_definition(server, transport, name=None, **extra):
    return {"name": name or transport.lower(), "transport": transport, "url": server.url(transport), **extra}


def wait_until(predicate, timeout=10.0, interval=0.05, what="condition"):
    """Poll ``predicate`` until it returns something truthy; that value, or AssertionError."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        gevent.sleep(interval)
    raise AssertionError(f"timed out waiting for {what}; last value: {last!r}")


def process_gone(pid):
    """True once ``pid`` no longer exists (reaped) or is a zombie nobody waits for."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] == "Z"
    except FileNotFoundError:
        return True


class HttpServer:
    """The fixture server over SSE or streamable HTTP in a child process on a loopback port."""

    def __init__(self, transport, token=None, port=0, tls=False):
        self.transport, self.token, self.tls = transport, token, tls
        self.scheme = "https" if tls else "http"
        self.proc = None
        self.port = port
        self.start()

    def start(self):
        argv = [sys.executable, FIXTURE, "--transport", self.transport, "--port", str(self.port)]
        if self.token:
            argv += ["--token", self.token]
        if self.tls:
            argv.append("--tls")
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        line = self.proc.stdout.readline()
        if not line.startswith("PORT="):
            self.stop()
            raise AssertionError(f"fixture server did not start: {line!r}")
        self.port = int(line.strip().split("=", 1)[1])
        # uvicorn accepts only once its startup finished: wait for a real answer.
        import requests
        wait_until(lambda: _answers(requests, f"{self.scheme}://127.0.0.1:{self.port}/stats"), what="fixture server")
        return self

    def url(self, transport=None):
        path = "/sse" if (transport or self.transport).lower() == "sse" else "/mcp"
        return f"{self.scheme}://127.0.0.1:{self.port}{path}"

    def stats(self):
        import requests
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the TLS fixture's certificate is self-signed on purpose
            return requests.get(f"{self.scheme}://127.0.0.1:{self.port}/stats", timeout=5, verify=False).json()

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
        if self.proc is not None and self.proc.stdout:
            self.proc.stdout.close()


def _answers(requests, url):
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the TLS fixture's certificate is self-signed on purpose
            return requests.get(url, timeout=1, verify=False).status_code == 200
    except requests.RequestException:
        return False


def children_running(command_part):
    """Pids of this process's live children whose command line contains ``command_part``."""
    me = str(os.getpid())
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                fields = fh.read().split(")")[-1].split()
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                cmdline = fh.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if fields[1] == me and fields[0] != "Z" and command_part in cmdline:
            found.append(int(entry))
    return found
