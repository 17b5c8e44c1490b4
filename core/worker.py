"""``core worker``: an RQ worker process that bootstraps the same host context as ``core serve``."""
import logging

log = logging.getLogger("agenthost.worker")

_HOST = None


def current_host():
    if _HOST is None:
        raise RuntimeError("no host context: start this with `core worker`")
    return _HOST


def run(config, burst=False):
    """Bootstrap (database, tool catalog, Redis event bus), then work the task queue."""
    global _HOST
    from redis import Redis
    from rq import SimpleWorker

    from .app import create_app
    from .rq_executor import queue_name

    config["service.role"] = "worker"
    app = create_app(config)
    host = app.extensions["agenthost"]
    if host.mode != "APP":
        raise RuntimeError("the database is not configured: run `core init` or the setup wizard first")
    _HOST = host
    connection = Redis.from_url(config["service.redis-url"])
    worker = SimpleWorker([queue_name(config.get("service.redis-namespace"))], connection=connection)
    try:
        worker.work(burst=burst, with_scheduler=False, logging_level="WARNING")
    finally:
        host.stop()
        _HOST = None
