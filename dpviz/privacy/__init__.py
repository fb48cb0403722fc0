"""Privacy: the accountants' registry, accounting, clipping, precision, dpviz's DP step and the curvature of
its update. The faces reach the registry (`accountants`) and σ by batch size here; the rest is imported by
module where it runs (the DP step loads torch, the accounting does not).
"""

import importlib

from dpviz.privacy.bandmf import BANDED, MAX_BANDS, MECHANISMS, PARTS  # noqa: F401  (the form's choices; no torch)
from dpviz.privacy import names, randomness, release  # noqa: F401  (the threat model every face states, and how a
# run's mechanism is named on every surface; no torch)
from dpviz.privacy.randomness import RANDOMNESS  # noqa: F401

__all__ = ["accountants", "sigma_by_batch_size", "MECHANISMS", "BANDED", "MAX_BANDS", "PARTS", "RANDOMNESS",
           "names", "randomness", "release"]


def __getattr__(name: str):  # accounting loads on first use: importing a privacy module stays light
    if name == "sigma_by_batch_size":
        return importlib.import_module(".accounting", __name__).sigma_by_batch_size
    if name == "accountants":
        return importlib.import_module(".accountants", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
