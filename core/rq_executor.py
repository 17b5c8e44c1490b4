"""The RQ executor: task bodies run in ``core worker`` processes fed through Redis."""
import logging
import time

from .errors import ApiError

log = logging.getLogger("agenthost.rq")



def queue_name(namespace):
    return f"{namespace or 'agenthost'}-tasks"


def run_task_job(task_id):
    """The RQ job: runs in a worker process bootstrapped by ``core worker``."""
    from . import worker
    worker.current_host().tasks.execute_by_id(task_id)


class RQExecutor:
    name = "rq"

    def __init__(self, redis_url, namespace=None):
        import redis
        from rq import Queue

        self.redis = redis.Redis.from_url(redis_url, socket_connect_timeout=2, socket_timeout=5)
        self.queue = Queue(queue_name(namespace), connection=self.redis)
        self._healthy_until = 0.0

    def check(self):
        """Raise a 503 problem when Redis cannot be reached (checked at most once a second)."""
        now = time.monotonic()
        if now < self._healthy_until:
            return
        try:
            self.redis.ping()
        except Exception:
            raise ApiError(503, "executor_unavailable",
                           "The background executor (Redis) is unreachable; nothing was admitted. Retry later.",
                           headers={"Retry-After": "1"}) from None
        self._healthy_until = now + 1.0

    def lost(self, task_ids):
        """Of these claimed task ids, the ones whose job Redis no longer has (Redis restarted empty)."""
        from rq.job import Job
        try:
            return [t for t in task_ids if not Job.exists(t, connection=self.redis)]
        except Exception:
            return []  # Redis is away: nothing to conclude yet

    def submit(self, task):
        """Enqueue a claimed task; False when Redis is away (the task goes back to the queue)."""
        try:
            self.queue.enqueue(run_task_job, task["taskId"], job_id=task["taskId"], job_timeout=-1,
                               result_ttl=0, failure_ttl=3600)
            return True
        except Exception as exc:
            log.warning("could not enqueue task %s (%s)", task["taskId"], type(exc).__name__)
            self._healthy_until = 0.0
            return False
