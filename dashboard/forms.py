"""The run form: every RunConfig field as a widget, a live preview, and launch."""

from __future__ import annotations

import math

import streamlit as st

from dpviz import autotune, calibration, strategies
from dpviz import catalog, tasks
from dpviz.config import ACCOUNTANTS, AUTO, CLIPPINGS, OPTIMIZERS, PRECISIONS, RunConfig
from dpviz.errors import DpvizError
from dpviz.fields import KEEP_WEIGHTS

NO_PRIVACY = "no privacy"
EPS_CHOICES = [0.1, 0.2, 0.3, 0.5, 0.7, 1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 8.0, 10.0, 15.0, 20.0, 30.0, 50.0,
               NO_PRIVACY]
D = RunConfig.__dataclass_fields__
_URL = "_form_url_keys"  # widget key → its shipped default, for the keys this run drew (written to the URL)


def _qkey(key: str) -> str:
    return key.removeprefix("f_")


def _parse(text: str, fallback, options=None):
    """A query-parameter value read as the type of ``fallback`` (None when it does not parse or is no option)."""
    try:
        if options is not None:
            return next((o for o in options if str(o) == text), None)
        if isinstance(fallback, bool):
            return {"1": True, "0": False}.get(text)
        if isinstance(fallback, int):
            return int(text)
        if isinstance(fallback, float):
            v = float(text)
            return v if math.isfinite(v) else None
        return text
    except ValueError:
        return None


def _default(key: str, fallback, options=None):
    """The widget's default: the URL's value (read once per session, so widgets keep their identity) or
    ``fallback``. A reload keeps the form: `_write_url` puts every field that differs from its default in the URL."""
    st.session_state.setdefault(_URL, {})[key] = fallback
    defaults = st.session_state.setdefault("_form_defaults", {})
    if key not in defaults:
        text = st.query_params.get(_qkey(key))
        parsed = None if text is None else _parse(text, fallback, options)
        defaults[key] = fallback if parsed is None else parsed
    return defaults[key]


def _write_url() -> None:
    """The drawn fields that differ from their shipped defaults, in the URL query (the others out of it)."""
    for key, fallback in st.session_state.get(_URL, {}).items():
        if key not in st.session_state:
            continue
        value, q = st.session_state[key], _qkey(key)
        text = ("1" if value else "0") if isinstance(value, bool) else str(value)
        if value == fallback:
            if q in st.query_params:
                del st.query_params[q]
        elif st.query_params.get(q) != text:
            st.query_params[q] = text


def _index(options, key: str, fallback=None) -> int:
    options = list(options)
    return options.index(_default(key, options[0] if fallback is None else fallback, options))


@st.cache_data(show_spinner="Calibrating the noise for this budget…", max_entries=256)
def _preview(cfg_json: str) -> dict:
    return calibration.preview(RunConfig.from_dict(__import__("json").loads(cfg_json)))


def _privacy_widgets() -> dict:
    c1, c2, c3 = st.columns([3, 2, 2])
    eps = c1.select_slider("ε (privacy budget, log scale)", EPS_CHOICES, value=_default("f_epsilon", 1.0, EPS_CHOICES),
                           key="f_epsilon",
                           help="Total ε for the whole run, every phase included. 'no privacy' trains without DP.")
    delta = c2.number_input("δ", value=_default("f_delta", 1e-5), format="%.1e", step=1e-6, key="f_delta")
    acct = c3.selectbox("accountant", ACCOUNTANTS, index=_index(ACCOUNTANTS, "f_accountant"), key="f_accountant",
                        help="PRV (Opacus's upper bound) and RDP bound ε. GDP is a central-limit approximation, "
                             "not a bound: a GDP run is calibrated by PRV's bound and shows GDP's ε beside it.")
    return {"epsilon": math.inf if eps == NO_PRIVACY else eps, "delta": delta, "accountant": acct}


