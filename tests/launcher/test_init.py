"""``core init``, the startup probe of ``core serve``, and settings surviving SIGKILL."""
import socket
import stat

import requests

from core import datasource as ds_file
from tests.launcher.conftest import run_core


def test_init_creates_the_embedded_database_and_is_repeatable(serve_process, data_dir):
    first = run_core("init", f"--data-dir={data_dir}")
    assert first.returncode == 0, first.stderr
    assert ds_file.read(data_dir) == {"type": "sqlite", "params": {}}
    assert stat.S_IMODE((data_dir / ds_file.FILE).stat().st_mode) == 0o600
    assert (data_dir / ds_file.DEFAULT_SQLITE_FILE).stat().st_size > 0
    config = (data_dir / ds_file.FILE).read_bytes()

    second = run_core("init", f"--data-dir={data_dir}")
    assert second.returncode == 0, second.stderr
    assert (data_dir / ds_file.FILE).read_bytes() == config
    assert "Traceback" not in first.stderr + second.stderr

    served = serve_process(data_dir)
    resp = requests.get(served.url + "/api/settings", headers=served.headers, timeout=10)
    assert resp.status_code == 200
    assert requests.get(served.url + "/api/setup/status", timeout=10).status_code == 404


def test_serve_with_an_unreachable_database_starts_in_setup_mode(serve_process, data_dir):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ds_file.write(data_dir, {"type": "postgresql", "params": {"host": "127.0.0.1", "port": port,
                                                              "database": "x", "user": "u"}})
    config = (data_dir / ds_file.FILE).read_bytes()
    served = serve_process(data_dir)
    assert requests.get(served.url + "/api/health", timeout=10).json() == {"status": "ok"}
    assert requests.get(served.url + "/api/setup/status", timeout=10).json()["initialized"] is False
    resp = requests.get(served.url + "/api/settings", headers=served.headers, timeout=10)
    assert resp.json()["code"] == "service_in_setup_mode"
    assert (data_dir / ds_file.BACKUP).read_bytes() == config


def test_a_committed_setting_survives_sigkill(serve_process, data_dir):
    ds_file.write(data_dir, {"type": "sqlite", "params": {}})
    served = serve_process(data_dir)
    resp = requests.put(served.url + "/api/settings", json={"theme": "dark", "language": "fr"},
                        headers=served.headers, timeout=10)
    assert resp.status_code == 200
    served.proc.kill()
    served.proc.wait(10)

    again = serve_process(data_dir)
    settings = requests.get(again.url + "/api/settings", headers=again.headers, timeout=10).json()
    assert (settings["theme"], settings["language"]) == ("dark", "fr")


def test_init_over_an_unusable_config_keeps_a_backup(data_dir):
    (data_dir / ds_file.FILE).write_bytes(b"type=oracle\n")
    result = run_core("init", f"--data-dir={data_dir}")
    assert result.returncode == 0, result.stderr
    assert ds_file.read(data_dir)["type"] == "sqlite"
    assert (data_dir / ds_file.BACKUP).read_bytes() == b"type=oracle\n"
