"""A host process for the kill tests: serves an app with fast schedule timings on a loopback port.

``python -m tests.schedules.host_process DATA_DIR TOKEN [--pause-in-fire]``. With
``--pause-in-fire`` the process prints ``FIRE_IN_PROGRESS`` and stops inside the
first fire's transaction (after the claim and the run row, at the task row), so
the test can SIGKILL it there.
"""
from gevent import monkey

monkey.patch_all()

import sys  # noqa: E402
import time  # noqa: E402

from sqlalchemy import event  # noqa: E402

from core.app import create_app  # noqa: E402
from core.config import Config  # noqa: E402
from core.launcher import serve  # noqa: E402
from hookspecs import hookimpl  # noqa: E402
from tests.schedules.support import FAST, EchoTool  # noqa: E402


class PauseInFire:
    __name__ = "pause_in_fire"

    @hookimpl
    def startup(self, host):
        @event.listens_for(host.db.engine, "after_cursor_execute")
        def pause(conn, cursor, statement, parameters, context, executemany):
            if statement.lstrip().upper().startswith("INSERT INTO TASKS") and "schedule:" in repr(parameters):
                sys.stdout.write("FIRE_IN_PROGRESS\n")
                sys.stdout.flush()
                time.sleep(60)  # the test kills the process here, mid-transaction


def main(data_dir, token, *flags):
    plugins = [EchoTool()] + ([PauseInFire()] if "--pause-in-fire" in flags else [])
    config = Config({"service.auth.token": token, "service.data-dir": data_dir, "service.log-level": "WARN",
                     **FAST, "schedules.missed-grace-seconds": 0.2})
    serve(create_app(config, plugins, load_entry_points=False), 0)


if __name__ == "__main__":
    main(*sys.argv[1:])
