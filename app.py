"""dpviz dashboard: `streamlit run app.py` (or `bash run.sh app`).

This script only registers the pages (hidden navigation); every page renders
the shared sidebar with its links itself (`dashboard.layout.page_setup`), so a
deep link that a fresh server serves in Streamlit's legacy mode looks the same.
"""

import streamlit as st

from dashboard.layout import PAGES

pages = [st.Page(script, title=title, icon=icon, default=i == 0) for i, (script, title, icon) in enumerate(PAGES)]
st.navigation(pages, position="hidden").run()
