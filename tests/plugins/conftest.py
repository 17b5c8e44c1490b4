"""Plugin-test fixtures: the example extension pip-installed, throwaway distributions, the ``core`` CLI."""
import importlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, distribution, version
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HELLO_SRC = REPO / "examples" / "extension-hello"
HELLO_DIST = "agenthost-hello"


def purge_modules(*prefixes):
    """Forget imported modules so a later import sees what is installed now."""
    for mod in list(sys.modules):
        if mod.split(".")[0] in prefixes:
            del sys.modules[mod]
    importlib.invalidate_caches()


def run_core(*args, home, pythonpath=None, check=True):
    """Run ``python -m core ARGS`` in a child process with its own $AGENTHOST_HOME."""
    env = {**os.environ, "AGENTHOST_HOME": str(home)}
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join([str(pythonpath), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    proc = subprocess.run([sys.executable, "-m", "core", *map(str, args)], env=env,
                          capture_output=True, text=True, timeout=60)
    if check:
        assert proc.returncode == 0, f"core {' '.join(map(str, args))} failed: {proc.stdout}{proc.stderr}"
    return proc


def invoke(*args, home):
    """Run ``core ARGS`` in this process (click's runner), with its own $AGENTHOST_HOME.

    The builtin group only: extensions' commands are added by the console script.
    """
    from click.testing import CliRunner

    from core.cli import cli

    return CliRunner().invoke(cli, [str(a) for a in args], env={"AGENTHOST_HOME": str(home)})


def plugins_json(home, data_dir=None, pythonpath=None):
    """``core plugins list --json`` as a dict keyed by plugin name."""
    args = ["plugins", "list", "--json"] + ([f"--data-dir={data_dir}"] if data_dir else [])
    proc = run_core(*args, home=home, pythonpath=pythonpath)
    return {r["name"]: r for r in json.loads(proc.stdout)}


def _pip(*args):
    proc = subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", *args],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"pip {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc


def _can_build_without_isolation():
    """Installed setuptools can build a wheel by itself (>= 70.1) or with ``wheel`` beside it."""
    if importlib.util.find_spec("wheel") is not None:
        return True
    try:
        major, minor = (int(p) for p in version("setuptools").split(".")[:2])
    except (PackageNotFoundError, ValueError):
        return False
    return (major, minor) >= (70, 1)


@dataclass
class Installed:
    version: str
    site: Path  # the folder it is installed in: on sys.path here, on PYTHONPATH for child processes


@pytest.fixture(scope="session")
def hello_installed(tmp_path_factory):
    """pip-install examples/extension-hello for this test session; remove it afterwards.

    A real ``pip install`` (wheel built from the pyproject, ``.dist-info`` with
    the entry point), into a folder of this session put on ``sys.path`` rather
    than into site-packages: test runs sharing one Python (xdist workers,
    several runs on one machine) would otherwise uninstall it under each other,
    and a killed run would leave it loaded by every host on the machine.

    The source is copied first because pip builds in the source tree (build/,
    *.egg-info). Without ``wheel`` the build runs in pip's isolated
    environment, which uses the configured (local) index.
    """
    base = tmp_path_factory.mktemp("hello")
    src, site = base / "extension-hello", base / "site"
    shutil.copytree(HELLO_SRC, src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    args = ["install", "--no-deps", "--target", str(site)]
    if _can_build_without_isolation():
        args += ["--no-index", "--no-build-isolation"]
    _pip(*args, str(src))
    sys.path.insert(0, str(site))
    purge_modules("agenthost_hello")
    try:
        yield Installed(distribution(HELLO_DIST).version, site)
    finally:
        sys.path.remove(str(site))
        purge_modules("agenthost_hello")
        shutil.rmtree(site, ignore_errors=True)


@pytest.fixture
def fake_dist(tmp_path, monkeypatch):
    """``fake_dist(name, entry_points, modules)`` -> a folder holding an installed-looking distribution.

    It has a real ``.dist-info`` (METADATA, entry_points.txt), so
    ``importlib.metadata`` finds its ``agenthost`` entry points once the folder
    is on ``sys.path`` (done here) or on ``PYTHONPATH`` (for child processes).
    """
    root = tmp_path / "site"
    root.mkdir()
    made = []

    def make(dist_name, entry_points, modules, dist_version="0.0.1"):
        info = root / f"{dist_name}-{dist_version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {dist_name}\nVersion: {dist_version}\n", encoding="utf-8")
        lines = ["[agenthost]"] + [f"{k} = {v}" for k, v in entry_points.items()]
        (info / "entry_points.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
        for module, source in modules.items():
            (root / f"{module}.py").write_text(source, encoding="utf-8")
            made.append(module)
        return root

    monkeypatch.syspath_prepend(str(root))
    yield make
    purge_modules(*made)
