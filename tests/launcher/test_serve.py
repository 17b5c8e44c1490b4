"""``core serve``: loopback binding, the port announcement and fallback, the token, shutdown."""
import errno
import signal
import socket
import time

import pytest
import requests

from core import datasource as ds_file
from core.config import DEFAULT_PORT
from tests.conftest import TOKEN

HEADERS = {"X-Service-Token": TOKEN}


def listening_addresses(port):
    """Local addresses with a TCP socket listening on ``port``, from /proc/net/tcp{,6}."""
    found = set()
    for table, width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        with open(table) as fh:
            next(fh)
            for row in fh:
                cols = row.split()
                addr, hexport = cols[1].split(":")
                if cols[3] == "0A" and int(hexport, 16) == port:
                    if width == 8:
                        found.add(socket.inet_ntoa(bytes.fromhex(addr)[::-1]))
                    else:
                        found.add(addr)
    return found


def outward_address():
    """This machine's address on its default route (no packet is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect(("192.0.2.1", 9))
        return s.getsockname()[0]


def connect_fails(addr, port):
    try:
        socket.create_connection((addr, port), timeout=2).close()
    except OSError:
        return True
    return False


def app_mode(data_dir):
    """Point the data directory at an embedded database so the host starts in APP mode."""
    ds_file.write(data_dir, {"type": "sqlite", "params": {}})
    return data_dir


def open_notification_stream(base, headers):
    minted = requests.post(f"{base}/api/notifications/stream-ticket", headers=headers, timeout=5)
    resp = requests.get(f"{base}/api/notifications/stream",
                        params={"ticket": minted.json()["ticket"]}, stream=True, timeout=10)
    assert resp.status_code == 200
    lines = resp.iter_lines(decode_unicode=True)
    assert next(lines) == ": connected"
    return resp, lines


def occupy(port):
    """A listening socket on 127.0.0.1:port, or None when someone else already listens there."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind(("127.0.0.1", port))
        sock.listen(1)
    except OSError as exc:
        sock.close()
        if exc.errno != errno.EADDRINUSE:
            raise
        return None
    return sock


def wait_until_free(port, seconds=5):
    """The default-port rule needs 24056 free; another launcher test may just be releasing it."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
            return
        except OSError:
            time.sleep(0.1)
        finally:
            sock.close()
    pytest.fail(f"port {port} is held by another process; the default-port rule cannot be checked")


def test_port_zero_binds_loopback_only_and_announces_when_accepting(launch, data_dir):
    """--port=0: an assigned port on 127.0.0.1 alone, announced once connections are accepted."""
    served = launch(f"--token={TOKEN}", "--port=0", f"--data-dir={data_dir}")
    assert served.port not in (0, DEFAULT_PORT)
    # Straight after the line, with no retry: the announcement promises a listening socket.
    with socket.create_connection(("127.0.0.1", served.port), timeout=5) as conn:
        conn.sendall(b"GET /api/health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        assert conn.recv(64).startswith(b"HTTP/1.1 200")

    assert listening_addresses(served.port) == {"127.0.0.1"}
    assert connect_fails(outward_address(), served.port)
    # All of 127/8 is loopback on Linux: only a wildcard bind would answer on 127.0.0.2.
    assert connect_fails("127.0.0.2", served.port)
    assert "SERVICE_TOKEN" not in served.lines  # a given token is never echoed
    code, _, err = served.finish()
    assert code == 0, err


def test_default_port_is_24056_and_a_missing_token_is_generated(launch, data_dir):
    """No --port and no --token: 24056, and a random token announced as SERVICE_TOKEN."""
    wait_until_free(DEFAULT_PORT)
    served = launch(f"--data-dir={app_mode(data_dir)}")
    assert served.port == DEFAULT_PORT
    token = served.token
    assert token and len(token) >= 32 and token != TOKEN
    assert requests.get(f"{served.url}/api/settings", headers={"X-Service-Token": token},
                        timeout=5).status_code == 200
    assert requests.get(f"{served.url}/api/settings", headers=HEADERS, timeout=5).status_code == 401
    code, _, err = served.finish()
    assert code == 0, err
    assert token not in err


def test_taken_default_port_falls_back_to_an_assigned_port(launch, data_dir):
    blocker = occupy(DEFAULT_PORT)
    try:
        served = launch(f"--token={TOKEN}", f"--data-dir={data_dir}")
        assert served.port not in (0, DEFAULT_PORT)
        assert listening_addresses(served.port) == {"127.0.0.1"}
        assert requests.get(f"{served.url}/api/health", timeout=5).status_code == 200
    finally:
        if blocker:
            blocker.close()
    code, _, err = served.finish()
    assert code == 0, err


def test_the_launch_token_is_what_every_request_must_carry(launch, data_dir):
    served = launch("--token=launch-value-123456", "--port=0", f"--data-dir={app_mode(data_dir)}")
    url = f"{served.url}/api/settings"
    good = {"X-Service-Token": "launch-value-123456"}
    assert requests.get(url, headers=good, timeout=5).status_code == 200
    for headers in ({}, {"X-Service-Token": "launch-value-12345"},
                    {"X-Service-Token": "LAUNCH-VALUE-123456"}):
        resp = requests.get(url, headers=headers, timeout=5)
        assert resp.status_code == 401
        assert resp.headers["Content-Type"].startswith("application/problem+json")
    in_url = requests.get(url, params={"token": "launch-value-123456"}, timeout=5)
    assert in_url.status_code == 401  # a token in the URL is never a credential


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_shuts_down_cleanly_with_an_open_stream(launch, data_dir, sig):
    """Exit code 0, the open notification stream ends, no traceback, the token not logged."""
    served = launch(f"--token={TOKEN}", "--port=0", f"--data-dir={app_mode(data_dir)}",
                    "--log-level=DEBUG")
    # Requests that log at several levels, including refused ones, before shutting down.
    requests.get(f"{served.url}/api/settings", headers=HEADERS, timeout=5).raise_for_status()
    requests.get(f"{served.url}/api/settings", headers={"X-Service-Token": TOKEN + "x"}, timeout=5)
    resp, lines = open_notification_stream(served.url, HEADERS)

    served.proc.send_signal(sig)
    rest = list(lines)  # returns only when the server ends the stream
    resp.close()
    assert all(line == "" or line.startswith(":") for line in rest)
    code, out, err = served.finish(sig)
    assert code == 0, err
    assert "Traceback" not in err
    assert TOKEN not in err
    assert TOKEN not in out
