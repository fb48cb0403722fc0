"""``private-tuning``: what a model tuned within one total ε releases, three ways (Papernot & Steinke 2022):

* ``auto``: one LP-FFT run with its learning rates on `auto` (chosen on public data: no privacy spent tuning);
* ``negative-binomial``: a private search over lr_lp and lr_ft (their `auto` ranges) with a truncated negative
  binomial (geometric) number of trials of mean 5, the best released, the whole search within ε;
* ``fixed``: exactly 5 trials whose training and scores are composed (PLD) to the total.

The searches hold out the same training examples for their scores; the ``auto`` run trains on all of them.
"""

from __future__ import annotations

from dpviz.studies.base import Measure, Study

METHODS = {"auto": "one run, auto rates (public)", "negative-binomial": "private search, geometric, mean 5",
           "fixed": "5 trials composed to the total"}


def fields(cell: dict) -> dict:
    return {"epsilon": float(cell["epsilon"])}


def execute(cell: dict, cfg, store, cancel) -> dict:
    """The cell's release: the ``auto`` run, or a private search's released run (no run: accuracy None)."""
    from dpviz import autotune
    from dpviz.runner import run
    from dpviz.sweeps import private

    if cell["method"] == "auto":
        return run(cfg, store=store, cancel=cancel, resume=True, rates="grid")
    search = private.PrivateSearch(base=cfg, space={f: autotune.RANGES[f] for f in ("lr_lp", "lr_ft")},
                                   total_epsilon=cfg.epsilon, distribution=cell["method"], mean_trials=5)
    e = private.run_search(search, run=run, store=store, cancel=cancel)
    return {"run_id": e["released_run_id"] or e.get("search_key", search.key()), "epsilon_spent": e["epsilon_spent"],
            "test_accuracy": e.get("test_accuracy") if e["released_run_id"] else None}


def measure(store, summary: dict, cfg) -> dict:
    return {"accuracy": summary.get("test_accuracy"), "epsilon_spent": summary["epsilon_spent"]}


def read(res) -> tuple[str, str]:
    """Per total ε, the method whose release is the most accurate, its lead over the next against the larger
    sd of the two. Verdict: "a search wins" (a search ahead beyond the spread at some ε), "public rates win"
    (``auto`` ahead beyond the spread at some ε, no search at any), or "within the spread"."""
    by_eps: dict = {}
    for e in res.cells.values():
        c = e["cell"]
        if (st := res.stats(c, "accuracy")) is not None:
            by_eps.setdefault(float(c["epsilon"]), []).append((c["method"], st))
    said, winners = [], []
    for eps, rows in sorted(by_eps.items()):
        if len(rows) < 2:
            continue
        ranked = sorted(rows, key=lambda r: -r[1][0])
        (m1, (a1, s1, _)), (m2, (a2, s2, _)) = ranked[0], ranked[1]
        beyond = round(a1 - a2, 9) > max(s1, s2)
        said.append(f"at ε = {eps:g} {METHODS.get(m1, m1)} releases the most accurate model ({a1:.3f} ± {s1:.3f}), "
                    f"{100 * (a1 - a2):.1f} points above {METHODS.get(m2, m2)} ({a2:.3f} ± {s2:.3f}), "
                    f"{'beyond' if beyond else 'within'} the spread")
        winners.append(m1 if beyond else None)
    if not said:
        return "not read", "No total ε has two methods read yet."
    verdict = ("a search wins" if any(w not in (None, "auto") for w in winners) else
               "public rates win" if "auto" in winners else "within the spread")
    text = "; ".join(said) + "."
    return verdict, text[0].upper() + text[1:]


def show(cell: dict) -> dict:
    return {"total ε": f"{float(cell['epsilon']):g}", "what is released": METHODS.get(cell["method"], cell["method"])}


PRIVATE_TUNING = Study(
    name="private-tuning", title="Tuning within one total ε",
    question="Does a private search over the learning rates, within the same total ε, release a better model than "
             "one run whose rates were chosen on public data?",
    axes={"epsilon": (1.0, 8.0), "method": tuple(METHODS)},
    fields=fields, base=dict(strategy="lp-fft"), kinds=("method",), execute=execute, choices={"method": tuple(METHODS)},
    measures=(Measure(name="accuracy", label="test accuracy of the release"),
              Measure(name="epsilon_spent", label="ε spent in all")),
    measure=measure, read=read, show=show)

from dpviz.studies.registry import register_study  # noqa: E402

register_study(PRIVATE_TUNING)