def _param_widget(box, p: strategies.Param):
    """One strategy field as the widget its `Param` declares (key ``f_<field>``). Number inputs take any
    value: one the config refuses is the form's error box, never a silently kept old value."""
    default, key = D[p.name].default, f"f_{p.name}"
    if p.kind == "choice":
        return box.selectbox(p.label, p.choices, index=_index(p.choices, key, default), key=key, help=p.help or None)
    if p.kind == "int":
        return int(box.number_input(p.label, None, None, _default(key, int(default)), int(p.step or 1), key=key,
                                    help=p.help or None))
    return box.slider(p.label, float(p.low), float(p.high), _default(key, float(default)), float(p.step), key=key,
                      help=p.help or None)


def _strategy_widgets() -> dict:
    """The strategy and exactly the fields it declares (the others keep their defaults)."""
    names = list(strategies.names())
    c1, *rest = st.columns([2, 5])
    strategy = c1.selectbox("strategy", names, index=_index(names, "f_strategy", "lp-fft"), key="f_strategy",
                            format_func=lambda n: f"{n} — {strategies.get(n).label}")
    params = strategies.get(strategy).params
    boxes = rest[0].columns(len(params)) if params else []
    return {"strategy": strategy, **{p.name: _param_widget(b, p) for b, p in zip(boxes, params)}}


def _model_widgets() -> dict:
    """Dataset and backbone; a field their choice disables is ignored (it keeps its text for later, never
    blocks the launch)."""
    c1, c2, c3, c4 = st.columns(4)
    dataset = c1.selectbox("dataset", tuple(catalog.DATASETS), index=_index(catalog.DATASETS, "f_dataset"),
                           key="f_dataset", format_func=lambda n: f"{n} — {catalog.DATASETS[n].label}")
    data = catalog.DATASETS[dataset]
    data_dir = c2.text_input("data folder (real datasets)", _default("f_data_dir", ""), key="f_data_dir",
                             disabled=not data.takes_data_dir, help=f"holding {data.files}" if data.files else None)
    backbone = c3.selectbox("backbone", tuple(catalog.BACKBONES), index=_index(catalog.BACKBONES, "f_backbone"),
                            key="f_backbone", format_func=lambda n: f"{n} — {catalog.BACKBONES[n].label}")
    needs_weights = catalog.BACKBONES[backbone].needs_weights
    weights = c4.text_input("weights file (torchvision/timm)", _default("f_weights", ""), key="f_weights",
                            disabled=not needs_weights)
    return {"dataset": dataset, "data_dir": (data_dir.strip() or None) if data.takes_data_dir else None,
            "backbone": backbone, "weights": (weights.strip() or None) if needs_weights else None}


LR_LABELS = {"lr_lp": "LR (LP)", "lr_ft": "LR (FT)"}
LR_PHASES = {"lr_lp": ("LP", "linear-probing"), "lr_ft": ("FT", "fine-tuning")}  # toggles sit in narrow columns


def _lr_widget(box, field: str):
    """A learning rate: "auto" (chosen on public data, the default) or a number the user types."""
    short, phase = LR_PHASES.get(field, (field, field))
    auto = box.toggle(f"{short} auto", value=_default(f"f_{field}_auto", True), key=f"f_{field}_auto",
                      help=f"Learning rate of the {phase} phase. On (auto): chosen for this ε, B, epochs and "
                           "strategy on public data only (no privacy spent); off: the number typed below.")
    value = box.number_input(LR_LABELS.get(field, field), None, None, _default(f"f_{field}", autotune.DEFAULTS[field]),
                             format="%.4g", key=f"f_{field}", disabled=auto, label_visibility="collapsed")
    return AUTO if auto else value


FORM_KEYS = {"batch_size": "f_batch", "clip_norm": "f_clip"}  # the others: f_<field>


