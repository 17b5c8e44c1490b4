"""Answers the handshake, then writes a line that is not JSON-RPC to stdout when asked to work."""
import sys

import wire


def handle(method, params):
    if method == "work":
        sys.stdout.write("hello from print(), which must never go to stdout\n")
        sys.stdout.flush()
        return wire.SILENT
    return wire.standard(method, params)


if __name__ == "__main__":
    wire.serve(handle)
