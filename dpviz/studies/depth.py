"""``depth``: the separation law (seed 002) on three depths of one family: EfficientNet-Lite0, Lite1 and Lite2.

For each backbone, its per-layer fuzziness D_l on the task's evaluation subset, ``pretrained`` (its ImageNet
weights, before any private step: nothing trains) and after DP-FFT at ε = 8 (``fft``, every backbone at Lite0's
rates from the shipped grid, since the grid is searched on Lite0); then the fit of log D_l against depth (R² and
its ratio ρ) from layer 1 on and over all layers, at the library's layers (the input, then the 7 stages) and,
pretrained, after every MBConv block (16, 21 or 21 blocks and the head conv). D_l is a statistic of private data
the DP guarantee does not cover. The backbone axis replaces the task's backbone, so the study runs on an image
task (``real-vision`` at the scorecard's sizes: ``--scale small`` or ``medium``); on a text task the first run's
configuration refuses the backbone in one line, before anything trains.
"""

from __future__ import annotations

from dpviz.studies.base import Measure, Study

FAMILY = ("efficientnet_lite0", "efficientnet_lite1", "efficientnet_lite2")
PHASES = {"pretrained": "pretrained (nothing trains)", "fft": "after DP-FFT"}
GOAL = 0.9
"""The R² the law asks of both fits (the scorecard's 002-law: `dpviz.reproduce.verdicts.judge_law`)."""
FITS = ("r2_from_1", "rho_from_1", "r2_all")


def fields(cell: dict) -> dict:
    return {"backbone": cell["backbone"]}


def execute(cell: dict, cfg, store, cancel) -> dict:
    """The pretrained backbone's D_l (no run), or the DP-FFT run at Lite0's shipped rates."""
    from dpviz.runner import run

    if cell["phase"] == "pretrained":
        return pretrained(cfg, store)
    return run(lite0_rates(cfg), store=store, cancel=cancel, resume=True, rates="grid")


def lite0_rates(cfg):
    """``cfg`` with the rates the shipped grid gives Lite0 at its size and ε (the grid is searched on Lite0 only:
    every depth trains at the same rates); unchanged where the grid has no such entry (the run resolves them)."""
    from dpviz import autotune

    lite0 = cfg.replace(backbone=FAMILY[0])
    hit = autotune.lookup(lite0, autotune.used_fields(lite0))
    return cfg.replace(**hit[0]) if hit else cfg


def pretrained(cfg, store) -> dict:
    """D_l of ``cfg``'s backbone's pretrained features on its evaluation subset, at the library's layers and after
    every block. Nothing trains and nothing here depends on the seed (the subset is fixed, the head unused); its
    "run_id" names the configuration whose features were read, so the results say what each cell read."""
    from dpviz.analyses.separability import separability
    from dpviz.training import prepare

    fixed = cfg.fixed_rates()  # preparing refuses "auto" rates; no step is taken, so none is used
    prep = prepare.prepare(fixed, cache_dir=store.root, with_curve=False)
    x, y = prep.bundle.eval_subset(cfg.eval_subset)
    stages = separability(prepare.layer_features(prep.model, x, y, prep.device)).fuzziness
    blocks = _by_block(prep.model.backbone, x, y, prep.device)
    return {"run_id": f"pretrained {cfg.backbone} {fixed.replace(seed=0).hash()[:16]}", "status": "finished",
            "fuzziness": [float(v) for v in stages], "block_fuzziness": blocks}


def _by_block(net, x, y, device) -> list[float] | None:
    """D_l of the input, after each MBConv block and after the head conv, each pooled over space; None for a
    backbone that is not an EfficientNet (no blocks to walk)."""
    import torch

    from dpviz.analyses.separability import fuzziness

    if not all(hasattr(net, a) for a in ("stem", "_input", "blocks")):
        return None
    net = net.to(device).eval()
    feats = [x.flatten(1)]
    with torch.no_grad():
        h = net.stem(net._input(x.to(device)))
        for i, stage in enumerate(net.blocks):
            head = []
            if i == len(net.blocks) - 1:  # Sequential(the last stage's blocks, head conv, its norm)
                stage, *head = stage
            for block in stage:
                h = block(h)
                feats.append(h.mean(dim=(2, 3)).cpu())
        for m in head:
            h = m(h)
        feats.append(h.mean(dim=(2, 3)).cpu())
    yy = y.numpy()
    return [float(fuzziness(f.float().numpy(), yy)) for f in feats]


def fits(fz) -> dict:
    """R² and ρ of log D_l against depth from layer 1 on, and R² over all layers (the scorecard's fits)."""
    from dpviz.reproduce.verdicts import fit_r2, fit_rho

    return {"r2_from_1": fit_r2(fz, 1), "rho_from_1": fit_rho(fz, 1), "r2_all": fit_r2(fz)}


