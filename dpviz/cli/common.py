"""What every group of subcommands shares: the parser class, the flags, the output, the errors.

* `Parser`: argparse whose usage errors are one line (a `ConfigError` naming ``arguments``).
* `config_flags` / `config_from_args`: every `RunConfig` field as a flag, and back to a config
  (``--config FILE`` first, flags override it).
* `dump`: the JSON every ``--json`` prints; `number` and `at_least`: argv checks naming the field.
* `fail`: a `DpvizError` as one line on stderr, exit code `EXIT_USAGE`.
* `Progress`: a training command's progress bar on stderr.

Nothing here imports torch: ``--help``, ``list`` and a cached ``run`` stay fast.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import fields

from dpviz.config import RunConfig, load_config_file
from dpviz.errors import ConfigError, DpvizError
from dpviz.privacy import PARTS, RANDOMNESS
from dpviz.tasks import TASKS, with_task

EXIT_USAGE = 2


class Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2, no usage dump
        raise ConfigError("arguments", message)


def config_flags(p: argparse.ArgumentParser, skip=()) -> None:
    """Every RunConfig field as a flag: shared ones in one group, each strategy's own in its group."""
    from dpviz import strategies

    g = p.add_argument_group("run configuration (see RunConfig)")
    groups = {f: (cls, prm) for cls in strategies.REGISTRY.values() for prm in cls.params for f in [prm.name]}
    owned: dict[str, argparse._ArgumentGroup] = {}
    for f in fields(RunConfig):
        if f.name in skip:
            continue
        helptext = f"default: {f.default}"
        if f.name == "strategy":
            helptext = f"one of {', '.join(strategies.names())} (see `strategies`); {helptext}"
        helptext = f"{CHOICE_HELP[f.name]}; {helptext}" if f.name in CHOICE_HELP else helptext
        box = g
        if f.name in groups:
            cls, prm = groups[f.name]
            box = owned.setdefault(cls.name, p.add_argument_group(f"strategy {cls.name} ({cls.label})"))
            helptext = f"{prm.help}; {helptext}" if prm.help else helptext
        box.add_argument("--" + f.name.replace("_", "-"), dest=f.name, default=None, metavar="V", help=helptext)
    g.add_argument("--config", help="JSON or TOML file of RunConfig fields (flags override it)")
    g.add_argument("--preset", default=None, metavar="TASK",
                   help=f"start from a task's fields ({', '.join(TASKS)}; --config and flags override them): "
                        "real-text is MiniLM on tweets, real-vision EfficientNet-Lite0 on Fashion-MNIST")


CHOICE_HELP = {
    "randomness": f"one of {', '.join(RANDOMNESS)}: where sampling, BandMF's parts and noise come from: the seed "
                  "(reproducible, and not private against anyone who holds the configuration) or the operating "
                  "system's entropy (for a model released to others)",
    "parts": f"one of {', '.join(PARTS)}: how BandMF splits records into its parts (bands > 1): independent holds "
             "for adding or removing a record, equal for zero-out neighbours only",
}
"""The help of the fields whose choices decide what a run's ε covers."""


def config_from_args(args) -> RunConfig:
    """The run the flags describe: ``--preset``'s fields, ``--config``'s, then every flag given ("none" clears
    a path)."""
    d = load_config_file(args.config) if args.config else {}
    d.update({f.name: getattr(args, f.name) for f in fields(RunConfig) if getattr(args, f.name, None) is not None})
    if getattr(args, "preset", None):  # the task's fields first; a task field the strategy ignores is dropped
        d = with_task(args.preset, d)
    for k, v in list(d.items()):  # flags arrive as strings; "none" clears optional paths
        if isinstance(v, str) and v.lower() in ("none", "null") and k in ("data_dir", "weights"):
            d[k] = None
    return RunConfig.from_dict(d)


def dump(obj) -> str:
    """``obj`` as indented JSON (infinities as null, anything else unknown as its text)."""
    return json.dumps(obj, indent=2, ensure_ascii=False,
                      default=lambda o: None if isinstance(o, float) and math.isinf(o) else str(o))


def number(value: str, field: str, kind=float):
    """``value`` read as ``kind``; a ConfigError naming ``field`` otherwise."""
    try:
        return kind(value)
    except ValueError:
        raise ConfigError(field, f"a{'n integer' if kind is int else ' number'}", value) from None


def at_least(args, name: str, low: int) -> None:
    """The integer flag ``name``, when given, is >= ``low``."""
    v = getattr(args, name)
    if v is not None and v < low:
        raise ConfigError(name, f"an integer >= {low}", v)


def fail(e: DpvizError) -> int:
    """``e`` as one line on stderr; the exit code of bad input."""
    print(f"dpviz: error: {e}".splitlines()[0], file=sys.stderr)
    return EXIT_USAGE


