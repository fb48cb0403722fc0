"""dpviz dashboard: `streamlit run app.py` (or `bash run.sh app`).

This script only registers the pages (hidden navigation); every page renders
the shared sidebar with its links itself (`dashboard.layout.page_setup`), so a
deep link that a fresh server serves in Streamlit's legacy mode looks the same.
"""

import os

import streamlit as st

from dashboard.layout import PAGES

# The data-folder and weights fields read any path the server's user can read: fine for a local tool,
# not for a network. Off loopback (or with no address, which binds every interface) the app refuses to
# serve unless DPVIZ_ALLOW_REMOTE=1 says the exposure is intended.
address = st.get_option("server.address") or ""
if not (address == "localhost" or address == "::1" or address.startswith("127.")) and \
        os.environ.get("DPVIZ_ALLOW_REMOTE") != "1":
    st.error(f"dpviz: server.address {address or '(every interface)'} is not loopback: the dashboard reads "
             "local files by path, so it serves only on 127.0.0.1 (see .streamlit/config.toml); "
             "set DPVIZ_ALLOW_REMOTE=1 to serve beyond it anyway.")
    st.stop()

# No icon here: a page's icon becomes the tab's favicon, which Streamlit fetches from fonts.gstatic.com for a
# Material icon (the sidebar's links draw theirs from the bundled font); `layout.page_setup` sets an emoji.
pages = [st.Page(script, title=title, default=i == 0) for i, (script, title, _) in enumerate(PAGES)]
st.navigation(pages, position="hidden").run()
