"""The run form: every RunConfig field as a widget, a live preview, and launch."""

from __future__ import annotations

import math

import streamlit as st

from dpviz import autotune, calibration, strategies
from dpviz import catalog
from dpviz.config import ACCOUNTANTS, AUTO, CLIPPINGS, OPTIMIZERS, RunConfig
from dpviz.errors import DpvizError

NO_PRIVACY = "no privacy"
EPS_CHOICES = [0.1, 0.2, 0.3, 0.5, 0.7, 1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 8.0, 10.0, 15.0, 20.0, 30.0, 50.0,
               NO_PRIVACY]
D = RunConfig.__dataclass_fields__


@st.cache_data(show_spinner="Calibrating the noise for this budget…", max_entries=256)
def _preview(cfg_json: str) -> dict:
    return calibration.preview(RunConfig.from_dict(__import__("json").loads(cfg_json)))


def _privacy_widgets() -> dict:
    c1, c2, c3 = st.columns([3, 2, 2])
    eps = c1.select_slider("ε (privacy budget, log scale)", EPS_CHOICES, value=1.0, key="f_epsilon",
                           help="Total ε for the whole run, every phase included. 'no privacy' trains without DP.")
    delta = c2.number_input("δ", value=1e-5, min_value=0.0, format="%.1e", step=1e-6, key="f_delta")
    acct = c3.selectbox("accountant", ACCOUNTANTS, key="f_accountant",
                        help="PRV (Opacus's upper bound) and RDP bound ε. GDP is a central-limit approximation, "
                             "not a bound: a GDP run is calibrated by PRV's bound and shows GDP's ε beside it.")
    return {"epsilon": math.inf if eps == NO_PRIVACY else eps, "delta": delta, "accountant": acct}


def _param_widget(box, p: strategies.Param):
    """One strategy field as the widget its `Param` declares (key ``f_<field>``)."""
    default, key = D[p.name].default, f"f_{p.name}"
    if p.kind == "choice":
        return box.selectbox(p.label, p.choices, index=p.choices.index(default), key=key, help=p.help or None)
    if p.kind == "int":
        return int(box.number_input(p.label, int(p.low), int(p.high), int(default), int(p.step or 1), key=key,
                                    help=p.help or None))
    return box.slider(p.label, float(p.low), float(p.high), float(default), float(p.step), key=key,
                      help=p.help or None)


def _strategy_widgets() -> dict:
    """The strategy and exactly the fields it declares (the others keep their defaults)."""
    names = list(strategies.names())
    c1, *rest = st.columns([2, 5])
    strategy = c1.selectbox("strategy", names, index=names.index("lp-fft"), key="f_strategy",
                            format_func=lambda n: f"{n} — {strategies.get(n).label}")
    params = strategies.get(strategy).params
    boxes = rest[0].columns(len(params)) if params else []
    return {"strategy": strategy, **{p.name: _param_widget(b, p) for b, p in zip(boxes, params)}}


def _model_widgets() -> dict:
    c1, c2, c3, c4 = st.columns(4)
    dataset = c1.selectbox("dataset", tuple(catalog.DATASETS), key="f_dataset",
                           format_func=lambda n: f"{n} — {catalog.DATASETS[n].label}")
    data = catalog.DATASETS[dataset]
    data_dir = c2.text_input("data folder (real datasets)", key="f_data_dir", disabled=not data.needs_data_dir,
                             help=f"holding {data.files}" if data.files else None)
    backbone = c3.selectbox("backbone", tuple(catalog.BACKBONES), key="f_backbone",
                            format_func=lambda n: f"{n} — {catalog.BACKBONES[n].label}")
    weights = c4.text_input("weights file (torchvision/timm)", key="f_weights",
                            disabled=not catalog.BACKBONES[backbone].needs_weights)
    return {"dataset": dataset, "data_dir": data_dir or None, "backbone": backbone, "weights": weights or None}


LR_LABELS = {"lr_lp": "LR (LP)", "lr_ft": "LR (FT)"}


def _lr_widget(box, field: str):
    """A learning rate: "auto" (chosen on public data, the default) or a number the user types."""
    auto = box.toggle(f"{LR_LABELS.get(field, field)} auto", value=True, key=f"f_{field}_auto",
                      help="auto: chosen for this ε, B, epochs and strategy on public data only (no privacy spent)")
    value = box.number_input(LR_LABELS.get(field, field), 1e-5, 100.0, autotune.DEFAULTS[field], format="%.4g",
                             key=f"f_{field}", disabled=auto, label_visibility="collapsed")
    return AUTO if auto else value


def _training_widgets(strategy: str) -> dict:
    """Shared training fields, and the learning rates the strategy declares."""
    lrs = strategies.get(strategy).lr_fields
    c = st.columns(6 + len(lrs))
    out = {
        "epochs": int(c[0].number_input("epochs", 1, 1000, D["epochs"].default, key="f_epochs")),
        "batch_size": int(c[1].number_input("batch size B", 1, 100000, D["batch_size"].default, key="f_batch")),
        **{f: _lr_widget(c[2 + i], f) for i, f in enumerate(lrs)},
    }
    c = c[2 + len(lrs):]
    out.update({
        "clip_norm": c[0].number_input("clip norm C", 1e-4, 1000.0, D["clip_norm"].default, format="%.4g",
                                       key="f_clip"),
        "optimizer": c[1].selectbox("optimizer", OPTIMIZERS, key="f_optimizer"),
        "seed": int(c[2].number_input("seed", 0, 10**6, 0, key="f_seed")),
        "clipping": c[3].selectbox("clipping", CLIPPINGS, key="f_clipping",
                                   help="abadi: g·min(1, C/‖g‖); auto-s: g·C/(‖g‖ + 0.01) (automatic clipping)"),
    })
    return out


def render_run_form(cache_dir=None) -> tuple[RunConfig | None, dict | None]:
    """Draw the form; return the validated config and its preview, or show an error box.

    ``cache_dir``: the store whose proxy searches answer "auto" learning rates.
    """
    privacy = _privacy_widgets()
    strategy = _strategy_widgets()
    fields = {**privacy, **strategy, **_model_widgets(), **_training_widgets(strategy["strategy"])}
    try:
        cfg = RunConfig(**fields)
        prev = _preview(cfg.to_json())
    except DpvizError as e:
        st.error(f"**{getattr(e, 'field', 'input')}** — {e}", icon=":material/error:")
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
