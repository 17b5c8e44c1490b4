"""Fixtures of the workflow tests: one app per module (modules override it for their own plugins)."""
import pytest

from tests.conftest import HEADERS
from tests.core.shared_app import module_app
from tests.workflows.support import FlowTools, create


@pytest.fixture(scope="module")
def shared_app(tmp_path_factory):
    yield from module_app(tmp_path_factory, plugins=[FlowTools()])


@pytest.fixture
def client(shared_app):
    """One app for the module: each test reads and writes workflows of its own."""
    return shared_app.test_client()


@pytest.fixture
def unchanged(client):
    """A fresh workflow, then a check after the test that no definition changed."""
    wf = create(client)
    before = client.get("/api/workflows", headers=HEADERS).json
    yield wf
    assert client.get("/api/workflows", headers=HEADERS).json == before
    client.delete(f"/api/workflows/{wf['id']}", headers=HEADERS)  # keeps the shared list short
