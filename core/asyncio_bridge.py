"""The process's one asyncio event loop, in its own OS thread, and the bridge greenlets call it through.

Libraries written for asyncio (the ``mcp`` SDK) run on this loop; no other code
may call ``asyncio.run()``. A greenlet hands a coroutine over with :meth:`Bridge.run`
and waits on a gevent ``AsyncResult``: only that greenlet waits, the hub keeps
serving everyone else. Results come back through one gevent ``async`` watcher per
hub (``hub.loop.async_()``, the thread-safe wake-up libev/libuv provide), drained in
the hub's own thread.

The loop thread is a real OS thread even under ``monkey.patch_all()``, and nothing
in it may depend on a gevent hub running there (none ever does). So the loop uses
the unpatched pieces of the standard library: the original epoll selector, real
threads for blocking helpers (name resolution), the original ``subprocess.Popen``
(gevent's refuses to fork outside the main thread) and its own child watcher.
"""
import asyncio
import collections
import contextlib
import contextvars
import ipaddress
import logging
import os
import select
import signal
import sys
import types
import weakref
from asyncio import base_subprocess
from socket import SOCK_STREAM as _SOCK_STREAM

import gevent
from gevent import monkey
from gevent.event import AsyncResult

log = logging.getLogger("agenthost.asyncio")

_start_thread = monkey.get_original("_thread", "start_new_thread")
_allocate_lock = monkey.get_original("_thread", "allocate_lock")
_get_ident = monkey.get_original("_thread", "get_ident")
_Selector = monkey.get_original("selectors", "DefaultSelector")
_waitpid = monkey.get_original("os", "waitpid")
# gevent's os.close defers the close to the calling thread's hub: in the loop thread, never.
close_fd = monkey.get_original("os", "close")
_getaddrinfo = monkey.get_original("socket", "getaddrinfo")
_getnameinfo = monkey.get_original("socket", "getnameinfo")
_socket = monkey.get_original("socket", "socket")
_socketpair = monkey.get_original("socket", "socketpair")


def _unpatched_popen():
    """The standard ``Popen``, rebuilt so that its code sees the unpatched ``os`` and fork machinery.

    gevent replaces ``subprocess.Popen`` (its own one can only fork in the main thread),
    blanks the module's ``_fork_exec`` and makes ``os.close`` defer the close to the
    calling thread's hub, which never runs in the loop thread (the child's pipes would
    never close). A copy of every method of the original class, with globals where
    those names hold the originals, spawns like an unpatched interpreter; nothing
    global changes.
    """
    import subprocess

    original = monkey.get_original("subprocess", "Popen")
    if not monkey.is_module_patched("subprocess") and not monkey.is_module_patched("os"):
        return original
    plain_os = types.ModuleType("os")
    plain_os.__dict__.update(vars(os))
    for name in ("close", "fork", "forkpty", "posix_spawn", "posix_spawnp", "waitpid"):
        if hasattr(os, name):
            setattr(plain_os, name, monkey.get_original("os", name))
    names = dict(vars(subprocess))
    names["os"] = plain_os
    for name in ("_fork_exec", "_USE_POSIX_SPAWN", "_use_posix_spawn"):
        if hasattr(subprocess, name):
            names[name] = monkey.get_original("subprocess", name)

    def clone(fn):
        copy = types.FunctionType(fn.__code__, names, fn.__name__, fn.__defaults__, fn.__closure__)
        copy.__kwdefaults__ = fn.__kwdefaults__
        copy.__qualname__ = fn.__qualname__
        return copy

    body = {}
    for name, value in vars(original).items():
        if name in ("__dict__", "__weakref__"):
            continue
        wrapped = getattr(value, "__wrapped__", None)
        if isinstance(value, types.FunctionType) and isinstance(wrapped, types.FunctionType):
            value = contextlib.contextmanager(clone(wrapped))  # _on_error_fd_closer
        elif isinstance(value, types.FunctionType):
            value = clone(value)
        elif isinstance(value, (staticmethod, classmethod)) and isinstance(value.__func__, types.FunctionType):
            value = type(value)(clone(value.__func__))
        body[name] = value
    return type("Popen", original.__bases__, body)


_Popen = _unpatched_popen()

# Whoever spawns a child process on the loop may learn its pid and exit code: the caller
# sets an object with ``spawned(pid)`` and ``exited(pid, returncode)`` here (a context
# variable, so it follows the task that spawns, through any library in between).
SUBPROCESS_WATCH = contextvars.ContextVar("agenthost_subprocess_watch", default=None)


