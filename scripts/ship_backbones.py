"""Pretrain the built-in backbones for the default task and ship them in ``dpviz/models/weights``.

Public random-process images only (`dpviz.models.pretrain`); the file is named by the recipe's key, so
a changed recipe or architecture is pretrained again at run time instead of loading a stale file.

    python scripts/ship_backbones.py [--backbones cnn]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from dpviz.models import pretrain  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backbones", nargs="+", default=["cnn"])
    a = p.parse_args()
    pretrain.SHIPPED.mkdir(exist_ok=True)
    for name in a.backbones:
        backbone, acc = pretrain.pretrain(name, channels=1, size=16)
        path = pretrain.SHIPPED / f"{pretrain.cache_key(name, 1, 16)}.pt"
        torch.save({"state_dict": backbone.state_dict(), "public_accuracy": acc}, path)
        print(f"{path}: public accuracy {acc:.4f}")


if __name__ == "__main__":
    main()
