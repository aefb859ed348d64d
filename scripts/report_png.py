"""Make docs/img/report.png, the README's picture of the HTML report, from a real report.

    python -m harness run scenarios/burst.toml --out /tmp/shot/burst.json --html
    python scripts/report_png.py /tmp/shot/burst.html docs/img/report.png

Headless Chromium renders the report, the rendered page is cut to an excerpt for one screen
(the summary and SLO tables side by side, then the TTFT percentile curve, offered vs achieved
load, requests in flight and output tokens/s, two per row; the other tables and charts are
left out) and screenshot at 1260x1180.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path

LEAVE_OUT_TABLES = ("Latency (ms)", "Client vs server", "Where the server's E2E goes")
LEAVE_OUT_CHARTS = ("E2E: latency", "ITL (per token)", "TPOT: latency", "Server: KV cache usage")
STYLE = (
    "<style>.chart{display:inline-block;vertical-align:top;margin:0 14px 10px 0}"
    "h2{margin:14px 0 6px}</style>"
)
CHROMIUM = ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"]


def excerpt(dom: str) -> str:
    for title in LEAVE_OUT_TABLES:
        i = dom.index(f"<h2>{title}")
        dom = dom[:i] + dom[dom.index("</table>", i) + len("</table>") :]
    for title in LEAVE_OUT_CHARTS:
        i = dom.index(f"<h2>{title}")
        start = dom.rindex('<div class="chart"', 0, i)
        dom = dom[:start] + dom[dom.index("</svg></div>", i) + len("</svg></div>") :]
    dom = re.sub(
        r"(<h2>(?:Summary \(measured phases\)|SLO verdicts)</h2>)(<table>.*?</table>)",
        r'<div style="display:inline-block;vertical-align:top;margin-right:28px">\1\2</div>',
        dom,
        flags=re.S,
    )
    return dom.replace("</head>", STYLE + "</head>", 1)


def main() -> None:
    report, out = Path(sys.argv[1]).resolve(), Path(sys.argv[2]).resolve()
    dom = subprocess.run(
        [*CHROMIUM, "--virtual-time-budget=5000", "--dump-dom", report.as_uri()],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    with tempfile.TemporaryDirectory() as td:
        page = Path(td) / "excerpt.html"
        page.write_text(excerpt(dom))
        subprocess.run(
            [*CHROMIUM, "--window-size=1260,1180", f"--screenshot={out}", page.as_uri()],
            capture_output=True,
            check=True,
        )
    print(out)


if __name__ == "__main__":
    main()
