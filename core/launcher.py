"""``core serve``: bind loopback, announce the port, serve until SIGTERM/SIGINT."""
import errno
import logging
import signal
import socket
import sys

import gevent
from gevent.event import Event
from gevent.pool import Pool
from gevent.pywsgi import WSGIServer
from werkzeug.wsgi import ClosingIterator

from .errors import problem

log = logging.getLogger("agenthost.launcher")

LOOPBACK = "127.0.0.1"
DRAIN_SECONDS = 3  # how long shutdown waits for in-flight requests after streams are ended


def bind(port):
    """A listening loopback socket on ``port``; a taken non-zero port falls back to an assigned one."""

    def listen_on(p):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # pywsgi sends headers and body separately; without this Nagle adds ~40 ms per response.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            sock.bind((LOOPBACK, p))
            sock.listen(1024)
        except OSError:
            sock.close()
            raise
        return sock

    if port == 0:
        return listen_on(0)
    try:
        return listen_on(port)
    except OSError as exc:
        if exc.errno not in (errno.EADDRINUSE, errno.EACCES):
            raise
        log.info("port %s is taken; using an assigned port", port)
        return listen_on(0)


class _ErrorLog:
    """pywsgi's error log, routed to logging (tracebacks stay in the log, never in responses)."""

    def write(self, text):
        text = text.rstrip()
        if text:
            log.debug("%s", text)

    def flush(self):
        pass


class _Tracked:
    """WSGI wrapper that counts requests in flight and refuses new ones once shutdown began.

    gevent's server cannot tell a handler serving a request from one idling on a
    keep-alive connection; this count lets shutdown wait for the first and kill the second.
    """

    def __init__(self, app):
        self.app = app
        self.active = 0
        self.drained = Event()
        self.drained.set()
        self.stopping = False

    def __call__(self, environ, start_response):
        if self.stopping:
            resp = problem(503, "service_stopping", "The service is shutting down.",
                           headers={"Connection": "close"})
            return resp(environ, start_response)
        self.active += 1
        self.drained.clear()
        try:
            result = self.app(environ, start_response)
        except BaseException:
            self._leave()
            raise
        return ClosingIterator(result, [self._leave])

    def _leave(self):
        self.active -= 1
        if self.active <= 0:
            self.active = 0
            self.drained.set()


def serve(app, port, *, out=sys.stdout):
    """Serve ``app`` until a signal arrives; returns after a clean shutdown."""
    host = app.extensions["agenthost"]
    listener = bind(port)
    tracked = _Tracked(app)
    handlers = Pool()
    server = WSGIServer(listener, tracked, spawn=handlers, log=None, error_log=_ErrorLog())
    stop = Event()
    # Handlers go in before the port is announced: a client may signal right after reading it.
    signals = [gevent.signal_handler(sig, stop.set) for sig in (signal.SIGTERM, signal.SIGINT)]
    server.start()
    actual = listener.getsockname()[1]
    host.config["service.port"] = actual
    out.write(f"SERVICE_PORT={actual}\n")
    out.flush()

    try:
        stop.wait()
        log.info("shutting down")
        tracked.stopping = True
        server.close()  # no new connections
        host.events.close_all()  # streams end first, so draining does not wait on them
        tracked.drained.wait(DRAIN_SECONDS)
        host.stop()
        # What is left are handlers idling on keep-alive connections (or requests past the drain).
        handlers.kill(block=True, timeout=1)
    finally:
        # Kept until here: a second SIGTERM during the bounded shutdown must not kill it midway.
        for handler in signals:
            handler.cancel()
    return actual