def measure(store, summary: dict, cfg) -> dict:
    """The fits at the library's layers (a run's last checkpoint, or the pretrained features) and, pretrained,
    after every block."""
    fz = summary.get("fuzziness")
    if fz is None:
        from dpviz.analyses.service import analyze

        fz = analyze(store, summary["run_id"], "separability")["fuzziness"]
    blocks = summary.get("block_fuzziness")
    by_block = fits(blocks) if blocks else dict.fromkeys(FITS)
    return {**fits(fz), **{f"blocks_{k}": v for k, v in by_block.items()},
            "block_layers": None if not blocks else float(len(blocks) - 1)}


def _law(res, cell: dict, prefix: str = "") -> tuple[str, str] | None:
    """The scorecard's judge of the law on ``cell``'s mean fits (None where it has none)."""
    from dpviz.reproduce.verdicts import judge_law

    got = {k: res.stats(cell, prefix + k) for k in FITS}
    if got["r2_from_1"] is None or got["r2_all"] is None:
        return None
    return judge_law({k: [st[0]] if st else [] for k, st in got.items()})


def read(res) -> tuple[str, str]:
    """Per phase and backbone, whether log D_l falls linearly with depth: R² ≥ 0.9 from layer 1 on and over all
    layers, with ρ < 1 (the scorecard's 002-law). Verdict: "the law holds at every depth" (every cell read
    agrees), "at some depths", "in part" (no cell agrees, one of its two fits reaches 0.9 somewhere), or "the law
    does not hold"."""
    from dpviz.reproduce.verdicts import AGREES, PARTLY

    said, verdicts = [], []
    for phase, words in PHASES.items():
        parts = []
        for e in _cells(res, phase):
            c = e["cell"]
            if (law := _law(res, c)) is None:
                continue
            verdicts.append(law[0])
            (a, _, _), (rho, _, _), (b, _, _) = (res.stats(c, k) or (float("nan"), 0, 0) for k in FITS)
            text = f"{label(c['backbone'])} R² {a:.2f} from layer 1, {b:.2f} over all layers, ρ = {rho:.2f}"
            if _law(res, c, "blocks_") is not None:
                a1, b1 = res.stats(c, "blocks_r2_from_1")[0], res.stats(c, "blocks_r2_all")[0]
                text += f" (by block: R² {a1:.2f} and {b1:.2f})"
            parts.append(text + {AGREES: ", linear", PARTLY: ", linear in part"}.get(law[0], ", not linear"))
        if parts:
            said.append(f"{words[0].upper() + words[1:]}: " + "; ".join(parts))
    if not verdicts:
        return "not read", "No backbone has its fits read yet."
    verdict = ("the law holds at every depth" if all(v == AGREES for v in verdicts) else
               "the law holds at some depths" if AGREES in verdicts else
               "the law holds in part" if PARTLY in verdicts else "the law does not hold")
    return verdict, ". ".join(said) + f". The law asks R² ≥ {GOAL:g} of both fits with ρ < 1."


def _cells(res, phase: str) -> list[dict]:
    order = {b: i for i, b in enumerate(FAMILY)}
    got = [e for e in res.cells.values() if e["cell"].get("phase") == phase]
    return sorted(got, key=lambda e: order.get(e["cell"]["backbone"], len(order)))


def label(backbone: str) -> str:
    """"efficientnet_lite1" → "EfficientNet-Lite1"."""
    return backbone.replace("efficientnet_lite", "EfficientNet-Lite") if backbone in FAMILY else backbone


def show(cell: dict) -> dict:
    return {"backbone": label(cell["backbone"]), "features": PHASES.get(cell["phase"], cell["phase"])}


DEPTH = Study(
    name="depth", title="The separation law at three depths",
    question="Does log D_l fall linearly with depth at every depth of one backbone family, pretrained and after "
             "DP-FFT?",
    axes={"backbone": FAMILY, "phase": tuple(PHASES)},
    fields=fields, base=dict(strategy="fft", epsilon=8.0, keep_weights="none", checkpoint_every=-1),
    kinds=("phase",), execute=execute, choices={"backbone": FAMILY, "phase": tuple(PHASES)},
    measures=(Measure(name="r2_from_1", label="R² from layer 1", private=True),
              Measure(name="rho_from_1", label="ρ from layer 1", private=True),
              Measure(name="r2_all", label="R² all layers", private=True),
              Measure(name="block_layers", label="blocks read (after the input)", fmt=".0f"),
              Measure(name="blocks_r2_from_1", label="R² from block 1", private=True),
              Measure(name="blocks_rho_from_1", label="ρ from block 1", private=True),
              Measure(name="blocks_r2_all", label="R² all blocks", private=True)),
    measure=measure, read=read, seed_paper="002", show=show)

from dpviz.studies.registry import register_study  # noqa: E402

register_study(DEPTH)
