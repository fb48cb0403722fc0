"""The run form: every RunConfig field as a widget, a live preview, and launch."""

from __future__ import annotations

import math

import streamlit as st

from dpviz import strategies
from dpviz import autotune
from dpviz import runner
from dpviz import catalog, tasks
from dpviz.config import AUTO, CLIPPINGS, OPTIMIZERS, PRECISIONS, RunConfig
from dpviz.privacy import accountants
from dpviz.errors import DpvizError
from dpviz.fields import KEEP_WEIGHTS
from dpviz.privacy import BANDED, MAX_BANDS, MECHANISMS, PARTS, RANDOMNESS, randomness

NO_PRIVACY = "no privacy"
EPS_CHOICES = [0.1, 0.2, 0.3, 0.5, 0.7, 1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 8.0, 10.0, 15.0, 20.0, 30.0, 50.0,
               NO_PRIVACY]
D = RunConfig.__dataclass_fields__
_URL = "_form_url_keys"  # widget key → its shipped default, for the keys this run drew (written to the URL)
HELD = "_form_held"  # widget key → the value the form shows: the one truth that drawing, the info box and Launch read


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


def _held() -> dict:
    return st.session_state.setdefault(HELD, {})


def _sync_held() -> dict:
    """The held values, each updated from its widget's state where the browser sent one (a widget's key is in
    the session state from the click that changed it, before any of the page's code runs)."""
    held = _held()
    for key in held:
        if key in st.session_state:
            held[key] = st.session_state[key]
    return held


def _default(key: str, fallback, options=None):
    """The value widget ``key`` shows, seeded into the session state when the widget has none.

    Widgets with a key keep their identity across reruns, so a changed ``value=`` never reaches the browser:
    a value the page sets (a task button, a reload's URL) must go through the session state, and a widget is
    given its held value only when it has no state of its own. A widget not drawn (a strategy's own field while
    another strategy is chosen) keeps its value here, so coming back to it never resets it. A reload reads
    the URL once per session: `_write_url` puts every field that differs from its default there."""
    st.session_state.setdefault(_URL, {})[key] = fallback
    held = _held()
    if key in st.session_state:
        held[key] = st.session_state[key]
    elif key not in held:
        text = st.query_params.get(_qkey(key))
        parsed = None if text is None else _parse(text, fallback, options)
        held[key] = fallback if parsed is None else parsed
    if options is not None and held[key] not in list(options):  # e.g. a plugin's choice that is gone
        held[key] = fallback
    if key not in st.session_state or st.session_state[key] != held[key]:
        st.session_state[key] = held[key]
    return held[key]


def _write_url() -> None:
    """The drawn fields that differ from their shipped defaults, in the URL query (the others out of it)."""
    held = _held()
    for key, fallback in st.session_state.get(_URL, {}).items():
        if key not in held:
            continue
        value, q = held[key], _qkey(key)
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
    return runner.preview(RunConfig.from_dict(__import__("json").loads(cfg_json)))


RANDOMNESS_HELP = randomness.__doc__.replace("``", "`")  # the module's account of the two modes, as markdown
PARTS_HELP = ("how records are split into BandMF's b parts. independent: each record's part drawn on its own, so "
              "ε holds for adding or removing a record (as jax_privacy's PartitionType.INDEPENDENT); equal: an "
              "equal split, as BandMF runs stored before this choice were trained: its ε holds for zero-out "
              "neighbours only (replacing a record by one that contributes nothing)")
SEEDED_WEIGHTS = ("Randomness seeded with weights kept: the sampling and the noise of this run are regenerated by "
                  "anyone who holds its configuration, so keeping or exporting its weights gives them its noise; "
                  "choose secure for weights that leave your hands.")


