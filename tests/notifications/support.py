"""Notification test helpers: an SSE frame reader, an authed test client, bounded polling."""
import gc
import json
import weakref

import gevent
import greenlet

from tests.conftest import HEADERS

NOTE = {"source": "host", "level": "info", "title": "Build finished"}


class SSEStream:
    """A real ``text/event-stream`` response read frame by frame."""

    def __init__(self, resp):
        self.resp = resp
        self._lines = resp.iter_lines(chunk_size=None)

    def next_frame(self, timeout=5):
        """The next frame, ``{"comment": text}`` or ``{"event": name, "data": obj}``.

        None when the stream ended.
        """
        lines = []
        with gevent.Timeout(timeout, AssertionError(f"no SSE frame within {timeout} s")):
            for raw in self._lines:
                line = raw.decode("utf-8")
                if line:
                    lines.append(line)
                elif lines:
                    return parse_frame(lines)
        return None

    def next_event(self, timeout=5):
        """The next non-comment frame (heartbeats in between are skipped); None at end."""
        while True:
            frame = self.next_frame(timeout)
            if frame is None or "event" in frame:
                return frame

    def close(self):
        self.resp.close()


def parse_frame(lines):
    if all(line.startswith(":") for line in lines):
        assert len(lines) == 1, lines
        return {"comment": lines[0][1:].strip()}
    fields = {}
    for line in lines:
        name, _, value = line.partition(":")
        assert name in ("event", "data"), f"unexpected SSE line {line!r}"
        assert name not in fields, f"{name} appears twice in one frame: {lines}"
        fields[name] = value[1:] if value.startswith(" ") else value
    return {"event": fields["event"], "data": json.loads(fields["data"])}


def authed(app):
    """A Flask test client that sends the launch token."""
    c = app.test_client()
    c.environ_base["HTTP_X_SERVICE_TOKEN"] = HEADERS["X-Service-Token"]
    return c


def live_greenlets():
    """Every greenlet that has not finished, as a weak set (so holding it keeps none alive)."""
    gc.collect()
    return weakref.WeakSet(o for o in gc.get_objects()
                           if isinstance(o, greenlet.greenlet) and not o.dead)


def greenlets_since(baseline):
    """Greenlets alive now that were not alive at ``baseline``; finished older ones do not count."""
    return [g for g in live_greenlets() if g not in baseline]


def wait_until(predicate, timeout=5, step=0.05):
    """Poll ``predicate`` until true or ``timeout`` seconds pass; returns its last value."""
    with gevent.Timeout(timeout, False):
        while not predicate():
            gevent.sleep(step)
    return predicate()
