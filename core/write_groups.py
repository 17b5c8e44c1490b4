"""Group commit: write transactions of greenlets that are ready together, committed as one."""
import logging

import gevent
from gevent.event import AsyncResult

log = logging.getLogger("agenthost.db")

_LEAD = object()  # lead the next group
_ALONE = object()  # write alone, in a transaction of your own


class _Member:
    __slots__ = ("write", "undo", "committed", "outcome")

    def __init__(self, write, undo, committed):
        self.write, self.undo, self.committed = write, undo, committed
        self.outcome = AsyncResult()  # (answer,), _LEAD or _ALONE


class WriteGroup:
    """Commit the writes of greenlets that are ready at the same moment in one transaction.

    On SQLite every commit writes each page it touched into the log, and a busy host
    commits the same hot pages (a table's last leaf, its indexes) over and over: a
    group pays for them once, and pays one commit. Writes become ready together when
    one event wakes several greenlets (a claim frees several queue places; a wave of
    runs ends) or several requests arrive in one turn of the event loop.

    The first writer becomes the leader: it yields once, so that the writers woken in
    the same turn can join, then runs every member's ``write(conn)`` in one
    transaction. If any of them raises, the whole transaction rolls back, every
    member's ``undo()`` runs, and each member writes again alone, where its own error
    reaches its own caller. A leader hands over to the first writer still waiting.

    A ``write`` therefore must be safe to run twice (``undo`` puts back what it changed
    outside the database) and must not wait for anything another member's caller
    holds: the leader runs it on the member's behalf while that caller waits.
    """

    def __init__(self, engine, max_size=16):
        self.engine = engine  # a callable returning the SQLAlchemy engine (it changes when the database does)
        self.max_size = max_size
        self._pending = []  # _Member, in arrival order
        self._leader = False

    def run(self, write, *, undo=None, committed=None, alone=None):
        """``write(conn)``'s answer once its transaction has committed.

        ``committed(answer)``: called as soon as the commit is done, in whichever
        greenlet committed it (so a caller killed while waiting still learns of it
        through what the callable records). ``alone()``: how to write alone when the
        group fails (default: ``write`` in a transaction of its own).
        """
        if self.max_size <= 1:
            return self._alone(write, committed, alone)
        mine = _Member(write, undo, committed)
        self._pending.append(mine)
        try:
            if self._leader:
                outcome = mine.outcome.get()
                if outcome is _LEAD:  # handed over by the last leader
                    mine.outcome = AsyncResult()
                    outcome = self._lead(mine)
            else:
                self._leader = True
                outcome = self._lead(mine)
        except gevent.GreenletExit:
            if mine in self._pending:  # not taken yet: it never runs
                self._pending.remove(mine)
            if mine.outcome.ready() and mine.outcome.value is _LEAD:
                self._hand_over()  # handed the lead as it was killed: pass it on
            raise
        if outcome is _ALONE:
            return self._alone(write, committed, alone)
        return outcome[0]

    def _alone(self, write, committed, alone):
        if alone is not None:
            return alone()
        with self.engine().begin() as conn:
            answer = write(conn)
        if committed is not None:
            committed(answer)
        return answer

    def _lead(self, mine):
        """Write the group ``mine`` leads (``_leader`` is set); returns ``mine``'s outcome."""
        group = []
        try:
            gevent.sleep(0)  # the writers woken in this turn of the loop join the group
            group, self._pending = self._pending[:self.max_size], self._pending[self.max_size:]
            if len(group) > 1:
                self._write_group(group)
        finally:
            for member in group:
                if not member.outcome.ready():
                    member.outcome.set(_ALONE)
            if mine in self._pending:  # killed before it took its group
                self._pending.remove(mine)
            self._hand_over()
        return mine.outcome.get()

    def _hand_over(self):
        """The lead goes to the first writer still waiting, if any (``_leader`` stays set)."""
        if self._pending:
            self._pending[0].outcome.set(_LEAD)
        else:
            self._leader = False

    def _write_group(self, group):
        try:
            with self.engine().begin() as conn:
                answers = [member.write(conn) for member in group]
        except Exception as exc:
            log.debug("a group of %d writes failed together (%s); each writes alone", len(group),
                      type(exc).__name__)
            for member in group:
                if member.undo is not None:
                    try:
                        member.undo()
                    except Exception:
                        log.exception("undoing a grouped write failed")
            return
        for member, answer in zip(group, answers):
            if member.committed is not None:
                try:
                    member.committed(answer)
                except Exception:
                    log.exception("a grouped write's commit callback failed")
            member.outcome.set((answer,))
