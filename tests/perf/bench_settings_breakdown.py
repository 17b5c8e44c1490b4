"""Where an authenticated ``GET /api/settings`` spends its time, measured in one process.

Companion of bench_settings.py: no sockets and no load generator, so it is far less
sensitive to a busy machine. Each case is called through WSGI (or directly, for the
building blocks) many times; cases are interleaved over several rounds and the median
microseconds per call are printed. "floor" is floor_app.py's bare Flask ``/hello``.

    python tests/perf/bench_settings_breakdown.py [--rounds 5] [--calls 2000]
"""
from gevent import monkey

monkey.patch_all()

import argparse  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

from werkzeug.test import EnvironBuilder  # noqa: E402

import _common as c  # noqa: E402


def wsgi_call(app, path, headers):
    environ = EnvironBuilder(path=path, headers=headers).get_environ()
    statuses = []

    def start_response(status, _headers, _exc_info=None):
        statuses.append(status)

    def call():
        body = app(dict(environ), start_response)
        try:
            b"".join(body)
        finally:
            getattr(body, "close", lambda: None)()

    call()
    if not statuses[-1].startswith("200"):
        raise SystemExit(f"{path}: {statuses[-1]}")
    return call


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()

    import floor_app
    from sqlalchemy import bindparam, select

    from builtin_plugins.settings import service
    from builtin_plugins.settings.models import SettingsRow
    from builtin_plugins.settings.schemas import Settings
    from core.app import create_app
    from core.config import Config

    print("machine:", c.machine())
    data_dir = c.init_data_dir()
    app = create_app(Config({"service.auth.token": c.TOKEN, "service.data-dir": data_dir,
                             "service.log-level": "WARN"}))
    host = app.extensions["agenthost"]
    auth = {"X-Service-Token": c.TOKEN}
    value = service.get(host)
    schema = Settings()
    statement = select(SettingsRow.data).where(SettingsRow.owner == bindparam("owner"))

    def empty_session():
        with host.db.session():
            pass

    def core_select():
        with host.db.engine.connect() as conn:
            conn.execute(statement, {"owner": "local"}).scalar()

    cases = {
        "floor: bare flask GET /hello (WSGI)": wsgi_call(floor_app.app, "/hello", {}),
        "ours: GET /api/health (no token, no db)": wsgi_call(app, "/api/health", {}),
        "ours: GET /api/settings (as shipped)": wsgi_call(app, "/api/settings", auth),
        "  settings service.get(host)": lambda: service.get(host),
        "    empty db.session() (open+commit+close)": empty_session,
        "    prebuilt Core select on engine.connect()": core_select,
        "  Settings() per request: construct + dump": lambda: Settings().dump(value),
        "    module-level Settings instance: dump": lambda: schema.dump(value),
    }
    try:
        from core.launcher import _Tracked
        tracked = _Tracked(app)
        cases["ours: _Tracked(app) GET /api/health"] = wsgi_call(tracked, "/api/health", {})
    except ImportError:
        pass

    samples = {name: [] for name in cases}
    try:
        for _ in range(args.rounds):
            for name, fn in cases.items():
                for _ in range(50):
                    fn()
                t0 = time.perf_counter()
                for _ in range(args.calls):
                    fn()
                samples[name].append((time.perf_counter() - t0) / args.calls * 1e6)
    finally:
        host.stop()
        shutil.rmtree(data_dir, ignore_errors=True)
    floor = c.median(samples["floor: bare flask GET /hello (WSGI)"])
    print(f"\nmicroseconds per call, median of {args.rounds} interleaved rounds of {args.calls}")
    c.table(["case", "us", "vs floor"],
            [[name, c.median(v), c.median(v) / floor] for name, v in samples.items()])


if __name__ == "__main__":
    main()
    sys.stdout.flush()
    # Skip interpreter teardown: gevent-patched logging locks print noise there.
    os._exit(0)
