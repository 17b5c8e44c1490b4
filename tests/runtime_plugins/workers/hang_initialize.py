"""Once armed, reads initialize and never answers it."""
import wire


def handle(method, params):
    if method == "initialize" and wire.armed():
        return wire.SILENT
    return wire.standard(method, params)


if __name__ == "__main__":
    wire.serve(handle)
