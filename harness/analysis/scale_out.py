"""Scale-out: how many workers a run had, how that number was chosen, and what each one did
(issue 45). The result's `client.scale_out` block, built from the journal, and its one report
line, read from the result (so `report R.json` prints it too):

    workers         N (1: one process)
    kind            "process" (one), "processes" (--workers N), "ray" (--ray)
    ray             the --ray address (absent without Ray)
    chosen          how N was chosen: "--workers 2", "auto: 2 CPUs, 1 left for the simulator;
                    ...", "one process, the default" (absent in a journal from before it)
    per_worker      one row per shard: name, requests (its final records), share (of all
                    records), cpu_s, cpu_peak_share (its busiest second, a share of one core,
                    harness.client.shard.CpuPeak), and for Ray its host and clock offset at
                    the start
    skew_start_ms, skew_end_ms, max_skew_ms   Ray: the clocks' disagreement and the bound it held

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

MAX_LISTED = 4  # workers listed one by one; more are summarised as a range


def worker_name(kind: str, index: int) -> str:
    if kind == "ray":
        return f"harness-ray-{index}"
    return "main" if kind == "process" else f"harness-worker-{index}"


def scale_out_block(
    options: dict[str, Any], end: dict[str, Any] | None, clock: dict[str, Any] | None
) -> dict[str, Any]:
    """The result's `client.scale_out` from the header's options, the end line (its per-shard
    `accounts`, None for a killed run) and the Ray clock event (None without Ray)."""
    n = int(options.get("workers") or 1)
    ray = options.get("ray")
    kind = "ray" if ray else ("processes" if n > 1 else "process")
    accounts = sorted(
        (end or {}).get("accounts") or [], key=lambda a: (list(a.get("shard") or [0]) + [0])[0]
    )
    recorded = [sum(int(x) for x in a.get("recorded") or []) for a in accounts]
    total = sum(recorded)
    offsets = {w.get("name"): w for w in (clock or {}).get("workers") or []}
    rows = []
    for a, r in zip(accounts, recorded, strict=True):
        index = (list(a.get("shard") or [0]) + [0])[0]
        name = worker_name(kind, index)
        cpu_s = a.get("cpu_s")
        if cpu_s is None and len(accounts) == 1:
            cpu_s = (end or {}).get("cpu_s")  # one process: the run's CPU is its own
        row: dict[str, Any] = {
            "name": name,
            "requests": r,
            "share": r / total if total else None,
            "cpu_s": cpu_s,
            "cpu_peak_share": a.get("cpu_peak_share"),
        }
        if name in offsets:
            row["host"] = offsets[name].get("host")
            row["offset_start_ms"] = offsets[name].get("offset_start_ms")
        rows.append(row)
    block: dict[str, Any] = {"workers": n, "kind": kind}
    if ray:
        block["ray"] = ray
    if options.get("workers_chosen"):
        block["chosen"] = options["workers_chosen"]
    block["per_worker"] = rows
    for k in ("skew_start_ms", "skew_end_ms", "max_skew_ms"):
        if clock and clock.get(k) is not None:
            block[k] = clock[k]
    return block


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.0%}"


def _listed(values: list[str]) -> str:
    return ", ".join(values)


def scale_out_line(result: Mapping[str, Any]) -> str | None:
    """One line: the workers, how their number was chosen, Ray's clock skew and the bound it
    held, and per worker its share of the requests and its CPU peak. None for a result from
    before `client.scale_out`, and for a prediction (no client ran)."""
    so = (result.get("client") or {}).get("scale_out")
    if not isinstance(so, dict) or (result.get("target") or {}).get("kind") == "prediction":
        return None  # from before schema 9, or a prediction (`predict`: no client ran)
    n, kind, rows = so.get("workers", 1), so.get("kind"), so.get("per_worker") or []
    what = {"process": "1 process", "processes": f"{n} worker processes"}.get(
        str(kind), f"{n} Ray actor{'s' if n != 1 else ''}"
    )
    if kind == "ray":
        hosts = {r.get("host") for r in rows if r.get("host")}
        if hosts:
            what += f" on {len(hosts)} host{'s' if len(hosts) != 1 else ''}"
    parts = [f"scale-out: {what}" + (f" ({so['chosen']})" if so.get("chosen") else "")]
    if so.get("skew_start_ms") is not None:
        end = so.get("skew_end_ms")
        parts.append(
            f"clock skew {so['skew_start_ms']:.2f} ms at the start"
            + (f", {end:.2f} ms at the end" if end is not None else "")
            + (
                f" (bound {so['max_skew_ms']:g} ms held)"
                if so.get("max_skew_ms") is not None
                else ""
            )
        )
    if kind == "process":
        mean = (result.get("client") or {}).get("cpu_share_of_one_core")
        peak = rows[0].get("cpu_peak_share") if rows else None
        parts.append(
            f"CPU {_pct(mean)} of one core (mean; a journal from before the peak)"
            if peak is None
            else f"CPU peak {_pct(peak)} of one core (mean {_pct(mean)})"
        )
        return "; ".join(parts)
    parts += _per_worker(rows)
    return "; ".join(parts)


def _per_worker(rows: list[dict[str, Any]]) -> list[str]:
    """Each worker's requests (share) and CPU peak: listed for up to MAX_LISTED workers, else
    the range and the busiest worker."""
    if not rows:
        return []
    peaks = [r.get("cpu_peak_share") for r in rows]
    if len(rows) <= MAX_LISTED:
        out = [
            "requests " + _listed([f"{r['requests']} ({_pct(r.get('share'))})" for r in rows]),
            f"CPU peak {_listed([_pct(p) for p in peaks])} of one core",
        ]
        offsets = [r.get("offset_start_ms") for r in rows]
        if any(o is not None for o in offsets):
            out.append(
                "offsets "
                + _listed(["-" if o is None else f"{round(o, 2) + 0.0:+.2f}" for o in offsets])
                + " ms"
            )
        return out
    req = [r["requests"] for r in rows]
    shares = [r.get("share") or 0.0 for r in rows]
    out = [f"requests {min(req)}-{max(req)} per worker ({_pct(min(shares))}-{_pct(max(shares))})"]
    known = [(p, r["name"]) for p, r in zip(peaks, rows, strict=True) if p is not None]
    if known:
        top, name = max(known)
        low = min(p for p, _ in known)
        out.append(f"CPU peak {_pct(low)}-{_pct(top)} of one core (highest {name})")
    return out


__all__ = ["MAX_LISTED", "scale_out_block", "scale_out_line", "worker_name"]