def _privacy_widgets() -> None:
    c1, c2, c3 = st.columns([3, 2, 2])
    c1.select_slider("ε (privacy budget, log scale)", EPS_CHOICES, value=_default("f_epsilon", 1.0, EPS_CHOICES),
                     key="f_epsilon",
                     help="Total ε for the whole run, every phase included. 'no privacy' trains without DP.")
    c2.number_input("δ", value=_default("f_delta", 1e-5), format="%.1e", step=1e-6, key="f_delta")
    c3.selectbox("accountant", accountants.names(), index=_index(accountants.names(), "f_accountant"), key="f_accountant",
                 help="; ".join(f"{a.name}: {a.label}" for a in map(accountants.get, accountants.names())) +
                 ". An approximate accountant's run is calibrated and reported by the bound it names, with its own "
                 "ε beside it.")


def _param_widget(box, p: strategies.Param) -> None:
    """One strategy field as the widget its `Param` declares (key ``f_<field>``). Number inputs take any
    value: one the config refuses is the form's error box, never a silently kept old value."""
    default, key = D[p.name].default, f"f_{p.name}"
    if p.kind == "choice":
        box.selectbox(p.label, p.choices, index=_index(p.choices, key, default), key=key, help=p.help or None)
    elif p.kind == "int":
        box.number_input(p.label, None, None, _default(key, int(default)), int(p.step or 1), key=key,
                         help=p.help or None)
    else:
        box.slider(p.label, float(p.low), float(p.high), _default(key, float(default)), float(p.step), key=key,
                   help=p.help or None)


def _strategy_widgets() -> None:
    """The strategy and exactly the fields it declares (the others keep their held values)."""
    names = list(strategies.names())
    c1, c2 = st.columns([3, 2])  # the strategy's name and label stay whole at 1024 px
    strategy = c1.selectbox("strategy", names, index=_index(names, "f_strategy", "lp-fft"), key="f_strategy",
                            format_func=lambda n: f"{n} — {strategies.get(n).label}")
    params = strategies.get(strategy).params
    boxes = [c2] if len(params) == 1 else st.columns(len(params)) if params else []  # several: a row of their own
    for box, p in zip(boxes, params):
        _param_widget(box, p)


def _model_widgets() -> None:
    """Dataset and backbone; a field their choice disables is shown greyed with its text (kept for later, never
    read by the launch)."""
    # each choice on a row of its own (a label of up to 85 characters is whole at 1024 px), the files' fields under
    c1, c3, (c2, c4) = st.container(), st.container(), st.columns(2)
    dataset = c1.selectbox("dataset", tuple(catalog.DATASETS), index=_index(catalog.DATASETS, "f_dataset"),
                           key="f_dataset", format_func=lambda n: f"{n} — {catalog.DATASETS[n].label}")
    data = catalog.DATASETS[dataset]
    c2.text_input("data folder (real datasets)", _default("f_data_dir", ""), key="f_data_dir",
                  disabled=not data.takes_data_dir, help=f"holding {data.files}" if data.files else None)
    backbone = c3.selectbox("backbone", tuple(catalog.BACKBONES), index=_index(catalog.BACKBONES, "f_backbone"),
                            key="f_backbone", format_func=lambda n: f"{n} — {catalog.BACKBONES[n].label}")
    c4.text_input("weights file (torchvision/timm)", _default("f_weights", ""), key="f_weights",
                  disabled=not catalog.BACKBONES[backbone].needs_weights)


LR_LABELS = {"lr_lp": "LR (LP)", "lr_ft": "LR (FT)"}
LR_PHASES = {"lr_lp": ("LP", "linear-probing"), "lr_ft": ("FT", "fine-tuning")}  # toggles sit in narrow columns


def _lr_widget(box, field: str) -> None:
    """A learning rate: "auto" (chosen on public data, the default) or a number the user types."""
    short, phase = LR_PHASES.get(field, (field, field))
    auto = box.toggle(f"{short} auto", value=_default(f"f_{field}_auto", True), key=f"f_{field}_auto",
                      help=f"Learning rate of the {phase} phase. On (auto): chosen for this ε, B, epochs and "
                           "strategy on public data only (no privacy spent); off: the number typed below.")
    box.number_input(LR_LABELS.get(field, field), None, None, _default(f"f_{field}", autotune.DEFAULTS[field]),
                     format="%.4g", key=f"f_{field}", disabled=auto, label_visibility="collapsed")


