"""How long a run has left: measured from its own recent steps, evaluations included, phase by phase.

A run's phases step at very different paces: LP on cached features takes milliseconds a step where
full fine-tuning of the same backbone takes a tenth of a second or more, and every ``eval_every`` steps an
evaluation adds a pass over the evaluation subset. So one average over the steps so far under-reads while
LP runs and wanders after each evaluation. `Pace` keeps the current phase's pace over a recent window that
spans at least one evaluation period, and prices the phases not reached yet from this machine's earlier
runs of the same backbone and batch (`prior`: each phase's wall time a step, evaluations included), scaled by
how this run's latest measured phase compares with theirs (the machine may be busier now).
Where no earlier run tells a later phase's pace, the estimate is a lower bound and says so.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

WRAP_UP = "wrap-up"  # `phase_timing`'s entry for the time from the last step to the summary
STEADY_S = 1.0  # seconds of a phase's steps before its pace tells how busy the machine is
MIN_WINDOW = 3  # steps: below this a pace is too noisy to promise anything (before, the prior prices it)


@dataclass
class Estimate:
    """``seconds`` left; ``complete``: False where a later phase's pace is unknown (the run takes at least this)."""

    seconds: float
    complete: bool = True


@dataclass
class Pace:
    """A run's measured pace.

    Attributes:
        phases: [(name, steps)] of the run's phases in order (a strategy's plan: `Phase.to_dict`).
        eval_every: the run's evaluation period in steps (the window spans at least one).
        min_window: the steps measured in a phase before its own pace is used.
        prior: {phase name: seconds a step} from earlier runs (`prior`); {} where there are none.
    """

    phases: list[tuple[str, int]]
    eval_every: int = 10
    prior: dict[str, float] = field(default_factory=dict)
    min_window: int = MIN_WINDOW  # 1 for units that are each long (a page task's runs or audit steps)
    marks: list[tuple[int, float]] = field(default_factory=list)  # (step, time) as reported

    def observe(self, step: int, t: float) -> None:
        """Step ``step`` was reported at time ``t`` (a repeated step, e.g. a pass's report, keeps the first)."""
        if step > 0 and (not self.marks or step > self.marks[-1][0]):
            self.marks.append((step, t))

    def _ends(self) -> list[int]:
        ends, at = [], 0
        for _, steps in self.phases:
            at += steps
            ends.append(at)
        return ends

    def _phase_of(self, step: int) -> int:
        """The index of the phase that step ``step + 1`` belongs to (the last phase past the end)."""
        return min(bisect.bisect_right(self._ends(), step), len(self.phases) - 1)

    def _current_pace(self, index: int) -> float | None:
        """Seconds a step in phase ``index`` over its recent steps (evaluations included), or None before
        ``min_window`` of them."""
        start = ([0] + self._ends())[index]
        here = [(s, t) for s, t in self.marks if s > start]
        if len(here) < 2:
            return None
        # a window of at least one evaluation period, and of half the phase's steps so far: a recent pace,
        # steady against one slow step or a busy moment of the machine
        span = max(self.min_window, self.eval_every, (here[-1][0] - here[0][0]) // 2)
        span = -(-span // self.eval_every) * self.eval_every  # whole evaluation periods: each holds one evaluation
        last_step, last_t = here[-1]
        if last_step - here[0][0] < self.min_window:
            return None
        # the newest mark at least `span` steps back (or the phase's first): evaluations fall inside it
        first = next(((s, t) for s, t in reversed(here) if last_step - s >= span), here[0])
        return (last_t - first[1]) / (last_step - first[0])

    def _load(self, index: int) -> float | None:
        """This run's pace ÷ the earlier runs' in the newest phase up to ``index`` where both are known: how
        much slower (busier) this machine steps now."""
        for i in range(index, -1, -1):
            name, pace = self.phases[i][0], self._current_pace(i)
            if pace is not None and self.prior.get(name):
                # a ratio of milliseconds (LP on cached features) is noise: a measured phase of under
                # `STEADY_S` of steps says nothing of the machine's load, so it counts as unchanged
                return pace / self.prior[name] if self._measured_s(i) >= STEADY_S else 1.0
        return 1.0 if self.prior else None

    def _measured_s(self, index: int) -> float:
        start = ([0] + self._ends())[index]
        here = [t for s, t in self.marks if start < s <= self._ends()[index]]
        return here[-1] - here[0] if len(here) > 1 else 0.0

    def left(self, now: float) -> Estimate | None:
        """The time left at ``now``; None until a pace of the current phase is known (measured, or priced
        from earlier runs at this run's measured load)."""
        if not self.marks:
            return None
        step, t = self.marks[-1]
        ends, index = self._ends(), self._phase_of(step)
        name, load = self.phases[index][0], self._load(index)
        pace = self._current_pace(index)
        if pace is None and load is not None and self.prior.get(name):  # a phase just begun: its prior, at the
            pace = self.prior[name] * load  # load the phase before measured
        if pace is None:
            return None
        seconds, complete = pace * max(ends[index] - step, 0), True
        for later_name, steps in self.phases[index + 1:]:
            if load is not None and self.prior.get(later_name):
                start = self.prior.get(f"{later_name}:start", self.prior[later_name])
                seconds += (start + (steps - 1) * self.prior[later_name]) * load
            elif later_name == name:  # the same kind of phase again (e.g. a repeated FFT): the same pace
                seconds += steps * pace
            else:
                complete = False
        if load is not None and self.prior.get(WRAP_UP):  # after the last step: the last checkpoint, the
            seconds += self.prior[WRAP_UP] * load  # weights, the privacy check's verdicts
        return Estimate(max(seconds - (now - t), 0.0), complete)


def phase_paces(timing: list[dict]) -> dict[str, float]:
    """{phase name: seconds a step after its first, evaluations included} of one stored run, from its summary's
    ``phase_timing``, and {"<name>:start": seconds to the end of its first step} (a feature pass, the privacy
    check's replays: paid once a phase, not a step)."""
    out = {}
    for t in timing:
        if t["name"] == WRAP_UP:
            out[WRAP_UP] = t["seconds"]
        elif t.get("steps", 0) >= 2:
            out[t["name"]] = t["seconds"] / (t["steps"] - 1)
            out[f"{t['name']}:start"] = t.get("start_s", 0.0)
    return out


SAME_PACE = ("backbone", "dataset", "batch_size", "precision", "grad_sample_mode", "max_length", "device",
             "eval_every", "eval_subset", "train_size")
"""Fields of earlier runs that must match for their step times to price this run's phases."""


def prior(store, cfg, limit: int = 3) -> dict[str, float]:
    """{phase name: seconds a step} from this store's newest finished runs whose `SAME_PACE` fields match
    ``cfg``'s (up to ``limit`` runs, the newest first wins): how this machine steps each kind of phase."""
    out: dict[str, float] = {}
    want = cfg.to_dict()
    seen = 0
    for r in reversed(store.list_runs("finished")):
        c, summary = r.get("config") or {}, r.get("summary") or {}
        if any(c.get(f) != want.get(f) for f in SAME_PACE) or not summary.get("phase_timing"):
            continue
        out = {**phase_paces(summary["phase_timing"]), **out}
        seen += 1
        if seen >= limit:
            break
    return out
