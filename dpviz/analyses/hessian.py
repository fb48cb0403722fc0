"""Curvature at a checkpoint: tr(H) by Hutchinson, GᵀG, GᵀHG, tr(HΣ) and the decelerator.

A model analysis: it reloads the run's weights at the step and takes a fixed
batch of the *private training data* (the first ``batch`` examples of a fixed
permutation, independent of the run's seed), so like the other analyses it is
a statistic of private data that the run's DP guarantee does not cover.
The formulas are in `dpviz.privacy.curvature`'s docstring. The parameters are those
the run updates at that step (the head in an LP phase, everything in FFT);
the decelerator uses the run's own σ, expected batch size B and clipping
norm C, and c, the mean clip factor of the sampled per-sample gradients.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from torch import nn

from dpviz.privacy import curvature
from dpviz.privacy.clipping import clip_factors
from dpviz.analyses import register


@dataclass(kw_only=True)
class Checkpoint:
    """What a model analysis needs (fields by keyword only: σ, B and C must not be swapped).

    Attributes:
        model: the classifier with the step's weights.
        x: (batch, C, H, W) fixed private training batch. y: (batch,) its labels.
        trainable: the phase's trainable set at this step ("all", "head", "last:k").
        noise_multiplier: σ of that phase (0 for a non-private phase).
        batch_size: expected batch B = q·n. clip_norm: C. clipping: "abadi" or "auto-s".
        noise_factor: κ of the run's noise mechanism (`dpviz.privacy.bandmf.noise_factor`): 1 for DP-SGD,
            below 1 for BandMF, whose correlated noise partly cancels in the running sum of updates.
    """

    model: nn.Module
    x: torch.Tensor
    y: torch.Tensor
    trainable: str
    noise_multiplier: float
    batch_size: float
    clip_norm: float
    clipping: str = "abadi"
    noise_factor: float = 1.0


@dataclass(frozen=True, kw_only=True)
class HessianResult:
    """What `hessian` returns; ``decelerator`` carries the σ, B and C it used (fields by keyword only)."""

    trace: float
    stderr: float
    probes: int
    blocks: dict
    gtg: float
    gthg: float
    tr_h_sigma: float
    tr_h_sigma_stderr: float
    clip_factor: float
    decelerator: dict
    terms: dict
    dominant: str
    lr_star: float
    improvement_star: float
    parameters: str
    n_parameters: int
    batch: int

    def to_dict(self) -> dict:
        return asdict(self)


def trainable_params(model: nn.Module, trainable: str) -> list[nn.Parameter]:
    from dpviz.training.prepare import set_trainable

    set_trainable(model, trainable)
    return [p for p in model.parameters() if p.requires_grad]


LARGE, LARGE_BATCH = 2_000_000, 32
"""Above LARGE trainable weights the probes use at most LARGE_BATCH examples (a wider standard error,
reported), so one checkpoint's curvature of a real pretrained network takes a minute, not an hour."""


@register("hessian", "tr(H) (Hutchinson ± s.e.), GᵀHG, tr(HΣ) and the DP decelerator σ²C²tr(H)/(B²c²)",
          kind="model", batch=256, rtol=0.05, max_probes=100, min_probes=10, sigma_samples=16, seed=0)
def hessian(ck: Checkpoint, *, batch: int, rtol: float, max_probes: int, min_probes: int, sigma_samples: int,
            seed: int) -> HessianResult:
    params = trainable_params(ck.model, ck.trainable)
    if sum(p.numel() for p in params) > LARGE:  # e.g. MiniLM's 11M: B = 256 would need ~11 GB and minutes
        batch = min(batch, LARGE_BATCH)         # per probe; the result's ``batch`` says what was used
    x, y = ck.x[:batch], ck.y[:batch]
    g = torch.Generator().manual_seed(seed)
    lc = curvature.LossCurvature(ck.model, x, y, params)
    tr, blocks = curvature.hutchinson(lc, curvature.param_blocks(ck.model, params), rtol=rtol,
                                      max_probes=max_probes, min_probes=min_probes, generator=g)
    gtg = float(sum(v.pow(2).sum() for v in lc.G))
    gthg = float(sum((a * b).sum() for a, b in zip(lc.G, lc.hvp(lc.G))))
    ths, norms = curvature.sigma_trace(lc, min(sigma_samples, len(y)), g)
    c = float(clip_factors(norms, ck.clip_norm, ck.clipping).mean())
    t = curvature.improvement_terms(gtg=gtg, gthg=gthg, trace=tr.value, tr_h_sigma=ths.value,
                                    noise_multiplier=ck.noise_multiplier, batch_size=ck.batch_size,
                                    clip_norm=ck.clip_norm, clip_factor_mean=c, noise_factor=ck.noise_factor)
    dec = {"value": t["terms"]["decelerator"], "noise_multiplier": ck.noise_multiplier,
           "batch_size": ck.batch_size, "clip_norm": ck.clip_norm, "clip_factor": c, "clipping": ck.clipping,
           **({"noise_factor": ck.noise_factor} if ck.noise_factor != 1.0 else {})}
    return HessianResult(trace=tr.value, stderr=tr.stderr, probes=tr.samples,
                         blocks={k: {"trace": e.value, "stderr": e.stderr} for k, e in blocks.items()},
                         gtg=gtg, gthg=gthg, tr_h_sigma=ths.value, tr_h_sigma_stderr=ths.stderr, clip_factor=c,
                         decelerator=dec, terms=t["terms"], dominant=t["dominant"], lr_star=t["lr_star"],
                         improvement_star=t["improvement_star"], parameters=ck.trainable,
                         n_parameters=sum(p.numel() for p in params), batch=len(y))


def predict_batch_size(result: dict, *, epsilon: float, delta: float, epochs: int, n: int, batch_sizes,
                       accountant: str = "prv") -> dict:
    """Combine a checkpoint's curvature with an accountant's σ(B): the B the formula predicts as best.

    Keeps GᵀG, GᵀHG, tr(H), tr(HΣ) and c of ``result`` fixed and varies B with σ(B) calibrated for
    (ε, δ) over ``epochs`` epochs of n examples; see `curvature.predicted_best_batch`.
    """
    from dpviz.privacy.accounting import sigma_by_batch_size

    rows = sigma_by_batch_size(epsilon=epsilon, delta=delta, epochs=epochs, dataset_size=n,
                               batch_sizes=batch_sizes, accountants=[accountant])
    sigmas = {r["batch_size"]: r["noise_multiplier"] for r in rows}
    return curvature.predicted_best_batch(gtg=result["gtg"], gthg=result["gthg"], trace=result["trace"],
                                          tr_h_sigma=result["tr_h_sigma"], clip_norm=result["decelerator"]["clip_norm"],
                                          clip_factor_mean=result["clip_factor"], n=n, epochs=epochs, sigmas=sigmas)