FORM_KEYS = {"batch_size": "f_batch", "clip_norm": "f_clip"}  # the others: f_<field>
TASK_FIELDS = sorted({f for t in tasks.TASKS.values() for f in t.fields} | {"epochs"})
"""The fields a task button sets: every field some task sets (the default's value where this task sets none),
so that switching tasks leaves nothing of the previous one behind; the rest of the form is the user's."""


def _key(field: str) -> str:
    return FORM_KEYS.get(field, f"f_{field}")


def _load_task(name: str) -> None:
    """Task button callback: every field a task implies becomes this task's value (or the default), through the
    session state, so the browser shows it (`_default`). The strategy, budget, rates and the rest are kept;
    the epochs rise to the fewest the chosen strategy needs (`tasks.with_task`)."""
    held = _sync_held()
    strategy = held.get("f_strategy", "lp-fft")
    fields = {**{f: D[f].default for f in TASK_FIELDS}, **tasks.task_fields(name)}
    fields["epochs"] = tasks.with_task(name, {"strategy": strategy}).get("epochs", fields["epochs"])
    for field, value in fields.items():
        held[_key(field)] = st.session_state[_key(field)] = value


def render_task_picker() -> None:
    """Buttons that fill the form with a task: the built-in default, or a real pretrained model on real data."""
    cols = st.columns(len(tasks.TASKS) + 1)
    cols[0].markdown("**Start from a task:**")
    for col, (name, task) in zip(cols[1:], tasks.TASKS.items()):
        col.button(name, key=f"task_{name}", on_click=_load_task, args=(name,), help=task.label,
                   use_container_width=True)


def _size_widgets(dataset: str) -> None:
    """The training subset (any dataset) and, for text, the tokens per example."""
    text = catalog.DATASETS[dataset].modality == "text"
    c1, c2, c3 = st.columns(3)
    c4, c5, c6 = st.columns(3)
    c1.number_input("training subset (0: all)", None, None, _default("f_train_size", 0), 100,
                    key="f_train_size", help="a fixed class-stratified subset of this many training "
                    "examples, the same for every seed (n for the accountant)")
    c2.number_input("tokens per text", None, None, _default("f_max_length", D["max_length"].default),
                    8, key="f_max_length", disabled=not text,
                    help="text: longer texts are cut, shorter ones padded (padding is masked)")
    c3.selectbox("precision", PRECISIONS, index=_index(PRECISIONS, "f_precision"), key="f_precision",
                 help="the forward and backward's arithmetic; per-sample norms, clipping, noise and "
                 "weights stay FP32, so ε is the same (tf32: CUDA only, fp32 on a CPU)")
    c4.selectbox("store keeps", KEEP_WEIGHTS, index=_index(KEEP_WEIGHTS, "f_keep_weights"),
                 key="f_keep_weights", help="checkpoints: the weights at every feature checkpoint (the "
                 "curvature analyses reload them) and the final model; final: the final model only; none: "
                 "metrics and features only (a real backbone's trained weights are 43–90 MB a copy)")
    c6.number_input("clip fraction inside ε: σ_b (0: off)", 0.0, None, _default("f_clip_fraction_noise", 0.0),
                    key="f_clip_fraction_noise", help="each step also releases the count of clipped examples plus "
                    "Gaussian noise of this std (in records): the clip fraction inside ε (clip_fraction_dp). Paid "
                    "for by more gradient noise, 1/√(σ⁻² − σ_b⁻²) for the calibrated σ; σ_b ≈ B/20 costs little "
                    "(Andrew et al. 2021)")
    if (cores := local_devices()) > 1:  # one run over several local processes (torchrun); not a config field
        c5.number_input("processes", 1, cores, _default("f_processes", 1), 1, key="f_processes",
                        help=f"train this run on up to {cores} local processes at once (torch.distributed: each "
                        "holds a shard of every batch; the same steps and ε as one process)")


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
    return int(_sync_held().get("f_processes", 1) or 1)


