"""The asyncio bridge: coroutines run on one loop in its own OS thread; waiting greenlets never block the hub."""
import asyncio
import os
import sys

import gevent
import pytest
from gevent import monkey

from core.asyncio_bridge import SUBPROCESS_WATCH, Bridge

real_get_ident = monkey.get_original("_thread", "get_ident")


@pytest.fixture
def bridge():
    b = Bridge()
    yield b
    b.stop()


def test_a_coroutine_returns_its_value_to_the_calling_greenlet(bridge):
    async def answer():
        await asyncio.sleep(0)
        return 42

    assert bridge.run(answer()) == 42


def test_the_loop_runs_in_an_os_thread_of_its_own(bridge):
    async def ident():
        return real_get_ident()

    assert bridge.run(ident()) != real_get_ident()


def test_an_exception_raised_on_the_loop_is_raised_in_the_greenlet(bridge):
    async def boom():
        raise LookupError("from the loop")

    with pytest.raises(LookupError, match="from the loop"):
        bridge.run(boom())


def test_a_timeout_raises_and_cancels_the_task(bridge):
    cancelled = []

    async def forever():
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    with pytest.raises(TimeoutError):
        bridge.run(forever(), timeout=0.05)

    async def settle():
        for _ in range(100):
            if cancelled:
                return True
            await asyncio.sleep(0.01)
        return False

    assert bridge.run(settle())


def test_killing_the_waiting_greenlet_cancels_the_task(bridge):
    started, cancelled = [], []

    async def forever():
        started.append(True)
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    waiter = gevent.spawn(bridge.run, forever())
    while not started:
        gevent.sleep(0.01)
    waiter.kill()

    async def settle():
        for _ in range(100):
            if cancelled:
                return True
            await asyncio.sleep(0.01)
        return False

    assert bridge.run(settle())


def test_a_waiting_greenlet_leaves_the_hub_free_for_the_others(bridge):
    """Only another greenlet can release the wait: were the hub blocked, the call would time out."""
    event_box = {}

    async def wait_for_release():
        event_box["event"] = asyncio.Event()
        await event_box["event"].wait()
        return "released"

    def releaser():
        while "event" not in event_box:
            gevent.sleep(0.005)
        gevent.sleep(0.02)  # the waiter is parked in the hub by now
        bridge.call_soon(event_box["event"].set)

    helper = gevent.spawn(releaser)
    assert bridge.run(wait_for_release(), timeout=10) == "released"
    helper.join()


def test_concurrent_calls_are_in_flight_together(bridge):
    """32 calls that each wait for all 32 to have started: serialised calls would never finish."""
    state = {"count": 0}

    async def rendezvous():
        if "all" not in state:
            state["all"] = asyncio.Event()
        state["count"] += 1
        if state["count"] == 32:
            state["all"].set()
        await asyncio.wait_for(state["all"].wait(), 10)
        return state["count"]

    greenlets = [gevent.spawn(bridge.run, rendezvous()) for _ in range(32)]
    gevent.joinall(greenlets, raise_error=True)
    assert [g.value for g in greenlets] == [32] * 32


def test_a_subprocess_spawned_on_the_loop_reports_its_pid_and_exit(bridge):
    seen = {}

    class Watch:
        def spawned(self, pid):
            seen["pid"] = pid

        def exited(self, pid, code):
            seen["exit"] = (pid, code)

    async def run_child():
        SUBPROCESS_WATCH.set(Watch())
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", "import sys; print('out'); sys.exit(7)", stdout=asyncio.subprocess.PIPE)
        out = await proc.stdout.read()
        return proc.pid, out, await proc.wait()

    pid, out, code = bridge.run(run_child(), timeout=30)
    assert out.strip() == b"out"
    assert seen["pid"] == pid
    assert seen["exit"][0] == pid
    # 255 when gevent's SIGCHLD handler (installed once this process used gevent.subprocess) reaped it first.
    assert code in (7, 255) and seen["exit"][1] == code


def test_a_missing_executable_raises_on_the_caller(bridge):
    async def spawn():
        await asyncio.create_subprocess_exec("/nonexistent/agenthost-no-such-command")

    with pytest.raises(FileNotFoundError):
        bridge.run(spawn(), timeout=30)


def test_name_resolution_runs_off_the_loop_thread(bridge):
    async def resolve():
        loop = asyncio.get_running_loop()
        infos = await loop.getaddrinfo("localhost", 80)
        return {info[4][0] for info in infos}

    assert bridge.run(resolve(), timeout=30) & {"127.0.0.1", "::1"}


def test_a_stopped_bridge_refuses_new_work():
    b = Bridge()

    async def one():
        return 1

    assert b.run(one()) == 1
    b.stop()
    with pytest.raises(RuntimeError):
        b.run(one())


def test_a_forked_child_gets_a_loop_of_its_own(bridge):
    """An RQ work horse is a fork: it inherits the loop object but not the thread that ran it."""
    async def answer():
        return 42

    assert bridge.run(answer()) == 42
    pid = os.fork()
    if pid == 0:  # the child: exit 0 only when its own loop answered
        try:
            code = 0 if bridge.run(answer(), timeout=10) == 42 else 1
        except BaseException:
            code = 2
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert bridge.run(answer()) == 42, "the parent's loop is untouched"
