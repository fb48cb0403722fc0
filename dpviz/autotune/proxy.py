"""The proxy search behind `auto` learning rates: a small TPE search on the public stand-in of the private
dataset, every trial an ordinary DP run of the same configuration, named by its inputs so that a second
resolution reopens it; when the best rate sits at an end of its range, a few more trials one decade
beyond that end (`extension`) and a warning if it is still there. `dpviz.autotune` decides when to search.
"""

from __future__ import annotations

from dpviz import catalog
from dpviz.config import LR_DEFAULTS, RunConfig
from dpviz.errors import Cancelled
from dpviz.autotune.grid import PLAIN_RANGES, RANGES

TRIALS_PER_FIELD = 6


def proxy_for(dataset: str) -> str | None:
    """The public stand-in a search can use for ``dataset`` (its catalogue entry's ``proxy``), or None."""
    entry = catalog.DATASETS.get(dataset)
    return entry.proxy if entry else None


def search_base(cfg: RunConfig) -> RunConfig:
    """The config a search tunes: auto fields at their defaults, seed 0, evaluated at the end only, keeping
    no weights (nobody looks at a trial's model; on MiniLM they would be 43 MB a trial)."""
    return cfg.replace(**{f: LR_DEFAULTS[f] for f in cfg.auto}, seed=0, checkpoint_every=0, eval_every=10**6,
                       device="auto", keep_weights="none")


def trials_for(fields) -> int:
    return 2 + TRIALS_PER_FIELD * len(fields)


def space_of(fields, private: bool = True) -> dict:
    """The log-scale range searched per field: DP steps' (`RANGES`) or a non-private run's (`PLAIN_RANGES`)."""
    return {f: list((RANGES if private else PLAIN_RANGES)[f]) for f in fields}


def proxy_study_name(cfg: RunConfig, fields) -> str:
    """The name `search` gives (or gave) the study for ``cfg``'s ``fields``, found without creating it."""
    from dpviz import sweeps

    return sweeps.search_name(search_base(cfg), space_of(fields, cfg.private), proxy_for(cfg.dataset))


def start_points(fields, trials: int, private: bool = True) -> list[dict]:
    """The first trials of a search: one field, ``trials`` log-spaced values over its range; two or more,
    a 3-per-field log grid (TPE takes over after it)."""
    k = trials if len(fields) == 1 else 3
    qs = [(i + 0.5) / k for i in range(k)] if len(fields) > 1 else [i / (k - 1) for i in range(k)]

    def at(f, q):
        lo, hi = space_of([f], private)[f]
        return lo * (hi / lo) ** q

    grid = [{}]
    for f in fields:
        grid = [{**g, f: at(f, q)} for g in grid for q in qs]
    return grid[:trials]


def search(cfg: RunConfig, fields, *, cache_dir=None, trials: int | None = None, seed: int = 0, run: bool = True,
           progress=None, cancel=None):
    """The proxy search for ``cfg``'s ``fields``: (study, finished trials); with ``run=False`` nothing trains.

    ``progress(k, n)`` is called before the k-th of n trials trains, and ``progress.step(s, S)`` (where the
    callback has that method) after each step s of the trial's S; ``cancel`` (an event) stops the search
    at the trial's next step (`Cancelled`), leaving the finished trials for the next resolution to resume from;
    the stopped trial's point is queued again, so the next resolution trains it rather than skip it."""
    from functools import partial

    from dpviz.training import execute
    from dpviz import sweeps

    trials = trials or trials_for(fields)
    study = sweeps.create_search(search_base(cfg), space_of(fields, cfg.private), trials=trials, seed=seed,
                                 proxy=proxy_for(cfg.dataset), cache_dir=cache_dir)
    if not study.get_trials(deepcopy=False):  # start from an even log grid, not TPE's random start-up
        for point in start_points(fields, trials, cfg.private):
            study.enqueue_trial(point)
    study.set_user_attr("auto", True)
    while run:  # one trial at a time (trials are concrete configs), reporting and cancellable between them
        if cancel is not None and cancel.is_set():
            raise Cancelled("the learning-rate search was cancelled between trials")
        if progress is not None:
            finished = [t for t in study.get_trials(deepcopy=False) if t.state.is_finished()]
            progress(min(len(finished) + 1, trials), trials)
        try:
            trial_run = partial(execute.run, cancel=cancel, progress=_steps_of(progress))
            if not sweeps.work(study, run=trial_run, cache_dir=cache_dir, max_trials=1, kind="search"):
                break
        except Cancelled:
            _queue_again(study)
            raise
    done = [t for t in study.get_trials(deepcopy=False) if t.state.is_finished() and t.value is not None]
    return study, done