def _training_widgets(strategy: str) -> None:
    """Shared training fields, and the learning rates the strategy declares."""
    lrs = strategies.get(strategy).lr_fields
    c = st.columns([1, 1] + [1.4] * len(lrs))  # a rate's toggle, its label and help need the room
    c[0].number_input("epochs", None, None, _default("f_epochs", D["epochs"].default), key="f_epochs")
    c[1].number_input("batch size B", None, None, _default("f_batch", D["batch_size"].default), key="f_batch")
    for i, f in enumerate(lrs):
        _lr_widget(c[2 + i], f)
    c = st.columns(4)  # a row of its own: four labels and choices stay whole at 1024 px
    c[0].number_input("clip norm C", None, None, _default("f_clip", D["clip_norm"].default), format="%.4g",
                      key="f_clip")
    c[1].selectbox("optimizer", OPTIMIZERS, index=_index(OPTIMIZERS, "f_optimizer"), key="f_optimizer")
    c[2].number_input("seed", None, None, _default("f_seed", 0), key="f_seed")
    c[3].selectbox("clipping", CLIPPINGS, index=_index(CLIPPINGS, "f_clipping"), key="f_clipping",
                   help="abadi: g·min(1, C/‖g‖); auto-s: g·C/(‖g‖ + 0.01) (automatic clipping)")
    c = st.columns(4)
    c[0].selectbox("noise", MECHANISMS, index=_index(MECHANISMS, "f_mechanism"), key="f_mechanism",
                   help="dp-sgd: fresh Gaussian noise at every step; bandmf: correlated noise (DP-FTRL, banded "
                   "matrix factorization): each step's noise partly cancels the last few steps', so less of it "
                   "adds up in the weights, under the same (ε, δ); bandmf-momentum: the same, its correlation "
                   "fitted to SGD with momentum (optimizer sgd)")
    c[1].number_input("bands b", 1, MAX_BANDS, _default("f_bands", 1), 1, key="f_bands",
                      disabled=_held().get("f_mechanism", "dp-sgd") not in BANDED,
                      help="how many steps each noise draw is spread over (1: DP-SGD). Records are split into b "
                      "parts and step t samples only part t mod b, each record at rate b·q: it takes part at most "
                      "once every b steps, which is what makes the correlated noise private")
    c[2].selectbox("parts", PARTS, index=_index(PARTS, "f_parts"), key="f_parts", help=PARTS_HELP,
                   disabled=_held().get("f_mechanism", "dp-sgd") not in BANDED)
    c[3].selectbox("randomness", RANDOMNESS, index=_index(RANDOMNESS, "f_randomness"), key="f_randomness",
                   help=RANDOMNESS_HELP)  # beside the noise: where it, the sampling and the parts come from


def _get(held: dict, field: str):
    return held.get(_key(field), D[field].default)


