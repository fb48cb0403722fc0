"""Artifact files of a run, each stamped with its kind and the schema version that wrote it.

`dpviz.store.Store` writes and reads every artifact through these functions;
nothing else in dpviz opens a run's files. Formats at schema 1::

    features   features/step_XXXXXX.npz   the caller's arrays plus ``__kind__`` and ``__schema__`` entries
    weights    weights/step_XXXXXX.pt     {"__kind__", "__schema__", "state_dict"} and, from schema 2, "base": the
                                          step of the full checkpoint whose unchanged tensors it leaves out;
                                          from schema 3, "tensors": {name: sha} of the large ones
    model      model.pt                   {"__kind__", "__schema__", "state_dict", "config"}; from schema 2,
                                          "tensors" as in weights
    tensor     tensors/xx/<sha>.pt        {"__kind__", "__schema__", "tensor"}: one large tensor, kept once per
                                          store (`dpviz.store.tensors`)
    resume     resume.pt                  where a stopped run goes on from (`dpviz.training.resume`)
    mask       mask.json                  the mask document plus "__kind__" and "__schema__" keys
    analysis   analyses table             ``kind`` and ``schema`` columns beside each result row

The model and mask keep their old top-level keys, so ``torch.load(model.pt)["state_dict"]``
and ``json.load(mask.json)["mask"]`` still work outside dpviz; the model's large tensors are then the
files its ``"tensors"`` entry names (`Store.load_model` puts them back).

Files written before schema 1 carry no stamp; they are read in their old form
(called schema 0) and never rewritten: bare arrays, a bare state dict,
{"state_dict", "config"}, a mask document without ``__kind__``. An artifact of
another kind, or one written by a newer schema, raises a one-line `StoreError`
naming the file, the kind found and the kind expected.
"""

from __future__ import annotations

import io
import json
import os
import re
from pathlib import Path
from typing import BinaryIO

import numpy as np

from dpviz.errors import StoreError, load_failure
from dpviz.store.safefile import link_refused

KIND, SCHEMA = "__kind__", "__schema__"
VERSIONS = {"features": 1, "weights": 3, "model": 2, "mask": 1, "analysis": 1, "resume": 1, "tensor": 1}
"""The schema version this dpviz writes, and the newest it reads, per artifact kind."""


def stamp(kind: str) -> dict:
    """The kind and schema entries that every artifact of ``kind`` written now carries."""
    return {KIND: kind, SCHEMA: VERSIONS[kind]}


def check(where: str, expected: str, found: str | None, schema: int, fix: str = "") -> None:
    """Raise a one-line `StoreError` unless the artifact is of kind ``expected`` at a schema we read.

    Args:
        where: what to name in the message ("artifact <path>", "analysis knn of run … at step …").
        expected: the kind the caller asked for.
        found: the kind the artifact declares (or was recognised as); None when unrecognised.
        schema: the schema version that wrote it (0 for files from before schemas existed).
        fix: what to do about an artifact of another kind (appended to that message).
    """
    if found != expected:
        raise StoreError(f"{where}: holds {found or 'no recognised dpviz artifact'}, expected {expected}"
                         + (f"; {fix}" if fix else ""))
    if schema > VERSIONS[expected]:
        raise StoreError(f"{where}: {expected} written by schema {schema}, newer than this dpviz reads "
                         f"(≤ {VERSIONS[expected]}); upgrade dpviz to read it")


def _reserved(keys) -> None:
    if clash := sorted(k for k in keys if k in (KIND, SCHEMA)):
        raise ValueError(f"{', '.join(clash)}: reserved for the artifact's kind and schema")


def _stamped(path: Path, expected: str, kind, schema) -> None:
    """Check a stamp read back from a file, whatever types it came back as (0-d arrays from an npz)."""
    try:
        schema = int(schema)
    except (TypeError, ValueError):
        kind, schema = None, 0  # a stamp we cannot read is no dpviz artifact
    check(f"artifact {path}", expected, None if kind is None else str(kind), schema, _fix(path))


def _run_of(path: Path) -> str:
    """The run id of an artifact path (its folder is ``runs/<run_id>/``, features and weights one deeper)."""
    return path.parent.parent.name if path.parent.name in ("features", "weights") else path.parent.name


def _fix(path: Path) -> str:
    run = _run_of(path)
    return f"restore it from a backup, or delete run {run} (`python -m dpviz delete {run}`)"


def _unreadable(path: Path, kind: str, e: Exception) -> StoreError:
    """A damaged file: which one, why, and what to do (the run's folder is ``runs/<run_id>/``)."""
    return StoreError(f"artifact {path}: cannot be read as {kind} ({load_failure(e)}); the file is damaged: "
                      f"{_fix(path)}")


STORE_FOLDERS = ("runs", "tensors", "tokens")
"""The folders a store keeps its files in, right under its root: the walk up from a file stops there."""


def _not_a_link(path: Path) -> None:
    """A store's artifacts are files dpviz wrote; a link planted in their place, or in place of a folder on the
    way to them inside the store (up to one of `STORE_FOLDERS`), would have dpviz read (and an analysis trust)
    whatever it points to. A file outside those folders (a backbone cache, which may be shared between stores by
    a link) is checked itself only."""
    chain = [path, *path.parents]
    inside = next((i for i, p in enumerate(chain) if p.name in STORE_FOLDERS), 0)
    for p in chain[:inside + 1]:  # the store's root above them is the user's choice (it may well be a link)
        if p.is_symlink():
            raise link_refused(p)


