"""Two runs' server series side by side: running and waiting requests, and preemptions, per
time bucket, from the `server_metrics` each result scraped (vLLM's and the simulator's
`/metrics` carry the same names). For checking the simulator against vLLM (docs/calibration.md).

    python benchmarks/server_series_compare.py MEASURED.json SIMULATED.json [--bucket-s 2]

Prints one row per bucket: mean running and waiting in each run, and preemptions counted in it,
then the totals and the mean absolute differences.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

RUNNING, WAITING, PREEMPT = (
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:num_preemptions_total",
)


def buckets(result: dict[str, Any], bucket_s: float) -> dict[int, dict[str, float]]:
    """Per bucket index: mean running, mean waiting, preemptions (counter deltas summed)."""
    sm = result.get("server_metrics") or {}
    series = sm.get("series") or {}
    t = series.get("t_s") or []
    gauges = series.get("gauges") or {}
    deltas = series.get("deltas") or {}
    out: dict[int, dict[str, Any]] = {}
    for i, ts in enumerate(t):
        b = int(ts // bucket_s)
        row = out.setdefault(b, {"running": [], "waiting": [], "preemptions": 0.0})
        for key, name in (("running", RUNNING), ("waiting", WAITING)):
            col = gauges.get(name) or []
            if i < len(col) and col[i] is not None:
                row[key].append(col[i])
        d = deltas.get(PREEMPT) or []
        if i < len(d) and d[i] is not None:
            row["preemptions"] += d[i]
    return {
        b: {
            "running": sum(r["running"]) / len(r["running"]) if r["running"] else float("nan"),
            "waiting": sum(r["waiting"]) / len(r["waiting"]) if r["waiting"] else float("nan"),
            "preemptions": r["preemptions"],
        }
        for b, r in out.items()
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("measured")
    p.add_argument("simulated")
    p.add_argument("--bucket-s", type=float, default=2.0)
    a = p.parse_args()
    m = buckets(json.loads(Path(a.measured).read_text()), a.bucket_s)
    s = buckets(json.loads(Path(a.simulated).read_text()), a.bucket_s)
    print(
        f"{'t (s)':>8} {'running meas/sim':>18} {'waiting meas/sim':>18} {'preempted meas/sim':>20}"
    )
    diffs: dict[str, list[float]] = {"running": [], "waiting": []}
    for b in sorted(set(m) | set(s)):
        mm, ss = m.get(b, {}), s.get(b, {})

        def cell(k: str, mm: dict[str, float] = mm, ss: dict[str, float] = ss) -> str:
            return f"{mm.get(k, float('nan')):.1f}/{ss.get(k, float('nan')):.1f}"

        for k in diffs:
            if k in mm and k in ss and mm[k] == mm[k] and ss[k] == ss[k]:
                diffs[k].append(abs(mm[k] - ss[k]))
        print(
            f"{b * a.bucket_s:>8.0f} {cell('running'):>18} {cell('waiting'):>18} "
            f"{mm.get('preemptions', 0):>9.0f}/{ss.get('preemptions', 0):<9.0f}"
        )
    tot = (sum(r["preemptions"] for r in m.values()), sum(r["preemptions"] for r in s.values()))
    print(f"preemptions in all: measured {tot[0]:.0f}, simulated {tot[1]:.0f}")
    for k, v in diffs.items():
        if v:
            print(f"mean |difference| of {k}: {sum(v) / len(v):.2f} requests over {len(v)} buckets")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
