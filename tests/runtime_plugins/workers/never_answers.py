"""Handshakes and pings fine, but never answers a call to ``work``."""
import wire


def handle(method, params):
    if method == "work":
        return wire.SILENT
    return wire.standard(method, params)


if __name__ == "__main__":
    wire.serve(handle)
