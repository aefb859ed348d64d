"""Shared prefixes: Mooncake hash_ids become identical text for equal ids, prefix groups share their
prefix, the implied reuse is what the trace says, and the simulator's prefix cache really sees it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import orjson
import pytest

from harness.client.openai import build_body
from harness.sim.protocol import block_hashes, parse_request
from harness.sim.scheduler import Scheduler, SchedulerConfig, SimRequest
from harness.sim.settings import SimSettings
from harness.sim.virtual import run_virtual
from harness.workload.plan import Plan, build_plan
from harness.workload.prefixes import BLOCK_TOKENS, BlockPrompts
from harness.workload.scenario import load_scenario

DATA = Path(__file__).resolve().parents[1] / "data" / "traces"
MOONCAKE = DATA / "mooncake_rows3840-3959.jsonl"
AZURE = DATA / "azure_code_first10min.csv"


def _scenario(write_scenario, arrival: str, extra: str = "", seed: int = 3):
    return load_scenario(
        write_scenario(
            f'name = "t"\nseed = {seed}\n{extra}\n[[phases]]\nname = "p"\narrival = {arrival}\n'
        )
    )


def _mooncake_plan(write_scenario, seed: int = 3) -> Plan:
    return build_plan(
        _scenario(
            write_scenario,
            f'{{ process = "trace", file = "{MOONCAKE}", origin = "first_row" }}',
            seed=seed,
        )
    )


def test_equal_block_ids_give_identical_text_and_different_ids_different_text():
    src = BlockPrompts(np.array([0, 2, 4, 5]), np.array([7, 8, 7, 9, 7]))
    from harness.workload.prompts import PromptMaker

    m = PromptMaker()
    a = src.text(0, 2 * BLOCK_TOKENS, 0, 1, m).split()  # blocks 7, 8
    b = src.text(1, 2 * BLOCK_TOKENS, 1, 1, m).split()  # blocks 7, 9
    c = src.text(2, 300, 2, 1, m).split()  # block 7, cut to 300 tokens
    assert len(a) == len(b) == 2 * BLOCK_TOKENS and len(c) == 300
    assert a[:BLOCK_TOKENS] == b[:BLOCK_TOKENS]  # same id: same content
    assert a[BLOCK_TOKENS:] != b[BLOCK_TOKENS:]  # different ids: different content
    assert c == a[:300]  # a cut block is a prefix of the whole
    other_seed = src.text(0, 2 * BLOCK_TOKENS, 0, 2, m).split()
    assert other_seed[:BLOCK_TOKENS] != a[:BLOCK_TOKENS]  # the scenario seed names the content
    # tokens past the listed blocks are the request's own
    longer = src.text(0, 2 * BLOCK_TOKENS + 40, 0, 1, m).split()
    assert longer[: 2 * BLOCK_TOKENS] == a and len(longer) == 2 * BLOCK_TOKENS + 40


def test_trace_prompts_have_the_trace_lengths_and_share_as_the_hash_ids_say(write_scenario):
    plan = _mooncake_plan(write_scenario)
    rows = [json.loads(x) for x in MOONCAKE.read_text().splitlines()]
    ph = plan.phases[0]
    texts = [
        plan.prompt_text(int(ph.prompt_tokens[k]), ph.first_seq + k).split()
        for k in range(len(rows))
    ]
    assert [len(t) for t in texts] == [r["input_length"] for r in rows]
    block_of: dict[int, list[str]] = {}
    for r, words in zip(rows, texts, strict=True):
        for j, h in enumerate(r["hash_ids"]):
            block = words[j * BLOCK_TOKENS : (j + 1) * BLOCK_TOKENS]
            if h in block_of and len(block) == len(block_of[h]):
                assert block == block_of[h]
            block_of.setdefault(h, block)
    firsts = {tuple(block[:8]) for block in block_of.values()}
    assert len(firsts) == len(block_of)  # every id its own content


def _implied_share(rows: list[dict]) -> float:
    """The share of prompt tokens in blocks an earlier row had, computed the plain way."""
    seen: set[int] = set()
    total = reused = 0
    for r in rows:
        for j, h in enumerate(r["hash_ids"]):
            n = max(0, min(BLOCK_TOKENS, r["input_length"] - BLOCK_TOKENS * j))
            total += n
            reused += n if h in seen else 0
        seen.update(r["hash_ids"])
        total += max(0, r["input_length"] - BLOCK_TOKENS * len(r["hash_ids"]))
    return reused / total


def test_implied_reuse_is_the_share_of_prompt_tokens_in_blocks_seen_before(write_scenario):
    rows = [json.loads(x) for x in MOONCAKE.read_text().splitlines()]
    plan = _mooncake_plan(write_scenario)
    implied = plan.workload["implied_prefix_reuse"]
    assert implied["share"] == pytest.approx(_implied_share(rows))
    assert implied["share"] == pytest.approx(
        0.545, abs=0.001
    )  # tests/data/traces/README.md says 54 %
    assert implied["prompt_tokens"] == sum(r["input_length"] for r in rows)
    assert any("implied prefix reuse: 54.5 %" in n for n in plan.notes)
    # A trace without block ids implies none
    azure = build_plan(_scenario(write_scenario, f'{{ process = "trace", file = "{AZURE}" }}'))
    assert azure.workload["implied_prefix_reuse"]["share"] == 0.0


def test_plans_with_blocks_are_deterministic_and_seeded(write_scenario):
    a, b = _mooncake_plan(write_scenario), _mooncake_plan(write_scenario)
    assert a.digest() == b.digest()
    c = _mooncake_plan(write_scenario, seed=4)
    assert c.digest() != a.digest()
    assert a.prompt_text(600, 0) != c.prompt_text(600, 0)


GROUPS = """[workload]
prompt_tokens = { dist = "uniform", min = 20, max = 40 }
output_tokens = { dist = "fixed", value = 4 }
prefix_groups = { groups = 3, tokens = { dist = "uniform", min = 100, max = 300 }, share = 0.75 }
"""


def test_prefix_groups_share_their_prefix_on_top_of_the_requests_own_words(write_scenario):
    plan = build_plan(
        load_scenario(
            write_scenario(
                f'name = "t"\nseed = 2\n{GROUPS}[[phases]]\nname = "p"\nrequests = 400\n'
                'arrival = { process = "constant", rate = 50 }\n'
            )
        )
    )
    ph = plan.phases[0]
    src = ph.prompts
    group, prefix = src.group, src.prefix_tokens
    assert len(prefix) == 3 and set(group.tolist()) == {-1, 0, 1, 2}
    assert (group >= 0).mean() == pytest.approx(0.75, abs=0.06)  # share
    own = ph.prompt_tokens - np.where(group >= 0, prefix[np.maximum(group, 0)], 0)
    assert own.min() >= 20 and own.max() <= 40  # the prefix comes on top
    texts = [plan.prompt_text(int(ph.prompt_tokens[k]), k).split() for k in range(40)]
    assert [len(t) for t in texts] == ph.prompt_tokens[:40].tolist()
    for g in range(3):
        members = [t for t, gg in zip(texts, group[:40], strict=False) if gg == g]
        assert len({tuple(t[: prefix[g]]) for t in members}) == 1  # one prefix per group
    starts = {tuple(t[:20]) for t, gg in zip(texts, group[:40], strict=False) if gg < 0}
    assert len(starts) == sum(1 for gg in group[:40] if gg < 0)  # ungrouped: all distinct
    implied = plan.workload["implied_prefix_reuse"]
    first_seen = {int(g): k for k, g in reversed(list(enumerate(group.tolist()))) if g >= 0}
    want = sum(
        int(prefix[g]) for k, g in enumerate(group.tolist()) if g >= 0 and first_seen[g] != k
    )
    assert implied["by_source_tokens"]["prefix_groups"] == want
    assert implied["prompt_tokens"] == int(ph.prompt_tokens.sum())


# --- the simulator's prefix cache on a virtual clock ----------------------------------------------


def _sim_prompt_tokens(plan: Plan, caching: bool, num_blocks: int | None = None) -> tuple[int, int]:
    """(prompt tokens the simulator computed, prompt tokens sent) when the plan's chat requests
    reach its scheduler at their planned times: the bodies the engine would send, parsed and
    block-hashed as the simulator's HTTP face does. Each asks for one token, so every scheduled
    token is a prompt token. `num_blocks`: the KV cache's size (None: the H200 preset's)."""
    settings = SimSettings(model="Llama-3.1-8B-Instruct", max_model_len=131072)
    resolved = settings.resolved()
    cfg = SchedulerConfig.from_resolved(resolved, jitter=False)
    cfg = SchedulerConfig(
        cfg.max_num_seqs,
        cfg.max_num_batched_tokens,
        num_blocks or cfg.num_blocks,
        cfg.block_size,
        prefix_caching=caching,
        jitter=False,
    )
    ph = plan.phases[0]
    arrivals = []
    sent = 0
    for k in range(ph.count):
        body = build_body(
            endpoint="chat",
            model="m",
            prompt=plan.prompt_text(int(ph.prompt_tokens[k]), ph.first_seq + k),
            system_prompt=plan.system_prompt,
            max_tokens=1,
            ignore_eos=True,
            continuous_usage=True,
            temperature=None,
            top_p=None,
            extra={},
        )
        req = parse_request(orjson.loads(body), True, "m", 131072)
        sent += req.prompt_tokens
        arrivals.append(
            (
                float(ph.offsets_s[k]),
                SimRequest(k, req.prompt_tokens, 1, block_hashes(req.token_words, cfg.block_size)),
            )
        )
    computed = 0

    def count(_s: Scheduler, out) -> None:  # type: ignore[no-untyped-def]
        nonlocal computed
        computed += out.num_scheduled_tokens

    sched = Scheduler(cfg, resolved.roofline)
    run_virtual(sched, arrivals, on_step=count)
    assert sched.num_preemptions == 0
    return computed, sent


UNBOUNDED_BLOCKS = 10_000_000  # 160 M tokens: nothing is ever evicted


def test_the_simulators_prefix_cache_hits_what_the_trace_shares(write_scenario):
    plan = _mooncake_plan(write_scenario)
    implied = plan.workload["implied_prefix_reuse"]["share"]
    uncached, sent = _sim_prompt_tokens(plan, caching=False)
    assert uncached == sent  # without caching every prompt token is computed
    computed, sent2 = _sim_prompt_tokens(plan, caching=True, num_blocks=UNBOUNDED_BLOCKS)
    assert sent2 == sent
    unbounded_share = 1 - computed / sent
    # With room for everything the cache hits what the trace shares, less a little: it hits whole
    # 16-token blocks only (the chat template shifts them) and never a prompt's last token.
    assert unbounded_share <= implied and unbounded_share == pytest.approx(implied, abs=0.005)
    # The preset's own cache (about 850k tokens for this model on an H200) is smaller than the
    # excerpt's 1.26 M distinct prompt tokens: it evicts, and hits less than the trace implies.
    computed, _ = _sim_prompt_tokens(plan, caching=True)
    bounded_share = 1 - computed / sent
    assert 0.3 < bounded_share < unbounded_share


def test_no_shared_prefix_means_no_hits(write_scenario):
    plan = build_plan(
        _scenario(write_scenario, f'{{ process = "trace", file = "{AZURE}", duration = "40s" }}')
    )
    computed, sent = _sim_prompt_tokens(plan, caching=True)
    assert sent > 0 and computed == sent


def test_implied_reuse_counted_in_slices_is_the_same(write_scenario, monkeypatch):
    from harness.workload import prefixes

    whole = _mooncake_plan(write_scenario).workload["implied_prefix_reuse"]
    monkeypatch.setattr(prefixes, "REUSE_SLICE_ROWS", 7)
    assert _mooncake_plan(write_scenario).workload["implied_prefix_reuse"] == whole


def test_prefix_groups_hit_the_simulators_cache(write_scenario):
    plan = build_plan(
        load_scenario(
            write_scenario(
                f'name = "t"\nseed = 2\n{GROUPS}[[phases]]\nname = "p"\nrequests = 200\n'
                'arrival = { process = "constant", rate = 20 }\n'
            )
        )
    )
    computed, sent = _sim_prompt_tokens(plan, caching=True)
    implied = plan.workload["implied_prefix_reuse"]["share"]
    assert implied > 0.5 and 0 < 1 - computed / sent <= implied
    assert 1 - computed / sent == pytest.approx(implied, abs=0.05)  # whole 16-token blocks only


def test_plans_with_prompt_sources_survive_the_trip_to_a_worker_process(write_scenario):
    import pickle

    plan = _mooncake_plan(write_scenario)
    copy = pickle.loads(pickle.dumps(plan))
    assert copy.digest() == plan.digest() and copy.prompt_text(2000, 5) == plan.prompt_text(2000, 5)
