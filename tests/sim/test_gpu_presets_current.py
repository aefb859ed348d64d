"""The current GPUs (B200, GB200, H20, MI300X, MI325X, RTX PRO 6000 Blackwell) beside the older
presets: datasheet figures with their source, the interconnects they name, and the borrowed
validation error each states (harness/sim/presets/builtin.toml)."""

from __future__ import annotations

import pytest

from harness.errors import ConfigError
from harness.sim.presets import GIB, load_presets, parse_presets
from harness.sim.settings import SimSettings
from harness.sim.validation.errors import is_validated, load_errors, validation_line

# name: (memory GB, bandwidth GB/s, dense BF16 TFLOPS, dense FP8, dense FP4 or None, link GB/s
# each way): the figures of the datasheets each preset's `source` names.
CURRENT = {
    "B200": (180, 8000, 2250, 4500, 9000, 900),
    "GB200": (186, 8000, 2500, 5000, 10000, 900),
    "H20": (96, 4000, 148, 296, None, 450),
    "MI300X": (192, 5300, 1307.4, 2614.9, None, 448),
    "MI325X": (256, 6000, 1307.4, 2614.9, None, 448),
    "RTX-PRO-6000": (96, 1792, 503.8, 1007.6, 2015, 64),
}


@pytest.mark.parametrize("name", sorted(CURRENT))
def test_current_gpu_has_its_datasheet_figures_and_source(name: str) -> None:
    gpu = load_presets().gpus[name]
    mem, bw, bf16, fp8, fp4, link = CURRENT[name]
    assert gpu.memory_bytes == mem * GIB
    assert gpu.bandwidth_bytes_per_s == bw * 1e9
    assert gpu.flop_per_s == pytest.approx(bf16 * 1e12)
    assert gpu.fp8_flop_per_s == pytest.approx(fp8 * 1e12)
    assert gpu.fp4_flop_per_s == (None if fp4 is None else pytest.approx(fp4 * 1e12))
    assert gpu.link_bytes_per_s == link * 1e9
    assert gpu.source.startswith(("NVIDIA", "AMD", "no public NVIDIA datasheet; as reported"))


@pytest.mark.parametrize("name", sorted(CURRENT))
def test_current_gpu_serves_a_model_and_states_a_borrowed_error(name: str) -> None:
    r = SimSettings(gpu=name, model="Llama-3.1-8B-Instruct").resolved()
    assert r.num_gpu_blocks > 0
    # one short decode step is memory-bound: bandwidth sets it
    h100 = SimSettings(gpu="H100-SXM", model="Llama-3.1-8B-Instruct").resolved()
    faster = load_presets().gpus[name].bandwidth_bytes_per_s > 3350e9
    assert (r.roofline.decode_step_s(1, 100) < h100.roofline.decode_step_s(1, 100)) == faster
    errors = load_errors()
    assert not is_validated(name, errors)
    lender = load_presets().gpus[name].errors_from
    assert lender is not None and is_validated(lender + "-X", errors)
    assert validation_line(name, errors).startswith(
        f"{name}: not validated; errors borrowed from {lender}"
    )


def test_every_lender_is_a_validated_class() -> None:
    errors = load_errors()
    for gpu in load_presets().gpus.values():
        if gpu.errors_from is not None:
            assert is_validated(gpu.errors_from + "-X", errors), gpu.name


def test_bad_gpu_text_fields_are_refused() -> None:
    base = {"memory_gib": 1, "bandwidth_gb_per_s": 1, "bf16_tflop_per_s": 1}
    with pytest.raises(ConfigError, match=r"gpu.X.source: expected a string"):
        parse_presets({"gpu": {"X": {**base, "source": 3}}}, "p.toml")
    with pytest.raises(ConfigError, match=r"gpu.X.fitted.speed: expected a coefficient of"):
        parse_presets({"gpu": {"X": {**base, "fitted": {"speed": "me"}}}}, "p.toml")
    with pytest.raises(ConfigError, match=r"gpu.X.interconnect: unknown .*nvlink5, xgmi"):
        parse_presets({"gpu": {"X": {**base, "interconnect": "nvlink9"}}}, "p.toml")
