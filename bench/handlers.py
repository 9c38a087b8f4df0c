"""The benchmark's handler: does nothing, so the engine's own cost is measured."""


def noop(ctx):
    return None
