"""Run ``core serve``'s start-up steps one by one and print how long each took (JSON, one line).

Used by bench_startup.py: ``python _startup_phases.py DATA_DIR [--profile-boot]``. It calls
the same public functions the real ``serve`` path calls, in the same order. With
``--profile-boot`` the host's boot runs under cProfile instead, and the line lists the
cumulative time of its parts (probe, migrations, each plugin's startup hook).
"""
import time

T0 = time.perf_counter()

from gevent import monkey  # noqa: E402

monkey.patch_all()
T_PATCH = time.perf_counter()

import json  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def main(data_dir):
    marks = [("gevent patch_all", T_PATCH - T0)]
    t = time.perf_counter()

    def mark(name):
        nonlocal t
        now = time.perf_counter()
        marks.append((name, now - t))
        t = now

    from core.cli import build_cli
    mark("import core.cli")
    build_cli()
    mark("build_cli (plugins' commands)")
    from core.app import create_app
    from core.config import Config
    from core.launcher import bind
    mark("import core.app (flask, sqlalchemy, ...)")
    app = create_app(Config({"service.auth.token": "t", "service.data-dir": data_dir}), start=False)
    mark("create_app (load plugins, mount routes)")
    if "--profile-boot" in sys.argv:
        print(json.dumps(profile_boot(app.extensions["agenthost"])), flush=True)
        app.extensions["agenthost"].stop()
        return
    app.extensions["agenthost"].boot()
    mark("host.boot (probe, migrations, startup hooks)")
    from gevent.pywsgi import WSGIServer
    server = WSGIServer(bind(0), app, log=None)
    server.start()
    mark("bind + server start")
    print(json.dumps(marks), flush=True)
    app.extensions["agenthost"].stop()
    server.stop(timeout=1)


def profile_boot(host):
    """Cumulative seconds (under cProfile, so inflated) of the parts of ``host.boot()``."""
    import cProfile
    import pstats

    profiler = cProfile.Profile()
    profiler.runcall(host.boot)
    stats = pstats.Stats(profiler).stats
    parts = [("host.boot, all of it", _cumulative(stats, "core/host.py", "boot"))]
    for name in ("open_database", "migrate"):
        parts.append((f"host.{name}", _cumulative(stats, "core/host.py", name)))
    for (path, _line, func), row in stats.items():
        if func == "startup" and "/builtin_plugins/" in path:
            area = path.split("/builtin_plugins/")[1].split("/")[0]
            parts.append((f"startup hook: {area}", row[3]))
    for (path, _line, func), row in stats.items():
        if func == "start" and path.endswith("core/tasks.py"):
            parts.append(("tasks.start", row[3]))
    return sorted(parts, key=lambda kv: -kv[1])


def _cumulative(stats, path_end, func):
    return sum(row[3] for (path, _line, name), row in stats.items()
               if name == func and path.endswith(path_end))


if __name__ == "__main__":
    main(sys.argv[1])
    sys.stdout.flush()
    # Skip interpreter teardown: gevent-patched logging locks print noise there.
    import os
    os._exit(0)
