"""Runtime-plugin fixtures: an app with fast fault timings, its client, and the hello example zipped."""
import pytest

from tests.runtime_plugins.support import FAST, HELLO_DIR, authed, zip_folder


@pytest.fixture
def rt_app(make_app):
    return make_app(config=FAST)


@pytest.fixture
def rt(rt_app):
    """An authenticated test client of ``rt_app``."""
    return authed(rt_app)


@pytest.fixture(scope="session")
def hello_zip():
    return zip_folder(HELLO_DIR)
