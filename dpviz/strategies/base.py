"""The strategy seam: what a strategy declares and the hooks the generic loop calls.

A strategy is one class in one module of this package, registered by name with
`register`. Its class attributes tell the rest of dpviz what it needs (the
`RunConfig` fields it uses, its learning rates, its colour); `plan` turns a
config into phases; the hooks run inside the trainer's loop (`dpviz.training.loop.Loop`),
which has one phase loop and names no strategy. What a hook may use of that loop is
`LoopAPI`, written down here so that strategies never import the trainer (it sits a
layer above them). Reading the registry imports no torch: hooks import what they need
when they run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from dpviz.errors import ConfigError


@dataclass(frozen=True, kw_only=True)
class PhasePlan:
    """One phase of a strategy's schedule.

    Attributes:
        name: phase name as reported (lp, fft, head, select, …).
        steps: number of steps (a public phase may stop earlier).
        lr: learning rate of the phase.
        trainable: what trains, as the analyses read it: "head", "last:k" or "all".
        public: trains without DP on public data; not counted by the accountant.
    """

    name: str
    steps: int
    lr: float
    trainable: str = "all"
    public: bool = False


@dataclass(frozen=True, kw_only=True)
class Param:
    """A strategy's own `RunConfig` field (a knob), declared once: its default, type and allowed range, and
    how the form shows it. The config's default, the type that text from flags and files is read as, the
    range check and the form's widget all come from here (the CLI shows every field as a flag, with
    ``help``).

    Attributes:
        name: the `RunConfig` field.
        default: its value when not given (`dpviz.config.RunConfig` reads it).
        label: the widget's label.
        kind: "slider" (a float), "int" (a whole number) or "choice" (one of ``choices``).
        low, high, step: the range of the form's slider or number input.
        valid: the allowed range (lo, hi), either end None for none; by default the form's (low, high).
        bounds: which ends of ``valid`` are allowed: "[]", "(]", "[)" or "()".
        means: a few words after the range in an error ("the fraction of each layer's rows that train").
        choices: the options of a choice.
        help: the widget's tooltip and the CLI flag's help.
    """

    name: str
    default: Any
    label: str
    kind: str = "slider"
    low: float | None = None
    high: float | None = None
    step: float | None = None
    valid: tuple | None = None
    bounds: str = "[]"
    means: str = ""
    choices: tuple = ()
    help: str = ""

    @property
    def type(self) -> type:
        """What text from flags and files is read as."""
        return {"slider": float, "int": int, "choice": str}[self.kind]

    def allowed(self) -> str:
        """The allowed values in words: "must be in (0, 1] (…)", "must be an integer >= 1", "one of …"."""
        if self.kind == "choice":
            return f"one of {', '.join(self.choices)}"
        lo, hi = self.valid or (self.low, self.high)
        if self.kind == "int":
            text = f"must be an integer in [{lo}, {hi}]" if hi is not None else f"must be an integer >= {lo}"
        else:
            text = f"must be in {self.bounds[0]}{lo:g}, {hi:g}{self.bounds[1]}"
        return f"{text} ({self.means})" if self.means else text

    def holds(self, value) -> bool:
        """Whether ``value`` (already of `type`) is allowed."""
        if self.kind == "choice":
            return value in self.choices
        lo, hi = self.valid or (self.low, self.high)
        above = lo is None or (value > lo if self.bounds[0] == "(" else value >= lo)
        below = hi is None or (value < hi if self.bounds[1] == ")" else value <= hi)
        return above and below


@dataclass(kw_only=True)
class PhaseSetup:
    """What the generic loop needs to run one phase; returned by `Strategy.enter_phase`.

    Attributes:
        module: what a step differentiates: the whole classifier, or its head on cached features.
        inputs: (N, …) inputs of ``module`` (images, or penultimate features (N, d)).
        labels: (N,) class labels.
        sample_rate: Poisson sampling rate q of a batch.
        private: steps clip and noise per-sample gradients (DP-SGD) instead of plain steps.
        update: apply the optimizer after each step (False: gradients are only read, as in a selection epoch).
        optimizer: the phase's optimizer; None makes a fresh one over ``module``'s trainable parameters.
    """

    module: Any
    inputs: Any
    labels: Any
    sample_rate: float
    private: bool
    update: bool = True
    optimizer: Any = None


class LoopAPI(Protocol):
    """What a strategy's hooks may use of the run that trains them (`dpviz.training.loop.Loop` is one).

    Attributes:
        cfg: the run's `RunConfig`.
        prep: the prepared run (`dpviz.training.prepare.Prepared`): ``phases`` (σ and steps per phase),
            ``public`` (the public stand-in's data, for strategies that train on it), ``sample_rate``.
        model: the classifier (``.backbone``, ``.head``) on ``dev``.
        dev: the torch device the run trains on.
        step: steps taken so far, over all phases.
        rec: the run's metric recorder; ``rec.add(step, **metrics)`` stores metrics at a step.
    """

    cfg: Any
    prep: Any
    model: Any
    dev: Any
    step: int
    rec: Any

    def set_trainable(self, trainable: str) -> None:
        """Freeze all but "head", "last:k" blocks or "all"."""

    def head_features(self) -> Any:
        """Penultimate features (n, d) of the private training set under the frozen backbone."""

    def setup(self, *, module, inputs=None, labels=None, sample_rate: float | None = None,
              private: bool | None = None, update: bool = True, optimizer=None) -> "PhaseSetup":
        """A phase's data and settings: the private training set under DP unless told otherwise."""

    def event(self, kind: str, message: str) -> None:
        """Store a line in the run's event log."""

    def update_run(self, **fields) -> None:
        """Update the stored run's row (a schedule that changed its total)."""

    def save_mask(self, mask: dict) -> None:
        """Store a sparse run's selected rows."""

    def evaluate(self) -> None:
        """Evaluate on the test split now and record it."""


class Strategy:
    """Base class: one fine-tuning strategy; a fresh instance trains one run and may hold its state.

    Class attributes (the declaration the rest of dpviz reads):
        name: registry key, the value of ``RunConfig.strategy``.
        label: a few words for menus and legends.
        color: its colour in every figure.
        params: its own `RunConfig` fields (the form shows these only for this strategy).
        lr_fields: the learning-rate fields its phases use (form, tuning, sweeps).
        grad_sample_modes: per-sample gradient paths it supports.
        min_epochs: the fewest epochs its schedule needs.
        auto_axes: its own numeric fields that "auto" learning rates interpolate over in the shipped
            grid (`dpviz.autotune`) instead of keying on them.
        auto_as: another strategy whose "auto" rates this one takes (None: its own), for a strategy
            whose tuned phase is that strategy's under the same σ but that a proxy cannot run.
    """

    name: ClassVar[str]
    label: ClassVar[str]
    color: ClassVar[str]
    params: ClassVar[tuple[Param, ...]] = ()
    lr_fields: ClassVar[tuple[str, ...]] = ("lr_ft",)
    grad_sample_modes: ClassVar[tuple[str, ...]] = ("auto", "bk", "hooks")
    min_epochs: ClassVar[int] = 1
    auto_axes: ClassVar[tuple[str, ...]] = ()
    auto_as: ClassVar[str | None] = None

    def __init__(self, cfg):
        self.cfg = cfg

    # --- declaration ----------------------------------------------------------
    @classmethod
    def fields(cls) -> tuple[str, ...]:
        """The `RunConfig` fields that only this strategy reads."""
        return tuple(p.name for p in cls.params)

    @classmethod
    def validate_fields(cls, cfg) -> None:
        """Range checks of this strategy's own fields, run whatever strategy a config names (a bad
        value is an error even where it is unused, so it cannot surprise a later switch of strategy)."""
        for p in cls.params:
            if not p.holds(getattr(cfg, p.name)):
                raise ConfigError(p.name, p.allowed(), getattr(cfg, p.name))

    @classmethod
    def validate(cls, cfg) -> None:
        """Checks of a config that runs this strategy (no data needed); raise `ConfigError` naming the field."""
        if cfg.grad_sample_mode not in cls.grad_sample_modes:
            raise ConfigError("grad_sample_mode", f"{' or '.join(cls.grad_sample_modes)} for {cls.name}",
                              cfg.grad_sample_mode)
        if cfg.epochs < cls.min_epochs:
            raise ConfigError("epochs", f"must be >= {cls.min_epochs} for {cls.name}", cfg.epochs)

    @classmethod
    def unread(cls, cfg) -> tuple[str, ...]:
        """The strategy-owned fields (other strategies' own fields, learning rates) this config ignores.

        Such a field must keep its default: a value there would change nothing but the cache key, so a
        run would be stored twice under two keys (`dpviz.strategies.validate` refuses it).
        """
        from dpviz.strategies import REGISTRY

        mine = set(cls.fields())
        others = {f for s in REGISTRY.values() for f in s.fields()} - mine
        lrs = {f for s in REGISTRY.values() for f in s.lr_fields} - set(cls.lr_fields)
        return tuple(sorted(others | lrs))

    @classmethod
    def unread_because(cls, cfg, name: str) -> str:
        """Why this strategy's own field ``name`` is unread in ``cfg`` (for `unread` overrides)."""
        return "this setting"

    @classmethod
    def describe(cls, cfg, phases: str) -> str:
        """The preview's one-line schedule; ``phases`` is "lp 20 steps → fft 80 steps" from the plan."""
        return phases

    def plan(self, *, total_steps: int, steps_per_epoch: int, num_blocks: int) -> list[PhasePlan]:
        """The phases of a run of ``total_steps`` private steps."""
        raise NotImplementedError

    # --- hooks of the generic loop ------------------------------------------
    def enter_phase(self, loop: "LoopAPI", plan: PhasePlan) -> PhaseSetup:
        """Set what trains and return the phase's data; by default private DP-SGD on ``plan.trainable``."""
        loop.set_trainable(plan.trainable)
        if plan.trainable == "head":  # frozen backbone: features once, not a forward per step
            return loop.setup(module=loop.model.head, inputs=loop.head_features())
        return loop.setup(module=loop.model)

    def before_step(self, loop: "LoopAPI", plan: PhasePlan, k: int) -> bool:
        """Called before step k of a phase; return False to end the phase early."""
        return True

    def after_step(self, loop: "LoopAPI", plan: PhasePlan, setup: PhaseSetup) -> None:
        """Called after a step's gradients are set, before the optimizer applies them."""

    def leave_phase(self, loop: "LoopAPI", plan: PhasePlan, setup: PhaseSetup) -> None:
        """Called after a phase's last step (or its early end)."""

    def state_dict(self, model) -> dict:
        """The weights a checkpoint stores: they must load into the unmodified classifier."""
        return model.state_dict()

    def resume_state(self, loop: "LoopAPI") -> dict | None:
        """What this strategy keeps outside the weights, for a stopped run to go on (`dpviz.training.resume`): {} when
        nothing, None when it cannot go on from here (the run then starts again)."""
        return {}

    def load_resume_state(self, state: dict) -> None:
        """Take back what `resume_state` gave."""

    def summary(self, loop: "LoopAPI") -> dict:
        """What this strategy adds to the run's JSON summary."""
        return {}
