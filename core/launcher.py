"""``core serve``: bind loopback, announce the port, serve until SIGTERM/SIGINT."""
import errno
import logging
import signal
import socket
import sys

import gevent
from gevent.event import Event
from gevent.pywsgi import WSGIServer

log = logging.getLogger("agenthost.launcher")

LOOPBACK = "127.0.0.1"


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


def serve(app, port, *, out=sys.stdout):
    """Serve ``app`` until a signal arrives; returns after a clean shutdown."""
    host = app.extensions["agenthost"]
    listener = bind(port)
    server = WSGIServer(listener, app, log=None, error_log=_ErrorLog())
    server.start()
    actual = listener.getsockname()[1]
    host.config["service.port"] = actual
    out.write(f"SERVICE_PORT={actual}\n")
    out.flush()

    stop = Event()
    handlers = [gevent.signal_handler(sig, stop.set) for sig in (signal.SIGTERM, signal.SIGINT)]
    try:
        stop.wait()
    finally:
        for handler in handlers:
            handler.cancel()
        log.info("shutting down")
        host.stop()  # ends streams first so the server's stop does not wait on them
        server.stop(timeout=3)
    return actual