def fields_of(held: dict) -> dict:
    """The `RunConfig` fields that the form's ``held`` values (widget key → value) show: the one mapping that
    the info box, the URL and Launch read. The chosen strategy's own fields and rates only; a field the
    dataset or backbone disables is left out (its text is kept in the form, not launched)."""
    strategy = held.get("f_strategy", "lp-fft")
    cls = strategies.get(strategy)
    data = catalog.DATASETS[held.get("f_dataset", D["dataset"].default)]
    backbone = catalog.BACKBONES[held.get("f_backbone", D["backbone"].default)]
    eps = held.get("f_epsilon", 1.0)
    lrs = {f: AUTO if held.get(f"f_{f}_auto", True) else held.get(f"f_{f}", autotune.DEFAULTS[f])
           for f in cls.lr_fields}
    own = {p.name: (int if p.kind == "int" else (lambda v: v) if p.kind == "choice" else float)(_get(held, p.name))
           for p in cls.params}
    return {"epsilon": math.inf if eps == NO_PRIVACY else eps, "delta": held.get("f_delta", 1e-5),
            "accountant": _get(held, "accountant"), "strategy": strategy, **own,
            "dataset": data.name, "data_dir": (held.get("f_data_dir", "").strip() or None) if data.takes_data_dir else None,
            "backbone": backbone.name,
            "weights": (held.get("f_weights", "").strip() or None) if backbone.needs_weights else None,
            "train_size": int(_get(held, "train_size")), "precision": _get(held, "precision"),
            "keep_weights": _get(held, "keep_weights"),
            **({"max_length": int(_get(held, "max_length"))} if data.modality == "text" else {}),
            "epochs": int(_get(held, "epochs")), "batch_size": int(_get(held, "batch_size")), **lrs,
            "clip_norm": _get(held, "clip_norm"), "optimizer": _get(held, "optimizer"),
            "seed": int(_get(held, "seed")), "clipping": _get(held, "clipping"),
            "mechanism": _get(held, "mechanism"), "randomness": _get(held, "randomness"),
            "clip_fraction_noise": float(_get(held, "clip_fraction_noise")) if eps != NO_PRIVACY else 0.0,
            **({"bands": int(_get(held, "bands")), "parts": _get(held, "parts")} if _get(held, "mechanism") in BANDED
               else {"bands": 1})}


def shown_config() -> RunConfig | None:
    """The configuration the form shows now, read from the widgets' state (a button callback's view: what the
    browser sent with the click, never the config an earlier run of the page drew); None when it is refused."""
    try:
        return RunConfig(**fields_of(_sync_held()))
    except DpvizError:
        return None


def render_run_form(cache_dir=None) -> tuple[RunConfig | None, dict | None]:
    """Draw the form; return the validated config and its preview, or show an error box (and None: a field
    the config refuses blocks the launch, it never falls back to a default). The fields live in the URL query.

    ``cache_dir``: the store whose proxy searches answer "auto" learning rates.
    """
    st.session_state[_URL] = {}
    render_task_picker()
    _privacy_widgets()
    _strategy_widgets()
    _model_widgets()
    _size_widgets(_held()["f_dataset"])
    _training_widgets(_held()["f_strategy"])
    _write_url()
    try:
        cfg = RunConfig(**fields_of(_held()))
        prev = _preview(cfg.to_json())
    except DpvizError as e:
        from .layout import input_error  # the one error box: names the field once

        input_error(e)
        return None, None
    render_preview(cfg, prev)
    if cfg.private and cfg.randomness == "seeded" and cfg.keep_weights != "none":
        st.caption(SEEDED_WEIGHTS)  # what keeping this run's weights gives away, said before the launch
    render_resolution(cfg, cache_dir)
    return cfg, prev


def preview_total(cfg: RunConfig) -> int:
    """Total DP steps the config implies (cached like the form's preview)."""
    return _preview(cfg.to_json())["total_steps"]


def _calibrated_by(cfg: RunConfig) -> str:
    acc = accountants.get(cfg.accountant)
    if acc.bound_by:
        return f"{acc.bound_by.upper()}'s upper bound: {acc.name.upper()} is an approximation, not a bound"
    return acc.name.upper()


