"""The frame every page shares: page config, sidebar, the notebook-like sections."""

from __future__ import annotations

import streamlit as st

from . import state



def page_setup(title: str, intro: str) -> None:
    """Page config, shared sidebar and the page's heading with its explanation.

    Every page calls this first, so a deep link that Streamlit serves before
    `app.py` has run still gets the shared sidebar.
    """
    st.set_page_config(page_title=f"dpviz · {title}", page_icon=":material/lock:", layout="wide")
    render_sidebar()
    st.title(title)
    st.markdown(intro)


def render_sidebar() -> None:
    jm = state.job_manager()
    with st.sidebar:
        st.markdown("### dpviz\nDifferentially private fine-tuning lab")
        active = jm.active()
        st.caption(f"Store: `{jm.store.root}`  \nBackground runs: {len(active)} active")


def reading(text: str) -> None:
    """The one-line reading of a figure, under it."""
    st.markdown(f"**Reading.** {text}")