def trial_seconds(cfg: RunConfig, store) -> float | None:
    """How long one trial of ``cfg``'s search takes on this machine, measured: the median training time of the
    store's finished search runs on the same backbone (None: none yet, so no estimate)."""
    import statistics

    times = [r["summary"]["wall_time_s"] for r in store.list_runs("finished", kind="search")
             if r["config"].get("backbone") == cfg.backbone and (r.get("summary") or {}).get("wall_time_s")]
    return statistics.median(times) if times else None


def _steps_of(progress):
    """A trial run's ``progress(step, total, last)`` that reports its steps to ``progress.step`` (None: none)."""
    step = getattr(progress, "step", None)
    return None if step is None else (lambda s, total, last: step(s, total))


def _queue_again(study) -> None:
    """Queue the point of the trial a cancel just stopped (stored failed, "Cancelled: …") once more."""
    from optuna.trial import TrialState

    stopped = [t for t in study.get_trials(deepcopy=False, states=(TrialState.FAIL,))
               if str(t.user_attrs.get("error", "")).startswith("Cancelled")]
    if stopped:
        study.enqueue_trial(max(stopped, key=lambda t: t.number).params)


EXTEND_TRIALS = 3  # trials over the decade beyond an end of the range the best trial sits at
EDGE = 0.1  # "at an end": within this share of the range (on the log scale) from it


def at_edges(params: dict, ranges: dict) -> dict:
    """{field: "low" | "high"} for the ``params`` within `EDGE` of an end of their ``ranges`` (log scale)."""
    import math

    out = {}
    for f, (lo, hi) in ranges.items():
        if f in params and hi > lo:
            q = math.log(params[f] / lo) / math.log(hi / lo)
            if q >= 1 - EDGE or q <= EDGE:
                out[f] = "high" if q >= 1 - EDGE else "low"
    return out


def _beyond(ranges: dict, sides: dict) -> dict:
    """The decade beyond each field's end in ``sides``."""
    return {f: [ranges[f][1], ranges[f][1] * 10] if side == "high" else [ranges[f][0] / 10, ranges[f][0]]
            for f, side in sides.items()}


def extension(cfg: RunConfig, fields, done: list, *, cache_dir=None, seed: int = 0, run: bool = True):
    """Where the best of ``done`` (a finished search's trials) sits at an end of its range: (study, its
    finished trials, the sides) of a small search over the decade beyond that end, the other fields at
    the best's values; None when no field is at an end. With ``run=False`` nothing trains."""
    from dpviz.training import execute
    from dpviz import sweeps

    best = best_trial(done)
    sides = at_edges(best.params, space_of(fields, cfg.private))
    if not sides:
        return None
    space = _beyond(space_of(fields, cfg.private), sides)
    base = search_base(cfg).replace(**{f: best.params[f] for f in fields if f not in sides})
    if not run:  # look, create nothing: the form's preview reads this on every change
        import optuna

        if sweeps.search_name(base, space, proxy_for(cfg.dataset)) not in optuna.get_all_study_names(sweeps.storage(None, cache_dir)):
            return None, [], sides
    study = sweeps.create_search(base, space, trials=EXTEND_TRIALS, seed=seed, proxy=proxy_for(cfg.dataset),
                                 cache_dir=cache_dir)
    if not study.get_trials(deepcopy=False):  # one decade out in even steps, all edge fields together
        for i in range(1, EXTEND_TRIALS + 1):
            study.enqueue_trial({f: lo * (hi / lo) ** (i / EXTEND_TRIALS if sides[f] == "high"
                                                       else 1 - i / EXTEND_TRIALS)
                                 for f, (lo, hi) in space.items()})
    study.set_user_attr("auto", True)
    if run:
        sweeps.work(study, run=execute.run, cache_dir=cache_dir, kind="search")
    ext_done = [t for t in study.get_trials(deepcopy=False) if t.state.is_finished() and t.value is not None]
    return study, ext_done, sides


