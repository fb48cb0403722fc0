"""Tables and readings of stored runs: curves, seed bands, the run table, twins and the budget split.

Holds what the run figures (`dpviz.figures.runs`) and the Compare, Budget and Public → private pages
read (their labels and captions: `dpviz.results.labels`): `curves` / `seed_bands` (long metric tables and their
mean ± std over seeds, `group_key` grouping runs that differ only by seed), `final_table` (one row per run)
with `best_run_reading`, `shown_runs` / `offered` / `stored_ids` / `runs_of` / `matching_run` (which runs to show
and in which order, and a run's "twin" under another strategy), `switch_step` (a continual run's switch to
private data) and `budget_reading` (the best LP share per ε under the budget split's utility curve).

Attributes:
    CURVE_METRICS: the metrics `curves` reads by default.
"""

from __future__ import annotations

import json

import pandas as pd

from dpviz.privacy import names
from dpviz.results.labels import run_labels
from dpviz.store import SHOWN, Store

CURVE_METRICS = ("loss", "train_accuracy", "test_accuracy", "test_loss", "epsilon",
                 "clip_fraction", "clip_fraction_dp", "grad_norm", "lr", "step_ms")
_VARYING_IGNORED = ("seed", "device", "eval_every", "checkpoint_every")


def shown_runs(store: Store, *, search: bool = False) -> list[dict]:
    """The runs pages list and offer, oldest first: the user's and their studies' trials (`store.SHOWN`),
    and the trials of "auto" proxy searches too only when ``search`` (the user asked to see them)."""
    return store.list_runs(kind=None if search else SHOWN)


def offered(runs: list[dict]) -> list[dict]:
    """``runs`` (oldest first, as the store lists them) in a picker's order: the user's own launches newest
    first, then the rest (their studies' trials, searches asked for) newest first — so the runs a page picks
    by default, its first few, are the user's own where there are any, not the points of a sweep."""
    new = list(reversed(runs))
    return [r for r in new if r.get("kind", "user") == "user"] + [r for r in new if r.get("kind", "user") != "user"]


def curves(store: Store, run_ids: list[str], metrics=CURVE_METRICS) -> pd.DataFrame:
    """Long table: run_id, label (`run_labels` over the runs), strategy, epsilon, seed, group, dataset, mechanism,
    bands, step, metric, value."""
    frames = []
    runs = [store.get_run(rid) for rid in dict.fromkeys(run_ids)]  # a run twice would draw back to its start
    labels = run_labels(runs)
    for run in runs:
        rid = run["run_id"]
        m = store.metrics(rid)
        rows = [(step, name, v) for name in metrics for step, v in m.get(name, []) if v is not None]
        df = pd.DataFrame(rows, columns=["step", "metric", "value"])
        c = run["config"]
        df.insert(0, "run_id", rid)
        df.insert(1, "label", labels[rid])
        df.insert(2, "strategy", c["strategy"])
        df.insert(3, "epsilon", c["epsilon"])
        df.insert(4, "seed", c["seed"])
        df.insert(5, "group", group_key(c))
        df.insert(6, "dataset", c.get("dataset"))
        df.insert(7, "mechanism", names.mechanism_of(c))
        df.insert(8, "bands", c.get("bands", 1))
        frames.append(df)
    cols = ["run_id", "label", "strategy", "epsilon", "seed", "group", "dataset", "mechanism", "bands", "step",
            "metric", "value"]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=cols)


def group_key(config: dict) -> str:
    """Runs with the same key differ only by seed (and bookkeeping fields)."""
    return json.dumps({k: v for k, v in sorted(config.items()) if k not in _VARYING_IGNORED})


def seed_bands(df: pd.DataFrame) -> pd.DataFrame:
    """Mean and std over seeds per (group, metric, step), with the group's strategy, ε and mechanism (its bands);
    n = number of runs."""
    keys = ["group", "strategy", "epsilon", *[k for k in ("mechanism", "bands") if k in df]]
    g = df.groupby([*keys, "metric", "step"])["value"]
    out = g.agg(["mean", "std", "count"]).reset_index().rename(columns={"count": "n"})
    out["std"] = out["std"].fillna(0.0)
    return out


def final_table(store: Store, run_ids: list[str]) -> pd.DataFrame:
    """One row per run: config essentials (the noise mechanism as `names.mechanism` prints it: "DP-SGD",
    "BandMF b=4"), final test accuracy/loss, ε spent, wall time, status, the
    strongest stored privacy audit of its configuration (ε_lb, threat, canaries M), if any, and where a private
    run's random draws came from (`RunConfig.randomness`)."""
    from dpviz.audit.run import best_per_config

    audits, rows = best_per_config(store), []
    for rid in run_ids:
        run = store.get_run(rid)
        c, s, a = run["config"], run["summary"] or {}, audits.get(run["config_hash"], {})
        rows.append({
            "run_id": rid, "kind": run.get("kind", "user"), "status": run["status"], "strategy": c["strategy"],
            "mechanism": names.mechanism(c), "dataset": c["dataset"], "backbone": c["backbone"],
            "epsilon": c["epsilon"], "delta": c["delta"],
            "lp_fraction": c["lp_fraction"], "seed": c["seed"], "epochs": c["epochs"],
            "test_accuracy": s.get("test_accuracy"), "test_loss": s.get("test_loss"),
            "epsilon_spent": s.get("private_search", {}).get("epsilon_spent", s.get("epsilon_spent")),
            "private_search": s.get("private_search", {}).get("search_key"), "wall_time_s": s.get("wall_time_s"),
            "processes": s.get("world_size", 1), "step": run["step"], "total_steps": run["total_steps"],
            "audit_epsilon_lb": a.get("epsilon_lb_best"), "audit_threat": a.get("threat"),
            "audit_canaries": a.get("canaries"),
            "randomness": s.get("randomness", c.get("randomness", "seeded")) if str(c["epsilon"]) != "inf" else None,
        })
    return pd.DataFrame(rows)


