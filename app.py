"""dpviz dashboard: `streamlit run app.py` (or `bash run.sh app`).

This script only registers the pages; each page renders the shared sidebar
itself (`dashboard.layout.page_setup`), so deep links work even on a fresh
server.
"""

import streamlit as st

pages = [
    st.Page("pages/runs.py", title="Runs", icon=":material/rocket_launch:", default=True),
    st.Page("pages/compare.py", title="Compare", icon=":material/stacked_line_chart:"),
    st.Page("pages/distortion.py", title="Feature distortion", icon=":material/scatter_plot:"),
    st.Page("pages/separability.py", title="Separability law", icon=":material/ssid_chart:"),
]
st.navigation(pages).run()
