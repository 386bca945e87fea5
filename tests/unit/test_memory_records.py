"""Every one-H200 training record of the bench transformer as it is since 2026-12-02 (every strategy, both
engines, compiled, checkpointed, 128 tokens to 32k), replayed through the default profile: the README's
memory claim, and the side that matters most, a plan that says "fits" must fit."""

from __future__ import annotations

from replay import memory_errors


def test_allocated_memory_of_every_one_gpu_record_as_the_readme_says():
    # README: "all 360 one-H200 training records ... 0.44% mean, -2.7..+3.3%": the finished bench train records of
    # 2026-12-02/03, frozen in tests/data/records (the research/ runs after them are not replayed here); the -2.7%
    # are GPT-2 under FSDP2 at 1 x 128 tokens (host-ops/run60; -4.2% without cuBLAS's workspace), the only two
    # under -2%
    errors = memory_errors("2026-12-0[23]-h200x1/**/*.jsonl")
    assert len(errors) == 360
    assert round(100 * sum(map(abs, errors)) / len(errors), 2) <= 0.44
    assert round(100 * min(errors), 1) >= -2.7 and round(100 * max(errors), 1) <= 3.3
    assert len([e for e in errors if e < -0.02]) == 2
