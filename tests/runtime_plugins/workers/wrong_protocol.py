"""Once armed, answers initialize with a protocol version the host does not speak."""
import wire


def handle(method, params):
    if method == "initialize" and wire.armed():
        return wire.initialize_result(version="1999-01-01")
    return wire.standard(method, params)


if __name__ == "__main__":
    wire.serve(handle)
