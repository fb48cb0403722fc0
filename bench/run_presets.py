"""Run the two paper presets (dpviz.experiments), then print their numbers and write their figures.

Usage: python bench/run_presets.py [distortion] [law]   (figures go to docs/figures/)
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import dpviz  # noqa: E402
from dpviz import figures, results  # noqa: E402
from dpviz.figures import export
from dpviz.experiments import CONSTANT_LR, PRESETS  # noqa: E402

OUT = ROOT / "docs" / "figures"


def run_all(name: str) -> list[dict]:
    jm = dpviz.JobManager(max_workers=2)
    jobs = [jm.submit(cfg) for cfg in PRESETS[name]()]
    out = [j.wait() for j in jobs]
    jm.shutdown(cancel=False)  # also waits for the background analyses
    return out


def save(fig, configs, name):
    OUT.mkdir(parents=True, exist_ok=True)
    cap = results.caption(configs) + " — private-data statistics, not covered by the DP guarantee"
    (OUT / f"{name}.png").write_bytes(export.figure_bytes(fig, "png", caption=cap, width=1000, height=560))


def distortion(store):
    sums = run_all("distortion")
    ids = [s["run_id"] for s in sums]
    df = results.analysis_curves(store, ids, "knn", "accuracy")
    print("| run | test acc | kNN step 0 | min kNN (step) | final kNN |\n|---|---|---|---|---|")
    for s in sums:
        d = df[df["run_id"] == s["run_id"]].sort_values("step")
        lo = d.loc[d["value"].idxmin()]
        print(f"| {d['label'].iloc[0]} | {s['test_accuracy']:.3f} | {d['value'].iloc[0]:.3f} | "
              f"{lo['value']:.3f} ({int(lo['step'])}) | {d['value'].iloc[-1]:.3f} |")
    for eps in (1.0, 8.0):
        sel = [s["run_id"] for s in sums if s["config"]["epsilon"] == eps]
        save(figures.metric_curves(df[df["run_id"].isin(sel)], "knn_accuracy"),
             [store.get_run(r)["config"] for r in sel], f"knn_eps{eps:g}")


def law(store):
    sums = run_all("law")
    print("| ε | lr | k | test acc | ρ (D) | R² (D) | r (D) | ρ (PR) | R² (PR) |\n|---|---|---|---|---|---|---|---|---|")
    series = {}
    for s in sums:
        c, rid = s["config"], s["run_id"]
        step = store.feature_steps(rid)[-1]
        sep = results.cached_analysis(store, rid, step, "separability")
        res = results.cached_analysis(store, rid, step, "residual")
        tuned = "constant" if c["lr_ft"] == CONSTANT_LR else "tuned"
        print(f"| {c['epsilon']:g} | {tuned} | {c['tune_blocks']} | {s['test_accuracy']:.3f} | {sep['rho']:.3f} | "
              f"{sep['r2']:.2f} | {sep['pearson_r']:.2f} | {res['rho']:.3f} | {res['r2']:.2f} |")
        series.setdefault((c["epsilon"], tuned), []).append(
            {"label": f"k={c['tune_blocks']}", "strategy": "partial", "epsilon": c["epsilon"],
             "values": sep["fuzziness"], **{k: sep[k] for k in ("rho", "intercept", "r2", "pearson_r")},
             "config": c})
    for (eps, tuned), ss in series.items():
        save(figures.analyses.law_plot(ss, f"fuzziness D_l ({tuned} lr)"), [s["config"] for s in ss],
             f"law_eps{eps:g}_{tuned}")


if __name__ == "__main__":
    store = dpviz.Store()
    for name in sys.argv[1:] or ["distortion", "law"]:
        {"distortion": distortion, "law": law}[name](store)
