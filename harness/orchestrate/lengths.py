"""Which method sets a run's prompt lengths, decided once before the first request.

A tokenizer file (`[workload] tokenizer`) makes the text exact to the token; else the target's own
`/tokenize` (`[workload] server_tokenize`: "on", or "auto" for an HTTP target) makes the whole
prompt exact as the server counts it (`harness.client.tokenize`); else the estimate: one word, one
token. The built-in simulator counts words, which the estimate already matches, so "auto" leaves it
there. The choice is kept in the result as `plan.workload.prompt_lengths` (`method`, and `reason`
for the estimate). "on" where the target has no usable /tokenize stops the run.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from harness.config.target import Target
from harness.errors import RunAborted
from harness.workload.plan import Plan, with_vocabulary
from harness.workload.scenario import Workload


def _with(plan: Plan, info: dict[str, str]) -> Plan:
    return dataclasses.replace(plan, workload={**plan.workload, "prompt_lengths": info})


async def settle_prompt_lengths(
    plan: Plan, wl: Workload, target: Target, say: Callable[[str], None]
) -> Plan:
    """The plan with its prompt-length method settled (and its prompts remade from the server's
    vocabulary where /tokenize was used); `say` gets one line about it. Raises RunAborted."""
    if wl.tokenizer is not None:
        return _with(plan, {"method": "tokenizer_file"})
    if wl.server_tokenize == "off" or (wl.server_tokenize == "auto" and target.kind != "http"):
        why = (
            '[workload] server_tokenize = "off"'
            if wl.server_tokenize == "off"
            else 'the built-in simulator counts words (set [workload] server_tokenize = "on" to ask it)'
        )
        return _with(plan, {"method": "estimate", "reason": why})
    from harness.client.tokenize import TokenizeUnavailable, measure_vocabulary

    try:
        vocab, info = await measure_vocabulary(target, plan, target.endpoint)
    except TokenizeUnavailable as exc:
        if wl.server_tokenize == "on":
            raise RunAborted(f'[workload] server_tokenize = "on": {exc}') from None
        say(f"prompt lengths: estimated (one word, one token): {exc}")
        return _with(plan, {"method": "estimate", "reason": str(exc)})
    say(
        f"prompt lengths: exact, from the target's /tokenize: {info['vocabulary_words']} of {info['of_words']} "
        f"words are one token, the template adds {info['template_tokens']} ({info['tokenize_requests']} requests)"
    )
    return with_vocabulary(plan, vocab, info)


__all__ = ["settle_prompt_lengths"]
