"""Training a run: calibration, preparing, the loop, execution, resume, distributed runs.

The faces reach a run through `dpviz.runner`; the command line's own run process also uses the modules
named in ``__all__`` (σ ahead in a second process, the idle lock, torchrun's process group, take-overs).
"""

__all__ = ["ahead", "distributed", "idle", "resume"]