class Progress:
    """A training command's progress on stderr (none with --quiet).

    Before the first step, a pass over the data (features, a test split) is counted in rows with its own
    measured time left. The step bar starts at the first step, so its clock holds no warm-up, and it shows
    the run's time left as `dpviz.jobs.eta` measures it (phase by phase, evaluations included), never
    tqdm's average rate: a feature pass between steps would stall that rate and blow its estimate up."""

    def __init__(self, cfg, quiet: bool, store=None):
        """``store``: where earlier runs' step times price the phases ahead (None: the current phase only)."""
        self.cfg, self.quiet, self.store = cfg, quiet, store
        self.bar = self.pass_bar = self.pace = None

    def __call__(self, step, total, last):
        if self.quiet:
            return
        import time

        if self.pace is None and last.get("plan"):
            from dpviz import jobs

            self.pace = jobs.Pace(phases=[tuple(p) for p in last["plan"]], eval_every=self.cfg.eval_every,
                                  prior=jobs.prior(self.store, self.cfg) if self.store is not None else {})
        if self.pace is not None:
            self.pace.observe(step, time.time())
        if "pass" in last and self.bar is None:  # before the first step: the pass alone, counted in rows
            self._pass(*last["pass"])
            return
        if self.pass_bar is not None:
            self.pass_bar.close()
            self.pass_bar = None
        if self.bar is None and not step:
            return
        self.bar = self.bar or _bar(self.cfg, total)
        _update(self.bar, step, last, self.pace)

    def _pass(self, what: str, done: int, total: int, spent: float) -> None:
        if self.pass_bar is None or self.pass_bar.desc != what:
            if self.pass_bar is not None:
                self.pass_bar.close()
            self.pass_bar = _counter(what, total)
        self.pass_bar.n = done
        left = f"about {_duration(spent / done * (total - done))} left" if 0 < done < total and spent >= 1 else ""
        self.pass_bar.set_postfix_str(left, refresh=True)

    def close(self) -> None:
        for bar in (self.pass_bar, self.bar):
            if bar is not None:
                bar.close()


def say_start(cfg) -> None:
    """The first line of a command that trains, before anything heavy is imported (torch takes seconds)."""
    noise = ("DP-SGD" if cfg.mechanism == "dp-sgd" else f"{cfg.mechanism} b = {cfg.bands}") if cfg.private \
        else "no privacy"
    print(f"dpviz: training {cfg.strategy} at ε = {cfg.epsilon:g} ({noise}) on {cfg.dataset} with {cfg.backbone}: "
          "loading torch, the data and the backbone, and calibrating the noise…", file=sys.stderr, flush=True)


class SearchProgress:
    """The bar over an `auto` learning-rate search's trials on public data, before training starts."""

    def __init__(self, quiet: bool, skip: tuple[str, ...] = ()):
        """``skip``: the auto fields being searched, named in one line with the flags that skip the search."""
        self.quiet, self.bar, self.skip = quiet, None, skip

    def __call__(self, k: int, n: int) -> None:
        if self.quiet:
            return
        if self.bar is None:
            from tqdm import tqdm

            if self.skip:
                flags = " ".join(f"--{f.replace('_', '-')} RATE" for f in self.skip)
                print(f"dpviz: {', '.join(self.skip)} on auto, and this setting is not in the shipped grid: "
                      f"searching {n} short runs on public data first (no privacy spent); {flags} or --rates grid "
                      "skips it",
                      file=sys.stderr)

            self.bar = tqdm(total=n, desc="searching learning rates on public data", file=sys.stderr, unit="trial")
        self.bar.total = max(self.bar.total, n)  # an edge extension adds trials
        self.bar.n = k - 1  # called before trial k trains
        self.bar.set_postfix_str("")
        self.bar.refresh()

    def step(self, s: int, total: int) -> None:
        """Step s of the running trial's ``total``: the bar moves within a trial too."""
        if self.bar is not None:
            self.bar.set_postfix_str(f"trial step {s}/{total}")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.n = self.bar.total
            self.bar.close()
            self.bar = None


# tqdm's own rate and time left are left out of every bar: they average over stalls (a feature pass between
# steps, a phase of cheaper steps) and mislead by minutes; the postfix says what `dpviz.jobs.eta` measures
_FORMAT = "{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} {unit} [{elapsed}{postfix}]"


def _bar(cfg, total):
    from tqdm import tqdm

    return tqdm(total=total, desc=f"{cfg.strategy} ε={cfg.epsilon:g}", file=sys.stderr, unit="step",
                bar_format=_FORMAT)


def _counter(what: str, total: int):
    from tqdm import tqdm

    return tqdm(total=total, desc=what, file=sys.stderr, unit="row", bar_format=_FORMAT, leave=False)


def _duration(seconds: float) -> str:
    from dpviz.jobs import duration

    return duration(seconds)


def _update(bar, step, last, pace=None):
    bar.n = step
    if "pass" in last:  # a pass over the data between steps (`Loop._pass`): said, not timed by tqdm
        what, done, total, _ = last["pass"]
        bar.set_postfix_str(f"{what}: {done:,} of {total:,}", refresh=True)
        return
    shown = {k: f"{v:.3g}" for k, v in last.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    from dpviz.jobs import time_left

    left = time_left(pace)
    bar.set_postfix({**shown, **({"left": left} if left else {})}, refresh=True)
