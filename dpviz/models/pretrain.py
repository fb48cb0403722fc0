"""Non-private pretraining of the built-in backbones on public data, cached on disk.

The public data are random-process images (`dpviz.data.public`); private data
are never passed here, so the pretrained weights carry no private
information. Weights are cached under ``<cache>/backbones/<key>.pt`` where
the key hashes everything that determines them; a file lock stops two
processes from pretraining the same backbone at once.

dpviz ships the result for the default backbone (``weights/<key>.pt``, written by
`scripts/ship_backbones.py` with this very recipe, on public data only): a fresh store uses it
instead of spending seconds pretraining on the first run, and every machine starts from the same
backbone — CPU pretraining is not bitwise reproducible across thread counts, so shipped weights are
what makes the README's figures reproducible exactly. A changed recipe or architecture changes the
key, and the backbone is pretrained again.
"""

from __future__ import annotations

import hashlib
import io
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from dpviz.data.public import NUM_CLASSES, random_process_images
from dpviz.errors import BackboneError, load_failure
from dpviz.store.artifacts import read_bytes
from dpviz.store.safefile import locked, write_atomic
from dpviz.models import Classifier, build_backbone

SHIPPED = Path(__file__).with_name("weights")
PRETRAIN = {"n": 12000, "epochs": 4, "batch": 128, "lr": 2e-3, "seed": 1234, "version": 1}


def cache_key(name: str, channels: int, size: int) -> str:
    arch = str(build_backbone(name, channels=channels, size=size))  # a changed architecture retrains
    blob = json.dumps({"backbone": name, "channels": channels, "size": size, "arch": arch, **PRETRAIN},
                      sort_keys=True)
    return f"{name}-{channels}x{size}-" + hashlib.sha256(blob.encode()).hexdigest()[:12]


def pretrain(name: str, *, channels: int, size: int, device: str = "cpu") -> tuple[nn.Module, float]:
    """Train ``name`` to classify public random-process images.

    Returns:
        the backbone (head dropped) and its accuracy on held-out public images.
    """
    torch.manual_seed(PRETRAIN["seed"])
    x, y = random_process_images(PRETRAIN["n"] + 2000, channels=channels, size=size, seed=PRETRAIN["seed"])
    xtr, ytr, xte, yte = x[2000:], y[2000:], x[:2000], y[:2000]
    model = Classifier(build_backbone(name, channels=channels, size=size), NUM_CLASSES).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=PRETRAIN["lr"], weight_decay=1e-4)
    steps = PRETRAIN["epochs"] * (len(ytr) // PRETRAIN["batch"])
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, PRETRAIN["lr"], total_steps=steps)
    g = torch.Generator().manual_seed(PRETRAIN["seed"])
    for _ in range(PRETRAIN["epochs"]):
        perm = torch.randperm(len(ytr), generator=g)
        for i in range(0, len(perm) - PRETRAIN["batch"] + 1, PRETRAIN["batch"]):
            idx = perm[i:i + PRETRAIN["batch"]]
            loss = F.cross_entropy(model(xtr[idx].to(device)), ytr[idx].to(device))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
    with torch.no_grad():
        acc = (model(xte.to(device)).argmax(1).cpu() == yte).float().mean().item()
    return model.backbone.cpu(), acc


def pretrained_backbone(name: str, *, channels: int, size: int, cache_dir: Path,
                        device: str = "cpu") -> nn.Module:
    """The cached pretrained backbone, pretraining it first if needed.

    The store's copy comes first, then the one dpviz ships. A store copy that does not load (a foreign
    or truncated file) is removed, with a one-line warning on stderr saying whether the shipped copy is
    used instead or the backbone is pretrained again. The lock and the new file are never opened
    through a link planted in the folder (`dpviz.store.safefile`).
    """
    folder = Path(cache_dir) / "backbones"  # may itself be a link: a backbone cache shared between stores
    folder.mkdir(parents=True, exist_ok=True)
    key = cache_key(name, channels, size)
    path, shipped = folder / f"{key}.pt", SHIPPED / f"{key}.pt"
    with locked(folder / ".lock"):  # one pretraining per backbone at a time
        backbone = _cached(path, shipped, name, channels, size)
        if backbone is None and shipped.exists():
            try:  # read-only, never written: the package's copy
                return _load(shipped, name, channels, size)
            except Exception as e:  # noqa: BLE001 - any unreadable file is one line to the user
                raise BackboneError(f"backbone {shipped}: the copy dpviz ships cannot be loaded "
                                    f"({load_failure(e)}); reinstall dpviz") from None
        if backbone is None:
            trained, acc = pretrain(name, channels=channels, size=size, device=device)
            state = {"state_dict": trained.state_dict(), "public_accuracy": acc}
            write_atomic(path, lambda f: torch.save(state, f))  # a killed pretraining leaves no half file
            backbone = build_backbone(name, channels=channels, size=size)  # fresh, as a loaded one is
            backbone.load_state_dict(state["state_dict"])
    return backbone


def _load(path: Path, name: str, channels: int, size: int) -> nn.Module:
    backbone = build_backbone(name, channels=channels, size=size)
    data = read_bytes(path)  # a link or a FIFO planted in the store is refused, never followed or waited on
    backbone.load_state_dict(torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)["state_dict"])
    return backbone


def _cached(path: Path, shipped: Path, name: str, channels: int, size: int) -> nn.Module | None:
    """The store's copy; None when there is none, or when it does not load (then it is removed)."""
    if not path.exists():
        return None
    try:
        return _load(path, name, channels, size)
    except Exception as e:  # noqa: BLE001 - whatever is wrong with it, the cure is the same
        then = f"using the copy dpviz ships ({shipped})" if shipped.exists() else "pretraining it again"
        print(f"dpviz: warning: backbone cache {path} is damaged ({load_failure(e)}); removed it, {then}",
              file=sys.stderr)
        path.unlink(missing_ok=True)
        return None
