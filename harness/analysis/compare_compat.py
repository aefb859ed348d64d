"""compare's first question: may these two results be compared at all, and what must the
reader know about them (notes written as sentences)?

Refused (exit 2, unless --force): a simulator's result against a real server's, different
scenarios, or one scenario that offered different load. What does not change the load is
compared with a note: the seed, the simulator's settings (`[sim]`), the description, and the
SLOs (`[slo]`: a limit to judge against, not load).
"""

from __future__ import annotations

from typing import Any

from harness.errors import UsageError

# Target kinds whose figures come from the simulator's model, not from hardware: a run against
# the simulator, and a `predict` result (the same model on its virtual clock).
SIMULATED_KINDS = ("simulator", "prediction")


def _settings_text(sim: Any, keys: list[str]) -> str:
    if not isinstance(sim, dict) or not any(k in sim for k in keys):
        return "the default settings"
    return ", ".join(f"{k} = {sim[k]}" if k in sim else f"{k} at its default" for k in keys)


def check_compatible(
    base: dict[str, Any], cand: dict[str, Any], base_name: str, cand_name: str, force: bool
) -> list[str]:
    """Reasons two results may not be compared (raises UsageError unless force); returns notes,
    written as sentences."""
    problems, notes = [], []
    kb, kc = base["target"].get("kind"), cand["target"].get("kind")
    if (kb in SIMULATED_KINDS) != (kc in SIMULATED_KINDS):
        problems.append(
            f"{base_name} was measured on a {kb} target and {cand_name} on a {kc} target: a "
            "simulator's figures come from its model, not a GPU, so the change would mean nothing"
        )
    if base.get("scenario_name") != cand.get("scenario_name"):
        problems.append(
            f"they ran different scenarios, '{base.get('scenario_name')}' and "
            f"'{cand.get('scenario_name')}'"
        )
    else:
        ignore = {"seed", "sim", "description", "target", "name", "slo"}
        sb = {k: v for k, v in (base.get("scenario") or {}).items() if k not in ignore}
        sc = {k: v for k, v in (cand.get("scenario") or {}).items() if k not in ignore}
        differ = sorted(k for k in set(sb) | set(sc) if sb.get(k) != sc.get(k))
        if differ:
            problems.append(
                f"scenario '{base.get('scenario_name')}' differs in {', '.join(differ)}: "
                "the two runs did not offer the same load"
            )
    if problems and not force:
        raise UsageError(
            f"cannot compare {base_name} with {cand_name}: "
            + "; ".join(problems)
            + " (use --force to compare anyway)"
        )
    notes += [f"Compared anyway (--force): {p}." for p in problems]
    for name, kind in ((base_name, kb), (cand_name, kc)):
        if kind == "prediction":
            notes.append(
                f"{name} is a prediction (the simulator's virtual clock), not a measurement."
            )
    slo_note = slo_difference(base, cand, base_name, cand_name)
    if slo_note:
        notes.append(slo_note)
    simb = (base.get("scenario") or {}).get("sim")
    simc = (cand.get("scenario") or {}).get("sim")
    if simb != simc:
        db, dc = (x if isinstance(x, dict) else {} for x in (simb, simc))
        keys = sorted(k for k in set(db) | set(dc) if db.get(k) != dc.get(k))
        notes.append(
            f"The simulator settings differ: {base_name} ran with "
            f"{_settings_text(simb, keys)}, {cand_name} with {_settings_text(simc, keys)}."
        )
    return notes


def _slo_text(slo: Any) -> str:
    if not isinstance(slo, dict) or not slo:
        return "none"
    return ", ".join(f"{k} {v}" for k, v in sorted(slo.items()))


def slo_difference(
    base: dict[str, Any], cand: dict[str, Any], base_name: str, cand_name: str
) -> str | None:
    """A sentence when the two scenarios' SLOs differ (compared anyway: an SLO is not load)."""
    sb = (base.get("scenario") or {}).get("slo")
    sc = (cand.get("scenario") or {}).get("slo")
    if (sb or None) == (sc or None):
        return None
    return (
        f"The SLOs differ (an SLO is not load, so the runs are compared): {base_name} has "
        f"{_slo_text(sb)}; {cand_name} has {_slo_text(sc)}."
    )


__all__ = ["SIMULATED_KINDS", "check_compatible", "slo_difference"]
