"""Test accuracy on the real tasks (MiniLM on tweets, EfficientNet-Lite0 on Fashion-MNIST), side by side.

Every cell is a stored run of the task's preset (`dpviz.tasks`) with learning rates on ``auto``
(searched on the task's public stand-in: no private data, no privacy spent) or ``--lr-lp/--lr-ft``,
reported as mean ± std over the seeds with the mean wall time per run. Beside them, the non-private
reference the issue measured: logistic regression on the frozen backbone's features of the same
training subset (scikit-learn, no DP). Runs come from the store when present, so a stopped table
resumes. Usage: python bench/bench_real.py --task real-text [--strategies lp fft] [--epsilons 1 8 inf]
[--seeds 0 1 2] [--train-size N]
"""

from __future__ import annotations

import argparse
import statistics
import time

from common import CACHE
import dpviz
from dpviz.config import RunConfig
from dpviz import tasks


def frozen_reference(base: RunConfig) -> tuple[float, float]:
    """Logistic regression on the frozen backbone's penultimate features: (test accuracy, seconds)."""
    import torch
    from sklearn.linear_model import LogisticRegression

    from dpviz.training import prepare

    t0 = time.perf_counter()
    prep = prepare.prepare(base.replace(strategy="lp", epsilon=float("inf")).fixed_rates(), cache_dir=CACHE,
                          with_curve=False)
    torch.set_grad_enabled(False)
    b = prep.bundle
    f_tr = prepare.backbone_features(prep.model, b.x_train, "cpu").numpy()
    f_te = prepare.backbone_features(prep.model, b.x_test, "cpu").numpy()
    clf = LogisticRegression(max_iter=3000).fit(f_tr, b.y_train.numpy())
    torch.set_grad_enabled(True)
    return clf.score(f_te, b.y_test.numpy()), time.perf_counter() - t0


def cell(task: str, changes: dict, strategy: str, eps: str, seeds) -> tuple[list[float], list[float], dict]:
    cfg = tasks.config(task, **changes, strategy=strategy, epsilon=eps)  # sparse: the 3 epochs it needs
    runs = [dpviz.run(cfg.replace(seed=s), cache_dir=CACHE, kind="trial") for s in seeds]
    rates = {f: runs[0]["config"][f] for f in ("lr_lp", "lr_ft")}
    return [r["test_accuracy"] for r in runs], [r["wall_time_s"] for r in runs], rates


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--task", default="real-text", choices=["real-text", "real-vision"])
    ap.add_argument("--strategies", nargs="+", default=["lp", "fft", "lp-fft", "lora", "sparse"])
    ap.add_argument("--epsilons", nargs="+", default=["1", "8", "inf"])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--train-size", type=int, default=None)
    args = ap.parse_args()
    changes = {} if args.train_size is None else {"train_size": args.train_size}
    base = tasks.config(args.task, **changes)
    acc, secs = frozen_reference(base)
    print(f"task {args.task}: {base.dataset} on {base.backbone}, n = {base.train_size or 'all'}, "
          f"B = {base.batch_size}, {base.epochs} epochs" + (f", {base.max_length} tokens" if base.dataset in
                                                          ("tweets", "bbc-news") else ""))
    print(f"frozen features + logistic regression (no DP): {acc:.3f} ({secs:.0f} s)\n")
    print(f"| strategy | " + " | ".join(f"ε = {e}" for e in args.epsilons) + " | s / run |")
    print("|---|" + "---|" * (len(args.epsilons) + 1))
    for strategy in args.strategies:
        row, walls = [], []
        for eps in args.epsilons:
            a, w, rates = cell(args.task, changes, strategy, eps, args.seeds)
            sd = f" ± {statistics.pstdev(a):.3f}" if len(a) > 1 else " (1 seed)"
            row.append(f"{statistics.mean(a):.3f}{sd}")
            walls += w
        print(f"| {strategy} | " + " | ".join(row) + f" | {statistics.mean(walls):.0f} |", flush=True)


if __name__ == "__main__":
    main()