@contextlib.contextmanager
def async_imports():
    """Import asyncio libraries inside this block, in the main thread, never in the loop thread.

    Under gevent's patching ``select.epoll`` is gone, so importing trio fails with an
    AttributeError that httpcore (httpx) does not expect when it probes for trio. trio
    is hidden for the block (we never use it); modules imported here are ready before
    the loop thread needs them.
    """
    hide = "trio" not in sys.modules and not hasattr(select, "epoll")
    if hide:
        sys.modules["trio"] = None
    try:
        yield
    finally:
        if hide and "trio" in sys.modules and sys.modules["trio"] is None:
            del sys.modules["trio"]


class BridgeClosed(RuntimeError):
    """The bridge was stopped; nothing more can run on it."""


# -- the loop ------------------------------------------------------------------------------

class _Loop(asyncio.SelectorEventLoop):
    """A selector loop that never needs a gevent hub in its own thread."""

    def __init__(self, bridge):
        super().__init__(_Selector())
        self._bridge = bridge

    def run_in_executor(self, executor, func, *args):
        if executor is not None:
            return super().run_in_executor(executor, func, *args)
        # The default executor would start patched threads: greenlets of a hub that never runs here.
        future = self.create_future()

        def work():
            try:
                result, error = func(*args), None
            except BaseException as exc:  # handed to the awaiting task
                result, error = None, exc
            try:
                self.call_soon_threadsafe(_settle, future, result, error)
            except RuntimeError:  # the loop closed meanwhile
                pass

        _start_thread(work, ())
        return future

    async def getaddrinfo(self, host, port, *, family=0, type=0, proto=0, flags=0):
        if _is_ip(host):  # nothing to look up: no thread needed
            return _getaddrinfo(host, port, family, type, proto, flags)
        return await self.run_in_executor(None, _getaddrinfo, host, port, family, type, proto, flags)

    async def getnameinfo(self, sockaddr, flags=0):
        return await self.run_in_executor(None, _getnameinfo, sockaddr, flags)

    # gevent's socket class wraps every send and recv in Python; the loop's sockets are
    # non-blocking anyway, so they are the standard ones (asyncio's code otherwise unchanged).

    def _make_self_pipe(self):
        self._ssock, self._csock = _socketpair()
        self._ssock.setblocking(False)
        self._csock.setblocking(False)
        self._internal_fds += 1
        self._add_reader(self._ssock.fileno(), self._read_from_self)

    async def create_connection(self, protocol_factory, host=None, port=None, *, sock=None, local_addr=None,
                                **kwargs):
        if sock is not None or host is None or port is None or any(v is not None for v in kwargs.values()):
            return await super().create_connection(protocol_factory, host, port, sock=sock, local_addr=local_addr,
                                                   **kwargs)
        infos = await self.getaddrinfo(host, port, type=_SOCK_STREAM)
        errors = []
        for family, kind, proto, _, address in infos:
            plain = _socket(family, kind, proto)
            try:
                plain.setblocking(False)
                if local_addr is not None:
                    plain.bind(local_addr)
                await self.sock_connect(plain, address)
            except OSError as exc:
                plain.close()
                errors.append(exc)
                continue
            except BaseException:
                plain.close()
                raise
            return await super().create_connection(protocol_factory, sock=plain)
        if not errors:
            raise OSError(f"getaddrinfo returned no address for {host!r}")
        if len(errors) == 1:
            raise errors[0]
        raise OSError(f"Multiple exceptions: {', '.join(str(e) for e in errors)}")

    async def _make_subprocess_transport(self, protocol, args, shell, stdin, stdout, stderr, bufsize,
                                         extra=None, **kwargs):
        waiter = self.create_future()
        transport = _SubprocessTransport(self, protocol, args, shell, stdin, stdout, stderr, bufsize,
                                         waiter=waiter, extra=extra, **kwargs)
        pid = transport.get_pid()
        watch = SUBPROCESS_WATCH.get()
        transport._watch = watch
        self._bridge._children[pid] = transport
        if watch is not None:
            watch.spawned(pid)
        _watch_exit(self, pid, transport)
        try:
            await waiter
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException:
            transport.close()
            await transport._wait()
            raise
        return transport


