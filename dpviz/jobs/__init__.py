"""Background runs: `JobManager` trains submitted configs in a thread pool, with progress, status and cancel.

The package re-exports `dpviz.jobs.manager`.
"""

from __future__ import annotations

from dpviz.jobs.eta import Pace, prior  # noqa: F401
from dpviz.jobs.manager import Job, Task, time_left, duration, JobManager  # noqa: F401

__all__ = ["Job", "Task", "time_left", "duration", "JobManager", "Pace", "prior"]
