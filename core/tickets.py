"""One-time stream tickets: random, single use, bound to a stream kind (and id), short-lived."""
import secrets
import threading
import time

from .errors import ApiError


class TicketBook:
    def __init__(self, ttl_seconds=60, clock=time.monotonic):
        self.ttl = ttl_seconds
        self.clock = clock
        self._tickets = {}
        self._lock = threading.Lock()

    def mint(self, kind, bound_to=None):
        """Return ``{ticket, expiresIn}`` for a stream of ``kind`` (and id ``bound_to``)."""
        ticket = secrets.token_urlsafe(32)  # 256 bits
        now = self.clock()
        with self._lock:
            self._purge(now)
            self._tickets[ticket] = (kind, bound_to, now + self.ttl)
        return {"ticket": ticket, "expiresIn": int(self.ttl)}

    def redeem(self, kind, ticket, bound_to=None):
        """Consume a ticket or raise a 403 problem. A ticket works once, whatever the outcome."""
        if not ticket:
            raise ApiError(403, "ticket_required", "A stream ticket is required.")
        with self._lock:
            entry = self._tickets.pop(ticket, None)
        if entry is None:
            raise ApiError(403, "ticket_invalid", "The stream ticket is unknown or already used.")
        t_kind, t_bound, expires = entry
        if self.clock() > expires:
            raise ApiError(403, "ticket_expired", "The stream ticket has expired.")
        if t_kind != kind or (t_bound is not None and t_bound != bound_to):
            raise ApiError(403, "ticket_invalid", "The stream ticket is not valid for this stream.")
        return True

    def __len__(self):
        return len(self._tickets)

    def _purge(self, now):
        for key in [k for k, (_, _, exp) in self._tickets.items() if exp < now]:
            del self._tickets[key]
