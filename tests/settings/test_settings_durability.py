"""A committed settings update survives the host being killed with SIGKILL."""
import signal

import requests

from core import datasource as ds_file
from tests.settings.test_settings import DEFAULTS


def test_committed_settings_survive_sigkill(serve_process, tmp_path, fresh_datasource):
    data_dir = tmp_path / "home"
    ds_file.write(data_dir, fresh_datasource("sqlite"))
    host = serve_process(data_dir)
    change = {"theme": "dark", "computerUse": {"allowedApps": ["Terminal"]}}
    resp = requests.put(host.url + "/api/settings", json=change, headers=host.headers, timeout=10)
    assert resp.status_code == 200
    assert host.stop(signal.SIGKILL) == -signal.SIGKILL

    again = serve_process(data_dir)
    got = requests.get(again.url + "/api/settings", headers=again.headers, timeout=10).json()
    assert got == {**DEFAULTS, "theme": "dark",
                   "computerUse": {**DEFAULTS["computerUse"], "allowedApps": ["Terminal"]}}
