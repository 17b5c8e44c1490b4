"""The app factory: one plugin manager and one Host per app."""
import logging
import secrets

from flask import Flask, jsonify, request
from flask.sessions import NullSession, SessionInterface

from . import auth
from .config import Config
from .errors import ApiError, install_error_handlers
from .host import APP, SETUP, Host
from .plugins import PluginSet

log = logging.getLogger("agenthost.app")

EXTENSION_PREFIX = "/api/ext"
LOOPBACK_NAMES = {"127.0.0.1", "localhost", "::1"}


class NoSessions(SessionInterface):
    """Every request carries its token: the service keeps no cookie sessions.

    Flask's default builds a fresh null session for each request (1 % of a webhook
    delivery's time); one shared null session does the same job, since any write to
    it raises.
    """

    null = NullSession()

    def open_session(self, app, request):
        return self.null

    def save_session(self, app, session, response):
        pass


def create_app(config=None, plugins=(), *, load_entry_points=True, start=True):
    """Build a Flask app with its own Host.

    ``plugins`` are extra plugin objects registered like extensions (tests use
    this). With ``start`` the host picks its mode at once (probing the database).
    """
    config = config if isinstance(config, Config) else Config(config)
    if not config.token:
        config["service.auth.token"] = secrets.token_urlsafe(32)
    config.data_dir.mkdir(parents=True, exist_ok=True)

    plugin_set = PluginSet(config.data_dir, plugins, load_entry_points=load_entry_points)
    host = Host(config, plugin_set)
    host.set_log_level(config["service.log-level"])

    app = Flask(__name__, static_folder=None)
    app.config["MAX_CONTENT_LENGTH"] = config["service.max-body-bytes"]
    app.json.sort_keys = False
    app.url_map.strict_slashes = False
    app.session_interface = NoSessions()
    app.extensions["agenthost"] = host
    host.app = app

    install_error_handlers(app)

    @app.before_request
    def _filter():
        # A page that rebinds its own domain to 127.0.0.1 reaches us with a foreign Host header;
        # refusing it keeps the token-free routes (setup, UI assets) out of other sites' reach.
        if request.host.rsplit(":", 1)[0].strip("[]").lower() not in LOOPBACK_NAMES:
            raise ApiError(403, "host_not_allowed", "Requests must address the service on the loopback interface.")
        auth.check_request(host)
        path = request.path
        if host.mode == SETUP and path.startswith("/api/") and not path.startswith(("/api/health", "/api/setup")):
            raise ApiError(503, "service_in_setup_mode",
                           "The service is in SETUP mode: configure the database through /api/setup first.")
        if host.mode == APP and (path == "/api/setup" or path.startswith("/api/setup/")):
            raise ApiError(404, "not_found", "Setup endpoints exist only in SETUP mode.")

    @app.get("/api/health")
    @auth.no_auth
    def health():
        """Liveness: always ok while the process serves requests."""
        return jsonify(status="ok")

    @app.get("/api/openapi.json")
    def openapi():
        """The OpenAPI 3.1 document of every mounted route."""
        from .openapi import build
        return jsonify(build(app))

    # Registries first: a plugin refused for a duplicate tool name mounts no routes,
    # and one whose routes fail takes its tools out again.
    tools_by_plugin = _register_tools(host)
    _mount_routes(app, host)
    for name, tool_names in tools_by_plugin.items():
        if host.plugins.records.get(name) is not None and host.plugins.records[name].error:
            for tool_name in tool_names:
                host.tools.remove(tool_name)
    if start:
        host.boot()
    return app


def _mount_routes(app, host):
    for name, blueprints in host.plugins.call_each("register_routes", registry=True, host=host):
        try:
            for bp in blueprints or []:
                if host.plugins.is_builtin(name):
                    app.register_blueprint(bp)
                else:
                    prefix = f"{EXTENSION_PREFIX}/{name}{bp.url_prefix or ''}"
                    app.register_blueprint(bp, url_prefix=prefix, name=f"ext.{name}.{bp.name}")
        except Exception as exc:
            log.exception("plugin %s: routes refused", name)
            host.plugins.fail(name, exc)


def _register_tools(host):
    """Add every plugin's tools; returns {plugin name: [tool names]}."""
    by_plugin = {}
    for name, tools in host.plugins.call_each("register_tools", registry=True, host=host):
        added = by_plugin.setdefault(name, [])
        try:
            for tool in tools or []:
                if tool.source == "builtin" and not host.plugins.is_builtin(name):
                    tool.source = f"extension:{name}"
                host.tools.add(tool)
                added.append(tool.name)
        except Exception as exc:
            for tool_name in added:
                host.tools.remove(tool_name)
            added.clear()
            host.plugins.fail(name, exc)
    return by_plugin
