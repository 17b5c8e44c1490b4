"""Launcher fixtures: ``core`` child processes started with exactly the arguments a test gives."""
import os
import signal
import subprocess
import sys

import gevent
import pytest


class Launched:
    """A ``core serve`` child and the protocol lines it announced on stdout."""

    def __init__(self, proc, lines):
        self.proc = proc
        self.lines = lines  # e.g. {"SERVICE_TOKEN": "...", "SERVICE_PORT": "24056"}
        self.port = int(lines["SERVICE_PORT"])
        self.url = f"http://127.0.0.1:{self.port}"
        self.token = lines.get("SERVICE_TOKEN")

    def finish(self, sig=signal.SIGTERM, timeout=15):
        """Send ``sig`` and wait (bounded); returns ``(exit code, stdout rest, stderr)``."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, err = self.proc.communicate(timeout=5)
            raise AssertionError(f"core serve did not exit within {timeout}s after {sig!r}: {err}")
        return self.proc.returncode, out, err


def core_command(*args):
    return [sys.executable, "-m", "core", *args]


@pytest.fixture
def launch():
    """``launch(*args)`` runs ``core serve *args`` and returns once SERVICE_PORT is announced."""
    started = []

    def start(*args, timeout=20):
        proc = subprocess.Popen(core_command("serve", *args), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=dict(os.environ))
        lines = {}
        try:
            with gevent.Timeout(timeout):
                while "SERVICE_PORT" not in lines:
                    line = proc.stdout.readline()
                    if not line:
                        break
                    key, sep, value = line.strip().partition("=")
                    if sep:
                        lines[key] = value
        except gevent.Timeout:
            pass
        if "SERVICE_PORT" not in lines:
            proc.kill()
            _, err = proc.communicate(timeout=5)
            raise AssertionError(f"core serve did not announce a port: {lines} {err}")
        launched = Launched(proc, lines)
        started.append(launched)
        return launched

    yield start
    for launched in started:
        if launched.proc.poll() is None:
            launched.proc.kill()
            launched.proc.communicate(timeout=5)


def run_core(*args, timeout=30):
    """Run a one-shot ``core`` command; returns the CompletedProcess."""
    return subprocess.run(core_command(*args), capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ))