def stored_ids(store: Store, run_ids) -> list[str]:
    """The ids of ``run_ids`` that are still in the store, in their order.

    A sweep's table names every run it finished, including runs deleted since.

    Args:
        store: the run store.
        run_ids: run ids, e.g. a sweep table's ``run_id`` column.
    """
    have = {r["run_id"] for r in store.list_runs()}
    return [r for r in run_ids if r in have]


def runs_of(store: Store, strategy: str, *, finished_only: bool = False) -> list[dict]:
    """Stored runs of ``strategy`` that pages offer (`shown_runs`) in a picker's order (`offered`: the user's
    own newest first), only finished ones when ``finished_only``."""
    return [r for r in offered(shown_runs(store))
            if r["config"]["strategy"] == strategy and (r["status"] == "finished" or not finished_only)]


def matching_run(store: Store, run: dict, *, finished_only: bool = True, **changes) -> dict | None:
    """The newest (finished) run whose config is ``run``'s with ``changes`` (e.g. strategy="fft"), or None.

    The "twin" a page compares with: the same data, backbone, budget and seed under another strategy.
    Every field but ``lora_rank`` keys the cache, so a caller resets the old strategy's own fields to
    the values the twin was run with (the sparse profile runs DP-FFT at the defaults).
    """
    from dpviz.config import RunConfig

    want = RunConfig.from_dict({**run["config"], **changes}, reset_unread=True).hash()
    same = [r for r in store.list_runs()
            if r["config_hash"] == want and (r["status"] == "finished" or not finished_only)]
    return same[-1] if same else None


def phase_switch(run: dict) -> int | None:
    """The step at which an LP-FFT run's LP phase ended and full fine-tuning began (None for a run of one
    phase, or one not finished: its phases are in its summary)."""
    phases = (run.get("summary") or {}).get("phases") or []
    names = [p.get("name") for p in phases]
    return int(phases[0]["steps"]) if names[:2] == ["lp", "fft"] else None


def switch_step(run: dict) -> int | None:
    """The step at which a continual run switched from public to private data (None before it has)."""
    return ((run["summary"] or {}).get("public_phase") or {}).get("step")


# --- readings of the budget and compare figures ------------------------------------
def budget_reading(rows: pd.DataFrame) -> str:
    """The best LP share per ε (mean over seeds) and whether it grows as ε shrinks, as Ke et al. 2024 predict.

    Args:
        rows: one row per finished budget-sweep run: epsilon (None: no DP), lp_fraction, test_accuracy.
    """
    best = rows.groupby(["epsilon", "lp_fraction"], dropna=False)["test_accuracy"].mean().reset_index()
    picks = best.loc[best.groupby("epsilon", dropna=False)["test_accuracy"].idxmax()]
    text = ", ".join(f"ε={'∞' if pd.isna(r.epsilon) else f'{r.epsilon:g}'}: p={r.lp_fraction:g}"
                     for r in picks.itertuples())
    ps = list(picks.dropna(subset=["epsilon"]).sort_values("epsilon")["lp_fraction"])  # smallest ε first
    if len(ps) < 2:
        verdict = ""
    elif ps[0] > ps[-1] and all(a >= b for a, b in zip(ps, ps[1:])):
        verdict = "The best share grows as ε shrinks, as the papers predict."
    elif len(set(ps)) == 1:
        verdict = "The best share is the same at every ε here."
    else:
        verdict = "The best share does not grow monotonically as ε shrinks here."
    return f"best LP share per ε — {text}. {verdict}"


READ_APART = ("strategy", "mechanism", "dataset", "backbone", "epsilon", "delta", "lp_fraction", "epochs", "seed")
"""The `final_table` columns a reading names where its runs differ in them."""


def best_run_reading(table: pd.DataFrame) -> str | None:
    """The best final test accuracy among runs of a `final_table`, or None before any has one: the run by its
    strategy, ε and mechanism (DP-SGD named where the runs' mechanisms differ), and what the runs compared differ
    in, so that a reading never passes runs of two mechanisms, or two datasets, for like with like."""
    done = table.dropna(subset=["test_accuracy"]).sort_values("test_accuracy", ascending=False)
    if not len(done):
        return None
    b = done.iloc[0]
    spent = "no DP" if b["epsilon_spent"] is None or b["epsilon_spent"] != b["epsilon_spent"] \
        else f"ε spent {b['epsilon_spent']:.3f}"
    differ = [c for c in READ_APART if c in done and done[c].astype(str).nunique() > 1]
    under = f" under {b['mechanism']}" if "mechanism" in b and (b["mechanism"] != "DP-SGD" or "mechanism" in differ) \
        else ""
    eps = f"{b['epsilon']:g}" if isinstance(b["epsilon"], (int, float)) else b["epsilon"]
    text = f"the best final test accuracy here is {b['test_accuracy']:.3f}, by {b['strategy']} at ε = {eps}{under} ({spent})."
    return text + (f" The runs compared differ in {', '.join(differ)}." if differ else "")
