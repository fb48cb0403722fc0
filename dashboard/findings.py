"""A study's results on a page (`dpviz.studies`): its verdict and reading, its figure with exports, its table of
numbers per cell, and where every number comes from. The Reproduction and Studies pages draw results
through `render_results`, from the one reader (`dpviz.studies.load`)."""

from __future__ import annotations

import json

import pandas as pd
import streamlit as st

from dpviz import studies

from . import layout


def shown(v) -> str:
    """An axis value as typed back into a field: 1.0 as "1", 0.2 as "0.2"."""
    return f"{v:g}" if isinstance(v, float) else str(v)


def name_of(res) -> str:
    """The results' file name (study, task, size, fields set)."""
    return studies.results_name(res.study, res.task, res.scale, res.sets)


def heading(res) -> str:
    """The results in a few words: the study's title, the size and the fields set on every run."""
    study = studies.get(res.study)
    extra = [f"at {res.scale}"] if res.scale else []
    extra += [f"{k} = {v}" for k, v in res.sets.items()]
    return study.title + (f" ({', '.join(extra)})" if extra else "")


def sources(res) -> str:
    """Where the numbers come from, in one caption: the store's (with its provenance) and the shipped ones."""
    cells = [e.get("source") for e in res.cells.values()]
    said = []
    if "store" in cells:
        said.append(f"*this store* ({cells.count('store')} cells): {studies.said(res.provenance)}")
    if "shipped" in cells:
        said.append(f"*shipped with dpviz* ({cells.count('shipped')} cells): {studies.said(res.shipped_provenance)}")
    return "; ".join(said) + "."


def render_results(res, key: str, figure: bool = True) -> None:
    """One study's results: the reading, the figure (with exports), the table and the provenance."""
    from dashboard import runs

    study = studies.get(res.study)
    verdict, sentence = studies.reading(study, res)
    private = [m.label for m in study.measures if m.private and any(
        res.stats(e["cell"], m.name) for e in res.cells.values())]
    layout.reading(f"*{verdict}*. {sentence}")
    if private:
        st.caption(f":material/lock_open: {', '.join(private)}: statistics of private data, NOT covered by the DP "
                   "guarantee.")
    cols, rows = res.table(study)
    fig = studies.figure(study, res) if figure else None
    if fig is not None:
        st.plotly_chart(fig, key=f"{key}-fig", width="stretch")
        caption = f"{study.title} on {res.task}: {sentence} Numbers from {sources(res)}"
        runs.render_export(fig, pd.DataFrame(rows, columns=cols), [], f"dpviz_study_{name_of(res)}", f"{key}-exp",
                           private=bool(private), caption=caption)
    if figure:
        def make(fmt: str) -> bytes:
            page = studies.study_report(res)[1]
            return page.encode() if fmt == "html" else studies.report_pdf(page)

        runs.export_row(make, f"dpviz_report_{name_of(res)}", f"{key}-report", formats=("html", "pdf"),
                        label="Report {fmt}")
    with st.expander(f"the numbers ({name_of(res)}: {len(rows)} cells)"):
        st.dataframe(pd.DataFrame(rows, columns=cols), hide_index=True, key=f"{key}-table")
        st.caption(sources(res))
        st.download_button("Results (JSON, per seed)", data=json.dumps(res.to_json() | {
            "cells": list(res.cells.values()), "private_statistics": [m.name for m in study.measures if m.private]},
            indent=1, ensure_ascii=False, default=str),
            file_name=f"{name_of(res)}.json", mime="application/json", key=f"{key}-json", on_click="ignore")
