"""Imports that two threads must not run at once: one lock, and Opacus's first import under it.

`dpviz.privacy.opacus_accountants` swaps placeholder packages in and out of ``sys.modules`` to load
Opacus's accountants alone; a thread's first ``import opacus`` in the middle of that fails on a
half-removed package. Both hold `IMPORTS`, and so does the runner's first import of the training modules
(`dpviz.runner.training_modules`). It sits here, below the models and the privacy code, because both
import Opacus: the ViT's and the external backbones' grad samplers, and the hooks per-sample path.
"""

from __future__ import annotations

import importlib
import sys
import threading
import types

IMPORTS = threading.RLock()
"""Held while `dpviz.privacy.opacus_accountants` swaps placeholders in and out of ``sys.modules`` and while a
thread first imports Opacus or the training modules (`dpviz.runner.training_modules`): one thread's ``import opacus`` in the middle of another's
placeholders fails on a half-removed package (``KeyError: 'opacus.accountants'``)."""


def import_opacus() -> types.ModuleType:
    """Opacus itself (its grad samplers, validators, privacy engine), imported once under `IMPORTS`: only
    the hooks grad-sample mode and external backbones need it, never the default run (≈ 2 s here)."""
    with IMPORTS:
        return importlib.import_module("opacus")


_PREFETCHING: dict[tuple, threading.Thread] = {}


def prefetch(names: tuple[str, ...], *, why: str) -> None:
    """Start importing the modules ``names`` in a daemon thread (once per tuple, and not where all are imported), under
    `IMPORTS`, so that the code that needs them later finds them done: a training step's kernels and a data load's
    tensor work release the GIL, so the imports go on beside them. ``why`` names the thread. A failed import is left
    to the code that needs the module, which imports it again itself and says what failed."""
    if names in _PREFETCHING or all(n in sys.modules for n in names):
        return
    _PREFETCHING[names] = threading.Thread(target=_import_all, args=(names,), name=f"dpviz-prefetch-{why}", daemon=True)
    _PREFETCHING[names].start()


def _import_all(names: tuple[str, ...]) -> None:
    with IMPORTS:
        for name in names:
            try:
                importlib.import_module(name)
            except Exception:  # noqa: BLE001 — see `prefetch`
                return


OPTIMIZERS = ("torch._dynamo",)
"""What a torch.optim optimizer imports when it is built (``torch._disable_dynamo`` wraps ``add_param_group``,
``zero_grad`` and ``step``, and imports torch._dynamo on their first call: 1.2–1.6 s on a 2-core CPU): `prefetch`
by every run's preparation, so that its first optimizer does not wait for it."""
