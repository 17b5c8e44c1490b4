"""The token filter: every request carries ``X-Service-Token`` unless its route says otherwise."""
import hmac

from flask import current_app, request

from .errors import ApiError

TOKEN_HEADER = "X-Service-Token"
BYPASS_PREFIXES = ("/api/health", "/api/setup/", "/plugin-runtime/")


def no_auth(view):
    """Mark a view as open (no token): only for the interface's bypass paths."""
    view._agenthost_auth = "none"
    return view


def ticket_auth(view):
    """Mark a view as a stream opened with a one-time ``?ticket=`` (checked by the view)."""
    view._agenthost_auth = "ticket"
    return view


def secret_auth(view):
    """Mark a view as authenticated by its own secret header (webhooks)."""
    view._agenthost_auth = "secret"
    return view


def token_matches(expected, given):
    """Constant-time comparison of the launch token."""
    if not expected or given is None:
        return False
    return hmac.compare_digest(expected.encode("utf-8"), given.encode("utf-8", "surrogateescape"))


def _bypassed(path):
    return path == "/api/health" or path == "/api/setup" or path.startswith(BYPASS_PREFIXES)


def check_request(host):
    """The ``before_request`` filter. Raises a 401 problem when the token is wrong."""
    if _bypassed(request.path):
        return
    view = current_app.view_functions.get(request.endpoint) if request.endpoint else None
    if view is not None and getattr(view, "_agenthost_auth", "token") != "token":
        return
    if "token" in request.args:
        # The credential never rides in a URL: refuse it rather than ignore it silently.
        raise ApiError(400, "token_in_url", "The launch token is accepted only in the X-Service-Token header.")
    if not token_matches(host.config.token, request.headers.get(TOKEN_HEADER)):
        raise ApiError(401, "invalid_token",
                       "The X-Service-Token header is missing or does not match the launch token.",
                       headers={"WWW-Authenticate": "Service-Token"})
