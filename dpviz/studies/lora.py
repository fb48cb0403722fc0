"""``lora``: DP-LoRA's accuracy and trainable share at each rank r, per ε (the sparse profile's setting: 20
epochs, its learning rates lr_ft 0.01 at ε = 1 and 0.1 at ε = 8 for every rank; other ε take the nearer).
"""

from __future__ import annotations

from dpviz.studies.base import Measure, Study

LR_FT = {1.0: 0.01, 8.0: 0.1}
"""The sparse profile's rates per ε (the same for every method it compares)."""


def fields(cell: dict) -> dict:
    eps = float(cell["epsilon"])
    lr = LR_FT[min(LR_FT, key=lambda e: abs(e - eps))]
    return {"epsilon": eps, "lora_rank": int(cell["lora_rank"]), "lr_ft": lr}


def measure(store, summary: dict, cfg) -> dict:
    return {"accuracy": summary["test_accuracy"], "trainable": 100 * summary["trainable_fraction"],
            "epsilon_spent": summary["epsilon_spent"]}


def read(res) -> tuple[str, str]:
    """Per ε, the most accurate rank, and whether the ranks differ beyond the seeds' spread (best minus worst
    against the largest sd). Verdict: "the rank matters" (beyond the spread at some ε), else "flat within the
    spread"."""
    by_eps: dict = {}
    for e in res.cells.values():
        c = e["cell"]
        if (st := res.stats(c, "accuracy")) is not None:
            by_eps.setdefault(float(c["epsilon"]), []).append((int(c["lora_rank"]), st))
    said, matters = [], False
    for eps, rows in sorted(by_eps.items()):
        if len(rows) < 2:
            continue
        (rb, (mb, sb, _)), (rw, (mw, sw, _)) = max(rows, key=lambda r: r[1][0]), min(rows, key=lambda r: r[1][0])
        beyond = round(mb - mw, 9) > max(st[1] for _, st in rows)
        matters |= beyond
        said.append(f"at ε = {eps:g} rank {rb} is the most accurate ({mb:.3f} ± {sb:.3f}), {100 * (mb - mw):.1f} "
                    f"points above rank {rw} ({mw:.3f} ± {sw:.3f}), {'beyond' if beyond else 'within'} the spread")
    if not said:
        return "not read", "No ε has two ranks read yet."
    text = "; ".join(said) + "."
    return ("the rank matters" if matters else "flat within the spread"), text[0].upper() + text[1:]


def show(cell: dict) -> dict:
    return {"ε": f"{float(cell['epsilon']):g}", "rank r": str(int(cell["lora_rank"]))}


LORA = Study(
    name="lora", title="DP-LoRA's rank",
    question="How do DP-LoRA's accuracy and trainable share move with its rank r?",
    axes={"lora_rank": (1, 2, 4, 8), "epsilon": (1.0, 8.0)},
    fields=fields, base=dict(strategy="lora", epochs=20),
    measures=(Measure(name="accuracy", label="test accuracy"),
              Measure(name="trainable", label="% of the backbone trained", fmt=".1f"),
              Measure(name="epsilon_spent", label="ε spent")),
    measure=measure, read=read, seed_paper="003", show=show)

from dpviz.studies.registry import register_study  # noqa: E402

register_study(LORA)
