"""What runs dpviz's work: one worker model, its two carriers, and imports under one lock.

Every piece of work is an item that a worker takes from one queue, and the workers training at a moment
share the cores by one rule (`pool.threads_per_worker`: cores ÷ workers, so workers × threads ≤ cores).
The carrier is processes (`pool`) where many runs train from one queue and each needs its own torch thread
setting and survives another's crash: sweeps, searches, the scorecard's runs. It is threads (`threads.DaemonPool`)
where a page reads progress in memory: the dashboard's jobs and page tasks (`dpviz.jobs.JobManager`), the
analyses beside them, and each GPU's one long-lived device worker (`dpviz.training.devices`).

A leaf package: it imports nothing of dpviz's, so every layer above may start workers and threads.
"""

from dpviz.runtime.pool import local_workers, set_threads  # noqa: E402,F401  (the command line's workers)

__all__ = ["local_workers", "set_threads"]