class _SubprocessTransport(base_subprocess.BaseSubprocessTransport):
    """asyncio's subprocess transport, spawning with the unpatched ``Popen``."""

    _watch = None

    def _start(self, args, shell, stdin, stdout, stderr, bufsize, **kwargs):
        self._proc = _Popen(args, shell=shell, stdin=stdin, stdout=stdout, stderr=stderr,
                            universal_newlines=False, bufsize=bufsize, **kwargs)

    def _exited(self, returncode):
        self._loop._bridge._children.pop(self.get_pid(), None)
        if self._watch is not None:
            try:
                self._watch.exited(self.get_pid(), returncode)
            except Exception:  # a watcher's bug must not lose the exit
                log.exception("subprocess watch failed")
        if self._returncode is None:
            self._process_exited(returncode)


def _watch_exit(loop, pid, transport):
    """Report the child's exit to its transport: a pidfd on Linux, else a real thread in waitpid."""
    pidfd_open = getattr(os, "pidfd_open", None)
    if pidfd_open is not None:
        try:
            fd = pidfd_open(pid)
        except OSError:  # already gone, or a kernel without pidfd
            fd = None
        if fd is not None:
            def ready():
                loop.remove_reader(fd)
                close_fd(fd)
                transport._exited(_reap(pid, os.WNOHANG, transport))
            loop.add_reader(fd, ready)
            return

    def wait():
        code = _reap(pid, 0, transport)
        try:
            loop.call_soon_threadsafe(transport._exited, code)
        except RuntimeError:
            pass

    _start_thread(wait, ())


def _reap(pid, options, transport):
    """The exit code of ``pid``.

    Someone else may have reaped it first: ``Popen.poll()`` (asyncio calls it when the
    transport closes), which keeps the code, or gevent's SIGCHLD handler, which does not
    (255 then, as asyncio's own watchers report).
    """
    try:
        got, status = _waitpid(pid, options)
    except ChildProcessError:
        code = transport._proc.returncode if transport._proc is not None else None
        return 255 if code is None else code
    if got == 0:  # WNOHANG and still running: a pidfd is readable only once it exited
        got, status = _waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def _is_ip(host):
    try:
        ipaddress.ip_address(host.decode() if isinstance(host, bytes) else host)
    except (ValueError, TypeError, UnicodeDecodeError):
        return False
    return True


def _settle(future, result, error):
    if future.cancelled():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


# -- the way back into gevent ---------------------------------------------------------------

class _Port:
    """Deliveries into one gevent hub: a deque drained by an ``async`` watcher in that hub's thread."""

    def __init__(self, hub):
        self.hub = hub
        self.items = collections.deque()
        self.waiting = 0
        self.watcher = hub.loop.async_()
        self.watcher.start(self._drain)
        # Unreferenced while nobody waits, so an idle bridge never keeps a hub from exiting.
        self.watcher.ref = False

    def send(self, item):
        """Any thread: queue ``item`` and wake the hub."""
        self.items.append(item)
        self.watcher.send()

    def hold(self):
        self.waiting += 1
        self.watcher.ref = True

    def release(self):
        self.waiting -= 1
        if self.waiting <= 0:
            self.waiting = 0
            self.watcher.ref = False

    def _drain(self):
        # Runs in the hub: nothing here may block. Callbacks get a greenlet of their own.
        items = self.items
        while items:
            target, outcome = items.popleft()
            if isinstance(target, AsyncResult):
                ok, value = outcome
                if ok:
                    target.set(value)
                else:
                    target.set_exception(value)
            else:
                gevent.spawn(target, *outcome)


