"""Datasets as prompts: ShareGPT, JSON lines and local Hugging Face datasets; lengths, filters,
seeded sampling, and the bad files the loader refuses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.errors import ConfigError
from harness.workload.plan import build_plan
from harness.workload.scenario import load_scenario

REPO = Path(__file__).resolve().parents[2]
SHAREGPT = REPO / "scenarios" / "datasets" / "sharegpt_sample.json"
CONVS = json.loads(SHAREGPT.read_text())
QA = [
    (c["conversations"][0]["value"], c["conversations"][1]["value"])
    for c in CONVS
    if len(c["conversations"]) == 2
]  # the 30 usable rows


def _scn(write_scenario, dataset: str, workload: str = "", phases: str = "", seed: int = 1):
    phases = (
        phases
        or '[[phases]]\nname = "p"\nrequests = 30\narrival = { process = "constant", rate = 10 }\n'
    )
    return load_scenario(
        write_scenario(
            f'name = "t"\nseed = {seed}\n[workload]\ndataset = {dataset}\n{workload}{phases}'
        )
    )


def _texts(plan):
    return [
        plan.prompt_text(int(pp.prompt_tokens[k]), pp.first_seq + k)
        for pp in plan.phases
        for k in range(pp.count)
    ]


def test_sharegpt_prompts_and_answer_lengths(write_scenario):
    plan = build_plan(_scn(write_scenario, f'{{ format = "sharegpt", file = "{SHAREGPT}" }}'))
    ph = plan.phases[0]
    answer_of = {q: a for q, a in QA}
    texts = _texts(plan)
    assert sorted(texts) == sorted(q for q, _ in QA)  # without replacement: each row once
    assert ph.prompt_tokens.tolist() == [
        len(t.split()) for t in texts
    ]  # words, what the simulator counts
    assert ph.output_tokens.tolist() == [
        len(answer_of[t].split()) for t in texts
    ]  # from the answers
    ds = plan.workload["dataset"]
    assert ds["rows"] == 32 and ds["usable_rows"] == 30
    assert ds["skipped_rows"] == {"no prompt text": 1, "no answer to take an output length from": 1}
    assert any("30 of 32 rows usable" in n for n in plan.notes)


def test_output_tokens_in_the_scenario_win_and_keep_rows_without_answers(write_scenario):
    plan = build_plan(
        _scn(
            write_scenario,
            f'{{ format = "sharegpt", file = "{SHAREGPT}" }}',
            'output_tokens = { dist = "fixed", value = 7 }\n',
        )
    )
    assert set(plan.phases[0].output_tokens.tolist()) == {7}
    assert plan.workload["dataset"]["usable_rows"] == 31  # "Are you still there?" counts now
    assert plan.workload["dataset"]["output_tokens_from"] == "[workload] output_tokens"


def test_sampling_is_seeded_with_or_without_replacement(write_scenario):
    def ds(extra: str) -> str:
        return f'{{ format = "sharegpt", file = "{SHAREGPT}"{extra} }}'

    phases = (
        '[[phases]]\nname = "p"\nrequests = 90\narrival = { process = "constant", rate = 10 }\n'
    )
    a = _texts(build_plan(_scn(write_scenario, ds(""), phases=phases)))
    assert a == _texts(
        build_plan(_scn(write_scenario, ds(""), phases=phases))
    )  # same seed, same rows
    assert a != _texts(build_plan(_scn(write_scenario, ds(""), phases=phases, seed=2)))
    for i in range(3):  # three passes, each row once per pass
        assert sorted(a[30 * i : 30 * (i + 1)]) == sorted(q for q, _ in QA)
    with_r = _texts(build_plan(_scn(write_scenario, ds(", replacement = true"), phases=phases)))
    assert len(set(with_r[:30])) < 30  # repeats before every row was used
    in_order = _texts(build_plan(_scn(write_scenario, ds(', order = "file"'), phases=phases)))
    assert in_order[:30] == [q for q, _ in QA] and in_order[30:60] == in_order[:30]


def test_rows_continue_across_phases_without_repeats(write_scenario):
    phases = (
        '[[phases]]\nname = "a"\nrequests = 10\narrival = { process = "constant", rate = 10 }\nwarmup = true\n'
        '[[phases]]\nname = "b"\nrequests = 20\narrival = { process = "constant", rate = 10 }\n'
    )
    texts = _texts(
        build_plan(
            _scn(write_scenario, f'{{ format = "sharegpt", file = "{SHAREGPT}" }}', phases=phases)
        )
    )
    assert len(set(texts)) == 30


def test_length_filters(write_scenario):
    plan = build_plan(
        _scn(
            write_scenario,
            f'{{ format = "sharegpt", file = "{SHAREGPT}", min_prompt_tokens = 8, '
            "max_output_tokens = 60 }",
        )
    )
    keep = [q for q, a in QA if len(q.split()) >= 8 and len(a.split()) <= 60]
    assert sorted(set(_texts(plan))) == sorted(keep)
    skipped = plan.workload["dataset"]["skipped_rows"]
    assert skipped["prompt outside 8..10000000 tokens"] == sum(
        1 for q, _ in QA if len(q.split()) < 8
    )


def test_jsonl_prompts_and_messages(tmp_path, write_scenario):
    rows = [
        {"prompt": "one two three", "output_tokens": 5},
        {
            "messages": [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": "hi there"},
                {"role": "assistant", "content": "hello to you too"},
            ]
        },
        {"prompt": "no length here"},
        {"messages": [{"role": "assistant", "content": "only me"}]},
    ]
    (tmp_path / "d.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    plan = build_plan(
        _scn(
            write_scenario,
            '{ format = "jsonl", file = "d.jsonl", order = "file" }',
            phases='[[phases]]\nname = "p"\nrequests = 2\narrival = { process = "constant", rate = 1 }\n',
        )
    )
    assert _texts(plan) == ["one two three", "be brief\nhi there"]
    assert plan.phases[0].output_tokens.tolist() == [5, 4]
    assert plan.workload["dataset"]["skipped_rows"] == {
        "no answer to take an output length from": 1,
        "no prompt text": 1,
    }


@pytest.mark.parametrize(
    ("files", "dataset", "words"),
    [
        # a malformed JSON line
        (
            {"d.jsonl": '{"prompt": "a"}\n{"prompt": \n'},
            '{ format = "jsonl", file = "d.jsonl" }',
            ["d.jsonl:2", "not valid JSON"],
        ),
        # rows whose fields match no shape
        (
            {"d.jsonl": '{"question": "a"}\n'},
            '{ format = "jsonl", file = "d.jsonl" }',
            ["d.jsonl", "line 1", "no prompt", "`prompt` or `messages`", "question"],
        ),
        # no usable prompt: every row lacks an answer to take a length from
        (
            {"d.jsonl": '{"prompt": "a"}\n{"prompt": "b"}\n'},
            '{ format = "jsonl", file = "d.jsonl" }',
            ["d.jsonl", "no usable prompt among 2 rows", "no answer", "[workload] output_tokens"],
        ),
        # filters that leave nothing
        (
            {},
            f'{{ format = "sharegpt", file = "{SHAREGPT}", min_prompt_tokens = 500 }}',
            ["sharegpt_sample.json", "no usable prompt among 32 rows", "prompt outside 500.."],
        ),
        # ShareGPT: not a list; a row of the wrong shape; bad JSON
        (
            {"s.json": '{"conversations": []}'},
            '{ format = "sharegpt", file = "s.json" }',
            ["s.json", "JSON list", "dict"],
        ),
        (
            {"s.json": '[{"conversations": "hi"}]'},
            '{ format = "sharegpt", file = "s.json" }',
            ["s.json", "row 0", "conversations"],
        ),
        (
            {"s.json": '[{"conversations": [}]'},
            '{ format = "sharegpt", file = "s.json" }',
            ["s.json", "not valid JSON"],
        ),
        # keys and values
        (
            {},
            '{ format = "csv", file = "x" }',
            ["workload.dataset.format", "'sharegpt', 'jsonl', 'hf'"],
        ),
        (
            {},
            '{ format = "jsonl", file = "missing.jsonl" }',
            ["workload.dataset.file", "missing.jsonl", "no such file"],
        ),
        (
            {"d.jsonl": "{}\n"},
            '{ format = "jsonl", file = "d.jsonl", min_prompt_tokens = 9, max_prompt_tokens = 3 }',
            ["workload.dataset.min_prompt_tokens", "<= max_prompt_tokens"],
        ),
        (
            {"d.jsonl": "{}\n"},
            '{ format = "jsonl", file = "d.jsonl", sample = 3 }',
            ["workload.dataset.sample", "unknown key"],
        ),
    ],
)
def test_bad_datasets(tmp_path, write_scenario, files, dataset, words):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    with pytest.raises(ConfigError) as ei:
        _scn(write_scenario, dataset)
    msg = str(ei.value)
    for w in words:
        assert w in msg, (w, msg)


def test_prompt_tokens_and_prefix_groups_do_not_mix_with_a_dataset(write_scenario):
    ds = f'{{ format = "sharegpt", file = "{SHAREGPT}" }}'
    with pytest.raises(ConfigError, match="workload.prompt_tokens: the dataset sets the prompts"):
        _scn(write_scenario, ds, 'prompt_tokens = { dist = "fixed", value = 5 }\n')
    with pytest.raises(
        ConfigError, match="workload.prefix_groups: a dataset's prompts are real text"
    ):
        _scn(
            write_scenario,
            ds,
            'prefix_groups = { groups = 2, tokens = { dist = "fixed", value = 5 } }\n',
        )
    with pytest.raises(ConfigError, match="max_output_tokens: filters the answers' lengths"):
        _scn(
            write_scenario,
            f'{{ format = "sharegpt", file = "{SHAREGPT}", max_output_tokens = 9 }}',
            'output_tokens = { dist = "fixed", value = 5 }\n',
        )


def test_dataset_plans_are_deterministic(write_scenario):
    a = build_plan(_scn(write_scenario, f'{{ format = "sharegpt", file = "{SHAREGPT}" }}'))
    b = build_plan(_scn(write_scenario, f'{{ format = "sharegpt", file = "{SHAREGPT}" }}'))
    c = build_plan(_scn(write_scenario, f'{{ format = "sharegpt", file = "{SHAREGPT}" }}', seed=9))
    assert a.digest() == b.digest() != c.digest()


# --- local Hugging Face datasets (the optional `datasets` extra) ----------------------------------


def test_hf_saved_to_disk_parquet_and_arrow(tmp_path, write_scenario):
    datasets = pytest.importorskip("datasets")
    d = datasets.Dataset.from_list([{"conversations": c["conversations"]} for c in CONVS])
    d.save_to_disk(str(tmp_path / "saved"))
    plan = build_plan(_scn(write_scenario, f'{{ format = "hf", file = "{tmp_path / "saved"}" }}'))
    assert sorted(_texts(plan)) == sorted(q for q, _ in QA)
    qa = datasets.Dataset.from_list([{"question": q, "answer": a} for q, a in QA])
    qa.to_parquet(str(tmp_path / "qa.parquet"))
    plan = build_plan(
        _scn(
            write_scenario,
            f'{{ format = "hf", file = "{tmp_path / "qa.parquet"}", '
            'columns = { prompt = "question", answer = "answer" } }',
        )
    )
    answer_of = dict(QA)
    assert [len(answer_of[t].split()) for t in _texts(plan)] == plan.phases[
        0
    ].output_tokens.tolist()
    datasets.DatasetDict({"test": qa}).save_to_disk(str(tmp_path / "dd"))
    with pytest.raises(
        ConfigError, match=r"split: expected one of the dataset's splits 'test', got 'train'"
    ):
        _scn(
            write_scenario,
            f'{{ format = "hf", file = "{tmp_path / "dd"}", split = "train", '
            'columns = { prompt = "question", answer = "answer" } }',
        )
    arrow = next((tmp_path / "saved").glob("*.arrow"))
    plan = build_plan(_scn(write_scenario, f'{{ format = "hf", file = "{arrow}" }}'))
    assert plan.workload["dataset"]["usable_rows"] == 30
    (tmp_path / "x.txt").write_text("x")
    with pytest.raises(
        ConfigError, match=r"workload.dataset.file: .*x.txt.*expected a folder saved by"
    ):
        _scn(write_scenario, f'{{ format = "hf", file = "{tmp_path / "x.txt"}" }}')
