"""A run's artifact files (features, weights, model, mask): the `Store` methods that write and read them.

Every file is written atomically under a fresh name (`dpviz.store.safefile.write_atomic`) in folders
checked not to be links, and read back through `dpviz.store.artifacts`, which refuses links and non-regular
files and checks its kind and schema. The files a run writes once (its step files: features and weights; its
model and mask) have their SHA-256 recorded in the table ``file_hashes`` when written and checked when read,
so a file swapped for another run's or step's, truncated or edited is refused, naming the run. (``resume.pt``
is replaced at every checkpoint, so it has no recorded hash; it is read through the same checks of links and
file kinds.)
"""

from __future__ import annotations

import hashlib
import io
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

    def _write_recorded(self, run_id: str, parts: tuple[str, ...], write) -> Path:
        """Write a run's file once (``write(f)`` on a binary file) and record its SHA-256 under its name."""
        path = self._new_file(run_id, *parts)
        buf = io.BytesIO()
        write(buf)
        data = buf.getvalue()
        self._tx("INSERT OR REPLACE INTO file_hashes VALUES (?,?,?)",
                 (run_id, "/".join(parts), hashlib.sha256(data).hexdigest()))
        write_atomic(path, lambda f: f.write(data))
        return path

    def _read(self, run_id: str, path: Path, read):
        """``read(data)`` of the bytes of ``path``, refused unless they hash to what was recorded when it was
        written (a store from before hashes were recorded has none: its files are read as they are). An artifact
        of another kind or schema, or one that cannot be read, is said as such first (`artifacts`)."""
        name = path.relative_to(self.run_dir(run_id)).as_posix()
        with self._conn() as c:
            row = c.execute("SELECT sha FROM file_hashes WHERE run_id=? AND name=?", (run_id, name)).fetchone()
        data = artifacts.read_bytes(path)
        doc = read(data)
        if row is not None and hashlib.sha256(data).hexdigest() != row[0]:
            raise StoreError(f"artifact {path}: not the file run {run_id} wrote there (its hash differs: swapped, "
                             f"edited or damaged); restore it from a backup, or delete run {run_id} "
                             f"(`python -m dpviz delete {run_id}`)")
        return doc

    def save_features(self, run_id: str, step: int, arrays: dict[str, np.ndarray]) -> Path:
        """The arrays of a feature checkpoint (per-layer features, labels), stamped as features."""
        return self._write_recorded(run_id, ("features", f"step_{step:06d}.npz"),
                                    lambda f: artifacts.write_npz(f, "features", arrays))

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
        return self._read(run_id, path, lambda data: artifacts.read_npz(path, "features", data))

    def save_weights(self, run_id: str, step: int, state: dict, *, base: tuple[int, dict] | None = None) -> Path:
        """The model's state dict at a checkpoint (curvature analyses reload it).

        Args:
            base: (step, state) of a full checkpoint of the same run saved before; only the tensors that
                differ from it are written (a frozen pretrained backbone is kept once per run, not once
                per checkpoint: 90 MB of MiniLM's 23 M weights), and `load_weights` puts them back on it.
        """
        state = {k: v.detach().cpu() for k, v in state.items()}
        payload = {}
        if base is not None:
            ref = base[1]
            payload = {"base": int(base[0])}
            state = {k: v for k, v in state.items() if k not in ref or not _same(v, ref[k])}
        payload.update(self.share(run_id, state))
        return self._write_recorded(run_id, ("weights", f"step_{step:06d}.pt"),
                                    lambda f: artifacts.write_pt(f, "weights", payload))

    def weight_steps(self, run_id: str) -> list[int]:
        return self._steps(run_id, "weights", ".pt")

    def load_weights(self, run_id: str, step: int, _seen: tuple[int, ...] = ()) -> dict:
        """The full state dict at ``step`` (a file of changes is put back on its base; old bare dicts as they are)."""
        path = self._file(run_id, "weights", f"step_{step:06d}.pt")
        if not os.path.lexists(path):
            raise StoreError(f"step: run {run_id} has no saved weights at step {step} (it keeps features only: "
                             f"keep_weights final or none, or stored before curvature analyses existed)")
        doc = self._read(run_id, path, lambda data: artifacts.read_pt(path, "weights", data))
        state = self.unshare(doc, path)
        if "base" not in doc:
            return state
        if doc["base"] == step or doc["base"] in _seen:  # each base must be an earlier full checkpoint
            chain = " → ".join(str(s) for s in (*_seen, step, doc["base"]))
            raise StoreError(f"artifact {path}: weights whose bases form a cycle ({chain}); the run's step files are "
                             f"damaged: delete run {run_id} (`python -m dpviz delete {run_id}`)")
        return {**self.load_weights(run_id, doc["base"], (*_seen, step)), **state}

    def prune_files(self, run_id: str) -> int:
        """Delete a finished run's step files (feature checkpoints, weights, its model and mask) and the shared
        tensors no other run uses; keep its row, summary, metrics and cached analyses. A study keeping only its
        results calls this once the run's numbers are read. Returns the bytes freed."""
        folder = self.run_dir(run_id)
        files = [p for p in folder.rglob("*") if p.is_file() and p.name != "resume.pt"] if folder.exists() else []
        freed = sum(p.stat().st_size for p in files)
        with self._conn() as c:
            c.execute("BEGIN IMMEDIATE")
            before = self.tensor_bytes()
            c.execute("DELETE FROM file_hashes WHERE run_id=?", (run_id,))
            self.drop_tensors(c, run_id)
            c.execute("COMMIT")
        freed += max(before - self.tensor_bytes(), 0)
        for p in files:
            p.unlink(missing_ok=True)
        return freed

    def save_resume(self, run_id: str, state: dict) -> Path:
        """Where a stopped run goes on from (`dpviz.training.resume`): one file per run, replaced at each checkpoint.
        Readable by the store's owner only (0600): it holds the generators' state, which regenerates the run's
        sampling and noise (under secure randomness, the only copy of it)."""
        path = self._new_file(run_id, "resume.pt")
        write_atomic(path, lambda f: artifacts.write_pt(f, "resume", state), mode=0o600)
        return path

    def load_resume(self, run_id: str) -> dict | None:
        path = self._file(run_id, "resume.pt")
        return artifacts.read_pt(path, "resume") if os.path.lexists(path) else None

    def has_resume(self, run_id: str) -> bool:
        """Whether the run has a snapshot to go on from (without reading it)."""
        return os.path.lexists(self._file(run_id, "resume.pt"))

    def drop_resume(self, run_id: str) -> None:
        """A finished run needs no resume point (a MiniLM one holds the whole model: 90 MB)."""
        self._file(run_id, "resume.pt").unlink(missing_ok=True)

    def save_model(self, run_id: str, state_dict: dict, config: dict) -> Path:
        """The final model: its state dict (large tensors by reference, `dpviz.store.tensors`) and the run's
        configuration (``RunConfig.to_dict()``)."""
        payload = self.share(run_id, {k: v.detach().cpu() for k, v in state_dict.items()})
        return self._write_recorded(run_id, ("model.pt",),
                                    lambda f: artifacts.write_pt(f, "model", {**payload, "config": config}))

    def load_model(self, run_id: str) -> dict:
        """{"state_dict": ..., "config": ...} of the run's final model."""
        path = self._file(run_id, "model.pt")
        if not os.path.lexists(path):
            raise StoreError(f"run_id: run {run_id} has no final model (it has not finished, or is not stored)")
        doc = self._read(run_id, path, lambda data: artifacts.read_pt(path, "model", data))
        return {"state_dict": self.unshare(doc, path), "config": doc["config"]}

    def save_mask(self, run_id: str, doc: dict) -> Path:
        """A sparse run's mask document ({step, selection, sparsity, mask, rows_per_layer})."""
        return self._write_recorded(run_id, ("mask.json",), lambda f: artifacts.write_json(f, "mask", doc))

    def load_mask(self, run_id: str) -> dict | None:
        """The document `save_mask` was given, or None when the run has no mask."""
        path = self._file(run_id, "mask.json")
        if not os.path.lexists(path):
            return None
        return self._read(run_id, path, lambda data: artifacts.read_json(path, "mask", old_keys=("mask",), data=data))


def _same(a, b) -> bool:
    """Whether two tensors are bit-for-bit equal (a changed dtype or shape counts as changed)."""
    import torch

    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
