"""The token filter: every request carries ``X-Service-Token`` unless its route says otherwise."""
import hmac

from flask import current_app, request

from .errors import ApiError

TOKEN_HEADER = "X-Service-Token"
# The interface's three bypass prefixes; /api/health is matched exactly or as a folder so a
# future /api/healthy-thing route cannot ride on it.
BYPASS_EXACT = ("/api/health",)
BYPASS_PREFIXES = ("/api/health/", "/api/setup/", "/plugin-runtime/")


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


def _header_bytes(value):
    # WSGI hands header bytes over as latin-1 text; anything else (a str built in-process)
    # is encoded so that it can never equal a real token's UTF-8 bytes by accident.
    try:
        return value.encode("latin-1")
    except UnicodeEncodeError:
        return value.encode("utf-8", "surrogatepass")


def token_matches(expected, given):
    """Constant-time comparison of the launch token with a header value."""
    if not expected or given is None:
        return False
    return hmac.compare_digest(expected.encode("utf-8"), _header_bytes(given))


def bypassed(path):
    """True for the paths the interface opens without a token."""
    return path in BYPASS_EXACT or path == "/api/setup" or path.startswith(BYPASS_PREFIXES)


def view_auth(view):
    """How a view is authenticated: "token" (default), "ticket", "secret" or "none"."""
    return getattr(view, "_agenthost_auth", "token")


def check_request(host):
    """The ``before_request`` filter. Raises a 401 problem when the token is wrong."""
    if bypassed(request.path):
        return
    view = current_app.view_functions.get(request.endpoint) if request.endpoint else None
    if view is not None and view_auth(view) != "token":
        return
    in_url = bool(request.query_string) and "token" in request.args  # parse only when present
    if not token_matches(host.config.token, request.headers.get(TOKEN_HEADER)):
        if in_url:
            # Never a credential: say so, so the client stops leaking it into URLs and logs.
            raise ApiError(401, "token_in_url",
                           "The launch token is accepted only in the X-Service-Token header, never in the URL.",
                           headers={"WWW-Authenticate": "Service-Token"})
        raise ApiError(401, "invalid_token",
                       "The X-Service-Token header is missing or does not match the launch token.",
                       headers={"WWW-Authenticate": "Service-Token"})
    if in_url:
        raise ApiError(400, "token_in_url", "The launch token is accepted only in the X-Service-Token header.")
