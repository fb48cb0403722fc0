"""How every table, reading, label and caption names a run: its strategy, ε, noise mechanism (`dpviz.privacy.names`) and
whatever else tells it from the runs beside it.

`run_labels` / `config_labels` label runs (and jobs not stored yet) shown together, `run_label` / `config_label`
one run, `launch_label` a launch, and `caption` the runs behind an exported figure, one line per configuration.
"""

from __future__ import annotations

import json
import math

from dpviz.privacy import names

LABEL_FIELDS = ("dataset", "backbone", "lp_fraction", "lr_lp", "lr_ft", "epochs", "batch_size", "clip_norm",
                "train_size", "max_length", "sparsity", "selection", "tune_blocks", "lora_rank", "public_dataset",
                "switch_step", "optimizer", "clipping", "accountant", "parts", "delta", "precision", "seed")
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
    """A configuration's label: strategy (with lp-fft's p), ε, the noise mechanism (`names.named`: always when it
    is not DP-SGD, and DP-SGD too where ``fields`` holds "mechanism") and ``fields`` as name=value where its
    strategy reads them ("lp-fft ε=1.5 BandMF b=4 p=0.5 dataset=glyphs seed=3")."""
    eps = "∞" if str(c["epsilon"]) == "inf" else f"{float(c['epsilon']):g}"
    read, own = _own_fields(c["strategy"]), _own_fields()
    named = [f for f in ("lp_fraction",) * (c["strategy"] == "lp-fft") + tuple(fields) if f in read or f not in own
             if (f != "max_length" or _text(c)) and f != "mechanism" and (f != "parts" or c.get("bands", 1) > 1)]
    extra = "".join(f" {SHORT.get(f, f)}={_value(c.get(f))}" for f in dict.fromkeys(named) if f in c)
    noise = names.named(c, "mechanism" in fields)
    return f"{c['strategy']} ε={eps}{' ' + noise if noise else ''}{extra}"


def launch_label(c: dict) -> str:
    """`config_label` naming every field of `LABEL_FIELDS` and the seed that differs from its default: what a
    toast or a progress line says of a launch, so that two launches are told apart by more than their ε."""
    from dpviz.config import RunConfig

    default = RunConfig().to_dict()
    return config_label(c, tuple(f for f in (*LABEL_FIELDS, "seed") if f in default and c.get(f) != default[f]
                                 and not f.startswith("lr_")))


def run_labels(runs: list[dict]) -> dict[str, str]:
    """Run id → label naming what tells the ``runs`` apart: strategy and ε (lp-fft's p always), the noise
    mechanism (a BandMF run's always, DP-SGD where the ``runs`` differ in it), the dataset and
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

    data = ("mechanism",) * names.mixed(r["config"] for r in runs) + differ(runs, ("dataset", "backbone"))
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


CAPTION_SAID = ("dataset", "backbone", "lp_fraction", "delta", "seed", "parts")
"""The fields every caption line names in its own words (the others: where they tell its runs apart)."""


def caption(configs: list[dict]) -> str:
    """The runs behind a figure, for exported images: a line per configuration (its seeds together), every
    one named — a figure's best run is never left out behind a "+N" — with its noise mechanism (DP-SGD too, and a
    BandMF run's parts: a caption is read on its own) and every field that tells it from the other lines."""
    seeds: dict = {}
    for r, fields in _apart([{"run_id": i, "config": c} for i, c in enumerate(configs)]):
        c = r["config"]
        private = str(c["epsilon"]) != "inf" and math.isfinite(float(c["epsilon"]))
        eps = f"{float(c['epsilon']):g}, {names.mechanism(c, parts=True)}" if private else "∞ (no DP)"
        s = f"{c['strategy']}" + (f" (p={c['lp_fraction']:g})" if c["strategy"] == "lp-fft" else "")
        extra = "".join(f", {SHORT.get(f, f)}={_value(c.get(f))}" for f in fields
                        if f not in CAPTION_SAID and f != "mechanism" and f in c)
        key = f"{s}, ε={eps}, δ={float(c['delta']):.0e}, {c['dataset']}/{c['backbone']}{extra}"
        seeds.setdefault(key, [])
        if c.get("seed") is not None and c["seed"] not in seeds[key]:
            seeds[key].append(c["seed"])
    lines = [k + (f", seed{'s' if len(v) > 1 else ''} {', '.join(str(x) for x in sorted(v))}" if v else "")
             for k, v in seeds.items()]
    if not lines:
        return "dpviz"
    return "dpviz: the runs behind this figure, one line per configuration:\n" + "\n".join(f"• {x}" for x in lines)
