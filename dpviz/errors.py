"""Errors a user can cause and fix: each names the field and what is allowed."""


class DpvizError(Exception):
    """Base class for user-facing errors (the CLI prints one line and exits 2)."""


class ConfigError(DpvizError, ValueError):
    """A configuration field has a value that is not allowed.

    Args:
        field: name of the offending field (as in `RunConfig` and the CLI flag).
        allowed: what the field accepts.
        got: the rejected value.
    """

    def __init__(self, field: str, allowed: str, got=None):
        self.field, self.allowed, self.got = field, allowed, got
        tail = f"; got {got!r}" if got is not None else ""
        super().__init__(f"{field}: {allowed}{tail}")


class DataError(DpvizError):
    """A dataset could not be found or read."""


class BackboneError(DpvizError):
    """A backbone or its weights file could not be built or loaded."""


class StoreError(DpvizError):
    """A run or artifact could not be found in the store, or is of another kind or a newer schema."""


def load_failure(e: Exception) -> str:
    """First sentence of a file-loading error, on one line (``torch.load``'s messages run long)."""
    msg, marker = str(e), "WeightsUnpickler error:"
    if marker in msg:  # skip torch's advice, keep what the weights_only unpickler refused
        msg = "weights_only unpickler: " + msg.split(marker, 1)[1].strip().split("\n\n")[0]
    return " ".join(msg.split()).split(". ")[0][:160] or type(e).__name__


class Cancelled(Exception):
    """A run was stopped by its cancel event (not a user error: the run is stored as cancelled)."""
