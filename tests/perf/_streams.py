"""Raw-socket notification stream clients for the benchmarks (gevent greenlets; patch first)."""
import http.client
import json
import re
import socket
import time

import gevent

import _common as c

FRAME = re.compile(rb"event: notification\ndata: (\{[^\n]*\})\n\n")


class Target:
    """Where the streams and posts go: our host's real endpoints, or the floor's bare ones."""

    def __init__(self, port, floor=False):
        self.port = port
        self.floor = floor

    def stream_path(self, ticket):
        return "/stream" if self.floor else f"/api/notifications/stream?ticket={ticket}"

    def post(self, api, title):
        """Send one notification; returns its id."""
        if self.floor:
            return api.call("POST", "/notify")["id"]
        return api.call("POST", "/api/notifications",
                        {"source": "host", "level": "info", "title": title})["id"]


class Api:
    """One keep-alive HTTP connection carrying the launch token."""

    def __init__(self, port):
        self.conn = http.client.HTTPConnection(c.LOOPBACK, port, timeout=30)

    def call(self, method, path, body=None):
        headers = {"X-Service-Token": c.TOKEN}
        payload = None
        if body is not None:
            payload = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        self.conn.request(method, path, body=payload, headers=headers)
        resp = self.conn.getresponse()
        data = resp.read()
        if resp.status >= 300:
            raise RuntimeError(f"{method} {path}: {resp.status} {data[:200]!r}")
        return json.loads(data)

    def ticket(self):
        return self.call("POST", "/api/notifications/stream-ticket")["ticket"]

    def close(self):
        self.conn.close()


class StreamClient:
    """One open ``/api/notifications/stream``; records when each notification id arrives."""

    def __init__(self, port, path, arrivals):
        self.sock = socket.create_connection((c.LOOPBACK, port), timeout=30)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {c.LOOPBACK}:{port}\r\n"
                          "Accept: text/event-stream\r\n\r\n".encode())
        self.arrivals = arrivals  # id -> [monotonic receipt times]
        self.buf = b""
        while b": connected" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise RuntimeError("stream closed before `: connected`: %r" % self.buf[:300])
            self.buf += chunk
        if not self.buf.startswith(b"HTTP/1.1 200"):
            raise RuntimeError("stream refused: %r" % self.buf[:300])
        self.buf = b""
        self.sock.settimeout(None)
        self.greenlet = None

    def listen(self):
        self.greenlet = gevent.spawn(self._run)

    def _run(self):
        while True:
            try:
                chunk = self.sock.recv(65536)
            except OSError:
                return
            now = time.perf_counter()
            if not chunk:
                return
            self.buf += chunk
            last = 0
            for match in FRAME.finditer(self.buf):
                self.arrivals.setdefault(json.loads(match.group(1))["id"], []).append(now)
                last = match.end()
            self.buf = self.buf[last:]

    def close(self):
        if self.greenlet is not None:
            self.greenlet.kill(block=False)
        self.sock.close()


def open_streams(target, count, arrivals=None):
    """Open ``count`` streams (each with its own ticket on our host); returns them all connected."""
    if target.floor:
        paths = [target.stream_path(None)] * count
    else:
        api = Api(target.port)
        try:
            paths = [target.stream_path(api.ticket()) for _ in range(count)]
        finally:
            api.close()
    arrivals = {} if arrivals is None else arrivals
    clients = []
    # In batches, so that the listen backlog and accept loop are not what gets measured.
    for start in range(0, count, 50):
        jobs = [gevent.spawn(_connect, target.port, p, arrivals) for p in paths[start:start + 50]]
        gevent.joinall(jobs)
        clients.extend(job.value for job in jobs)
    failed = [x for x in clients if isinstance(x, Exception)]
    if failed:
        for x in clients:
            if not isinstance(x, Exception):
                x.close()
        raise RuntimeError(f"{len(failed)} of {count} streams failed to open; first: {failed[0]!r}")
    return clients


def _connect(port, path, arrivals):
    # Returned, not raised: gevent would print every failed greenlet's traceback.
    try:
        return StreamClient(port, path, arrivals)
    except Exception as exc:
        return exc
