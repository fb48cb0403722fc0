"""``proxy-tuning``: DP-FFT's (lr_ft, clip_norm) tuned on the public proxy, or on the private data, each choice
then trained on the private data at the study's seeds, beside dpviz's fixed defaults (no tuning).

Two TPE searches of `TRIALS` trials over `SPACE`, the same sampler seed, every trial a run at the cell's ε:
``public`` trains its trials on the task's public stand-in (the catalogue's ``proxy``), ``private`` on the
task's own training set; ``default`` takes the fixed rates "auto" falls back to (lr_ft 0.01) and the task's
C, no tuning at all (dpviz's shipped "auto" grid is itself tuned on the public proxy). A search is named by
its inputs (`dpviz.sweeps.create_search`), so every seed's cell reopens the one search, and a search whose
trials are spent trains nothing more. Its trials run at `SEARCH_SEED`, a seed no scored run takes, so the
scored runs are fresh draws and not the trial that won.

The ``private`` cell is not a private release: its search spends privacy that the scored run's ε does not
count (each trial is a DP run on the same records, and the choice among them is released), and it ranks its
trials by accuracy on the private test set. Its measure ``tuning_epsilon`` says what the search's trials cost,
composed; `dpviz.studies.tuning` (``private-tuning``) is the search whose cost is inside ε.
"""

from __future__ import annotations

from dpviz.studies.base import Measure, Study

TRIALS = 12
"""Trials of each search (a module constant: a study takes no option of its own; tests set it small)."""
SPACE = {"lr_ft": [0.001, 0.3], "clip_norm": [0.1, 10.0]}
"""The log-scale ranges both searches sample."""
SEARCH_SEED = 10_000
"""The seed of every search trial: apart from the scored runs' seeds, so a winner is not scored on the very
noise draw it won on."""
TUNED_ON = {"default": "fixed defaults (no tuning)", "public": "the public proxy",
            "private": "the private data (ε does not cover it)"}


def fields(cell: dict) -> dict:
    return {"epsilon": float(cell["epsilon"])}


def execute(cell: dict, cfg, store, cancel) -> dict:
    """The cell's scored run: ``cfg`` at the fixed default rates, or at the best trial of its search."""
    from dpviz.runner import run

    if cell["tuned_on"] == "default":
        chosen, spent = cfg.fixed_rates(), 0.0
    else:
        search = _search(cfg, cell["tuned_on"], store, cancel)
        chosen, spent = cfg.replace(**search.best_trial.params), _spent(search)
    summary = run(chosen, store=store, cancel=cancel, resume=True, rates="grid")
    return {**summary, "chosen": {"lr_ft": chosen.lr_ft, "clip_norm": chosen.clip_norm}, "tuning_epsilon": spent}


def _search(cfg, where: str, store, cancel):
    """The search on ``where`` ("public" or "private") for ``cfg``, run until its trials are spent."""
    from functools import partial

    from dpviz import sweeps
    from dpviz.autotune.proxy import proxy_for, search_base
    from dpviz.errors import ConfigError
    from dpviz.runner import run

    proxy = None
    if where == "public" and (proxy := proxy_for(cfg.dataset)) is None:
        raise ConfigError("dataset", "a dataset with a public stand-in in dpviz's catalogue (the public search "
                          "tunes on it)", cfg.dataset)
    # autotune's trial settings (evaluated at the end only, no weights kept) at a seed of the search's own
    base = search_base(cfg.fixed_rates()).replace(seed=SEARCH_SEED, device=cfg.device)
    search = sweeps.create_search(base, SPACE, trials=TRIALS, proxy=proxy, cache_dir=store.root)
    sweeps.work(search, run=partial(run, cancel=cancel, rates="grid"), cache_dir=store.root)
    return search


def _spent(search) -> float | None:
    """ε the search's trials spent on the private data, composed (0 on the proxy; None: not costed here)."""
    from dpviz import sweeps

    if search.user_attrs.get("proxy"):
        return 0.0
    cost = sweeps.search_cost(search)
    return cost["composed_epsilon"] if cost else None


def measure(store, summary: dict, cfg) -> dict:
    return {"accuracy": summary["test_accuracy"], **summary["chosen"], "tuning_epsilon": summary["tuning_epsilon"]}


def _verdict(acc: dict) -> str:
    """One ε's verdict from {tuned_on: (mean, sd, n)} (the public and private cells read)."""
    (pub, sp, _), (pri, sq, _) = acc["public"], acc["private"]
    if round(pri - pub, 9) > max(sp, sq):
        return "private tuning wins"
    base = acc.get("default")
    if base is None or round(pub - base[0], 9) > max(sp, base[1]):
        return "the proxy suffices"
    return "within the spread"


