"""Convert the tables the former comparison scripts wrote (``bench/results/noise_*.json``, ``split_*.json``,
``depth_*.json``: display strings of mean ± sd over seeds) into study results (`dpviz.studies.results`), shipped in
``dpviz/studies/shipped/``.

Those tables kept only each cell's mean, sd and number of seeds, so the converted cells hold that summary and
their provenance says ``per_seed: lost``: regenerate one with the command it prints to get per-seed numbers
back. This is the one place display strings are parsed, once, to carry the measured figures over.
Usage: python scripts/convert_study_results.py OLD.json…  (the old files are read, not changed)
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from dpviz.studies import results

ROOT = Path(__file__).resolve().parents[1]
NOISE_COLUMNS = {"σ": "sigma", "test accuracy": "accuracy", "early kNN dip": "dip", "ρ (D_l decay)": "rho",
                 "R² of the fit": "r2"}


def _cell(text: str, seeds: int) -> dict | None:
    m = re.match(r"\s*(-?[\d.]+)(?:\s*±\s*([\d.]+))?(?:\s*\((\d+) of \d+\))?", text or "")
    if not m:
        return None
    return {"mean": float(m.group(1)), "sd": float(m.group(2) or 0.0), "n": int(m.group(3) or seeds)}  # no "(k of n)": every seed


def _mechanism(text: str) -> dict:
    if text == "dp-sgd":
        return {"bands": 1, "family": "bandmf"}
    family, b = re.match(r"(\S+) b=(\d+)", text).groups()
    return {"bands": int(b), "family": family}


TUNING_METHODS = {"(a)": "auto", "(b)": "negative-binomial", "(c)": "fixed"}


def convert_tuning(path: Path) -> Path:
    """A ``private_tuning_<task>.json`` table, whose "per seed" column kept each seed's accuracy: per-seed cells
    (no run ids were recorded), the real-text task at the scorecard's small size as the script ran it."""
    doc = json.loads(path.read_text())
    task = path.stem.removeprefix("private_tuning_")
    seeds = [int(s) for s in re.search(r"seeds \(([\d, ]+)\)", doc["notes"]).group(1).split(",")]
    res = results.Results(study="private-tuning", task=task, scale=None if task == "default" else "small", seeds=seeds)
    for row in doc["rows"]:
        cell = {"epsilon": float(row[0]), "method": TUNING_METHODS[row[1][:3]]}
        for seed, v in zip(seeds, row[3].split()):
            res.add(cell, seed, run_id="not recorded", config="not recorded", values={"accuracy": float(v)})
    return _ship(res, doc, path, per_seed="kept")


def _ship(res: results.Results, doc: dict, path: Path, *, per_seed: str) -> Path:
    """Write ``res`` to the shipped folder with the old table's command, machine and date as its provenance."""
    res.provenance = {"command": doc["command"], "dpviz": "not recorded", "commit": "not recorded",
                      "machine": doc["machine"], "device": "no GPU" if "no GPU" in doc["machine"] else "not recorded",
                      "date": doc["date"], "store": "not recorded", "per_seed": per_seed,
                      "converted_from": f"bench/results/{path.name}"}
    out = results.SHIPPED / f"{results.results_name(res.study, res.task, res.scale, res.sets)}.json"
    out.write_text(json.dumps(res.to_json(), indent=1, ensure_ascii=False) + "\n")
    return out


DEPTH_FITS = ("r2_from_1", "rho_from_1", "r2_all")  # the table's last three columns, in order


def convert_depth(path: Path) -> Path:
    """A ``depth_real-vision[_<scale>].json`` table of ``bench/run_depth.py``: per backbone, its pretrained fits at
    the 7 stages and after every block (computed once: they depend on no seed) and its DP-FFT fits over seeds."""
    doc = json.loads(path.read_text())
    words = doc["command"].split()
    scale = words[words.index("--scale") + 1] if "--scale" in words else "small"
    seeds = list(range(int(words[words.index("--seeds") + 1]) if "--seeds" in words else 3))
    res = results.Results(study="depth", task="real-vision", scale=scale, seeds=seeds,
                          axes={"backbone": sorted({r[0] for r in doc["rows"]}), "phase": ["pretrained", "fft"]})
    for backbone, layers, features, *fits in doc["rows"]:
        cell = {"backbone": backbone, "phase": "pretrained" if features == "pretrained" else "fft"}
        entry = res.cells.setdefault(results.cell_key(cell), {"cell": cell, "summary": {}, "source": "store"})
        n, unit = layers.split()
        prefix = "blocks_" if unit == "blocks" else ""
        for name, text in zip(DEPTH_FITS, fits):
            s = _cell(text, len(seeds))
            # The script printed numpy's population sd (ddof 0) over its seeds; `Results.stats` gives the sample
            # sd. The pretrained fits were read once and depend on no seed: every seed would give them, sd 0.
            s["sd"] = round(s["sd"] * (len(seeds) / (len(seeds) - 1)) ** 0.5, 6) if len(seeds) > 1 else s["sd"]
            entry["summary"][prefix + name] = s
        if unit == "blocks":
            entry["summary"]["block_layers"] = {"mean": float(n), "sd": 0.0, "n": len(seeds)}
    return _ship(res, doc, path, per_seed="lost")


def _asked(command: str) -> tuple[str, str, str | None, dict]:
    """(study, task, scale, sets) of an old script's command line."""
    words = command.split()
    opt = lambda name, default=None: words[words.index(name) + 1] if name in words else default  # noqa: E731
    study = "noise" if "compare_noise" in command else "split"
    sets = {}
    if study == "noise" and opt("--strategy", "fft") != "fft":
        sets["strategy"] = opt("--strategy")
    return study, opt("--task", "default" if study == "noise" else "real-vision"), opt("--scale"), sets


def convert(path: Path) -> Path:
    doc = json.loads(path.read_text())
    study, task, scale, sets = _asked(doc["command"])
    seeds = [int(s) for s in re.search(r"seeds ([\d, ]+)", doc["notes"]).group(1).replace(",", " ").split()]
    cols = doc["columns"]
    res = results.Results(study=study, task=task, scale=scale, sets=sets, seeds=seeds)
    for row in doc["rows"]:
        base = {"epsilon": float(row[0]), **_mechanism(row[1])}
        if study == "noise":
            cells = [(base, {NOISE_COLUMNS[c]: s for c, t in zip(cols, row) if c in NOISE_COLUMNS
                             and (s := _cell(t, len(seeds)))})]
        else:
            cells = [({**base, "lp_fraction": float(c.split("=")[1])}, {"accuracy": s})
                     for c, t in zip(cols, row) if c.startswith("p =") and (s := _cell(t, len(seeds)))]
        for cell, summary in cells:
            res.cells[results.cell_key(cell)] = {"cell": cell, "summary": summary, "source": "store"}
    device = "no GPU" if "no GPU" in doc["machine"] else doc["machine"].split(", ")[-2]
    res.provenance = {"command": doc["command"], "dpviz": "not recorded", "commit": "not recorded",
                      "machine": doc["machine"], "device": device, "date": doc["date"], "store": "not recorded",
                      "per_seed": "lost", "converted_from": path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT)
                      else path.name}
    out = results.SHIPPED / f"{results.results_name(study, task, scale, sets)}.json"
    out.write_text(json.dumps(res.to_json(), indent=1, ensure_ascii=False) + "\n")
    return out


if __name__ == "__main__":
    for name in sys.argv[1:]:
        path = Path(name).resolve()
        print(convert_tuning(path) if path.stem.startswith("private_tuning_") else
              convert_depth(path) if path.stem.startswith("depth_") else convert(path))
