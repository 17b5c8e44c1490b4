"""Notification test fixtures: a live stream opener that closes what it opened."""
import pytest
import requests

from core import datasource as ds_file
from core.app import create_app
from core.config import Config
from tests.conftest import TOKEN
from tests.notifications.support import SSEStream


@pytest.fixture
def open_stream():
    """``open_stream(base_url, client)`` mints a ticket with ``client`` and opens the stream."""
    streams = []

    def open_(base_url, client):
        ticket = client.post("/api/notifications/stream-ticket").json["ticket"]
        resp = requests.get(f"{base_url}/api/notifications/stream", params={"ticket": ticket},
                            stream=True, timeout=10)
        assert resp.status_code == 200, resp.text
        stream = SSEStream(resp)
        streams.append(stream)
        return stream

    yield open_
    for stream in streams:
        stream.close()


@pytest.fixture(scope="module")
def shared_app(tmp_path_factory):
    """One embedded-SQLite app for a module of tests that each leave it unchanged.

    Building an app runs every migration, which dominates the cost of a short test;
    the bad-input tests compare state before and after instead of needing a fresh app.
    """
    data_dir = tmp_path_factory.mktemp("shared")
    ds_file.write(data_dir, {"type": "sqlite", "params": {}})
    app = create_app(Config({"service.auth.token": TOKEN, "service.data-dir": str(data_dir)}),
                     load_entry_points=False)
    yield app
    app.extensions["agenthost"].stop()