def _load_task(name: str) -> None:
    """Button callback: the task's fields become the form's (the widgets redraw from them); the rest resets."""
    defaults = st.session_state.setdefault("_form_defaults", {})
    for key in [k for k in st.session_state if str(k).startswith("f_")]:
        del st.session_state[key]
    defaults.clear()
    st.query_params.clear()  # the form's old fields must not come back from the URL
    for field, value in tasks.task_fields(name).items():
        defaults[FORM_KEYS.get(field, f"f_{field}")] = value


def render_task_picker() -> None:
    """Buttons that fill the form with a task: the built-in default, or a real pretrained model on real data."""
    cols = st.columns(len(tasks.TASKS) + 1)
    cols[0].markdown("**Start from a task:**")
    for col, (name, task) in zip(cols[1:], tasks.TASKS.items()):
        col.button(name, key=f"task_{name}", on_click=_load_task, args=(name,), help=task.label,
                   use_container_width=True)


def _size_widgets(dataset: str) -> dict:
    """The training subset (any dataset) and, for text, the tokens per example."""
    text = catalog.DATASETS[dataset].modality == "text"
    c1, c2, c3, c4, c5 = st.columns([1, 1, 1, 1, 1])
    size = int(c1.number_input("training subset (0: all)", None, None, _default("f_train_size", 0), 100,
                               key="f_train_size", help="a fixed class-stratified subset of this many training "
                               "examples, the same for every seed (n for the accountant)"))
    length = int(c2.number_input("tokens per text", None, None, _default("f_max_length", D["max_length"].default),
                                 8, key="f_max_length", disabled=not text,
                                 help="text: longer texts are cut, shorter ones padded (padding is masked)"))
    prec = c3.selectbox("precision", PRECISIONS, index=_index(PRECISIONS, "f_precision"), key="f_precision",
                        help="the forward and backward's arithmetic; per-sample norms, clipping, noise and "
                        "weights stay FP32, so ε is the same (tf32: CUDA only, fp32 on a CPU)")
    keep = c4.selectbox("store keeps", KEEP_WEIGHTS, index=_index(KEEP_WEIGHTS, "f_keep_weights"),
                        key="f_keep_weights", help="checkpoints: the weights at every feature checkpoint (the "
                        "curvature analyses reload them) and the final model; final: the final model only; none: "
                        "metrics and features only (a real backbone's trained weights are 43–90 MB a copy)")
    if (cores := local_devices()) > 1:  # one run over several local processes (torchrun); not a config field
        c5.number_input("processes", 1, cores, _default("f_processes", 1), 1, key="f_processes",
                        help=f"train this run on up to {cores} local processes at once (torch.distributed: each "
                        "holds a shard of every batch; the same steps and ε as one process)")
    return {"train_size": size, "precision": prec, "keep_weights": keep, **({"max_length": length} if text else {})}


def local_devices() -> int:
    """How many processes a run may use here: the GPUs when more than one (without importing torch when the
    driver shows none), else the CPU cores."""
    import os
    import shutil

    if shutil.which("nvidia-smi") or os.environ.get("CUDA_VISIBLE_DEVICES"):
        import torch

        if torch.cuda.device_count() > 1:
            return torch.cuda.device_count()
    return os.cpu_count() or 1


def processes() -> int:
    """The form's "processes" (1 where the field is not shown)."""
    return int(st.session_state.get("f_processes", 1) or 1)


