"""The Host: what every hook receives (config, database, events, tickets, tools, plugins)."""
import logging
from pathlib import Path
import threading
from urllib.parse import quote, quote_plus

from . import datasource as ds_file
from .db import Database
from .events import EventBus
from .tickets import TicketBook
from .tools import ToolCatalog

log = logging.getLogger("agenthost.host")

SETUP, APP = "SETUP", "APP"
CORE_MIGRATIONS = Path(__file__).with_name("migrations") / "versions"

LOG_LEVELS = {"TRACE": 5, "DEBUG": logging.DEBUG, "INFO": logging.INFO,
              "WARN": logging.WARNING, "ERROR": logging.ERROR}


class ModeError(RuntimeError):
    """The database could not be brought up; the host stays in (or returns to) SETUP mode."""


class AlreadyInitialized(ModeError):
    """initialize raced another initialize that won: the host is in APP mode already."""


class Host:
    def __init__(self, config, plugins):
        self.config = config
        self.plugins = plugins
        self.pm = plugins.pm
        if config.get("service.redis-url"):
            from .events import RedisEventBus
            self.events = RedisEventBus(config["service.redis-url"], config["sse.queue-size"],
                                        config.get("service.redis-namespace") or "agenthost")
            self.events.start()
        else:
            self.events = EventBus(config["sse.queue-size"])
        self.tickets = TicketBook(config["tickets.ttl-seconds"])
        self.tools = ToolCatalog()
        self.services = {}  # name -> object other areas may use (see provide/service)
        self.db = None
        self.tasks = None  # core.tasks.TaskQueue while in APP mode
        self.mode = SETUP
        self.app = None
        self.stopping = False
        self._mode_lock = threading.RLock()

    @property
    def data_dir(self):
        return self.config.data_dir

    # Services that one area offers to others, so no area imports another's internals.
    def provide(self, name, service):
        self.services[name] = service

    def service(self, name):
        return self.services.get(name)

    def boot(self):
        """Pick the start mode: APP when the stored datasource answers the probe, else SETUP."""
        stored = ds_file.read(self.data_dir)
        if stored is None:
            if ds_file.exists(self.data_dir):
                # An unreadable config counts as a failed probe: keep a copy before the
                # wizard writes over it.
                self._backup_config("datasource.properties is not usable")
            else:
                log.info("no datasource configured: SETUP mode")
            return self.mode
        try:
            self.enter_app_mode(stored)
        except ModeError as exc:
            self._backup_config(f"database probe failed ({exc})")
        return self.mode

    def _backup_config(self, reason):
        try:
            ds_file.backup(self.data_dir)
        except OSError as exc:
            log.error("%s, and the config could not be backed up (%s): SETUP mode",
                      reason, exc.strerror)
            return
        log.warning("%s: config backed up to %s, SETUP mode", reason, ds_file.BACKUP)

    def open_database(self, datasource):
        """Connect and probe; raises ModeError with a message safe to show."""
        timeout = self.config["datasource.probe-timeout-seconds"]
        try:
            db = Database.from_datasource(self.data_dir, datasource, timeout)
        except ValueError as exc:
            raise ModeError(str(exc)) from None
        except OSError:
            # The OS message names a host path; the person only needs to know where to look.
            raise ModeError(
                "the database file could not be created in the data directory") from None
        try:
            db.probe()
        except Exception as exc:
            db.dispose()
            raise ModeError(describe_db_error(exc, datasource)) from None
        return db

    def migration_folders(self):
        """``[(plugin name, [Alembic version folders])]`` of every enabled plugin."""
        results = self.plugins.call_each("register_models", registry=True, host=self)
        return [(name, list(folders)) for name, folders in results if folders]

    def migrate(self, db):
        """Each plugin's migrations with its own version table.

        A builtin's failure stops APP mode; an extension's failure drops that extension only.
        The kernel's own tables (the task queue) come first.
        """
        db.migrate([CORE_MIGRATIONS], version_table=db.version_table("core"))
        for name, folders in self.migration_folders():
            try:
                db.migrate(folders, version_table=db.version_table(name))
            except Exception as exc:
                if self.plugins.is_builtin(name):
                    raise
                log.exception("migrations of extension %s failed", name)
                self.plugins.fail(name, exc)

    def enter_app_mode(self, datasource, db=None):
        with self._mode_lock:
            if self.mode == APP:
                return
            db = db or self.open_database(datasource)
            try:
                self.migrate(db)
            except Exception as exc:
                db.dispose()
                log.exception("migrations failed")
                raise ModeError("the database schema could not be migrated") from exc
            self.db = db
            if self.role == "host":
                db.start_background_checkpoints(float(self.config.get("service.sqlite-checkpoint-seconds", 1.0)))
            from .tasks import TaskQueue
            self.tasks = TaskQueue(self)
            # Services come up before the mode flips, so no request sees APP mode without them.
            self.plugins.notify("startup", host=self)
            self.tasks.start()  # after startup hooks: every task kind is registered
            self.mode = APP
            log.info("APP mode on %s", db.kind)

    def initialize(self, datasource):
        """Probe, migrate, switch to APP mode, then persist the datasource (the wizard's initialize)."""
        with self._mode_lock:
            if self.mode == APP:
                raise AlreadyInitialized("the service is already initialized")
            db = self.open_database(datasource)
            self.enter_app_mode(datasource, db=db)
            try:
                # A config being replaced (one the probe refused, or an unreadable one) is kept.
                ds_file.backup(self.data_dir)
                ds_file.write(self.data_dir, datasource)
            except OSError:
                self.enter_setup_mode()
                raise ModeError("the configuration could not be saved in the data directory") from None

    def enter_setup_mode(self):
        """Leave APP mode: end streams, run shutdown hooks, release the database."""
        with self._mode_lock:
            if self.mode == SETUP:
                return
            # New requests get the SETUP answer at once; the database stays for the shutdown hooks.
            self.mode = SETUP
            self.events.close_all()
            if self.tasks is not None:
                self.tasks.stop()
                self.tasks = None
            self.plugins.notify("shutdown", host=self)
            self.services.clear()
            db, self.db = self.db, None
            if db is not None:
                db.dispose()
            log.info("database released" if self.stopping else "SETUP mode")

    def reset_datasource(self):
        """Back up and clear the stored config, then return to SETUP mode."""
        ds_file.clear(self.data_dir)
        self.enter_setup_mode()

    def set_log_level(self, name):
        logging.getLogger("agenthost").setLevel(LOG_LEVELS.get(name, logging.INFO))

    @property
    def instance_id(self):
        """A stable identity of this host: kept in its data directory, so it survives restarts."""
        if getattr(self, "_instance_id", None) is None:
            import uuid
            path = Path(self.data_dir) / "host-id"
            try:
                self._instance_id = path.read_text(encoding="utf-8").strip() or None
            except OSError:
                self._instance_id = None
            if self._instance_id is None:
                self._instance_id = str(uuid.uuid4())
                path.write_text(self._instance_id + "\n", encoding="utf-8")
        return self._instance_id

    @property
    def role(self):
        """``host`` (serves the API, dispatches tasks) or ``worker`` (``core worker``: runs task bodies)."""
        return self.config.get("service.role", "host")

    def stop(self):
        """Clean shutdown: streams closed, shutdown hooks run, database released."""
        self.stopping = True
        self.enter_setup_mode()
        self.events.close_all()
        if hasattr(self.events, "stop"):
            self.events.stop()


def describe_db_error(exc, datasource):
    """A one-line reason for a failed probe, with no password, SQL or traceback in it."""
    orig = getattr(exc, "orig", None) or exc
    text = str(orig).strip().splitlines()[0] if str(orig).strip() else type(orig).__name__
    password = (datasource.get("params") or {}).get("password")
    if password:
        password = str(password)
        for form in {password, quote(password, safe=""), quote_plus(password, safe="")}:
            text = text.replace(form, "***")
    # Keep driver messages short: enough for a person to fix their settings.
    return text[:300]