def read_bytes(path: Path) -> bytes:
    """The bytes of the store's file ``path``, read only if it is a regular file reached through no link.

    Checked before opening (links on the way, inside the store) and on the open descriptor: opened without
    following a link and without blocking, so a FIFO or a device planted in its place is a one-line
    `StoreError`, never a hang."""
    import errno
    import stat

    from dpviz.store.safefile import NOFOLLOW, _kind

    _not_a_link(path)
    try:
        fd = os.open(path, os.O_RDONLY | NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise link_refused(path) from None
        raise
    with os.fdopen(fd, "rb") as f:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise StoreError(f"store: {path} is {_kind(mode)}, not a file dpviz wrote: remove it")
        return f.read()


# --- npz: features ------------------------------------------------------------
def write_npz(f: BinaryIO, kind: str, arrays: dict[str, np.ndarray]) -> None:
    """Write ``arrays`` and the stamp of ``kind`` to the open file ``f`` (`Store` makes it atomic and safe)."""
    _reserved(arrays)
    np.savez(f, **arrays, **{k: np.asarray(v) for k, v in stamp(kind).items()})


def read_npz(path: Path, kind: str, data: bytes | None = None) -> dict[str, np.ndarray]:
    """The arrays saved at ``path`` (its bytes ``data`` when already read), without the stamp; an unstamped file
    is old-format ``kind``."""
    data = read_bytes(path) if data is None else data
    try:
        with np.load(io.BytesIO(data)) as z:
            arrays = {k: z[k] for k in z.files}
    except Exception as e:  # noqa: BLE001 - any unreadable file is one line to the user
        raise _unreadable(path, kind, e) from None
    if KIND in arrays:
        _stamped(path, kind, arrays.pop(KIND), arrays.pop(SCHEMA, None))
        return arrays
    # Unstamped: only an old-format file of ``kind`` passes; another npz (or a .pt, which is a zip too
    # and reads as raw members) is refused here, not as an IndexError deep in an analysis.
    check(f"artifact {path}", kind, kind if _OLD_NPZ[kind](arrays) else None, 0, _fix(path))
    return arrays


def _old_features(arrays: dict) -> bool:
    """Whether unstamped arrays look like features from before schema 1: labels and layer_0 … layer_L."""
    layers = [k for k in arrays if re.fullmatch(r"layer_\d+", k)]
    return ("labels" in arrays and bool(layers) and len(layers) + 1 == len(arrays)
            and all(isinstance(v, np.ndarray) for v in arrays.values()))


_OLD_NPZ = {"features": _old_features}


# --- torch: weights and model -------------------------------------------------
def _old_pt_kind(obj) -> str | None:
    """What an unstamped .pt from before schema 1 holds: model, weights, or None if neither."""
    import torch

    if isinstance(obj, dict) and {"state_dict", "config"} <= obj.keys():
        return "model"
    if isinstance(obj, dict) and obj and all(isinstance(v, torch.Tensor) for v in obj.values()):
        return "weights"
    return None


def write_pt(f: BinaryIO, kind: str, payload: dict) -> None:
    """``torch.save`` of ``payload`` (e.g. {"state_dict", "config"}) and the stamp of ``kind`` to ``f``."""
    import torch

    _reserved(payload)
    torch.save({**stamp(kind), **payload}, f)


def read_pt(path: Path, kind: str, data: bytes | None = None) -> dict:
    """The payload written by `write_pt` (its bytes ``data`` when already read), without the stamp; old-format
    files come back in the same shape.

    An old bare state dict is returned as {"state_dict": it}; an old model as {"state_dict", "config"}.
    """
    import torch

    data = read_bytes(path) if data is None else data
    try:
        obj = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - any unreadable file is one line to the user
        raise _unreadable(path, kind, e) from None
    if isinstance(obj, dict) and KIND in obj:
        _stamped(path, kind, obj.pop(KIND), obj.pop(SCHEMA, None))
        return obj
    found = _old_pt_kind(obj)
    if found != kind:
        check(f"artifact {path}", kind, found and f"{found} (unstamped, from before schema 1)", 0, _fix(path))
    return {"state_dict": obj} if found == "weights" else {"state_dict": obj["state_dict"], "config": obj["config"]}


# --- json: mask ---------------------------------------------------------------
def write_json(f: BinaryIO, kind: str, doc: dict) -> None:
    """``doc`` as JSON with the stamp of ``kind`` beside its keys, to ``f``."""
    _reserved(doc)
    f.write(json.dumps({**stamp(kind), **doc}).encode())


def read_json(path: Path, kind: str, *, old_keys: tuple[str, ...], data: bytes | None = None) -> dict:
    """The document written by `write_json`, without the stamp.

    Args:
        path: the file.
        kind: the kind expected.
        old_keys: keys that identify an unstamped document of ``kind`` from before schema 1.
        data: the file's bytes, when already read.
    """
    data = read_bytes(path) if data is None else data
    try:
        doc = json.loads(data.decode())
    except (OSError, ValueError) as e:
        raise _unreadable(path, kind, e) from None
    if isinstance(doc, dict) and KIND in doc:
        _stamped(path, kind, doc.pop(KIND), doc.pop(SCHEMA, None))
        return doc
    old = isinstance(doc, dict) and set(old_keys) <= doc.keys()
    check(f"artifact {path}", kind, kind if old else None, 0, _fix(path))
    return doc