class Bridge:
    """One asyncio loop in a real OS thread; see the module docstring."""

    def __init__(self, name="agenthost-asyncio"):
        self.name = name
        self._lock = _allocate_lock()
        self._loop = None
        self._thread_ident = None
        self._stopped = False
        self._ports = weakref.WeakKeyDictionary()
        self._children = {}
        self._pid = os.getpid()

    # -- lifecycle --------------------------------------------------------------------------

    @property
    def loop(self):
        """The running loop (started on first use)."""
        return self._ensure_loop()

    def _ensure_loop(self):
        if self._pid != os.getpid():
            self._reset_after_fork()
        loop = self._loop
        if loop is not None:
            return loop
        if self._stopped:
            raise BridgeClosed("the asyncio bridge is stopped")
        with self._lock:
            if self._loop is None:
                # Built here, run there: the loop thread then needs no imports of its own,
                # and calls queued before it runs simply wait in the loop's ready queue.
                loop = _Loop(self)
                _start_thread(self._run_loop, (loop,))
                self._loop = loop
        return self._loop

    def _run_loop(self, loop):
        self._thread_ident = _get_ident()
        try:
            loop.run_forever()
        finally:
            try:
                loop.run_until_complete(loop.shutdown_asyncgens())
            except Exception:
                pass
            loop.close()

    def _reset_after_fork(self):
        # A forked child (an RQ work horse) has the parent's loop object but not its thread.
        self._pid = os.getpid()
        self._lock = _allocate_lock()
        self._loop = None
        self._thread_ident = None
        self._ports = weakref.WeakKeyDictionary()
        self._children = {}

    def in_loop_thread(self):
        return self._thread_ident is not None and _get_ident() == self._thread_ident

    def stop(self, timeout=5.0):
        """Cancel what still runs, stop the loop and kill any child process it left behind."""
        loop = self._loop
        if loop is None or self._stopped:
            self._stopped = True
            return
        try:
            self.run(_cancel_all(), timeout=timeout)
        except Exception:
            pass
        self._stopped = True
        for pid in list(self._children):
            _kill_quietly(pid)
        try:
            loop.call_soon_threadsafe(loop.stop)
        except RuntimeError:
            pass
        self._loop = None

    def kill_children(self, pids):
        """SIGKILL those of ``pids`` that are still children spawned on this loop and not yet reaped."""
        for pid in pids:
            if pid in self._children:
                _kill_quietly(pid)

    # -- greenlet side ----------------------------------------------------------------------

    def port(self):
        """The delivery port of the calling thread's hub (created on first use)."""
        hub = gevent.get_hub()
        port = self._ports.get(hub)
        if port is None:
            port = self._ports[hub] = _Port(hub)
        return port

    def run(self, coro, timeout=None):
        """Run ``coro`` on the loop; block only the calling greenlet until it finishes.

        Raises what the coroutine raised, ``TimeoutError`` after ``timeout`` seconds
        (the task is cancelled then), and cancels the task when the waiting greenlet is
        killed.
        """
        if self.in_loop_thread():
            coro.close()
            raise RuntimeError("Bridge.run() called from the loop thread: await the coroutine instead")
        try:
            loop = self._ensure_loop()
        except BaseException:
            coro.close()
            raise
        port = self.port()
        result = AsyncResult()
        call = _Call(coro, result, port)
        port.hold()
        try:
            loop.call_soon_threadsafe(call.start, loop)
            # wait() never raises on its own timeout, so a caller's gevent.Timeout stays theirs.
            result.wait(timeout)
        except BaseException:
            call.cancel(loop)
            raise
        finally:
            port.release()
        if not result.ready():
            call.cancel(loop)
            raise TimeoutError(f"the call did not finish within {timeout:g} s")
        return result.get(block=False)

    def call_soon(self, fn, *args):
        """Schedule a plain callback on the loop from any thread."""
        self._ensure_loop().call_soon_threadsafe(fn, *args)

    def post(self, port, fn, *args):
        """From the loop thread: run ``fn(*args)`` in a new greenlet of ``port``'s hub."""
        port.send((fn, args))


class _Call:
    """One coroutine crossing from a greenlet to the loop and its result crossing back."""

    __slots__ = ("coro", "result", "port", "task", "cancelled")

    def __init__(self, coro, result, port):
        self.coro, self.result, self.port = coro, result, port
        self.task = None
        self.cancelled = False

    def start(self, loop):
        if self.cancelled:
            self.coro.close()
            return
        self.task = loop.create_task(self.coro)
        self.task.add_done_callback(self.done)

    def done(self, task):
        if task.cancelled():
            outcome = (False, asyncio.CancelledError())
        else:
            error = task.exception()
            outcome = (True, task.result()) if error is None else (False, error)
        self.port.send((self.result, outcome))

    def cancel(self, loop):
        self.cancelled = True
        try:
            loop.call_soon_threadsafe(self._cancel_in_loop)
        except RuntimeError:  # loop closed
            pass

    def _cancel_in_loop(self):
        if self.task is not None and not self.task.done():
            self.task.cancel()


async def _cancel_all():
    me = asyncio.current_task()
    tasks = [t for t in asyncio.all_tasks() if t is not me]
    for task in tasks:
        task.cancel()
    if tasks:
        await asyncio.wait(tasks, timeout=3)


def _kill_quietly(pid):
    try:
        os.killpg(os.getpgid(pid), signal.SIGKILL)
    except (ProcessLookupError, PermissionError, OSError):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


_bridge = None
_bridge_lock = _allocate_lock()


def bridge():
    """The process's bridge (its loop thread starts on first use)."""
    global _bridge
    if _bridge is None:
        with _bridge_lock:
            if _bridge is None:
                _bridge = Bridge()
    return _bridge
