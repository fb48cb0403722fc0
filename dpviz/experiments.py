"""The papers' experiments at small scale on the built-in ViT and the default data.

* ``distortion`` (Ke et al. 2024): DP-LP vs DP-FFT vs DP-LP-FFT at ε ∈ {1, 8}, with
  feature checkpoints every 6 steps so the kNN curves show the early dip.
* ``law`` (the anonymous ViT study): tune the last k = 1 … L blocks at ε ∈ {1, 8} with
  δ = 1/n, once with a constant learning rate shared by all settings and once
  with a learning rate tuned per ε (picked on the default CNN grid: see
  README); checkpoints every 12 steps for the layer × step heat maps.
"""

from __future__ import annotations

from dpviz.config import RunConfig

N_DIGITS = 1437
BASE = dict(backbone="vit", dataset="digits", epochs=20, eval_every=6)
# learning rates per ε for the ViT (LP head, fine-tuning), best of a small grid on seed 0
# (LP 0.3/1/3, FFT 0.01/0.03/0.1; README)
TUNED_LR = {1.0: (0.3, 0.01), 8.0: (1.0, 0.1)}
CONSTANT_LR = 0.05  # the "untuned" setting: one rate for every ε and k


def distortion() -> list[RunConfig]:
    out = []
    for eps in (1.0, 8.0):
        lr_lp, lr_ft = TUNED_LR[eps]
        for strategy in ("lp", "fft", "lp-fft"):
            out.append(RunConfig.from_dict(dict(**BASE, strategy=strategy, epsilon=eps, lp_fraction=0.3, lr_lp=lr_lp,
                                                lr_ft=lr_ft, checkpoint_every=6), reset_unread=True))
    return out


def law(num_blocks: int = 4) -> list[RunConfig]:
    from dpviz.data.digits import load_digits  # here: the constants above are read without torch

    n = load_digits().n
    out = []
    for eps in (1.0, 8.0):
        for tuned in (False, True):
            lr_lp, lr_ft = TUNED_LR[eps] if tuned else (CONSTANT_LR, CONSTANT_LR)
            for k in range(1, num_blocks + 1):
                out.append(RunConfig(**BASE, strategy="partial", tune_blocks=k, epsilon=eps, delta=1 / n,
                                     lr_ft=lr_ft, checkpoint_every=12))  # partial reads no lr_lp
    return out


PRESETS = {"distortion": distortion, "law": law}
