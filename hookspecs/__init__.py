"""The agenthost hook specifications: the public extension API (see docs/extensions.md)."""
import pluggy

hookspec = pluggy.HookspecMarker("agenthost")
hookimpl = pluggy.HookimplMarker("agenthost")


@hookspec
def register_routes(host):
    """Called once while the app is built. Return a list of flask.Blueprint.

    It runs before any database exists (the host may start in SETUP mode), so
    keep ``host.db`` for the views. Builtin plugins mount at the interface's
    own paths; an extension's blueprints are mounted under
    ``/api/ext/<plugin-name>/`` so that they can never shadow a builtin route.
    Routes require the launch token unless the view is marked otherwise with
    ``core.auth.ticket_auth`` or ``core.auth.no_auth``. An implementation that
    raises (or returns something that is not a list of blueprints) fails its
    plugin: it is recorded and dropped, the others still mount.
    """


@hookspec
def register_tools(host):
    """Called once while the app is built. Return a list of ``core.tools.Tool``.

    The tools join the live catalog (``GET /api/agent/tools``); an extension's
    tools get the source ``extension:<plugin-name>``. Plugins are asked in
    registration order (builtin plugins first), so a name that is already
    taken refuses the later plugin: none of its tools join, and it is
    reported as failed.
    """


@hookspec
def register_commands(cli):
    """Called when the ``core`` command line is built. Add commands to ``cli``; returns nothing.

    ``cli`` is a click group of the plugin's own: its commands are copied into
    ``core`` unless a name is taken (by ``core`` or an earlier plugin), in which
    case all of the plugin's commands are refused. This is the one hook
    without ``host``: the command line exists before any host does. A command
    that needs a host builds one with ``core.app.create_app``.
    """


@hookspec
def register_models(host):
    """Called before migrations run. Return a list of Alembic version folders.

    It runs each time the host enters APP mode. Each folder holds the
    migrations of the plugin's tables; its first revision has
    ``down_revision = None`` and a ``branch_labels`` naming the plugin. All
    folders are upgraded to their heads before ``startup`` runs.
    """


@hookspec
def startup(host):
    """Called when the host enters APP mode, after migrations. Returns nothing.

    ``host.db`` is ready and no APP-mode request has been served yet.
    Implementations run in registration order (builtin plugins first), so an
    extension can use the services builtins ``provide``. One that raises is
    logged; the others still run.
    """


@hookspec
def shutdown(host):
    """Called when the host leaves APP mode or stops. Returns nothing.

    It runs before the database is released, in reverse registration order
    (extensions before the builtin plugins they may use). One implementation
    that raises is logged; the others still run.
    """


@hookspec
def notification_created(host, notification):
    """Called after a notification is committed, before it is fanned out. Returns nothing.

    ``notification`` is the dict the stream sends. One implementation that
    raises is logged; the others still run and the notification is still sent.
    """


@hookspec
def settings_changed(host, settings, changed):
    """Called after a settings update is committed. Returns nothing.

    ``settings`` is the full settings dict, ``changed`` the names of the
    fields whose values changed. One implementation that raises is logged;
    the others still run and the update stands.
    """


@hookspec
def run_finished(host, run):
    """Called once when an agent run reaches a terminal state (complete, failed or cancelled).

    ``run`` is ``{runId, status, error}``; the run's history is already committed.
    Returns nothing.
    """


@hookspec
def workflow_deleting(host, workflow_id, session):
    """Called while a workflow is deleted, inside the deleting database transaction.

    Cancel whatever of yours depends on the workflow using ``session`` (so it
    commits or rolls back with the delete) and return counts
    ``{"schedules": n, "webhookTriggers": m}`` of what you cancelled (or None).
    This hook is not isolated: an implementation that raises, or returns anything
    else, rolls the delete back (500 ``workflow_delete_failed``), because a
    deleted workflow must never keep live triggers.
    """
