"""Tables and readings of stored runs: curves, seed bands, the run table, twins and the budget split.

Holds what the run figures (`dpviz.figures.runs`) and the Compare, Budget and Public → private pages
read: `run_label` and `caption` (labels), `curves` / `seed_bands` (long metric tables and their mean ±
std over seeds, `group_key` grouping runs that differ only by seed), `final_table` (one row per run)
with `best_run_reading`, `shown_runs` / `offered` / `stored_ids` / `runs_of` / `matching_run` (which runs to show
and in which order, and a run's
"twin" under another strategy), `switch_step` (a continual run's switch to private data) and
`budget_reading` (the best LP share per ε under the budget split's utility curve).

Attributes:
    CURVE_METRICS: the metrics `curves` reads by default.
"""

from __future__ import annotations

import json
import math

import pandas as pd

from dpviz.store import SHOWN, Store

CURVE_METRICS = ("loss", "train_accuracy", "test_accuracy", "test_loss", "epsilon",
                 "clip_fraction", "clip_fraction_dp", "grad_norm", "lr", "step_ms")
_VARYING_IGNORED = ("seed", "device", "eval_every", "checkpoint_every")


LABEL_FIELDS = ("dataset", "backbone", "lp_fraction", "lr_lp", "lr_ft", "epochs", "batch_size", "clip_norm",
                "train_size", "max_length", "sparsity", "selection", "tune_blocks", "lora_rank", "public_dataset",
                "switch_step", "optimizer", "clipping", "accountant", "delta", "precision", "seed")
"""The fields a label names when they differ among the runs shown, in this order."""
SHORT = {"lp_fraction": "p", "batch_size": "B", "clip_norm": "C", "sparsity": "s", "tune_blocks": "k",
         "lora_rank": "r", "delta": "δ", "lr_lp": "lr LP", "lr_ft": "lr FT", "train_size": "n"}


def run_label(run: dict, fields: tuple = ("seed",)) -> str:
    """Short human label: strategy (with lp-fft's p), ε, ``fields`` as name=value where the run's strategy
    reads them, and the run id (and its kind when not the user's own launch: "· trial" for a study's trial,
    "· search" for an "auto" search's)."""
    kind = run.get("kind", "user")
    return f"{config_label(run['config'], fields)} [{run['run_id']}]" + (f" · {kind}" if kind != "user" else "")


def config_label(c: dict, fields: tuple = ("seed",)) -> str:
    """A configuration's label: strategy (with lp-fft's p), ε, the noise mechanism when it is not DP-SGD's, and
    ``fields`` as name=value where its strategy reads them ("lp-fft ε=1.5 bandmf b=4 p=0.5 dataset=glyphs seed=3")."""
    eps = "∞" if str(c["epsilon"]) == "inf" else f"{float(c['epsilon']):g}"
    read, own = _own_fields(c["strategy"]), _own_fields()
    named = [f for f in ("lp_fraction",) * (c["strategy"] == "lp-fft") + tuple(fields) if f in read or f not in own
             if f != "max_length" or _text(c)]
    extra = "".join(f" {SHORT.get(f, f)}={_value(c.get(f))}" for f in dict.fromkeys(named) if f in c)
    noise = f" {c['mechanism']} b={c.get('bands', 1)}" if c.get("mechanism", "dp-sgd") != "dp-sgd" else ""  # always said
    return f"{c['strategy']} ε={eps}{noise}{extra}"


def launch_label(c: dict) -> str:
    """`config_label` naming every field of `LABEL_FIELDS` and the seed that differs from its default: what a
    toast or a progress line says of a launch, so that two launches are told apart by more than their ε."""
    from dpviz.config import RunConfig

    default = RunConfig().to_dict()
    return config_label(c, tuple(f for f in (*LABEL_FIELDS, "seed") if f in default and c.get(f) != default[f]
                                 and not f.startswith("lr_")))


def run_labels(runs: list[dict]) -> dict[str, str]:
    """Run id → label naming what tells the ``runs`` apart: strategy and ε (lp-fft's p always), the dataset and
    backbone where they differ among all ``runs``, and every other field of `LABEL_FIELDS` that differs among
    the runs of the same strategy and ε — so that two such runs never share a label but for their ids, and a
    label names no field that only runs of another strategy set differently."""
    return {r["run_id"]: run_label(r, fields) for r, fields in _apart(runs)}


def config_labels(configs: dict) -> dict:
    """Key → `config_label` of ``configs`` (key → config) naming what tells them apart, as `run_labels` does
    for runs: the labels of jobs not stored yet (a progress line)."""
    runs = [{"run_id": k, "config": c} for k, c in configs.items()]
    return {r["run_id"]: config_label(r["config"], fields) for r, fields in _apart(runs)}


