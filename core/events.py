"""The event bus: publish/subscribe by channel, in-process gevent queues."""
import logging
import threading

from gevent.queue import Empty, Full, Queue

log = logging.getLogger("agenthost.events")

CLOSED = object()  # queued into a subscription to end its stream


class Subscription:
    """One subscriber's bounded queue. A subscriber that falls too far behind is closed."""

    def __init__(self, bus, channel, maxsize):
        self.bus = bus
        self.channel = channel
        self.queue = Queue(maxsize=maxsize)
        self.closed = False

    def get(self, timeout=None):
        """Next ``(event, data)``, ``CLOSED``, or raise ``gevent.queue.Empty`` on timeout."""
        return self.queue.get(timeout=timeout)

    def put(self, item):
        if self.closed:
            return
        try:
            self.queue.put_nowait(item)
        except Full:
            # A client this slow will reconnect and refetch history; dropping it keeps
            # memory bounded for everybody else.
            log.warning("dropping slow subscriber on %s", self.channel)
            self.close(notify=True)

    def end(self):
        """Finish after what is already queued: the stream sends it, then ends."""
        if self.closed:
            return
        self.closed = True
        self.bus._remove(self)
        try:
            self.queue.put_nowait(CLOSED)
        except Full:  # a full queue's reader is too slow anyway: make room for the end marker
            try:
                self.queue.get_nowait()
            except Empty:
                pass
            self.queue.put_nowait(CLOSED)

    def close(self, notify=False):
        if self.closed:
            return
        self.closed = True
        self.bus._remove(self)
        if notify:
            try:
                while True:
                    self.queue.get_nowait()
            except Empty:
                pass
            self.queue.put_nowait(CLOSED)


class EventBus:
    """Channels of subscribers. ``publish`` never blocks the publisher."""

    def __init__(self, queue_size=1024):
        self.queue_size = queue_size
        self._channels = {}
        self._lock = threading.Lock()

    def subscribe(self, channel):
        sub = Subscription(self, channel, self.queue_size)
        with self._lock:
            self._channels.setdefault(channel, set()).add(sub)
        return sub

    def publish(self, channel, event, data):
        return self.publish_item(channel, (event, data))

    def publish_item(self, channel, item):
        """Publish a prepared item, e.g. ``(event, data, sequence)`` for streams that replay history."""
        with self._lock:
            subs = list(self._channels.get(channel, ()))
        for sub in subs:
            sub.put(item)
        return len(subs)

    def close_channel(self, channel):
        """End every stream subscribed to ``channel`` once it has sent what was published."""
        with self._lock:
            subs = list(self._channels.get(channel, ()))
        for sub in subs:
            sub.end()

    def subscriber_count(self, channel=None):
        with self._lock:
            if channel is not None:
                return len(self._channels.get(channel, ()))
            return sum(len(s) for s in self._channels.values())

    def close_all(self):
        """End every open stream (shutdown, or leaving APP mode)."""
        with self._lock:
            subs = [s for group in self._channels.values() for s in group]
        for sub in subs:
            sub.close(notify=True)

    def _remove(self, sub):
        with self._lock:
            group = self._channels.get(sub.channel)
            if group is not None:
                group.discard(sub)
                if not group:
                    del self._channels[sub.channel]
