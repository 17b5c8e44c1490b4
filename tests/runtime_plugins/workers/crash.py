"""Handshakes fine, then dies on every call to ``work`` (restarted, it crashes again: a crash loop)."""
import os
import sys

import wire


def handle(method, params):
    if method == "work":
        sys.stderr.write("Traceback (most recent call last):\nRuntimeError: boom\n")
        sys.stderr.flush()
        os._exit(1)
    return wire.standard(method, params)


if __name__ == "__main__":
    wire.serve(handle)
