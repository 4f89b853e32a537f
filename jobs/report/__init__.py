"""Reports from the results store: the HTML dashboard and the published Markdown docs.

gate_evaluation's report task calls render_dashboard; `roadgate docs` calls write_docs and check_docs.
"""
from jobs.report.docs import DocsDifference, check_docs, write_docs
from jobs.report.html import render_dashboard

__all__ = ["DocsDifference", "check_docs", "render_dashboard", "write_docs"]
