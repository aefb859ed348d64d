"""Token-length distributions for prompts and outputs: pure, seeded, vectorised draws.

Every distribution draws integers >= 1 with `sample(n, rng)`. `parse_length(table)` turns a
scenario table such as `{ dist = "lognormal", mean = 512, sigma = 0.5, min = 16, max = 4096 }`
into one of these frozen dataclasses.

- fixed(value)                      every draw is `value`
- uniform(min, max)                 integers in [min, max], both inclusive
- normal(mean, std[, min, max])     rounded, clipped to [min, max] (min defaults to 1)
- lognormal(mean, sigma[, min, max]) `mean` is the distribution's mean, so
                                    mu = ln(mean) - sigma^2 / 2; rounded and clipped
- empirical(values, weights | file) draws from the listed values with the given weights
- mixture(components)               each component is one of the above plus `weight`
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from harness.config.bounded import bounded_lines, file_problem
from harness.config.validate import Table
from harness.errors import preview

MAX_TOKENS_LIMIT = 10_000_000  # far beyond any context window; guards against typos like 1e12


class LengthDist(Protocol):
    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """n integer lengths (int64, each >= 1)."""
        ...

    @property
    def mean_estimate(self) -> float: ...


# One frozen dataclass per distribution a scenario names (`dist = ...`): alike in shape (fields,
# `sample`, `mean_estimate`, `__str__`) by design, as the arrival processes of arrivals.py are.
# Left unfolded (issue 46): a shared base would hide each one's parameters, in the order its
# scenario table gives them, behind inheritance.


def _clip(x: np.ndarray, lo: int, hi: int) -> np.ndarray:
    return np.clip(np.rint(x), lo, hi).astype(np.int64)


@dataclass(frozen=True, slots=True)
class Fixed:
    value: int

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return np.full(n, self.value, dtype=np.int64)

    @property
    def mean_estimate(self) -> float:
        return float(self.value)

    def __str__(self) -> str:
        return f"fixed({self.value})"


@dataclass(frozen=True, slots=True)
class Uniform:
    min: int
    max: int

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return rng.integers(self.min, self.max + 1, size=n, dtype=np.int64)

    @property
    def mean_estimate(self) -> float:
        return (self.min + self.max) / 2

    def __str__(self) -> str:
        return f"uniform({self.min}..{self.max})"


@dataclass(frozen=True, slots=True)
class Normal:
    mean: float
    std: float
    min: int = 1
    max: int = MAX_TOKENS_LIMIT

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return _clip(rng.normal(self.mean, self.std, size=n), self.min, self.max)

    @property
    def mean_estimate(self) -> float:
        return min(max(self.mean, self.min), self.max)

    def __str__(self) -> str:
        return f"normal(mean={self.mean:g}, std={self.std:g})"


@dataclass(frozen=True, slots=True)
class LogNormal:
    mean: float
    sigma: float
    min: int = 1
    max: int = MAX_TOKENS_LIMIT

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        mu = math.log(self.mean) - self.sigma**2 / 2
        return _clip(rng.lognormal(mu, self.sigma, size=n), self.min, self.max)

    @property
    def mean_estimate(self) -> float:
        return min(max(self.mean, self.min), self.max)

    def __str__(self) -> str:
        return f"lognormal(mean={self.mean:g}, sigma={self.sigma:g})"


@dataclass(frozen=True, slots=True)
class Empirical:
    values: tuple[int, ...]
    weights: tuple[float, ...]

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        p = np.asarray(self.weights, dtype=np.float64)
        return rng.choice(np.asarray(self.values, dtype=np.int64), size=n, p=p / p.sum())

    @property
    def mean_estimate(self) -> float:
        w = np.asarray(self.weights)
        return float(np.dot(self.values, w) / w.sum())

    def __str__(self) -> str:
        return f"empirical({len(self.values)} values)"


@dataclass(frozen=True, slots=True)
class Mixture:
    components: tuple[LengthDist, ...]
    weights: tuple[float, ...]

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        p = np.asarray(self.weights, dtype=np.float64)
        which = rng.choice(len(self.components), size=n, p=p / p.sum())
        out = np.empty(n, dtype=np.int64)
        for i, comp in enumerate(self.components):
            idx = np.flatnonzero(which == i)
            out[idx] = comp.sample(len(idx), rng)
        return out

    @property
    def mean_estimate(self) -> float:
        w = np.asarray(self.weights)
        return float(
            sum(c.mean_estimate * wi for c, wi in zip(self.components, w, strict=True)) / w.sum()
        )

    def __str__(self) -> str:
        return "mixture(" + ", ".join(map(str, self.components)) + ")"


DIST_NAMES = ("fixed", "uniform", "normal", "lognormal", "empirical", "mixture")


def _token_int(t: Table, name: str, default: object = ...) -> int:
    if default is ...:
        return t.int(name, min=1, max=MAX_TOKENS_LIMIT)
    return t.int(name, default, min=1, max=MAX_TOKENS_LIMIT)


def _bounds(t: Table) -> tuple[int, int]:
    lo = _token_int(t, "min", 1)
    hi = _token_int(t, "max", MAX_TOKENS_LIMIT)
    if lo > hi:
        t.fail("min", f"min ({lo}) must be <= max ({hi})")
    return lo, hi


def _weights(t: Table, name: str, values: list[object], n: int) -> tuple[float, ...]:
    if len(values) != n:
        t.fail(name, f"expected {n} weights (one per value), got {len(values)}")
    out: list[float] = []
    for w in values:
        if isinstance(w, bool) or not isinstance(w, int | float) or not 0 <= w < math.inf:
            t.fail(name, f"expected finite weights >= 0, got {w!r}")
        out.append(float(w))
    if not 0 < sum(out) < math.inf:  # 1e308 + 1e308 overflows: the shares would be NaN
        t.fail(name, "weights must sum to more than 0, and to a finite number")
    return tuple(out)


def _read_values_file(t: Table, base_dir: Path) -> list[object]:
    raw = t.str("file")
    path = (base_dir / raw) if not Path(raw).is_absolute() else Path(raw)
    problem = file_problem(path)
    if problem is not None:
        t.fail("file", f"cannot read {str(path)!r}: {problem}")
    values: list[object] = []
    try:
        with path.open("rb") as f:
            for lineno, raw_line in bounded_lines(f, str(path)):
                try:
                    line = raw_line.decode("utf-8")
                except UnicodeDecodeError as exc:
                    t.fail("file", f"{path}: not UTF-8 text (byte {exc.object[exc.start]:#04x})")
                line = line.split("#", 1)[0].strip().rstrip(",")
                if not line:
                    continue
                try:
                    values.append(int(line))
                except ValueError:
                    t.fail(
                        "file",
                        f"{path}:{lineno}: expected one integer per line, got {preview(line)}",
                    )
    except OSError as exc:
        t.fail("file", f"cannot read {str(path)!r}: {exc.strerror or exc}")
    if not values:
        t.fail("file", f"{path} holds no values")
    return values


def parse_length(t: Table, base_dir: Path = Path(".")) -> LengthDist:
    """Build a distribution from its scenario table; raises ConfigError naming the key."""
    dist = t.str("dist", choices=DIST_NAMES)
    result: LengthDist
    if dist == "fixed":
        result = Fixed(_token_int(t, "value"))
    elif dist == "uniform":
        lo, hi = _token_int(t, "min"), _token_int(t, "max")
        if lo > hi:
            t.fail("min", f"min ({lo}) must be <= max ({hi})")
        result = Uniform(lo, hi)
    elif dist == "normal":
        mean = t.float("mean", min=1)
        std = t.float("std", min=0)
        result = Normal(mean, std, *_bounds(t))
    elif dist == "lognormal":
        mean = t.float("mean", min=1)
        sigma = t.float("sigma", min=0, max=5)
        result = LogNormal(mean, sigma, *_bounds(t))
    elif dist == "empirical":
        if t.has("file") == t.has("values"):
            t.fail(
                "values",
                "give either `values` (with optional `weights`) or `file`, not both or neither",
            )
        vals = _read_values_file(t, base_dir) if t.has("file") else t.list("values")
        t.allow("file", "values")
        ints: list[int] = []
        for v in vals:
            if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= MAX_TOKENS_LIMIT:
                t.fail("values", f"expected integers >= 1, got {v!r}")
            ints.append(v)
        if not ints:
            t.fail("values", "expected at least one value")
        raw_w = t.list("weights", None)
        weights = (
            _weights(t, "weights", raw_w, len(ints)) if raw_w is not None else (1.0,) * len(ints)
        )
        result = Empirical(tuple(ints), weights)
    else:  # mixture
        comps_raw = t.list("components")
        if not comps_raw:
            t.fail(
                "components", "expected a non-empty array of distributions, each with a `weight`"
            )
        comps: list[LengthDist] = []
        weights_l: list[object] = []
        for i, c in enumerate(comps_raw):
            ct = Table(c, t.where, t.key(f"components.{i}"))
            weights_l.append(ct.raw("weight", 1.0))
            if ct.data.get("dist") == "mixture":
                ct.fail("dist", "a mixture cannot contain another mixture")
            comps.append(parse_length(ct, base_dir))
        result = Mixture(tuple(comps), _weights(t, "components", weights_l, len(comps)))
    t.finish()
    return result