def render_preview(cfg: RunConfig, prev: dict) -> None:
    """What the budget implies, before launch."""
    phases = strategies.get(cfg.strategy).describe(
        cfg, " → ".join(f"{p['name']} {p['steps']} steps" for p in prev["phases"]))
    if cfg.private:
        fitted = " fitted to SGD's momentum" if cfg.mechanism == "bandmf-momentum" else ""
        scheme = (f"BandMF{fitted} with b = {cfg.bands} bands: records in {cfg.bands} parts, each sampled at "
                  f"b·q = {cfg.bands * prev['sample_rate']:.3f} every {cfg.bands}th step (cyclic Poisson), accounted as "
                  f"⌈T/b⌉ DP-SGD steps. {_bands_trade(cfg, prev)}" if cfg.mechanism in BANDED else "")
        st.info(f"Budget (ε = {cfg.epsilon:g}, δ = {cfg.delta:.0e}) with q = B/n = {prev['sample_rate']:.3f} "
                f"over {prev['total_steps']} steps ⇒ noise multiplier **σ = {prev['noise_multiplier']:.3f}** "
                f"({_calibrated_by(cfg)}). {scheme}Phases: {phases}.", icon=":material/lock:")
    else:
        st.info(f"No privacy: plain SGD baseline, {prev['total_steps']} steps. Phases: {phases}.", icon=":material/lock_open:")


def _bands_trade(cfg: RunConfig, prev: dict) -> str:
    """One sentence: what the bands cost (σ against DP-SGD's at this budget) and what they buy (κ)."""
    plain = _preview(cfg.replace(mechanism="dp-sgd", bands=1).to_json())
    t = runner.bands_trade(cfg, prev, plain)
    net = "less" if t["sigma_weights"] < t["sigma_dp_sgd"] else "more"
    return (f"The bands cost σ = {t['sigma']:.2f} against DP-SGD's {t['sigma_dp_sgd']:.2f} at this budget, and buy "
            f"a weights' noise variance κ = {t['kappa']:.2f} of DP-SGD's at the same σ over the {t['phase']} phase's "
            f"{t['steps']} steps: σ·√κ = {t['sigma_weights']:.2f} against {t['sigma_dp_sgd']:.2f}, so {net} noise "
            f"reaches the weights than under DP-SGD here. ")


def render_pending_search(cfg: RunConfig, res: dict, cache_dir=None) -> None:
    """A search the launch would train first: how many trials, how long by this machine's measured trials, and
    one click to the nearest shipped grid rates instead."""
    from dpviz.jobs import duration
    from dpviz.store import Store

    n = autotune.trials_for(autotune.used_fields(cfg))
    per = autotune.proxy.trial_seconds(cfg, Store(cache_dir))
    when = (f"about {duration(n * per)} on this machine (its search trials on {cfg.backbone} took "
            f"{duration(per)} each)" if per else "its time is measured once the first trial runs")
    what = res["note"].removeprefix("searched at launch: ")
    st.warning(f"Learning rates on auto: this setting is off the shipped grid, so Launch first **searches them: "
               f"{what}**; {when}.", icon=":material/hourglass:")
    near, how = autotune.resolve(cfg, cache_dir=cache_dir, rates="grid")
    if how.source == "nearest":
        st.button(f"Use the nearest grid rates instead — {how.note.split(': ', 1)[-1]}", key="f_use_grid",
                  on_click=_use_rates, args=({f: getattr(near, f) for f in autotune.used_fields(cfg)},))


def _use_rates(values: dict) -> None:
    """Button callback: the rates become numbers in the form (their auto toggles off)."""
    for f, v in values.items():
        st.session_state[f"f_{f}_auto"] = False
        st.session_state[f"f_{f}"] = float(v)


def render_resolution(cfg: RunConfig, cache_dir=None) -> None:
    """What the "auto" learning rates become for this config, and where they come from, before launch."""
    if not cfg.auto:
        return
    res = autotune.resolve(cfg, cache_dir=cache_dir, search_ok=False)[1].as_dict()  # shipped: < 50 ms
    if res["source"] == "pending":
        render_pending_search(cfg, res, cache_dir)
        return
    vals = ", ".join(f"{LR_LABELS.get(f, f)} = {v:.4g}" for f, v in res["resolved"].items()
                     if f in strategies.get(cfg.strategy).lr_fields)
    st.caption(f"Learning rates on auto: {vals or 'none used'} — {res['note']}; no privacy spent on tuning.")
    if res.get("warning"):
        st.warning(f"Learning rates on auto: {res['warning']}.", icon=":material/warning:")
