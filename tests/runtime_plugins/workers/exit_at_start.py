"""Once armed, exits before reading anything (a missing dependency, a syntax error at import...)."""
import sys

import wire

if __name__ == "__main__":
    if wire.armed():
        sys.stderr.write("ImportError: something this worker needs is missing\n")
        sys.exit(3)
    wire.serve()
