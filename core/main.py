"""Console entry point of ``core``: gevent patches the standard library before anything else loads."""
from gevent import monkey

monkey.patch_all()

import logging  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402


def main(argv=None):
    import click

    from core.cli import build_cli

    try:
        code = build_cli().main(args=argv, prog_name="core", standalone_mode=False)
        code = code if isinstance(code, int) else 0
    except click.exceptions.Abort:
        click.echo("Aborted!", err=True)
        code = 1
    except click.ClickException as exc:
        exc.show()
        code = exc.exit_code
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    # Finish here rather than in interpreter teardown, where gevent's patched locks
    # make logging's handler cleanup print spurious "greenlet is being finalized" noise.
    sys.stdout.flush()
    sys.stderr.flush()
    logging.shutdown()
    os._exit(code)


if __name__ == "__main__":
    main()
