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


class RedisEventBus(EventBus):
    """The same bus across processes: every publish goes through Redis pub/sub.

    Host and ``core worker`` processes each keep their local subscriptions; one
    listener greenlet per process receives every message of the ``agenthost:``
    channels and fans it out locally. When Redis cannot be reached a publish is
    delivered locally only (history is already in the database), and logged.
    """

    def __init__(self, redis_url, queue_size=1024, namespace="agenthost"):
        import redis

        super().__init__(queue_size)
        # Redis pub/sub ignores database numbers: the namespace keeps installs apart.
        self.PREFIX = f"{namespace}:bus:"
        self.redis = redis.Redis.from_url(redis_url, socket_connect_timeout=2, health_check_interval=30)
        self._listener = None
        self._stopped = False

    def start(self):
        import gevent
        if self._listener is None:
            self._listener = gevent.spawn(self._listen)

    def stop(self):
        self._stopped = True
        if self._listener is not None:
            self._listener.kill(block=False)
            self._listener = None

    def publish_item(self, channel, item):
        import json
        try:
            self.redis.publish(self.PREFIX + channel, json.dumps({"item": list(item)}))
            return self.subscriber_count(channel)
        except Exception as exc:  # redis down: local streams still get it
            log.warning("redis publish failed (%s); delivering locally", type(exc).__name__)
            return super().publish_item(channel, item)

    def close_channel(self, channel):
        import json
        try:
            self.redis.publish(self.PREFIX + channel, json.dumps({"close": True}))
        except Exception:
            super().close_channel(channel)

    def _listen(self):
        import json

        import gevent
        backoff = 0.1
        while not self._stopped:
            pubsub = self.redis.pubsub(ignore_subscribe_messages=True)
            try:
                pubsub.psubscribe(self.PREFIX + "*")
                backoff = 0.1
                for message in pubsub.listen():
                    if message.get("type") != "pmessage":
                        continue
                    channel = message["channel"].decode()[len(self.PREFIX):]
                    body = json.loads(message["data"])
                    if body.get("close"):
                        EventBus.close_channel(self, channel)
                    else:
                        EventBus.publish_item(self, channel, tuple(body["item"]))
            except gevent.GreenletExit:
                raise
            except Exception as exc:
                log.warning("redis bus listener lost its connection (%s); retrying", type(exc).__name__)
                gevent.sleep(backoff)
                backoff = min(backoff * 2, 5)
            finally:
                try:
                    pubsub.close()
                except Exception:
                    pass
