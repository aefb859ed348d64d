"""HTML reports: one self-contained file per result, sweep, compare, capacity search or plan; no
network needed. This module is the entry the commands import; the parts live beside it:

  html_page      the page kit: `page` (title, subtitle, banner, sections), `chart`, `table`,
                 `keep_drawn`, `write_html`, and the inline CSS and JS that draw the page
  html_safe      what a page may hold: text escaped once, long series downsampled
  html_trust     the banner above the title of a result, comparison or sweep not to be trusted
                 as it stands (NOT TRUSTWORTHY, INCOMPLETE), in the terminal's words
  html_result    the result's page (`render_result_html`) and its core sections
  html_workload  what was offered, sessions, agents, the prefix cache
  html_server    the server's own view (/metrics) and failures
  html_compare, html_sweep, html_capacity   the other commands' pages
"""

from __future__ import annotations

from harness.analysis.html_page import chart, keep_drawn, page, table, write_html
from harness.analysis.html_result import (
    percentile_curve,
    render_result_html,
    result_sections,
    timeline,
)
from harness.analysis.html_server import failure_sections, server_view_sections
from harness.analysis.html_workload import (
    agent_sections,
    prefix_cache_sections,
    session_sections,
    workload_sections,
)

__all__ = [
    "agent_sections",
    "chart",
    "failure_sections",
    "keep_drawn",
    "page",
    "percentile_curve",
    "prefix_cache_sections",
    "render_result_html",
    "result_sections",
    "server_view_sections",
    "session_sections",
    "table",
    "timeline",
    "workload_sections",
    "write_html",
]
