"""Bu et al. 2024 on the default: curvature over DP-FFT training, accountants, and continual vs pure DP.

Prints markdown tables and writes figures to docs/figures/. Usage: python bench/run_curvature.py
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import pandas as pd  # noqa: E402

import dpviz  # noqa: E402
from dpviz import figures, results  # noqa: E402
from dpviz.figures import export
from dpviz.analyses.hessian import predict_batch_size  # noqa: E402
from dpviz.analyses.service import analyze  # noqa: E402
from dpviz.config import RunConfig  # noqa: E402
from dpviz.privacy.accounting import sigma_by_batch_size  # noqa: E402
from dpviz.store import Store  # noqa: E402

OUT = ROOT / "docs" / "figures"
BS = [16, 32, 64, 128, 256, 512, 1024]


def save(fig, name, caption):
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"{name}.png").write_bytes(export.figure_bytes(fig, "png", caption=caption, width=1000, height=520))


def curvature_runs(store):
    cfgs = [RunConfig(strategy="fft", epsilon=e, lr_ft=lr, checkpoint_every=12) for e, lr in ((1.0, 0.01), (8.0, 0.1))]
    cfgs.append(RunConfig(strategy="fft", epsilon=float("inf"), lr_ft=0.1, checkpoint_every=12))
    jm = dpviz.JobManager(max_workers=2)
    sums = [j.wait() for j in [jm.submit(c) for c in cfgs]]
    jm.shutdown(cancel=False)
    ids = [s["run_id"] for s in sums]
    for rid in ids:
        for step in store.feature_steps(rid):
            analyze(store, rid, "hessian", step=step)
    df = results.curvature_table(store, ids)
    print("| run | step | tr(H) ± s.e. | GᵀG | GᵀHG | tr(HΣ)/B | decelerator | dominant |\n|---|---|---|---|---|---|---|---|")
    for r in df.itertuples():
        if r.step in (0, 24, 60, 120):
            print(f"| {r.label} | {r.step} | {r.trace:.3g} ± {r.stderr:.2g} | {r.gtg:.3g} | {r.curvature:.3g} | "
                  f"{r.sampling:.3g} | {r.decelerator:.3g} | {r.dominant} |")
    cap = "DP-FFT on digits (CNN); curvature on 256 private training examples — not covered by the DP guarantee"
    save(figures.curvature.terms_figure(df[df["epsilon"] == 1.0]), "curvature_terms_eps1", cap)
    save(figures.curvature.trace_figure(df), "curvature_trace", cap)
    last = store.feature_steps(ids[0])[-1]
    res = results.cached_analysis(store, ids[0], last, "hessian")
    pred = predict_batch_size(res, epsilon=1.0, delta=1e-5, epochs=20, n=1437, batch_sizes=BS)
    print(f"\npredicted best B at ε = 1 from the final checkpoint: {pred['best_batch_size']} "
          f"(totals: {', '.join(f'{b}: {v:.3g}' for b, v in pred['total_improvement'].items())})")


def accountants():
    rows = pd.DataFrame(sigma_by_batch_size(epsilon=1.0, delta=1e-5, epochs=20, dataset_size=1437, batch_sizes=BS))
    piv = rows.pivot(index="batch_size", columns="accountant", values="noise_multiplier")
    print("\n| B | σ RDP | σ GDP | σ PRV | σ²/B PRV |\n|---|---|---|---|---|")
    for b in BS:
        print(f"| {b} | {piv.loc[b, 'rdp']:.3f} | {piv.loc[b, 'gdp']:.3f} | {piv.loc[b, 'prv']:.3f} | "
              f"{piv.loc[b, 'prv'] ** 2 / b:.4f} |")
    save(figures.curvature.accountants_figure(rows, 1.0, 1e-5, 20), "accountants_eps1", "n = 1437 (digits)")


def continual():
    print("\n| ε | pure DP-FFT | continual (auto switch) | switch step (mean) | continual (switch at 60) |\n|---|---|---|---|---|")
    jm = dpviz.JobManager(max_workers=2)
    for eps, lr in ((1.0, 0.01), (2.0, 0.03), (8.0, 0.1)):
        base = RunConfig(strategy="fft", epsilon=eps, lr_ft=lr)
        kinds = {"fft": base, "auto": base.replace(strategy="continual"),
                 "fixed": base.replace(strategy="continual", switch_step=60)}
        jobs = {k: [jm.submit(c.replace(seed=s)) for s in (0, 1, 2)] for k, c in kinds.items()}
        out = {k: [j.wait() for j in js] for k, js in jobs.items()}
        ms = {k: (statistics.mean(s["test_accuracy"] for s in v), statistics.stdev(s["test_accuracy"] for s in v))
              for k, v in out.items()}
        sw = statistics.mean(s["public_phase"]["step"] for s in out["auto"])
        assert all(s["epsilon_spent"] <= eps for v in out.values() for s in v)
        print(f"| {eps:g} | {ms['fft'][0]:.3f} ± {ms['fft'][1]:.3f} | {ms['auto'][0]:.3f} ± {ms['auto'][1]:.3f} | "
              f"{sw:.0f} | {ms['fixed'][0]:.3f} ± {ms['fixed'][1]:.3f} |", flush=True)
    jm.shutdown(cancel=False)


if __name__ == "__main__":
    store = Store()
    accountants()
    curvature_runs(store)
    continual()
