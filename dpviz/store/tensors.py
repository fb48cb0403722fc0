"""Large tensors kept once per store, whichever runs and checkpoints hold them.

A real backbone's weights are the same in every run that starts from it, and a tensor a run does not
train is the same at every checkpoint and in its final model. Stored per file, a MiniLM run kept
them three times over (its first checkpoint and ``model.pt``, 90 MB each), so a scorecard of 165
runs needed 30 GB. Weights files (schema 3) and ``model.pt`` (schema 2) now keep each tensor of at
least `SHARED_BYTES` as a reference, its SHA-256, to ``tensors/<2 hex>/<sha>.pt`` (one tensor, written
once, never changed), and small tensors inline as before.

Every read checks a file's tensor against the SHA-256 that names it, so analyses never run on substituted
or damaged weights; a file this process found intact and that has not changed since (same inode, size and
modification time) is not hashed again. Hashing costs about as much as reading: a MiniLM model's 90 MB of
shared tensors take 0.17 s to read checked, 0.09 s unchecked, on a 2-core CPU (`bench/bench_tensor_check.py`).
A save that finds a file changed or damaged rewrites it.

The table ``tensor_refs`` (sha, run_id) says which runs use a file. Deleting a run drops its rows and,
inside the same write transaction, the files no run uses any more. A run that saves inserts its rows
first and only then writes the files it finds missing, so a deletion running at the same time either
sees the new row and keeps the file, or has removed it before the check and the file is written again.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from dpviz.store import artifacts
from dpviz.errors import StoreError
from dpviz.store.safefile import real_folder, write_atomic

_INTACT: dict[str, tuple[int, int, int]] = {}
"""Files this process found intact (or wrote): path → (inode, size, mtime_ns) when it did."""

SHARED_BYTES = 1 << 16
"""Tensors of at least this many bytes are kept once per store (64 KiB: every weight matrix of MiniLM, and
EfficientNet-Lite0's larger convolutions; biases, norms, small kernels and heads stay in their file)."""


def digest(t) -> str:
    """SHA-256 of a CPU tensor's dtype, shape and bytes: equal tensors, equal names."""
    import torch

    h = hashlib.sha256(f"{t.dtype}|{tuple(t.shape)}|".encode())
    h.update(t.contiguous().view(-1).view(torch.uint8).numpy())  # the raw bytes, bf16 included
    return h.hexdigest()


class SharedTensors:
    """Mixed into `dpviz.store.Store` (which gives ``root``, ``_conn``)."""

    root: Path

    def _tensor_path(self, sha: str) -> Path:
        return self.root / "tensors" / sha[:2] / f"{sha}.pt"

    def share(self, run_id: str, state: dict) -> dict:
        """``state`` (CPU tensors) as a payload: {"state_dict": the small tensors, "tensors": {name: sha}};
        the large tensors' files exist once this returns and are counted as used by ``run_id``."""
        small, refs = {}, {}
        for name, t in state.items():
            if t.numel() * t.element_size() >= SHARED_BYTES:
                refs[name] = digest(t)
            else:
                small[name] = t
        if refs:
            with self._conn() as c:
                c.execute("BEGIN IMMEDIATE")
                c.executemany("INSERT OR IGNORE INTO tensor_refs(sha, run_id) VALUES (?, ?)",
                              [(sha, run_id) for sha in set(refs.values())])
                c.execute("COMMIT")
        for name, sha in refs.items():
            path = self._tensor_path(sha)
            if not _intact(path, sha):  # missing, or changed or damaged since it was written: write it anew
                t = state[name].clone()  # its own storage: a view would save the whole buffer it lives in
                write_atomic(real_folder(self.root, "tensors", sha[:2]) / path.name,
                             lambda f, t=t: artifacts.write_pt(f, "tensor", {"tensor": t}))
                _INTACT[str(path)] = _identity(path)
        return {"state_dict": small, **({"tensors": refs} if refs else {})}

    def unshare(self, doc: dict, where: Path) -> dict:
        """The full state dict of a payload `share` made (``where``: its file, named if a tensor is missing or
        damaged, with the runs that use that tensor and how to delete them)."""
        state = dict(doc["state_dict"])
        for name, sha in doc.get("tensors", {}).items():
            path = self._tensor_path(sha)
            if not os.path.lexists(path):
                raise StoreError(f"artifact {where}: its tensor {name} ({path}) is missing; {self._remedy(sha)}")
            try:
                state[name] = _checked(path, sha, f"artifact {where}: its tensor {name} ({path})")
            except StoreError as e:  # the file's own message names no run: say which runs use it
                raise StoreError(f"{str(e).split('; ')[0]}; {self._remedy(sha)}") from None
        return state

    def _remedy(self, sha: str) -> str:
        """What to do about a shared tensor file that is missing or damaged: the runs that use it, and the one
        command that deletes them (a run that saves the same tensor later writes the file anew)."""
        with self._conn() as c:
            runs = [r[0] for r in c.execute("SELECT run_id FROM tensor_refs WHERE sha=? ORDER BY run_id", (sha,))]
        if not runs:
            return "no run uses it any more: delete the file"
        return (f"it is shared by run{'s' * (len(runs) > 1)} {', '.join(runs)}: restore it from a backup, or delete "
                f"{'them' if len(runs) > 1 else 'it'} (`python -m dpviz delete {' '.join(runs)}`)")

    def drop_tensors(self, c, run_id: str) -> None:
        """Inside ``c``'s open write transaction: forget ``run_id``'s uses and delete the files no run uses."""
        shas = [r[0] for r in c.execute("SELECT sha FROM tensor_refs WHERE run_id=?", (run_id,))]
        c.execute("DELETE FROM tensor_refs WHERE run_id=?", (run_id,))
        for sha in shas:
            if c.execute("SELECT 1 FROM tensor_refs WHERE sha=? LIMIT 1", (sha,)).fetchone() is None:
                self._tensor_path(sha).unlink(missing_ok=True)

    def tensor_bytes(self) -> int:
        """Bytes the store's shared tensors take on disk."""
        folder = self.root / "tensors"
        return sum(p.stat().st_size for p in folder.glob("*/*.pt")) if folder.exists() else 0


def _identity(path: Path) -> tuple[int, int, int]:
    st = os.lstat(path)
    return st.st_ino, st.st_size, st.st_mtime_ns


def _checked(path: Path, sha: str, what: str):
    """The tensor in ``path``, checked against ``sha`` unless this process found the unchanged file intact;
    one `StoreError` naming ``what`` when it does not match (a substituted or damaged file)."""
    seen = _identity(path)
    try:
        t = artifacts.read_pt(path, "tensor")["tensor"]
    except StoreError as e:  # a link, a FIFO, a truncated file, another artifact: say which tensor of what
        raise StoreError(f"{what}: {str(e).split(': ', 1)[-1].split('; ')[0]}") from None
    if _INTACT.get(str(path)) != seen:
        if digest(t) != sha:
            raise StoreError(f"{what} does not match its hash: the file was changed or damaged; the next run that "
                             "saves this tensor rewrites it (or delete the runs that use it)")
        _INTACT[str(path)] = seen
    return t


def _intact(path: Path, sha: str) -> bool:
    """Whether ``path`` exists and holds the tensor ``sha`` names."""
    if not os.path.lexists(path):
        return False
    try:
        _checked(path, sha, str(path))
    except (StoreError, OSError):
        return False
    return True
