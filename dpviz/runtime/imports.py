"""Imports that two threads must not run at once: one lock, and Opacus's first import under it.

`dpviz.privacy.opacus_accountants` swaps placeholder packages in and out of ``sys.modules`` to load
Opacus's accountants alone; a thread's first ``import opacus`` in the middle of that fails on a
half-removed package. Both hold `IMPORTS`, and so does the runner's first import of the training modules
(`dpviz.runner.training_modules`). It sits here, below the models and the privacy code, because both
import Opacus: the ViT's and the external backbones' grad samplers, and the hooks per-sample path.
"""

from __future__ import annotations

import importlib
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
