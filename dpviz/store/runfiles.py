"""A run's artifact files (features, weights, model, mask): the `Store` methods that write and read them.

Every file is written atomically under a fresh name (`dpviz.store.safefile.write_atomic`) in folders
checked not to be links, and read back through `dpviz.store.artifacts`, which checks its kind and schema.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from dpviz.store import artifacts
from dpviz.errors import StoreError
from dpviz.store.safefile import real_folder, write_atomic
from dpviz.store.tensors import SharedTensors


class RunFiles(SharedTensors):
    """Mixed into `dpviz.store.Store`, which sets ``root`` (the store folder); large tensors of weights and
    models are kept once per store (`dpviz.store.tensors`)."""

    root: Path

    def run_dir(self, run_id: str) -> Path:
        return self.root / "runs" / run_id

    def _file(self, run_id: str, *parts: str) -> Path:
        return self.run_dir(run_id).joinpath(*parts)

    def _new_file(self, run_id: str, *parts: str) -> Path:
        """Where to write an artifact: its folders made, none of them a link (`safefile.real_folder`)."""
        return real_folder(self.root, "runs", run_id, *parts[:-1]) / parts[-1]

    def save_features(self, run_id: str, step: int, arrays: dict[str, np.ndarray]) -> Path:
        """The arrays of a feature checkpoint (per-layer features, labels), stamped as features."""
        path = self._new_file(run_id, "features", f"step_{step:06d}.npz")
        write_atomic(path, lambda f: artifacts.write_npz(f, "features", arrays))
        return path

    def _steps(self, run_id: str, kind: str, suffix: str) -> list[int]:
        folder = self.run_dir(run_id) / kind
        return sorted(int(p.stem.split("_")[1]) for p in folder.glob(f"step_*{suffix}")) if folder.exists() else []

    def feature_steps(self, run_id: str) -> list[int]:
        return self._steps(run_id, "features", ".npz")

    def load_features(self, run_id: str, step: int) -> dict[str, np.ndarray]:
        """Exactly the arrays `save_features` was given (old unstamped files read as they are)."""
        path = self._file(run_id, "features", f"step_{step:06d}.npz")
        if not os.path.lexists(path):
            raise StoreError(f"step: run {run_id} has no features at step {step} "
                             f"(has {self.feature_steps(run_id)})")
        return artifacts.read_npz(path, "features")

    def save_weights(self, run_id: str, step: int, state: dict, *, base: tuple[int, dict] | None = None) -> Path:
        """The model's state dict at a checkpoint (curvature analyses reload it).

        Args:
            base: (step, state) of a full checkpoint of the same run saved before; only the tensors that
                differ from it are written (a frozen pretrained backbone is kept once per run, not once
                per checkpoint: 90 MB of MiniLM's 23 M weights), and `load_weights` puts them back on it.
        """
        path = self._new_file(run_id, "weights", f"step_{step:06d}.pt")
        state = {k: v.detach().cpu() for k, v in state.items()}
        payload = {}
        if base is not None:
            ref = base[1]
            payload = {"base": int(base[0])}
            state = {k: v for k, v in state.items() if k not in ref or not _same(v, ref[k])}
        payload.update(self.share(run_id, state))
        write_atomic(path, lambda f: artifacts.write_pt(f, "weights", payload))
        return path

    def weight_steps(self, run_id: str) -> list[int]:
        return self._steps(run_id, "weights", ".pt")

    def load_weights(self, run_id: str, step: int) -> dict:
        """The full state dict at ``step`` (a file of changes is put back on its base; old bare dicts as they are)."""
        path = self._file(run_id, "weights", f"step_{step:06d}.pt")
        if not os.path.lexists(path):
            raise StoreError(f"step: run {run_id} has no saved weights at step {step} (it keeps features only: "
                             f"keep_weights final or none, or stored before curvature analyses existed)")
        doc = artifacts.read_pt(path, "weights")
        state = self.unshare(doc, path)
        if "base" not in doc:
            return state
        if doc["base"] == step:
            raise StoreError(f"artifact {path}: weights based on themselves; the file is damaged")
        return {**self.load_weights(run_id, doc["base"]), **state}

    def save_resume(self, run_id: str, state: dict) -> Path:
        """Where a stopped run goes on from (`dpviz.training.resume`): one file per run, replaced at each checkpoint."""
        path = self._new_file(run_id, "resume.pt")
        write_atomic(path, lambda f: artifacts.write_pt(f, "resume", state))
        return path

    def load_resume(self, run_id: str) -> dict | None:
        path = self._file(run_id, "resume.pt")
        return artifacts.read_pt(path, "resume") if os.path.lexists(path) else None

    def drop_resume(self, run_id: str) -> None:
        """A finished run needs no resume point (a MiniLM one holds the whole model: 90 MB)."""
        self._file(run_id, "resume.pt").unlink(missing_ok=True)

    def save_model(self, run_id: str, state_dict: dict, config: dict) -> Path:
        """The final model: its state dict (large tensors by reference, `dpviz.store.tensors`) and the run's
        configuration (``RunConfig.to_dict()``)."""
        path = self._new_file(run_id, "model.pt")
        payload = self.share(run_id, {k: v.detach().cpu() for k, v in state_dict.items()})
        write_atomic(path, lambda f: artifacts.write_pt(f, "model", {**payload, "config": config}))
        return path

    def load_model(self, run_id: str) -> dict:
        """{"state_dict": ..., "config": ...} of the run's final model."""
        path = self._file(run_id, "model.pt")
        if not os.path.lexists(path):
            raise StoreError(f"run_id: run {run_id} has no final model (it has not finished, or is not stored)")
        doc = artifacts.read_pt(path, "model")
        return {"state_dict": self.unshare(doc, path), "config": doc["config"]}

    def save_mask(self, run_id: str, doc: dict) -> Path:
        """A sparse run's mask document ({step, selection, sparsity, mask, rows_per_layer})."""
        path = self._new_file(run_id, "mask.json")
        write_atomic(path, lambda f: artifacts.write_json(f, "mask", doc))
        return path

    def load_mask(self, run_id: str) -> dict | None:
        """The document `save_mask` was given, or None when the run has no mask."""
        path = self._file(run_id, "mask.json")
        return artifacts.read_json(path, "mask", old_keys=("mask",)) if os.path.lexists(path) else None


def _same(a, b) -> bool:
    """Whether two tensors are bit-for-bit equal (a changed dtype or shape counts as changed)."""
    import torch

    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