def _apart(runs: list[dict]) -> list[tuple[dict, tuple]]:
    """(run, the fields its label names) for each of ``runs``: see `run_labels`."""
    def differ(group: list[dict], fields) -> tuple:
        return tuple(f for f in fields if len({json.dumps(r["config"].get(f)) for r in group}) > 1)

    data = differ(runs, ("dataset", "backbone"))
    groups: dict = {}
    for r in runs:
        groups.setdefault((r["config"]["strategy"], str(r["config"]["epsilon"])), []).append(r)
    return [(r, data + differ(g, [f for f in LABEL_FIELDS if f not in data])) for g in groups.values() for r in g]


def _text(c: dict) -> bool:
    """Whether the config's dataset is text, the only kind that reads ``max_length`` (a dataset no module
    registers counts as text: its label then says all it may read)."""
    from dpviz import catalog

    d = catalog.DATASETS.get(c.get("dataset", ""))
    return d is None or d.modality == "text"


def _value(v) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def _own_fields(strategy: str | None = None) -> set[str]:
    """The fields only some strategies read (their own and their learning rates): ``strategy``'s, or every
    registered strategy's. A strategy no module registers (a plugin not loaded) reads all of them."""
    from dpviz import strategies

    every = {f for n in strategies.names() for f in strategies.get(n).fields() + strategies.get(n).lr_fields}
    if strategy is None or strategy not in strategies.names():
        return every
    return set(strategies.get(strategy).fields() + strategies.get(strategy).lr_fields)


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
    """Long table: run_id, label (`run_labels` over the runs), strategy, epsilon, seed, group, dataset, step,
    metric, value."""
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
        frames.append(df)
    cols = ["run_id", "label", "strategy", "epsilon", "seed", "group", "dataset", "step", "metric", "value"]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=cols)


def group_key(config: dict) -> str:
    """Runs with the same key differ only by seed (and bookkeeping fields)."""
    return json.dumps({k: v for k, v in sorted(config.items()) if k not in _VARYING_IGNORED})


def seed_bands(df: pd.DataFrame) -> pd.DataFrame:
    """Mean and std over seeds per (group, metric, step); n = number of runs."""
    g = df.groupby(["group", "strategy", "epsilon", "metric", "step"])["value"]
    out = g.agg(["mean", "std", "count"]).reset_index().rename(columns={"count": "n"})
    out["std"] = out["std"].fillna(0.0)
    return out


def final_table(store: Store, run_ids: list[str]) -> pd.DataFrame:
    """One row per run: config essentials, final test accuracy/loss, ε spent, wall time, status, the
    strongest stored privacy audit of its configuration (ε_lb, threat, canaries M), if any, and where a private
    run's random draws came from (`RunConfig.randomness`)."""
    from dpviz.audit.run import best_per_config

    audits, rows = best_per_config(store), []
    for rid in run_ids:
        run = store.get_run(rid)
        c, s, a = run["config"], run["summary"] or {}, audits.get(run["config_hash"], {})
        rows.append({
            "run_id": rid, "kind": run.get("kind", "user"), "status": run["status"], "strategy": c["strategy"], "dataset": c["dataset"],
            "backbone": c["backbone"], "epsilon": c["epsilon"], "delta": c["delta"],
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


def caption(configs: list[dict]) -> str:
    """The runs behind a figure, for exported images: a line per configuration (its seeds together), every
    one named — a figure's best run is never left out behind a "+N"."""
    seeds: dict = {}
    for c in configs:
        eps = "∞ (no DP)" if str(c["epsilon"]) == "inf" or not math.isfinite(float(c["epsilon"])) \
            else f"{float(c['epsilon']):g}"
        s = f"{c['strategy']}" + (f" (p={c['lp_fraction']:g})" if c["strategy"] == "lp-fft" else "")
        key = f"{s}, ε={eps}, δ={float(c['delta']):.0e}, {c['dataset']}/{c['backbone']}"
        seeds.setdefault(key, [])
        if c.get("seed") is not None and c["seed"] not in seeds[key]:
            seeds[key].append(c["seed"])
    lines = [k + (f", seed{'s' if len(v) > 1 else ''} {', '.join(str(x) for x in sorted(v))}" if v else "")
             for k, v in seeds.items()]
    if not lines:
        return "dpviz"
    return "dpviz: the runs behind this figure, one line per configuration:\n" + "\n".join(f"• {x}" for x in lines)


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


def best_run_reading(table: pd.DataFrame) -> str | None:
    """The best final test accuracy among runs of a `final_table`, or None before any has one."""
    done = table.dropna(subset=["test_accuracy"]).sort_values("test_accuracy", ascending=False)
    if not len(done):
        return None
    b = done.iloc[0]
    spent = "no DP" if b["epsilon_spent"] is None or b["epsilon_spent"] != b["epsilon_spent"] \
        else f"ε spent {b['epsilon_spent']:.3f}"
    return (f"the best final test accuracy here is {b['test_accuracy']:.3f}, by {b['strategy']} "
            f"at ε = {b['epsilon']} ({spent}).")
