"""Host configuration: dotted property names with defaults."""
import os
from pathlib import Path

DEFAULT_PORT = 24056

DEFAULTS = {
    "service.auth.token": None,
    "service.data-dir": None,
    "service.port": DEFAULT_PORT,
    "service.redis-url": None,
    "service.redis-namespace": "agenthost",
    "service.role": "host",
    "service.max-body-bytes": 8 * 1024 * 1024,
    "service.log-level": "INFO",
    "datasource.probe-timeout-seconds": 5,
    "tickets.ttl-seconds": 60,
    "notifications.heartbeat-seconds": 25,
    "notifications.retained": 200,
    "sse.queue-size": 1024,
    "tasks.max-running": 16,
    "tasks.aging-seconds": 60,
    "tasks.poll-seconds": 2,
    "webhooks.queue-full-memo-ms": 50,
    "webhooks.max-concurrent-admissions": 8,
}


def default_data_dir():
    return Path(os.environ.get("AGENTHOST_HOME") or Path.home() / ".agenthost")


class Config(dict):
    """A dict of dotted properties (``service.auth.token``) over the defaults."""

    def __init__(self, values=None, **kwargs):
        super().__init__(DEFAULTS)
        self.update(values or {})
        self.update(kwargs)
        if not self.get("service.data-dir"):
            self["service.data-dir"] = str(default_data_dir())

    @property
    def data_dir(self):
        return Path(self["service.data-dir"])

    @property
    def token(self):
        return self["service.auth.token"]
