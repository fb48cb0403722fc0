"""``sparse-selection``: how much of SPARTA's private row choice is signal.

Per ε and seed: train the head phase of the sparse run (SPARTA's selection, s = 0.2 of each layer's rows), then
run its selection epoch twice from the same weights and the same sampling: once as the run does (noisy
releases) and once with σ = 0 (clipped, noiseless: a diagnostic only, not private). Measured: the share of the
noisy choice's rows that the noiseless choice also picks, beside what random rows would give (s, within each
layer's rounding). The overlap is a statistic of private data that ε does not cover.
"""

from __future__ import annotations

import dataclasses

from dpviz.errors import ConfigError
from dpviz.studies.base import Measure, Study


def fields(cell: dict) -> dict:
    return {"epsilon": float(cell["epsilon"])}


def execute(cell: dict, cfg, store, cancel) -> dict:
    """The cell's two selection epochs after one head phase, trained unstored (nothing of them is released)."""
    from dpviz.runner import resolved
    from dpviz.training import prepare

    _check(cfg)
    cfg, _ = resolved(cfg, store, rates="grid", cancel=cancel)  # the rates the run itself would take
    prep = prepare.prepare(cfg, cache_dir=store.root)
    noisy, clean, sigma = selections(prep, cancel)
    overlap, random = agreement(noisy, clean, sparsity=cfg.sparsity)
    # no stored run: the id names the configuration whose selection epoch this is
    return {"run_id": f"sparse-selection:{cfg.hash()[:16]}", "status": "finished", "overlap": overlap,
            "random": random, "sigma": sigma}


def _check(cfg) -> None:
    """The study reruns SPARTA's selection epoch: a private sparse run that selects its rows by it."""
    if cfg.strategy != "sparse":
        raise ConfigError("strategy", "sparse (the study reruns SPARTA's selection epoch)", cfg.strategy)
    if cfg.selection != "sparta":
        raise ConfigError("selection", "sparta (the study reruns its private selection epoch)", cfg.selection)
    if not cfg.private:
        raise ConfigError("epsilon", "a finite ε (the noiseless choice is compared with a private one)", cfg.epsilon)


def selections(prep, cancel) -> tuple[dict, dict, float]:
    """(the noisy epoch's row scores, the noiseless epoch's, σ of the selection epoch): the phases before the
    selection trained once, the selection epoch run twice from their end with the same sampling."""
    import copy

    from dpviz.training.loop import Loop

    loop = Loop(prep, None, "sparse-selection", None, cancel)
    phases, i = iter(prep.phases), 0  # the accountant's phases: the private plans, in order
    while prep.plans[i].name != "select":
        loop.run_phase(prep.plans[i], None if prep.plans[i].public else next(phases), i)
        i += 1
    plan, phase = prep.plans[i], next(phases)
    # the state both epochs start from: weights (and buffers), the sampling and noise streams, the step
    start = (copy.deepcopy(loop.model.state_dict()), loop.gen_sample.get_state(), loop.gen_noise.get_state(),
             loop.step, loop.private_steps)
    scores = []
    for sigma in (phase.noise_multiplier, 0.0):
        state, sampling, noise, loop.step, loop.private_steps = start
        loop.model.load_state_dict(state)
        loop.gen_sample.set_state(sampling)
        loop.gen_noise.set_state(noise)
        loop.strategy.v = None  # the epoch's sums start empty
        loop.run_phase(plan, dataclasses.replace(phase, noise_multiplier=sigma), i)
        scores.append(loop.strategy.scores)
    return scores[0], scores[1], phase.noise_multiplier


def agreement(noisy: dict, clean: dict, *, sparsity: float) -> tuple[float, float]:
    """(share of the rows ``noisy``'s scores choose that ``clean``'s also choose, what random rows would give):
    a layer of n rows has k chosen, so a random choice shares k/n of another's k in expectation."""
    from dpviz.models import sparse

    a, b = sparse.select_rows(noisy, sparsity), sparse.select_rows(clean, sparsity)  # SPARTA's choice of rows
    total = sum(len(a[n]) for n in a)
    shared = sum(len(set(a[n]) & set(b[n])) for n in a)
    return shared / total, sum(len(a[n]) ** 2 / len(noisy[n]) for n in a) / total


def measure(store, summary: dict, cfg) -> dict:
    return {k: summary.get(k) for k in ("overlap", "random", "sigma")}


def read(res) -> tuple[str, str]:
    """Per ε, the overlap with the noiseless choice against what random rows give: above random beyond the
    seeds' spread (its excess over random larger than its sd), and how it moves from the smallest ε to the
    largest.

    Verdict: "signal at every ε" (above random beyond the spread at each ε read), "signal at some ε", or
    "no signal beyond random"."""
    rows = []
    for e in res.cells.values():
        c = e["cell"]
        if (st := res.stats(c, "overlap")) is not None and (r := res.stats(c, "random")) is not None:
            rows.append((float(c["epsilon"]), st, r[0]))
    if not rows:
        return "not read", "No ε has its selection overlap read yet."
    said, above = [], []
    for eps, (m, sd, n), rand in sorted(rows):
        beyond = round(m - rand, 9) > sd
        above.append(beyond)
        said.append(f"at ε = {eps:g}, {100 * m:.0f} % of SPARTA's rows are the noiseless choice's ({m:.3f} ± "
                    f"{sd:.3f} over {n} seed{'s' if n > 1 else ''}; random rows: {rand:.3f}), "
                    f"{'above random beyond' if beyond else 'within'} the spread")
    text = "; ".join(said) + "."
    if len(rows) > 1:
        (e0, (m0, s0, _), _), (e1, (m1, s1, _), _) = min(rows), max(rows)
        moves = "grows" if round(m1 - m0, 9) > max(s0, s1) else "falls" if round(m0 - m1, 9) > max(s0, s1) else \
            "stays within the spread"
        text += (f" From ε = {e0:g} to ε = {e1:g} the overlap {moves}" + (f" ({m0:.3f} → {m1:.3f})."
                                                                          if moves != "stays within the spread"
                                                                          else "."))
    verdict = ("signal at every ε" if all(above) else "signal at some ε" if any(above) else
               "no signal beyond random")
    return verdict, text[0].upper() + text[1:]


def show(cell: dict) -> dict:
    return {"ε": f"{float(cell['epsilon']):g}"}


SPARSE_SELECTION = Study(
    name="sparse-selection", title="SPARTA's private row choice",
    question="How much of SPARTA's private choice of rows is signal: how often does it pick the rows a noiseless "
             "selection epoch would, beside random rows, and how does that grow with ε?",
    axes={"epsilon": (1.0, 8.0, 64.0)},
    fields=fields, base=dict(strategy="sparse", selection="sparta", sparsity=0.2), execute=execute,
    measures=(Measure(name="overlap", label="share of SPARTA's rows the noiseless choice picks", private=True),
              Measure(name="random", label="what random rows would give"),
              Measure(name="sigma", label="σ of the selection epoch")),
    measure=measure, read=read, show=show)

from dpviz.studies.registry import register_study  # noqa: E402

register_study(SPARSE_SELECTION)
