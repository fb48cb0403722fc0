"""dpviz: a lab for differentially private fine-tuning.

    >>> import dpviz
    >>> summary = dpviz.run(dpviz.RunConfig(strategy="lp-fft", epsilon=1.0, lp_fraction=0.3))
    >>> summary["test_accuracy"], summary["epsilon_spent"]
"""

import warnings

__version__ = "0.2.0"

from dpviz.runtime import threads

threads.set_wait_policy()  # before anything imports torch: libgomp reads it once, at load

from dpviz.config import RunConfig  # noqa: E402
from dpviz.errors import ConfigError, DpvizError  # noqa: E402
from dpviz.runner import run  # noqa: E402
from dpviz.store import Store  # noqa: E402

# Opacus warns on every RDP evaluation whose best order is the largest one, and
# that GDP is experimental (said once in the docs instead).
warnings.filterwarnings("ignore", message="Optimal order is the largest alpha")
warnings.filterwarnings("ignore", message="GDP accounting is experimental")
warnings.filterwarnings("ignore", message="Full backward hook is firing")

__all__ = ["__version__", "RunConfig", "run", "Store", "JobManager", "ConfigError", "DpvizError"]


def __getattr__(name):  # torch loads only when a job manager is asked for: `import dpviz` stays light
    if name == "JobManager":
        from dpviz.jobs import JobManager

        return JobManager
    raise AttributeError(f"module 'dpviz' has no attribute {name!r}")
