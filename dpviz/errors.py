"""Errors a user can cause and fix: each names the field and what is allowed."""

import re


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


# Import names whose distribution is named otherwise (the rest: "_" read as "-").
_DISTRIBUTIONS = {"PIL": "pillow", "sklearn": "scikit-learn", "umap": "umap-learn", "yaml": "pyyaml",
                  "psycopg2": "psycopg2-binary"}


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def install_hint(module: str) -> str:
    """The pip command that installs the package providing ``module``: the dpviz extra that declares it
    (read from dpviz's installed metadata), else the package itself."""
    from importlib import metadata  # here, not at the top: 17 ms (email, zipfile) every command would pay

    top = module.split(".")[0]
    dist = _DISTRIBUTIONS.get(top, top.replace("_", "-"))
    try:
        requirements = metadata.requires("dpviz") or []
    except metadata.PackageNotFoundError:  # run from a checkout that is not installed
        requirements = []
    for req in requirements:
        name = re.match(r"\s*([A-Za-z0-9._-]+)", req)
        extra = re.search(r"extra\s*==\s*[\"']([^\"']+)", req)
        if name and extra and _normal(name.group(1)) == _normal(dist):
            return f'pip install "dpviz[{extra.group(1)}]"'
    return f"pip install {dist}"


def missing_package(field: str, needed_by: str, module: str) -> ConfigError:
    """The error for ``needed_by`` (e.g. "backbone resnet18") whose code needs the uninstalled ``module``."""
    top = module.split(".")[0]
    return ConfigError(field, f"{needed_by} needs the Python package {_DISTRIBUTIONS.get(top, top.replace('_', '-'))}, "
                       f"which is not installed ({install_hint(module)})")


class Cancelled(Exception):
    """A run was stopped by its cancel event (not a user error: the run is stored as cancelled)."""
