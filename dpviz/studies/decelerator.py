"""``decelerator``: what the noise alone of K steps does to the loss, measured beside the curvature formula's
prediction, under DP-SGD (b = 1) and BandMF's correlated noise (b bands); and the noise each mechanism leaves in
the weights at equal ε.

Each seed trains one DP-FFT run (a checkpoint every 40 steps, its weights kept); every cell measures at the
checkpoint halfway through it. With the run's σ, C and B, the noise of K steps moves the weights by
Δ = −(η/B)·Σ_{t<K} w_t, with w_t DP-SGD's independent draws or BandMF's banded ones
(`dpviz.privacy.bandmf.BandedNoise`). Measured: the symmetric loss change (L(θ+Δ) + L(θ−Δ))/2 − L(θ) on the
curvature analysis's fixed batch of private training examples, averaged over draws (the symmetric difference
removes the gradient's first-order term exactly). Predicted: (η²/2)·K·κ·σ²C²·tr(H)/B², with tr(H) by
Hutchinson (the ``hessian`` analysis, cached in the store) and κ = `bandmf.noise_factor(b, K)` (1 for DP-SGD).
Both are statistics of private data that ε does not cover.

Beside them, σ_b: the σ a run of the same configuration under BandMF with b bands is calibrated to at the same ε
(`dpviz.runner.preview`), and σ_b²·κ_b(T) against DP-SGD's σ²: the noise each leaves in the weights over the
run's T steps (below 1: less than DP-SGD's).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math

from dpviz.errors import ConfigError
from dpviz.studies.base import Measure, Study

LR = 0.5
"""η of the noise steps: small enough that the loss change is second order."""
DRAWS = 40
"""Draws of K steps of noise per cell, averaged."""
TOLERANCE = 1.5
"""The formula predicts a cell when measured ÷ predicted lies within a factor of this of 1."""
HUTCHINSON = dict(rtol=0.02, max_probes=400, min_probes=50)
"""The ``hessian`` analysis's probes for tr(H): tighter than its default, the prediction's only estimate."""

MEASURES = ("measured", "measured_se", "predicted", "ratio", "independent", "kappa", "sigma", "noise_vs_sgd")


def fields(cell: dict) -> dict:
    """One run per ε: the bands and the horizon choose what is measured at its checkpoint, not how it trains."""
    return {"epsilon": float(cell["epsilon"])}


def execute(cell: dict, cfg, store, cancel) -> dict:
    """The seed's run (trained once; the store answers the other cells), and this cell's numbers at its
    middle checkpoint."""
    from dpviz.runner import run

    _check(cfg)
    summary = run(cfg, store=store, cancel=cancel, resume=True, rates="grid")
    if summary.get("status", "finished") != "finished":
        return summary
    bands, horizon = int(cell["bands"]), int(cell["horizon"])
    return {**summary, **loss_change(store, summary["run_id"], bands=bands, horizon=horizon, seed=cfg.seed),
            **equal_epsilon(cfg, bands=bands)}


def _check(cfg) -> None:
    """What the measurement needs of the run: DP noise to measure, and the weights of its checkpoints."""
    if not cfg.private:
        raise ConfigError("epsilon", "a finite ε (the study measures what DP's noise does)", cfg.epsilon)
    if cfg.keep_weights != "checkpoints" or cfg.checkpoint_every <= 0:
        raise ConfigError("keep_weights", "checkpoints with checkpoint_every > 0 (the study measures at a "
                          "checkpoint's weights)", cfg.keep_weights)


def loss_change(store, run_id: str, *, bands: int, horizon: int, seed: int) -> dict:
    """At the run's middle checkpoint: the loss change from ``horizon`` steps of noise alone with ``bands`` bands
    (mean and standard error over draws), the formula's prediction, their ratio and the ratio to the
    independent-noise formula's (κ = 1), and κ(K)."""
    import torch

    from dpviz.analyses import analyze
    from dpviz.analyses.hessian import trainable_params
    from dpviz.analyses.service import model_checkpoint
    from dpviz.privacy import bandmf

    steps = store.weight_steps(run_id)
    if not steps:
        raise ConfigError("keep", "all: every cell reads its seed's run's checkpoint weights, and run "
                          f"{run_id} has none left (keep results prunes them once a cell is read)", "results")
    step = steps[len(steps) // 2]
    hess = analyze(store, run_id, "hessian", step=step, **HUTCHINSON)
    ck = model_checkpoint(store, run_id, step, batch=256)
    ck.model.eval()
    params = trainable_params(ck.model, ck.trainable)  # the parameters tr(H) was taken over
    x, y = ck.x[:hess["batch"]], ck.y[:hess["batch"]]
    std = ck.noise_multiplier * ck.clip_norm
    # a stream per (seed, K, b): cells and seeds draw apart
    gen = torch.Generator().manual_seed(seed * 100_000 + horizon * 100 + bands)
    mean, se = _symmetric_change(ck.model, params, x, y, bands=bands, horizon=horizon, std=std,
                                 scale=LR / ck.batch_size, generator=gen)
    kappa = bandmf.noise_factor(bands, horizon)
    predicted = LR ** 2 / 2 * horizon * kappa * std ** 2 * hess["trace"] / ck.batch_size ** 2
    return {"measured": mean, "measured_se": se, "predicted": predicted,
            "ratio": mean / predicted if predicted > 0 else None,
            "independent": mean * kappa / predicted if predicted > 0 else None, "kappa": kappa}


def _symmetric_change(model, params, x, y, *, bands: int, horizon: int, std: float, scale: float,
                      generator) -> tuple[float, float]:
    """(mean, standard error) over `DRAWS` of (L(θ+Δ) + L(θ−Δ))/2 − L(θ), Δ = scale · the sum of ``horizon``
    steps of noise of std ``std`` through ``bands`` bands."""
    import torch

    from dpviz.privacy import bandmf

    base = _loss(model, x, y)
    vals = []
    for _ in range(DRAWS):
        noise, total = bandmf.BandedNoise(bands), [torch.zeros_like(p) for p in params]
        for _ in range(horizon):
            z = [(torch.randn(p.shape, generator=generator) * std).to(p.device) for p in params]
            torch._foreach_add_(total, noise(z))
        delta = [t * scale for t in total]
        vals.append((_shifted(model, params, delta, 1.0, x, y) + _shifted(model, params, delta, -1.0, x, y)) / 2
                    - base)
    t = torch.tensor(vals, dtype=torch.float64)
    return float(t.mean()), float(t.std() / math.sqrt(len(vals)))


def _loss(model, x, y) -> float:
    import torch
    import torch.nn.functional as F

    with torch.no_grad():
        return float(F.cross_entropy(model(x), y))


def _shifted(model, params, delta, sign: float, x, y) -> float:
    """The loss at θ + sign·Δ (the parameters are restored after)."""
    import torch

    with torch.no_grad():
        for p, d in zip(params, delta):
            p.add_(d, alpha=sign)
        out = _loss(model, x, y)
        for p, d in zip(params, delta):
            p.sub_(d, alpha=sign)
    return out


def equal_epsilon(cfg, *, bands: int) -> dict:
    """σ of ``cfg`` under BandMF with ``bands`` bands (DP-SGD at 1) at its ε, and σ²·κ(T) against DP-SGD's σ²;
    None where that mechanism cannot run on this configuration (b·q > 1)."""
    from dpviz.privacy import bandmf

    sgd, _ = _calibrated(cfg.to_json(), 1)
    try:
        sigma, steps = _calibrated(cfg.to_json(), bands)
    except ConfigError:
        return {"sigma": None, "noise_vs_sgd": None}
    return {"sigma": sigma, "noise_vs_sgd": sigma ** 2 * bandmf.noise_factor(bands, steps) / sgd ** 2}


@functools.lru_cache(maxsize=256)
def _calibrated(config: str, bands: int) -> tuple[float, int]:
    """(σ, steps) of the first phase of the configuration ``config`` (JSON) under ``bands`` bands, as a run of it
    would be calibrated (`dpviz.runner.preview`); once per process, not once per cell."""
    from dpviz.config import RunConfig
    from dpviz.runner import preview

    mech = dict(mechanism="bandmf", bands=bands) if bands > 1 else dict(mechanism="dp-sgd", bands=1)
    phase = preview(dataclasses.replace(RunConfig.from_dict(json.loads(config)), **mech))["phases"][0]
    return phase["noise_multiplier"], phase["steps"]


def measure(store, summary: dict, cfg) -> dict:
    return {k: summary.get(k) for k in MEASURES}


def read(res) -> tuple[str, str]:
    """Does the formula predict the measured change (every cell's mean ratio within a factor `TOLERANCE` of 1),
    and do bands leave less noise in the weights than DP-SGD at equal ε (σ_b²·κ_b(T) ÷ σ² below 1)?

    Verdict: "formula holds, bands quieter" / "… bands noisier" / "… bands mixed" (some ε each way), "formula
    holds at ε = 8, …" (at some ε only) or "formula off, …"; "formula holds" alone where no b > 1 has a
    calibrated σ."""
    ratios, noise, independent = [], {}, []
    for e in res.cells.values():
        c = e["cell"]
        if res.stats(c, "measured") is None:  # not read yet
            continue
        if (st := res.stats(c, "ratio")) is not None:
            ratios.append((float(c["epsilon"]), int(c["bands"]), int(c["horizon"]), st))
        if int(c["bands"]) > 1 and (st := res.stats(c, "independent")) is not None:
            independent.append(st[0])
        if int(c["bands"]) > 1:
            v = res.stats(c, "noise_vs_sgd")
            noise.setdefault(float(c["epsilon"]), {})[int(c["bands"])] = v[0] if v else None
    if not ratios:
        return "not read", "No cell has a measured loss change yet."
    holds, text = _formula(ratios)
    if independent:  # what κ adds: the same measurement against the formula for independent noise
        text += (f" Against the independent-noise formula (κ = 1) BandMF's change is {min(independent):.2f} to "
                 f"{max(independent):.2f} times it.")
    quieter, said = _noise(noise)
    if said:
        text += " " + said
    verdict = f"formula {holds}" + (f", bands {quieter}" if quieter else "")
    return verdict, text


def _formula(ratios: list) -> tuple[str, str]:
    """("holds" / "holds at ε = …" / "off", the sentence), judged per ε: at a large σ the noise of a step of η
    leaves the quadratic regime the formula is, so one ε may hold where another does not."""
    said, held = [], []
    for eps in sorted({r[0] for r in ratios}):
        at = [r for r in ratios if r[0] == eps]
        lo, hi = min(r[3][0] for r in at), max(r[3][0] for r in at)
        off = [r for r in at if not 1 / TOLERANCE <= r[3][0] <= TOLERANCE]
        held.append(not off)
        text = (f"at ε = {eps:g} the loss change from K steps of noise alone is {lo:.2f} to {hi:.2f} times the "
                f"κ-formula's over b ∈ {{{', '.join(map(str, sorted({r[1] for r in at})))}}} and K ∈ "
                f"{{{', '.join(map(str, sorted({r[2] for r in at})))}}}")
        said.append(text + (f" (every cell within a factor {TOLERANCE:g}: the formula predicts it)" if not off else
                            f"; outside a factor {TOLERANCE:g}: " + ", ".join(
                                f"b = {b}, K = {k} ({st[0]:.2f} ± {st[1]:.2f})" for _, b, k, st in off)))
    text = "; ".join(said) + "."
    eps = sorted({r[0] for r in ratios})
    verdict = "holds" if all(held) else "off" if not any(held) else \
        "holds at ε = " + ", ".join(f"{e:g}" for e, h in zip(eps, held) if h)
    return verdict, text[0].upper() + text[1:]


def _noise(noise: dict) -> tuple[str, str]:
    """("quieter" / "noisier" / "mixed" / "", the sentence) from ε → {b: σ_b²κ_b ÷ σ² or None}."""
    said, ways = [], set()
    for eps, by_b in sorted(noise.items()):
        ran = {b: v for b, v in by_b.items() if v is not None}
        if not ran:
            continue
        ways.add("quieter" if min(ran.values()) < 1 else "noisier")
        said.append(f"at ε = {eps:g} BandMF leaves " + ", ".join(f"{v:.2f} (b = {b})" for b, v in sorted(ran.items()))
                    + " of DP-SGD's noise in the weights"
                    + "".join(f"; b = {b} cannot run" for b, v in sorted(by_b.items()) if v is None))
    if not said:
        return "", ""
    text = "; ".join(said) + "."
    return ("mixed" if len(ways) > 1 else ways.pop()), text[0].upper() + text[1:]


def show(cell: dict) -> dict:
    b = int(cell["bands"])
    return {"ε": f"{float(cell['epsilon']):g}", "mechanism": f"BandMF b={b}" if b > 1 else "DP-SGD",
            "K steps": str(int(cell["horizon"]))}


DECELERATOR = Study(
    name="decelerator", title="The decelerator under correlated noise",
    question="Does the curvature formula predict what K steps of noise alone do to the loss under DP-SGD and "
             "BandMF, and does BandMF leave less noise in the weights than DP-SGD at the same ε?",
    axes={"bands": (1, 2, 4, 8), "horizon": (1, 4, 16, 64), "epsilon": (8.0,)},
    fields=fields, base=dict(strategy="fft", checkpoint_every=40, keep_weights="checkpoints"),
    kinds=("bands", "horizon"), execute=execute,
    measures=(Measure(name="measured", label="measured ΔL", fmt=".4g", private=True),
              Measure(name="measured_se", label="its s.e. over draws", fmt=".2g", private=True),
              Measure(name="predicted", label="κ-formula's ΔL", fmt=".4g", private=True),
              Measure(name="ratio", label="measured ÷ κ-formula", fmt=".2f", private=True),
              Measure(name="independent", label="measured ÷ independent-noise formula (κ = 1)", fmt=".2f",
                      private=True),
              Measure(name="kappa", label="κ(K)"),
              Measure(name="sigma", label="calibrated σ of the mechanism"),
              Measure(name="noise_vs_sgd", label="σ²·κ(T) ÷ DP-SGD's σ²", fmt=".2f")),
    measure=measure, read=read, show=show)

from dpviz.studies.registry import register_study  # noqa: E402

register_study(DECELERATOR)
