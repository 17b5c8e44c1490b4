"""One app for a whole test module, for rules that only read state (saves a build per case)."""
import secrets

from core import datasource as ds_file
from core.app import create_app
from core.config import Config
from tests.conftest import TOKEN


def module_app(tmp_path_factory, plugins=(), config=None):
    """Yield an APP-mode app on a fresh embedded database; stops its host afterwards."""
    data_dir = tmp_path_factory.mktemp("data")
    ds_file.write(data_dir, {"type": "sqlite", "params": {"path": f"db-{secrets.token_hex(4)}.sqlite"}})
    values = {"service.auth.token": TOKEN, "service.data-dir": str(data_dir), **(config or {})}
    app = create_app(Config(values), plugins, load_entry_points=False)
    try:
        yield app
    finally:
        app.extensions["agenthost"].stop()
