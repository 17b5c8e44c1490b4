"""An MCP server for the tests, built with the SDK's FastMCP: tools, a prompt, a resource, over any transport.

    python fixture_server.py --transport stdio [--linger]
    python fixture_server.py --transport streamable-http --port 0 [--token SECRET]
    python fixture_server.py --transport sse --port 0 [--tls]

HTTP transports print ``PORT=<n>`` once the socket listens. ``--token`` makes every
MCP request need ``Authorization: Bearer <token>``. ``GET /stats`` (no token)
reports the open streamable-HTTP sessions.
"""
import argparse
import os
import socket
import sys

import anyio
from mcp.server.fastmcp import Context, FastMCP

mcp = FastMCP("fixture", log_level="WARNING")


@mcp.tool()
def echo(text: str) -> str:
    """Return the text unchanged."""
    return text


@mcp.tool()
def add(a: float, b: float) -> float:
    """Add two numbers."""
    return a + b


@mcp.tool()
async def sleep(seconds: float) -> str:
    """Sleep, then say so."""
    await anyio.sleep(seconds)
    return f"slept {seconds}"


@mcp.tool()
def getenv(name: str) -> str:
    """The value of an environment variable of the server process ("" when unset)."""
    return os.environ.get(name, "")


@mcp.tool()
def fail(message: str) -> str:
    """Always fails with the message (an MCP tool error)."""
    raise ValueError(message)


@mcp.tool()
def refuse() -> str:
    """Answer the call with a JSON-RPC error instead of a result (URL elicitation required)."""
    from mcp.shared.exceptions import UrlElicitationRequiredError
    from mcp.types import ElicitRequestURLParams

    raise UrlElicitationRequiredError([ElicitRequestURLParams(
        message="sign in first", url="https://example.invalid/sign-in", elicitationId="e1")])


@mcp.tool()
def crash(code: int = 3) -> str:
    """Exit the server process at once (the transport dies mid-call)."""
    sys.stderr.write("fatal: crashing on purpose\n")
    sys.stderr.flush()
    os._exit(code)


@mcp.tool(name="weird.name")
def weird() -> str:
    """A tool whose MCP name needs sanitising for the catalog."""
    return "weird"


@mcp.tool()
async def grow(ctx: Context) -> str:
    """Add a tool named extra and tell the client its tool list changed."""

    def extra(x: int) -> int:
        """Double x."""
        return 2 * x

    mcp.add_tool(extra, name="extra")
    await ctx.session.send_tool_list_changed()
    return "grown"


@mcp.prompt()
def greet(name: str) -> str:
    """Greet someone."""
    return f"Hello, {name}!"


@mcp.resource("fixture://readme", name="readme", mime_type="text/plain")
def readme() -> str:
    """A fixed text resource."""
    return "fixture readme"


class RequireBearer:
    """ASGI middleware: 401 unless the request carries the expected bearer token."""

    def __init__(self, app, token):
        self.app, self.expected = app, f"Bearer {token}".encode()

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["path"] != "/stats":
            if dict(scope["headers"]).get(b"authorization") != self.expected:
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"application/json")]})
                await send({"type": "http.response.body", "body": b'{"error":"unauthorized"}'})
                return
        await self.app(scope, receive, send)


def stats_route():
    from starlette.responses import JSONResponse

    @mcp.custom_route("/stats", methods=["GET"])
    async def stats(request):
        manager = getattr(mcp, "_session_manager", None)
        sessions = len(getattr(manager, "_server_instances", {}) or {}) if manager else None
        return JSONResponse({"sessions": sessions, "pid": os.getpid()})


def self_signed_files():
    """A throwaway key and certificate for 127.0.0.1 (no CA trusts it)."""
    import datetime
    import ipaddress
    import tempfile

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now)
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .sign(key, hashes.SHA256()))
    folder = tempfile.mkdtemp(prefix="mcp-fixture-tls-")
    key_path, cert_path = os.path.join(folder, "key.pem"), os.path.join(folder, "cert.pem")
    with open(key_path, "wb") as fh:
        fh.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                   serialization.NoEncryption()))
    with open(cert_path, "wb") as fh:
        fh.write(cert.public_bytes(serialization.Encoding.PEM))
    return key_path, cert_path


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--transport", default="stdio", choices=["stdio", "sse", "streamable-http"])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--token")
    parser.add_argument("--linger", action="store_true", help="stay alive after stdin closes (until killed)")
    parser.add_argument("--tls", action="store_true", help="serve https with a self-signed certificate")
    args = parser.parse_args()
    if args.transport == "stdio":
        mcp.run("stdio")
        if args.linger:
            import time
            time.sleep(120)
        return
    import uvicorn

    stats_route()
    app = mcp.sse_app() if args.transport == "sse" else mcp.streamable_http_app()
    if args.token:
        app = RequireBearer(app, args.token)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", args.port))
    sock.listen(128)
    print(f"PORT={sock.getsockname()[1]}", flush=True)
    tls = dict(zip(("ssl_keyfile", "ssl_certfile"), self_signed_files())) if args.tls else {}
    config = uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=1, **tls)
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main()
