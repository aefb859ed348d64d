"""Ray actors' clocks against the driver's (`harness.client.raycluster`).

Clocks: processes on different machines share no monotonic clock, so the start is a wall-clock
instant of the *driver*. Each actor measures its wall-clock offset against the driver's machine
(NTP-style: a `Clock` actor pinned to the driver's node answers `time.time()`; of
CLOCK_SAMPLES round trips the one with the shortest round trip is kept, offset = driver time -
the midpoint of the local send and receive times, uncertainty = half that round trip), converts
the start instant to its own `perf_counter_ns()`, and stamps everything relative to it. It
measures the offset again after its shard ends. The result records every actor's offsets, round
trips and drift under `client.clock` (from the journal's `"t": "clock"` line).

Skew = the largest disagreement between any actor's clock and the driver's that the harness
must trust: max over actors of |offset| + uncertainty. Offsets are corrected, but a large one
means the machines' clocks are not disciplined (no NTP) and may jump or slew during the run, so
the run refuses to start when skew exceeds MAX_SKEW_MS (`HARNESS_RAY_MAX_SKEW_MS` overrides).
A loaded machine lengthens the round trips and with them the uncertainty, not the offset: the
start measures again (up to CLOCK_ROUNDS times, keeping each actor's shortest round trip so far)
while the skew is over the bound, and a refusal says which of the two put it there.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass

from harness.errors import UsageError

CLOCK_SAMPLES = 16  # round trips per offset measurement; the shortest one is kept
CLOCK_ROUNDS = 6  # measurements at the start while the skew is over the bound (a busy machine)
CLOCK_PAUSE_S = 0.25  # between them, times the round: a burst of load passes
MAX_SKEW_MS = 10.0  # above this, clocks are not NTP-disciplined: refuse to start


@dataclass(frozen=True)
class ClockSample:
    offset_s: float  # driver clock - actor clock
    rtt_s: float  # round trip of the best sample: offset uncertainty is half of it


def best_offset(samples: list[tuple[float, float, float]]) -> ClockSample:
    """(local send, driver time, local receive) triples -> the offset of the shortest round trip."""
    t1, d, t2 = min(samples, key=lambda s: s[2] - s[0])
    return ClockSample(d - (t1 + t2) / 2, t2 - t1)


def skew_ms(samples: list[ClockSample]) -> float:
    """Largest possible disagreement between an actor's clock and the driver's, in ms."""
    return max((abs(s.offset_s) + s.rtt_s / 2 for s in samples), default=0.0) * 1e3


def max_skew_ms() -> float:
    raw = os.environ.get("HARNESS_RAY_MAX_SKEW_MS")
    if raw is None:
        return MAX_SKEW_MS
    try:
        v = float(raw)
    except ValueError:
        raise UsageError(
            f"HARNESS_RAY_MAX_SKEW_MS: expected a number of milliseconds > 0, got {raw!r}"
        ) from None
    if not v > 0:
        raise UsageError(
            f"HARNESS_RAY_MAX_SKEW_MS: expected a number of milliseconds > 0, got {raw!r}"
        )
    return v


def check_skew(samples: list[ClockSample], bound_ms: float) -> None:
    """Raise UsageError (one line) when the clocks disagree by more than bound_ms. The message
    names the worst worker and whether its offset or its round trip (a busy or distant
    machine, whose offset is known only within half of it) put it over."""
    s = skew_ms(samples)
    if s > bound_ms:
        worst = max(
            range(len(samples)), key=lambda i: abs(samples[i].offset_s) + samples[i].rtt_s / 2
        )
        w = samples[worst]
        what = f"worker {worker_label(worst)} offset {w.offset_s * 1e3:+.1f} ms"
        if abs(w.offset_s) * 1e3 <= bound_ms / 2 < w.rtt_s / 2 * 1e3:
            raise UsageError(
                f"--ray: clock skew {s:.1f} ms > {bound_ms:g} ms ({what}, known only within "
                f"+-{w.rtt_s / 2 * 1e3:.1f} ms: its shortest round trip to the driver took "
                f"{w.rtt_s * 1e3:.1f} ms in {CLOCK_ROUNDS} tries): the machines are too busy "
                "or too far apart to time the run; free CPUs or raise HARNESS_RAY_MAX_SKEW_MS"
            )
        raise UsageError(
            f"--ray: clock skew {s:.1f} ms > {bound_ms:g} ms ({what}): synchronise the machines' "
            "clocks (NTP/chrony) or raise HARNESS_RAY_MAX_SKEW_MS"
        )


def measure_clocks(
    measure: Callable[[], list[ClockSample]],
    bound_ms: float,
    rounds: int = CLOCK_ROUNDS,
    pause_s: float = CLOCK_PAUSE_S,
    sleep: Callable[[float], None] = time.sleep,
) -> list[ClockSample]:
    """Every actor's offset, measured again while the skew is over bound_ms (at most `rounds`
    times in all), each actor keeping its shortest round trip so far. Then check_skew."""
    best = measure()
    for r in range(1, rounds):
        if skew_ms(best) <= bound_ms:
            break
        sleep(pause_s * r)
        best = [min(a, b, key=lambda c: c.rtt_s) for a, b in zip(best, measure(), strict=True)]
    check_skew(best, bound_ms)
    return best


def worker_label(i: int) -> str:
    return f"harness-ray-{i}"