def read(res) -> tuple[str, str]:
    """Per ε: whether tuning on the public proxy reaches the private-tuned accuracy within the spread (the
    larger sd of the two), and whether it beats the fixed defaults beyond theirs.

    Verdict: "private tuning wins" (the private choice ahead of the proxy's beyond the spread), "the proxy
    suffices" (the proxy's choice within the spread of the private one or above, and beyond the defaults'
    spread above them), "within the spread" (the proxy's choice not clear of the defaults), or "mixed" (ε
    apart)."""
    by_eps: dict = {}
    for e in res.cells.values():
        c = e["cell"]
        if (st := res.stats(c, "accuracy")) is not None:
            by_eps.setdefault(float(c["epsilon"]), {})[c["tuned_on"]] = (c, st)
    said, verdicts = [], []
    for eps, rows in sorted(by_eps.items()):
        if "public" not in rows or "private" not in rows:
            continue
        acc = {k: st for k, (_, st) in rows.items()}
        verdicts.append(_verdict(acc))
        said.append(_said(res, eps, rows, acc))
    if not said:
        return "not read", "No ε has both searches' choices scored yet."
    verdict = verdicts[0] if len(set(verdicts)) == 1 else "mixed"
    return verdict, " ".join(said)


def _said(res, eps: float, rows: dict, acc: dict) -> str:
    """One ε in words: the three accuracies with the rates chosen, the gaps, what the private search cost."""
    def one(k):
        c, (m, s, _) = rows[k]
        rates = "" if k == "default" else (f" (lr_ft {_mean(res, c, 'lr_ft'):.3g}, "
                                           f"C {_mean(res, c, 'clip_norm'):.3g})")
        return f"{m:.3f} ± {s:.3f}{rates}"

    (pub, sp, _), (pri, sq, _) = acc["public"], acc["private"]
    out = (f"At ε = {eps:g}, tuned on the public proxy {one('public')}, on the private data {one('private')}"
           + (f", fixed defaults {one('default')}" if "default" in rows else "") + ": the proxy's choice is "
           f"{100 * abs(pub - pri):.1f} points {'below' if pub < pri else 'above'} the private one, "
           f"{'beyond' if round(abs(pub - pri), 9) > max(sp, sq) else 'within'} the spread")
    if "default" in rows:
        (m, s, _) = acc["default"]
        out += (f", and {100 * abs(pub - m):.1f} points {'above' if pub >= m else 'below'} the defaults, "
                f"{'beyond' if round(abs(pub - m), 9) > max(sp, s) else 'within'} the spread")
    spent = _mean(res, rows["private"][0], "tuning_epsilon")
    cost = f"spent ε ≈ {spent:.3g}, composed," if spent is not None else "spent privacy"
    return (out + f". The private search's trials {cost} on the private data and were ranked by accuracy on "
            f"the private test set: ε = {eps:g} does not cover that cell's tuning.")


def _mean(res, cell: dict, name: str) -> float | None:
    st = res.stats(cell, name)
    return None if st is None else st[0]


def show(cell: dict) -> dict:
    return {"ε": f"{float(cell['epsilon']):g}", "tuned on": TUNED_ON.get(cell["tuned_on"], cell["tuned_on"])}


PROXY_TUNING = Study(
    name="proxy-tuning", title="Tuning on public or private data",
    question="Do DP-FFT's learning rate and clipping norm tuned on the public proxy score as well on the private "
             "data as those tuned on the private data itself (a search ε does not account), and do both beat the "
             "fixed defaults?",
    axes={"tuned_on": tuple(TUNED_ON), "epsilon": (1.0,)},
    fields=fields, base=dict(strategy="fft"), kinds=("tuned_on",), choices={"tuned_on": tuple(TUNED_ON)},
    execute=execute,
    measures=(Measure(name="accuracy", label="test accuracy"),
              Measure(name="lr_ft", label="lr_ft chosen", fmt=".3g", private=True),
              Measure(name="clip_norm", label="clipping norm C chosen", fmt=".3g", private=True),
              Measure(name="tuning_epsilon", label="ε the tuning spent on private data", fmt=".3g")),
    measure=measure, read=read, show=show)

from dpviz.studies.registry import register_study  # noqa: E402

register_study(PROXY_TUNING)
