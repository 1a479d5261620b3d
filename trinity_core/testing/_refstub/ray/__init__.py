"""Test-only stand-in for ``ray``: the reference trinity-rft imports it only for logging helpers."""


def is_initialized() -> bool:
    """The reference asks whether a Ray cluster is up before naming its loggers; it never is here."""
    return False


def get_runtime_context() -> None:
    """Never reached while :func:`is_initialized` is False."""
    raise RuntimeError("ray stub: no runtime context in tests")
