"""Handshakes fine; ``work`` caps its address space and allocates past it, dying of MemoryError."""
import resource

import wire

CAP = 1024 * 1024 * 1024


def handle(method, params):
    if method == "work":
        resource.setrlimit(resource.RLIMIT_AS, (CAP, CAP))
        hog = bytearray(2 * CAP)  # raises MemoryError at once: nothing is really allocated
        return {"size": len(hog)}
    return wire.standard(method, params)


if __name__ == "__main__":
    wire.serve(handle)  # the MemoryError is not caught: the worker dies with its traceback on stderr
