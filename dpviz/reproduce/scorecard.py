"""Running the scorecard: train what the chosen claims need (finished runs answer from the store, so a
stopped scorecard resumes) and read each claim's row; or read the rows that are already complete."""

from __future__ import annotations

from typing import Callable

import numpy as np

from ..config import RunConfig
from .claims import PAPERS, PRIVATE_NOTE, REGISTRY, SEED_FILES, Claim
from .verdicts import mean_std


def plan(claims, seeds) -> dict[str, dict[str, list[RunConfig]]]:
    """claim id → group → its runs' configs."""
    return {c.id: c.configs(tuple(seeds)) for c in claims}


ONE_SEED = ("From one seed there is no spread to judge a difference by: this verdict is not a reading "
            "(run 2 seeds or more, 3 for a mean ± std).")


def row(claim: Claim, store, groups: dict[str, list[dict]]) -> dict:
    """The scorecard row of ``claim`` from its runs' summaries (JSON-ready)."""
    m = claim.measure(store, groups)
    verdict, reading = claim.judge(m)
    n_seeds = len(next(iter(groups.values()), []))
    if n_seeds < 2:  # no spread to compare a difference with: any difference decides the verdict
        reading += f" {ONE_SEED}"
    stats = {g: dict(zip(("mean", "std"), mean_std(v))) for g, v in m.get("groups", {}).items()}
    if "curves" in m:
        stats = {f"ε={e} p={p:g}": dict(zip(("mean", "std"), mean_std(v))) for e, c in m["curves"].items()
                 for p, v in sorted(c.items())}
    if "dips" in m:
        stats = {f"{g} kNN dip": dict(zip(("mean", "std"), mean_std(v))) for g, v in m["dips"].items()}
    if "dominant" in m:
        stats = {"decelerator dominant (share)": {"mean": float(np.mean([d == "decelerator" for d in m["dominant"]]
                                                                          or [0.0])), "std": 0.0}}
    return {"id": claim.id, "seed": claim.seed, "seed_file": SEED_FILES[claim.seed], "paper": PAPERS[claim.seed][0],
            "claim": claim.sentence, "preset": claim.preset, "verdict": verdict,
            "reading": reading, "measured": stats, "private_statistics": claim.private,
            **({"note": PRIVATE_NOTE} if claim.private else {}), "seeds": n_seeds,
            "run_ids": {g: [s["run_id"] for s in runs] for g, runs in groups.items()}}


def run(claims=None, *, seeds=(0, 1, 2), cache_dir=None, progress: Callable | None = None, cancel=None) -> list[dict]:
    """Train what the chosen claims need (finished runs answer from the cache) and return their rows.

    Args:
        claims: claim ids (default: all of `CLAIMS`).
        seeds: the seeds of every experiment (≥ 3 for a mean ± std).
        cache_dir: the store.
        progress: called with (runs done, runs in all, the claim id being run).
        cancel: a `threading.Event`; set, the scorecard stops after the current run (rows so far).
    """
    from ..runner import run as run_one
    from ..store import Store

    chosen = [REGISTRY[c] for c in (claims or REGISTRY)]
    store = Store(cache_dir)
    todo = plan(chosen, seeds)
    total = sum(len(v) for g in todo.values() for v in g.values())
    done, rows, memo = 0, [], {}
    for claim in chosen:
        groups = {}
        for g, cfgs in todo[claim.id].items():
            groups[g] = []
            for cfg in cfgs:
                if cancel is not None and cancel.is_set():
                    return rows
                key = cfg.to_json()
                memo[key] = memo.get(key) or run_one(cfg, store=store)
                groups[g].append(memo[key])
                done += 1
                if progress:
                    progress(done, total, claim.id)
        rows.append(row(claim, store, groups))
    return rows


def stored_rows(claims=None, *, seeds=(0, 1, 2), cache_dir=None) -> list[dict]:
    """The rows whose runs are all finished in the store, training nothing (for pages)."""
    from ..store import Store

    store = Store(cache_dir)
    out = []
    for claim in [REGISTRY[c] for c in (claims or REGISTRY)]:
        groups = {}
        for g, cfgs in claim.configs(tuple(seeds)).items():
            hits = [_finished(store, cfg) for cfg in cfgs]
            if any(h is None for h in hits):
                break
            groups[g] = hits
        else:
            try:
                out.append(row(claim, store, groups))
            except Exception:  # an analysis not computable yet (e.g. a checkpoint being written)
                continue
    return out


def _finished(store, cfg: RunConfig) -> dict | None:
    from ..runner import lookup

    hit = lookup(cfg, store)[2]
    return {**hit["summary"], "run_id": hit["run_id"]} if hit else None
