"""The Streamlit layer of dpviz: `render_*` helpers that draw widgets and figures.

Only this package and the page scripts import Streamlit. The helpers call
library functions (`dpviz.training.prepare`, `dpviz.results`, `dpviz.figures`,
`dpviz.figures.export`) and render what they return; nothing here trains or
computes an analysis. Background work belongs to the one `JobManager` held
per server (`state.job_manager`), whose threads never call ``st.*``.
"""
