"""How much of SPARTA's private row choice is signal: overlap with the noiseless choice.

For each ε, train the head phase of the default sparse run, then run the selection epoch twice from
the same state and sampling: once as the run does (noisy releases) and once with σ = 0 (clipped,
noiseless — a diagnostic only, not private). Prints, per ε, the share of the noisy choice's rows
that the noiseless choice also picks, against s (what random rows would give).
Usage: python bench/run_sparse_selection.py
"""

from __future__ import annotations

import copy
import dataclasses
import tempfile

import torch

from common import CACHE
from dpviz.training import prepare
from dpviz.models import sparse
from dpviz.config import RunConfig
from dpviz.store import Store
from dpviz.training.loop import Loop


def scores_after_selection(prep, store, phase_sigma_zero: bool):
    run_id = store.create_run(prep.cfg.hash(), prep.cfg.to_json(), prep.total_steps)
    loop = Loop(prep, store, run_id, None, None)
    head_plan, sel_plan = prep.plans[0], prep.plans[1]
    loop.run_phase(head_plan, prep.phases[0])
    phase = prep.phases[1]
    if phase_sigma_zero:
        phase = dataclasses.replace(phase, noise_multiplier=0.0)
    loop.run_phase(sel_plan, phase)
    return loop.strategy.scores  # the selection epoch's Σ|g̃| per row, kept by the sparse strategy


def main():
    s = 0.2
    store = Store(tempfile.mkdtemp())
    print("| ε | σ | overlap of SPARTA's rows with the noiseless choice | random rows would give |\n|---|---|---|---|")
    for eps in (1.0, 8.0, 64.0):
        cfg = RunConfig(strategy="sparse", epsilon=eps, sparsity=s)
        prep = prepare.prepare(cfg.fixed_rates(), cache_dir=CACHE)
        noisy = scores_after_selection(copy.deepcopy(prep), store, False)
        clean = scores_after_selection(copy.deepcopy(prep), store, True)
        a, b = sparse.select_rows(noisy, s), sparse.select_rows(clean, s)
        inter = sum(len(set(a[n]) & set(b[n])) for n in a)
        total = sum(len(a[n]) for n in a)
        exp = sum(len(a[n]) * len(a[n]) / len(noisy[n]) for n in a) / total
        print(f"| {eps:g} | {prep.phases[0].noise_multiplier:.2f} | {inter / total:.2f} | {exp:.2f} |", flush=True)


if __name__ == "__main__":
    torch.set_num_threads(2)
    main()
