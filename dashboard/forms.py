"""The run form: every RunConfig field as a widget, a live preview, and launch."""

from __future__ import annotations

import math

import streamlit as st

from dpviz import engine
from dpviz.config import (ACCOUNTANTS, BACKBONES, CLIPPINGS, DATASETS, OPTIMIZERS, SELECTIONS, STRATEGIES,
                          RunConfig)
from dpviz.errors import DpvizError

NO_PRIVACY = "no privacy"
EPS_CHOICES = [0.1, 0.2, 0.3, 0.5, 0.7, 1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 8.0, 10.0, 15.0, 20.0, 30.0, 50.0,
               NO_PRIVACY]
D = RunConfig.__dataclass_fields__


@st.cache_data(show_spinner="Calibrating the noise for this budget…", max_entries=256)
def _preview(cfg_json: str) -> dict:
    return engine.preview(RunConfig.from_dict(__import__("json").loads(cfg_json)))


def _privacy_widgets() -> dict:
    c1, c2, c3 = st.columns([3, 2, 2])
    eps = c1.select_slider("ε (privacy budget, log scale)", EPS_CHOICES, value=1.0, key="f_epsilon",
                           help="Total ε for the whole run, every phase included. 'no privacy' trains without DP.")
    delta = c2.number_input("δ", value=1e-5, min_value=0.0, format="%.1e", step=1e-6, key="f_delta")
    acct = c3.selectbox("accountant", ACCOUNTANTS, key="f_accountant")
    return {"epsilon": math.inf if eps == NO_PRIVACY else eps, "delta": delta, "accountant": acct}


def _strategy_widgets() -> dict:
    c1, c2, c3, c4 = st.columns([2, 3, 2, 2])
    strategy = c1.selectbox("strategy", STRATEGIES, index=STRATEGIES.index("lp-fft"), key="f_strategy")
    p = c2.slider("LP fraction p (share of steps and budget on LP)", 0.0, 1.0, 0.3, 0.05, key="f_lp_fraction",
                  disabled=strategy != "lp-fft")
    k = c3.number_input("blocks to tune (partial)", 1, 64, 1, key="f_tune_blocks", disabled=strategy != "partial")
    sw = c4.number_input("public steps before DP (continual; -1: automatic)", -1, 100000, -1, key="f_switch",
                         disabled=strategy != "continual")
    c5, c6 = st.columns(2)
    sel = c5.selectbox("rows to train (sparse)", SELECTIONS, key="f_selection", disabled=strategy != "sparse",
                       help="sparta: private selection epoch; magnitude/random: fixed rows; bias / norm: "
                            "head + biases / norm layers")
    s = c6.slider("sparsity s (share of each layer's rows, sparse)", 0.01, 1.0, 0.2, 0.01, key="f_sparsity",
                  disabled=strategy != "sparse")
    return {"strategy": strategy, "lp_fraction": p, "tune_blocks": int(k), "switch_step": int(sw),
            "selection": sel, "sparsity": s}


def _model_widgets() -> dict:
    c1, c2, c3, c4 = st.columns(4)
    dataset = c1.selectbox("dataset", DATASETS, key="f_dataset")
    data_dir = c2.text_input("data folder (real datasets)", key="f_data_dir",
                             disabled=dataset in ("digits", "glyphs", "synthetic"))
    backbone = c3.selectbox("backbone", BACKBONES, key="f_backbone")
    weights = c4.text_input("weights file (torchvision/timm)", key="f_weights", disabled=backbone in ("cnn", "vit"))
    return {"dataset": dataset, "data_dir": data_dir or None, "backbone": backbone, "weights": weights or None}


def _training_widgets() -> dict:
    c = st.columns(8)
    return {
        "epochs": int(c[0].number_input("epochs", 1, 1000, D["epochs"].default, key="f_epochs")),
        "batch_size": int(c[1].number_input("batch size B", 1, 100000, D["batch_size"].default, key="f_batch")),
        "lr_lp": c[2].number_input("LR (LP)", 1e-5, 100.0, D["lr_lp"].default, format="%.4g", key="f_lr_lp"),
        "lr_ft": c[3].number_input("LR (FT)", 1e-5, 100.0, D["lr_ft"].default, format="%.4g", key="f_lr_ft"),
        "clip_norm": c[4].number_input("clip norm C", 1e-4, 1000.0, D["clip_norm"].default, format="%.4g",
                                       key="f_clip"),
        "optimizer": c[5].selectbox("optimizer", OPTIMIZERS, key="f_optimizer"),
        "seed": int(c[6].number_input("seed", 0, 10**6, 0, key="f_seed")),
        "clipping": c[7].selectbox("clipping", CLIPPINGS, key="f_clipping",
                                   help="abadi: g·min(1, C/‖g‖); auto-s: g·C/(‖g‖ + 0.01) (automatic clipping)"),
    }


def render_run_form() -> tuple[RunConfig | None, dict | None]:
    """Draw the form; return the validated config and its preview, or show an error box."""
    fields = {**_privacy_widgets(), **_strategy_widgets(), **_model_widgets(), **_training_widgets()}
    try:
        cfg = RunConfig(**fields)
        prev = _preview(cfg.to_json())
    except DpvizError as e:
        st.error(f"**{getattr(e, 'field', 'input')}** — {e}", icon=":material/error:")
        return None, None
    render_preview(cfg, prev)
    return cfg, prev


def preview_total(cfg: RunConfig) -> int:
    """Total DP steps the config implies (cached like the form's preview)."""
    return _preview(cfg.to_json())["total_steps"]


def render_preview(cfg: RunConfig, prev: dict) -> None:
    """What the budget implies, before launch."""
    phases = " → ".join(f"{p['name']} {p['steps']} steps" for p in prev["phases"])
    if cfg.strategy == "sparse":
        phases += f" (s = {cfg.sparsity:g} of each layer's rows, {cfg.selection})"
    if cfg.strategy == "continual":
        public = "automatic switch" if cfg.switch_step < 0 else f"{cfg.switch_step} steps"
        phases = f"public ({cfg.public_dataset}, no DP, not counted in ε) {public} → {phases}"
    if cfg.private:
        st.info(f"Budget (ε = {cfg.epsilon:g}, δ = {cfg.delta:.0e}) with q = B/n = {prev['sample_rate']:.3f} "
                f"over {prev['total_steps']} steps ⇒ noise multiplier **σ = {prev['noise_multiplier']:.3f}** "
                f"({cfg.accountant.upper()}). Phases: {phases}.", icon=":material/lock:")
    else:
        st.info(f"No privacy: plain SGD baseline, {prev['total_steps']} steps. Phases: {phases}.", icon=":material/lock_open:")
