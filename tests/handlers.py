"""Python targets used by tests and the benchmark."""


def noop(ctx):
    return None