def _training_widgets(strategy: str) -> dict:
    """Shared training fields, and the learning rates the strategy declares."""
    lrs = strategies.get(strategy).lr_fields
    c = st.columns([1, 1] + [1.4] * len(lrs) + [1, 1, 1, 1])  # a rate's toggle, its label and help need the room
    out = {
        "epochs": int(c[0].number_input("epochs", None, None, _default("f_epochs", D["epochs"].default), key="f_epochs")),
        "batch_size": int(c[1].number_input("batch size B", None, None, _default("f_batch", D["batch_size"].default),
                                            key="f_batch")),
        **{f: _lr_widget(c[2 + i], f) for i, f in enumerate(lrs)},
    }
    c = c[2 + len(lrs):]
    out.update({
        "clip_norm": c[0].number_input("clip norm C", None, None, _default("f_clip", D["clip_norm"].default),
                                       format="%.4g", key="f_clip"),
        "optimizer": c[1].selectbox("optimizer", OPTIMIZERS, index=_index(OPTIMIZERS, "f_optimizer"), key="f_optimizer"),
        "seed": int(c[2].number_input("seed", None, None, _default("f_seed", 0), key="f_seed")),
        "clipping": c[3].selectbox("clipping", CLIPPINGS, index=_index(CLIPPINGS, "f_clipping"), key="f_clipping",
                                   help="abadi: g·min(1, C/‖g‖); auto-s: g·C/(‖g‖ + 0.01) (automatic clipping)"),
    })
    return out


def render_run_form(cache_dir=None) -> tuple[RunConfig | None, dict | None]:
    """Draw the form; return the validated config and its preview, or show an error box (and None: a field
    the config refuses blocks the launch, it never falls back to a default). The fields live in the URL query.

    ``cache_dir``: the store whose proxy searches answer "auto" learning rates.
    """
    st.session_state[_URL] = {}
    render_task_picker()
    privacy = _privacy_widgets()
    strategy = _strategy_widgets()
    model = _model_widgets()
    fields = {**privacy, **strategy, **model, **_size_widgets(model["dataset"]), **_training_widgets(strategy["strategy"])}
    _write_url()
    try:
        cfg = RunConfig(**fields)
        prev = _preview(cfg.to_json())
    except DpvizError as e:
        from .layout import input_error  # the one error box: names the field once

        input_error(e)
        return None, None
    render_preview(cfg, prev)
    render_resolution(cfg, cache_dir)
    return cfg, prev


def preview_total(cfg: RunConfig) -> int:
    """Total DP steps the config implies (cached like the form's preview)."""
    return _preview(cfg.to_json())["total_steps"]


def _calibrated_by(cfg: RunConfig) -> str:
    if cfg.accountant == "gdp":
        return "PRV's upper bound: GDP is an approximation, not a bound"
    return cfg.accountant.upper()


def render_preview(cfg: RunConfig, prev: dict) -> None:
    """What the budget implies, before launch."""
    phases = strategies.get(cfg.strategy).describe(
        cfg, " → ".join(f"{p['name']} {p['steps']} steps" for p in prev["phases"]))
    if cfg.private:
        st.info(f"Budget (ε = {cfg.epsilon:g}, δ = {cfg.delta:.0e}) with q = B/n = {prev['sample_rate']:.3f} "
                f"over {prev['total_steps']} steps ⇒ noise multiplier **σ = {prev['noise_multiplier']:.3f}** "
                f"({_calibrated_by(cfg)}). Phases: {phases}.", icon=":material/lock:")
    else:
        st.info(f"No privacy: plain SGD baseline, {prev['total_steps']} steps. Phases: {phases}.", icon=":material/lock_open:")


def render_resolution(cfg: RunConfig, cache_dir=None) -> None:
    """What the "auto" learning rates become for this config, and where they come from, before launch."""
    if not cfg.auto:
        return
    res = autotune.resolve(cfg, cache_dir=cache_dir, search_ok=False)[1].as_dict()  # shipped: < 50 ms
    if res["source"] == "pending":
        st.caption(f"Learning rates on auto: {res['note']}.")
        return
    vals = ", ".join(f"{LR_LABELS.get(f, f)} = {v:.4g}" for f, v in res["resolved"].items()
                     if f in strategies.get(cfg.strategy).lr_fields)
    st.caption(f"Learning rates on auto: {vals or 'none used'} — {res['note']}; no privacy spent on tuning.")
    if res.get("warning"):
        st.warning(f"Learning rates on auto: {res['warning']}.", icon=":material/warning:")