def edge_warning(values: dict, ranges: dict, sides: dict, extended: bool, how: str | None = None) -> str:
    """One line naming the fields whose chosen value still sits at an end of the searched range.

    ``how`` says why the range was not extended where the default does not (e.g. the shipped grid's)."""
    still = {f: side for f, side in at_edges(values, ranges).items() if sides.get(f) == side}
    if not still:
        return ""
    ends = "; ".join(f"{f} = {values[f]:.4g} is at the {'top' if side == 'high' else 'bottom'} of the range "
                     f"searched ({ranges[f][0]:.4g}–{ranges[f][1]:.4g})" for f, side in still.items())
    how = how or ("even after extending it one decade" if extended
                  else "which was not extended (DPVIZ_AUTO_SEARCH=off)")
    return f"{ends}, {how}: the best rate may lie beyond it; set it by hand or tune it on the Tuning page"


def chance_warning(proxy: str, accuracy: float | None) -> str:
    """One line when the best trial barely beat guessing on ``proxy``: no rate searched trained, so the rate
    chosen is noise (a range made for another kind of step, or a proxy the backbone cannot learn)."""
    entry = catalog.DATASETS.get(proxy)
    if accuracy is None or entry is None or entry.shape is None:
        return ""
    chance = 1 / entry.shape.num_classes
    if accuracy > chance + 0.1 * (1 - chance):
        return ""
    return (f"every rate searched ended near chance on {proxy} (best accuracy {accuracy:.3f}, chance {chance:.3f}): "
            "the rates chosen are not tuned; set them by hand or tune them on the Tuning page")


def best_trial(done: list):
    """The best finished trial: the highest test accuracy; among equal ones the lowest test loss, then the
    earliest. The loss decides where the proxy saturates: on 11,000 glyphs at ε = 8, rates a factor 5 apart
    all reach accuracy 1.0, and the earliest of them is the range's bottom end."""
    def neg_loss(t) -> float:  # max() prefers the lower loss; a trial without one comes last among equals
        v = (t.user_attrs.get("summary") or {}).get("test_loss")
        return float("-inf") if v is None else -float(v)

    return max(done, key=lambda t: (t.value, neg_loss(t), -t.number))


def finished_search(cfg: RunConfig, fields, cache_dir, trials, seed, name: str | None = None) -> tuple | None:
    """(study, finished trials) of ``cfg``'s search if it has run to its budget, else None (creates nothing);
    ``name``: the study's name (`proxy_study_name`), where the caller has it."""
    import optuna

    from dpviz import sweeps

    storage = sweeps.storage(None, cache_dir)
    name = name or proxy_study_name(cfg, fields)
    if name not in optuna.get_all_study_names(storage):
        return None
    study = optuna.load_study(study_name=name, storage=storage)  # read only: a look-up writes nothing
    done = [t for t in study.get_trials(deepcopy=False) if t.state.is_finished() and t.value is not None]
    needed = max(trials or trials_for(fields), study.user_attrs["n_trials"])  # a larger budget asked: search on
    return (study, done) if len(done) >= needed else None
