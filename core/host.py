"""The Host: what every hook receives (config, database, events, tickets, tools, plugins)."""
import logging
import threading

from . import datasource as ds_file
from .db import Database
from .events import EventBus
from .tickets import TicketBook
from .tools import ToolCatalog

log = logging.getLogger("agenthost.host")

SETUP, APP = "SETUP", "APP"

LOG_LEVELS = {"TRACE": 5, "DEBUG": logging.DEBUG, "INFO": logging.INFO,
              "WARN": logging.WARNING, "ERROR": logging.ERROR}


class ModeError(RuntimeError):
    """The database could not be brought up; the host stays in (or returns to) SETUP mode."""


class Host:
    def __init__(self, config, plugins):
        self.config = config
        self.plugins = plugins
        self.pm = plugins.pm
        self.events = EventBus(config["sse.queue-size"])
        self.tickets = TicketBook(config["tickets.ttl-seconds"])
        self.tools = ToolCatalog()
        self.services = {}  # name -> object other areas may use (see provide/service)
        self.db = None
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
            log.info("no datasource configured: SETUP mode")
            return self.mode
        try:
            self.enter_app_mode(stored)
        except ModeError as exc:
            ds_file.backup(self.data_dir)
            log.warning("database probe failed (%s): config backed up, SETUP mode", exc)
        return self.mode

    def open_database(self, datasource):
        """Connect and probe; raises ModeError with a message safe to show."""
        timeout = self.config["datasource.probe-timeout-seconds"]
        try:
            db = Database.from_datasource(self.data_dir, datasource, timeout)
        except ValueError as exc:
            raise ModeError(str(exc)) from None
        try:
            db.probe()
        except Exception as exc:
            db.dispose()
            raise ModeError(describe_db_error(exc, datasource)) from None
        return db

    def enter_app_mode(self, datasource, db=None):
        with self._mode_lock:
            if self.mode == APP:
                return
            db = db or self.open_database(datasource)
            try:
                folders = [f for _, result in self.plugins.call_each("register_models", registry=True, host=self)
                           for f in (result or [])]
                db.migrate(folders)
            except Exception as exc:
                db.dispose()
                log.exception("migrations failed")
                raise ModeError("the database schema could not be migrated") from exc
            self.db = db
            self.mode = APP
            self.plugins.notify("startup", host=self)
            log.info("APP mode on %s", db.kind)

    def initialize(self, datasource):
        """Probe, migrate, switch to APP mode, then persist the datasource (the wizard's initialize)."""
        with self._mode_lock:
            if self.mode == APP:
                raise ModeError("the service is already initialized")
            db = self.open_database(datasource)
            self.enter_app_mode(datasource, db=db)
            try:
                ds_file.write(self.data_dir, datasource)
            except OSError:
                self.enter_setup_mode()
                raise ModeError("the configuration could not be saved in the data directory") from None

    def enter_setup_mode(self):
        """Leave APP mode: end streams, run shutdown hooks, release the database."""
        with self._mode_lock:
            if self.mode == SETUP:
                return
            self.events.close_all()
            self.plugins.notify("shutdown", host=self)
            self.services.clear()
            db, self.db, self.mode = self.db, None, SETUP
            if db is not None:
                db.dispose()
            log.info("SETUP mode")

    def reset_datasource(self):
        """Back up and clear the stored config, then return to SETUP mode."""
        ds_file.clear(self.data_dir)
        self.enter_setup_mode()

    def set_log_level(self, name):
        logging.getLogger("agenthost").setLevel(LOG_LEVELS.get(name, logging.INFO))

    def stop(self):
        """Clean shutdown: streams closed, shutdown hooks run, database released."""
        self.stopping = True
        self.enter_setup_mode()
        self.events.close_all()


def describe_db_error(exc, datasource):
    """A one-line reason for a failed probe, with no password, SQL or traceback in it."""
    orig = getattr(exc, "orig", None) or exc
    text = str(orig).strip().splitlines()[0] if str(orig).strip() else type(orig).__name__
    password = (datasource.get("params") or {}).get("password")
    if password:
        text = text.replace(str(password), "***")
    # Keep driver messages short: enough for a person to fix their settings.
    return text[:300]
