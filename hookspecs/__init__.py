"""The agenthost hook specifications: the public extension API."""
import pluggy

hookspec = pluggy.HookspecMarker("agenthost")
hookimpl = pluggy.HookimplMarker("agenthost")


@hookspec
def register_routes(host):
    """Called once while the app is built. Return a list of flask.Blueprint.

    Builtin plugins mount at the interface's own paths; an extension's
    blueprints are mounted under ``/api/ext/<plugin-name>/`` so that they can
    never shadow a builtin route. Routes require the launch token unless the
    view is marked otherwise with ``core.auth.ticket_auth`` or ``core.auth.no_auth``.
    """


@hookspec
def register_tools(host):
    """Called once while the app is built. Return a list of ``core.tools.Tool``.

    The tools join the live catalog (``GET /api/agent/tools``). A name that is
    already taken is refused and the plugin is reported as failed.
    """


@hookspec
def register_commands(cli):
    """Called when the ``core`` command line is built. Add click commands to ``cli``.

    This is the one hook without ``host``: the command line exists before any
    host does. A command that needs a host builds one with ``core.app.create_app``.
    """


@hookspec
def register_models(host):
    """Called before migrations run. Return a list of Alembic version folders.

    Each folder holds the migrations of the plugin's tables; its first revision
    has ``down_revision = None`` and a ``branch_labels`` naming the plugin. All
    folders are upgraded to their heads when the host enters APP mode.
    """


@hookspec
def startup(host):
    """Called when the host enters APP mode (the database is ready). Returns nothing."""


@hookspec
def shutdown(host):
    """Called when the host leaves APP mode or stops. Returns nothing."""


@hookspec
def notification_created(host, notification):
    """Called after a notification is committed and before it is fanned out.

    ``notification`` is the dict the stream sends. Returns nothing.
    """


@hookspec
def settings_changed(host, settings, changed):
    """Called after a settings update is committed.

    ``settings`` is the full settings dict, ``changed`` the names of the fields
    whose values changed. Returns nothing.
    """
