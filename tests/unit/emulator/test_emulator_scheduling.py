# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The scheduling knobs' effects (chunked prefill, mixed chunks, prefix cache and schedule policy, CUDA-graph
limit, speculative steps) and the proof that their defaults leave the calibrated demo numbers unchanged; the step
trace of a seeded workload is pinned.

Schedulers run in-process on a tiny time_scale: a step costs its real-GPU time x 1e-7 of wall time, so the
event loop only orders the steps; what a test compares are step costs and the order of events.
"""
from __future__ import annotations

import asyncio
import random
import time

import pytest

from tests.emulator import EMULATOR, make_importable  # noqa: E402

make_importable()

from sglang._emulator import scheduler as sched  # noqa: E402
from sglang._emulator.capacity import plan_memory  # noqa: E402
from sglang._emulator.model_shape import load_model_shape  # noqa: E402
from sglang._emulator.perf import build_perf_model, expected_output_throughput  # noqa: E402
from sglang._emulator.prefix_cache import PrefixCache, page_keys  # noqa: E402
from sglang._emulator.profile import load_profile  # noqa: E402
from sglang._emulator.server import scheduler_limits  # noqa: E402
from sglang.srt.layers.moe.moe_runner.triton_utils import fused_moe_triton_config as moe_config  # noqa: E402
from sglang.srt.server_args import prepare_server_args  # noqa: E402

QWEN = str(EMULATOR / "models" / "Qwen3.5-122B-A10B")
BASELINE = ["--model-path", QWEN, "--tp", "4", "--speculative-algorithm", "NEXTN"]
TINY_TIME_SCALE = 1e-7


@pytest.fixture(autouse=True, params=["demo.yaml", "newest.yaml"])
def profile_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("SGLANG_EMULATOR_PROFILE", str(EMULATOR / "profiles" / request.param))
    monkeypatch.delenv("SGLANG_MOE_CONFIG_DIR", raising=False)
    moe_config.get_moe_configs.cache_clear()
    return request.param


class RecordingPerf:
    """The perf model, recording every step cost the scheduler asks for."""

    def __init__(self, perf) -> None:
        self.perf, self.calls = perf, []

    def __getattr__(self, name: str):
        return getattr(self.perf, name)

    def prefill_s(self, tokens: int) -> float:
        self.calls.append(("prefill", tokens, self.perf.prefill_s(tokens)))
        return self.calls[-1][2]

    def decode_step_s(self, batch_size: int) -> float:
        self.calls.append(("decode", batch_size, self.perf.decode_step_s(batch_size)))
        return self.calls[-1][2]


def server_parts(extra: list[str] = ()):
    profile, shape = load_profile(), load_model_shape(QWEN)
    args = prepare_server_args([*BASELINE, *extra])
    return profile, args, build_perf_model(profile, args, shape), plan_memory(args, shape, profile)


def make_scheduler(perf, limits, seed: int = 7, noise: tuple[float, float, float] = (0.03, 0.006, 0.12)):
    return sched.Scheduler(perf, limits, TINY_TIME_SCALE, *noise, random.Random(seed), "TP0")


def request(rid: str, input_len: int, output_len: int, prompt=None, stop_after: int | None = None):
    return sched.GenRequest(rid=rid, input_len=input_len, max_new_tokens=output_len, stop_after=stop_after,
                            eos_token_id=0, prompt=prompt)


async def run_all(scheduler, requests, on_step=None) -> None:
    """Submit every request at once and run the scheduler until all are done."""
    for r in requests:
        scheduler.submit(r)
    task = asyncio.create_task(scheduler.run())
    try:
        while not all(r.done for r in requests):
            await asyncio.sleep(0.0005)
    finally:
        task.cancel()


def run(scheduler, requests) -> None:
    asyncio.run(run_all(scheduler, requests))


# --- defaults: the calibrated numbers (computed with the emulator before these knobs were modelled) ---------


def test_demo_perf_numbers_are_unchanged_at_default_knobs() -> None:
    _, args, perf, plan = server_parts()
    assert (plan.max_running_requests, plan.max_total_num_tokens) == (48, 884397)
    assert (args.chunked_prefill_size, args.schedule_policy, args.disable_radix_cache) == (8192, "fcfs", False)
    assert [perf.decode_step_s(b) for b in (1, 8, 26, 48, 64)] == pytest.approx(
        [0.0212212, 0.0272888, 0.0387002, 0.0692384, 0.09127698461538462], rel=1e-12)
    assert (perf.prefill_s(1000), perf.accept_length) == pytest.approx((0.08, 2.6116479999999997), rel=1e-12)
    curve = [expected_output_throughput(perf, c, 1000, 1000, plan.max_running_requests) for c in (1, 4, 16, 32, 64)]
    assert curve == pytest.approx([121.98883184277705, 398.88401037614534, 1214.0211811750648,
                                   1551.810085442596, 1582.8591409017174], rel=1e-12)


def test_seeded_workload_runs_the_same_steps_at_default_knobs() -> None:
    """70 unique prompts of 200-4000 tokens through the server's own limits (chunked prefill 8192, radix cache
    on, fcfs; prompts differ from their first token, so nothing is a cache hit): every step, its cost, the
    tokens and the random stream are pinned. Since the batch's chunk budget (issue #40) every prefill batch holds
    at most 8192 tokens, as SGLang's PrefillAdder fills it; before, the first batches took up to max_prefill_tokens
    (14473, 15872, 16311, 15609 tokens: 132 steps, 23 of them prefills, 14.026 s, 3216 verify steps)."""
    _, args, perf, plan = server_parts()
    recording = RecordingPerf(perf)
    scheduler = make_scheduler(recording, scheduler_limits(args, plan))
    workload = random.Random(11)
    requests = [request(f"r{i}", workload.randint(200, 4000), workload.randint(20, 300),
                        stop_after=None if i % 3 else workload.randint(10, 200)) for i in range(70)]
    for i, r in enumerate(requests):
        r.prompt = [100000 + i, *range(r.input_len - 1)] if i % 2 else f"{i:04d} unique " * (r.input_len // 3)
    run(scheduler, requests)
    assert (len(recording.calls), sum(c[0] == "prefill" for c in recording.calls)) == (157, 27)
    assert sum(c[2] for c in recording.calls) == pytest.approx(14.595367013333318, rel=1e-12)
    assert [c[:2] for c in recording.calls[:4]] == [("prefill", 8192)] * 4
    assert max(tokens for kind, tokens, _ in recording.calls if kind == "prefill") == 8192
    assert sum(r.generated for r in requests) == 8426 and sum(r.verify_steps for r in requests) == 3241
    assert scheduler.rng.random() == pytest.approx(0.0630562674590941, rel=1e-12)
    assert scheduler.instance_factor == pytest.approx(0.9978488870124457, rel=1e-12)
    assert [int(r.rid[1:]) for r in sorted(requests, key=lambda r: r.first_token_at)][:20] == list(range(20))


# --- the knobs' effects, on an emulated clock (noise-free step costs, no sleeping) --------------------------


def simulate(scheduler, arrivals: list[tuple[float, sched.GenRequest]]) -> dict[str, list[float]]:
    """Run `arrivals` ((emulated time, request)) to the end; returns each request's token times."""
    pending, clock, times = sorted(arrivals, key=lambda a: a[0]), 0.0, {r.rid: [] for _, r in arrivals}
    requests = [r for _, r in arrivals]
    while not all(r.done for r in requests):
        while pending and pending[0][0] <= clock:
            scheduler.submit(pending.pop(0)[1])
        if not (scheduler.running or scheduler.waiting or scheduler.chunked):
            clock = pending[0][0]
            continue
        before = {r.rid: r.generated for r in requests}
        batch, cost = scheduler.plan_step()
        clock += cost
        scheduler.finish_step(batch)
        for r in requests:
            times[r.rid] += [clock] * (r.generated > before[r.rid])
    return times


def quiet_scheduler(perf, limits):
    return make_scheduler(perf, limits, noise=(0.0, 0.0, 0.0))


def limits(plan, **knobs) -> sched.SchedulerLimits:
    return sched.SchedulerLimits(plan.max_running_requests, plan.max_total_num_tokens, 16384, 10**9, True, **knobs)


def long_prompt_among_decodes(chunk: int, mixed: bool) -> tuple[float, float, int]:
    """8 running decodes, then a 30000-token prompt: (its TTFT, the running requests' max ITL, chunk count)."""
    _, _, perf, plan = server_parts()
    recording = RecordingPerf(perf)
    scheduler = quiet_scheduler(recording, limits(plan, chunked_prefill_size=chunk, mixed_chunk=mixed))
    decodes = [(0.0, request(f"d{i}", 250, 400)) for i in range(8)]  # 2000 tokens: one batch within either chunk
    times = simulate(scheduler, [*decodes, (1.0, request("long", 30000, 4))])
    ttft = times["long"][0] - 1.0
    max_itl = max(b - a for _, r in decodes for a, b in zip(times[r.rid], times[r.rid][1:]))
    chunks = sum(1 for kind, _, _ in recording.calls if kind == "prefill") - 1  # the decodes' own prefill
    return ttft, max_itl, chunks


def admitted(scheduler) -> list[tuple[str, int]]:
    """The next iteration's prefill batch as (request, tokens it prefills), after it ran."""
    batch, _ = scheduler.plan_step()
    scheduler.finish_step(batch)
    return [(r.rid, tokens) for r, tokens in zip(batch.requests, batch.extend)]


def test_a_prefill_batch_holds_at_most_a_chunk_and_the_request_crossing_it_is_truncated() -> None:
    """sglang 0.5.11/0.5.23 schedule_policy.py PrefillAdder: every admitted request spends its tokens of
    rem_chunk_tokens (chunked_prefill_size), the one whose prompt crosses what is left is truncated to it in whole
    pages and is the chunked request, which continues first in the next batch; without chunking (-1) a batch takes
    every waiting request within max_prefill_tokens."""
    _, _, perf, plan = server_parts()
    scheduler = quiet_scheduler(perf, limits(plan, chunked_prefill_size=500, page_size=16))
    for i in range(5):
        scheduler.submit(request(f"r{i}", 200, 8))
    assert admitted(scheduler) == [("r0", 200), ("r1", 200), ("r2", 96)]
    assert scheduler.chunked.rid == "r2" and scheduler.chunked.first_token_at is None
    assert admitted(scheduler) == [("r2", 104), ("r3", 200), ("r4", 192)]
    assert scheduler.chunked.rid == "r4"
    assert admitted(scheduler) == [("r4", 8)]
    unchunked = quiet_scheduler(perf, limits(plan, chunked_prefill_size=-1))
    for i in range(5):
        unchunked.submit(request(f"r{i}", 200, 8))
    assert admitted(unchunked) == [(f"r{i}", 200) for i in range(5)]


def test_mixed_chunked_prefill_trades_new_ttft_against_running_itl() -> None:
    """--enable-mixed-chunk: each chunk rides with one decode token per running request, so a larger chunk
    makes fewer, longer iterations: the long prompt's first token comes sooner, the running requests wait
    longer between tokens."""
    small_ttft, small_itl, small_chunks = long_prompt_among_decodes(2048, mixed=True)
    large_ttft, large_itl, large_chunks = long_prompt_among_decodes(8192, mixed=True)
    assert (small_chunks, large_chunks) == (15, 4)
    assert large_ttft < small_ttft
    assert large_itl > 2 * small_itl


def test_without_mixed_chunks_the_running_requests_wait_for_every_chunk() -> None:
    """Prefill has priority (get_next_batch_to_run): the chunked request's chunks run back to back, so a
    running request's longest gap spans the whole prefill, and smaller chunks only add per-chunk overhead."""
    _, _, perf, _ = server_parts()
    for chunk in (2048, 8192):
        ttft, max_itl, chunks = long_prompt_among_decodes(chunk, mixed=False)
        assert max_itl >= ttft > chunks * perf.prefill_s(0)
    assert long_prompt_among_decodes(8192, False)[0] < long_prompt_among_decodes(2048, False)[0]


def test_mixed_chunk_is_off_with_eagle_on_0_5_11(profile_path: str, caplog: pytest.LogCaptureFixture) -> None:
    args = prepare_server_args([*BASELINE, "--enable-mixed-chunk"])
    assert args.enable_mixed_chunk is (profile_path == "newest.yaml")
    assert ("Mixed chunked prefill is disabled" in caplog.text) is (profile_path == "demo.yaml")


def test_max_running_requests_caps_the_batch_and_queues_the_rest() -> None:
    _, _, perf, plan = server_parts()
    capped = sched.SchedulerLimits(4, plan.max_total_num_tokens, 16384, 10**9, True)
    scheduler = quiet_scheduler(perf, capped)
    requests = [request(f"r{i}", 100, 50) for i in range(10)]
    for r in requests:
        scheduler.submit(r)
    peak = 0
    while not all(r.done for r in requests):
        batch, _ = scheduler.plan_step()
        scheduler.finish_step(batch)
        peak = max(peak, len(scheduler.running))
        assert len(scheduler.running) + len(scheduler.waiting) + sum(r.done for r in requests) == 10
    assert peak == 4


def test_decode_batches_above_the_cuda_graph_limit_run_eagerly(profile_path: str) -> None:
    limit_flag = "--cuda-graph-max-bs" if profile_path == "demo.yaml" else "--cuda-graph-max-bs-decode"
    profile, _, graphs, _ = server_parts()
    _, args, limited, _ = server_parts([limit_flag, "16"])
    assert args.decode_graph_limit == 16
    assert limited.decode_step_s(16) == pytest.approx(graphs.decode_step_s(16))
    factor = profile.flag_effects.no_cuda_graph_decode_factor
    assert limited.decode_step_s(17) == pytest.approx(graphs.decode_step_s(17) * factor)


def test_more_speculative_steps_accept_more_tokens_and_cost_more_per_step() -> None:
    profile = load_profile()
    p = profile.speculative.token_acceptance
    perfs = [server_parts(["--speculative-num-steps", str(k), "--speculative-eagle-topk", "1",
                           "--speculative-num-draft-tokens", str(k + 1)])[2] for k in (1, 2, 3, 5)]
    for k, perf in zip((1, 2, 3, 5), perfs):
        assert perf.accept_length == pytest.approx((1 - p ** (k + 1)) / (1 - p))
    assert all(a.accept_length < b.accept_length for a, b in zip(perfs, perfs[1:]))
    assert all(a.decode_step_s(32) < b.decode_step_s(32) for a, b in zip(perfs, perfs[1:]))


def test_draft_tokens_beyond_the_chain_widen_the_verify_step() -> None:
    profile = load_profile()
    chain = server_parts(["--speculative-num-steps", "3", "--speculative-eagle-topk", "4",
                          "--speculative-num-draft-tokens", "4"])[2]
    tree = server_parts(["--speculative-num-steps", "3", "--speculative-eagle-topk", "4",
                         "--speculative-num-draft-tokens", "8"])[2]
    spec = profile.speculative
    expected = (1 + spec.draft_step_overhead * 3 + spec.verify_token_overhead * 4) / (1 + spec.draft_step_overhead * 3)
    assert tree.decode_step_s(8) / chain.decode_step_s(8) == pytest.approx(expected)
    assert tree.accept_length == chain.accept_length  # topk 4 widens both; 4 draft tokens already hold 3 steps + 1


def test_prefix_cache_matches_whole_pages_and_evicts_leaves_first() -> None:
    cache = PrefixCache(page_size=4)
    shared = list(range(40))
    first, second = page_keys(shared + [1000] * 8, 4), page_keys(shared + [2000] * 8, 4)
    assert len(first) == 12 and first[:10] == second[:10] and first[10] != second[10]
    cache.insert(first)
    assert cache.match(second, 48) == 40
    assert cache.match(first, 48) == 44  # the last token is always computed: at most 47, in whole pages
    cache.evict_to(40)
    assert cache.match(first, 48) == 40  # the branch's leaves went, the shared root stayed


def shared_prefix_requests(groups: int, per_group: int, prefix_len: int, interleaved: bool):
    """Token-id prompts: a group's system prompt, then a question of its own."""
    order = [(g, i) for i in range(per_group) for g in range(groups)] if interleaved else \
        [(g, i) for g in range(groups) for i in range(per_group)]
    return [request(f"g{g}r{i}", prefix_len + 200, 8,
                    prompt=[g * 100000 + t for t in range(prefix_len)] + [7 * 10**6 + 1000 * g + 10 * i + t
                                                                          for t in range(200)])
            for g, i in order]


def test_a_cached_system_prompt_is_not_prefilled_again() -> None:
    _, args, perf, plan = server_parts()
    for radix, expected_hits in ((True, 4000), (False, 0)):
        knobs = limits(plan, radix_cache=radix, chunked_prefill_size=args.chunked_prefill_size)
        first, second = shared_prefix_requests(1, 2, 4000, interleaved=False)
        scheduler = quiet_scheduler(perf, knobs)
        simulate(scheduler, [(0.0, first), (5.0, second)])
        assert (first.cached_tokens, second.cached_tokens) == (0, expected_hits)


def test_radix_cache_flag_and_policy_reach_the_scheduler() -> None:
    _, args, _, plan = server_parts(["--disable-radix-cache", "--schedule-policy", "lpm", "--page-size", "16"])
    knobs = scheduler_limits(args, plan)
    assert (knobs.radix_cache, knobs.schedule_policy, knobs.page_size) == (False, "lpm", 16)


def prefix_hits(policy: str, radix: bool = True) -> int:
    """Cached tokens over an interleaved shared-prefix workload on a pool that holds about two prefixes."""
    _, _, perf, _ = server_parts()
    knobs = sched.SchedulerLimits(1, 7000, 16384, 10**9, True, radix_cache=radix, schedule_policy=policy)
    requests = shared_prefix_requests(5, 4, 3000, interleaved=True)
    simulate(quiet_scheduler(perf, knobs), [(0.0, r) for r in requests])
    return sum(r.cached_tokens for r in requests)


def test_lpm_serves_cached_prefixes_before_they_are_evicted() -> None:
    """fcfs reaches a group's second request after the other groups' prompts evicted its prefix; lpm sorts the
    queue by cached prefix, so the group's other requests run while it is cached."""
    fcfs, lpm = prefix_hits("fcfs"), prefix_hits("lpm")
    assert fcfs == 0
    assert lpm == 5 * 3 * 3000
    assert prefix_hits("lpm", radix=False) == 0


# --- the loop's own lag ---------------------------------------------------------------------------------------


def test_time_the_loop_falls_behind_is_counted_not_hidden() -> None:
    """Up to MAX_LAG_S behind its modelled timeline the loop catches up; beyond that it gives the time up and counts
    it in ``behind_s``, which the integration test takes off the throughput it expects. The decision, on the loop's
    clock as given."""
    _, args, perf, plan = server_parts()
    scheduler = make_scheduler(perf, scheduler_limits(args, plan))
    assert scheduler.kept_up(10.0, 10.0 + sched.MAX_LAG_S) == 10.0  # within the lag it may catch up: kept
    assert scheduler.stats.behind_s == 0.0
    assert scheduler.kept_up(10.0, 10.3) == pytest.approx(10.3 - sched.MAX_LAG_S)  # the rest is given up ...
    assert scheduler.kept_up(20.0, 20.1) == pytest.approx(20.1 - sched.MAX_LAG_S)
    assert scheduler.stats.behind_s == pytest.approx(0.3 - sched.MAX_LAG_S + 0.1 - sched.MAX_LAG_S)  # ... and counted


def test_a_step_that_blocks_the_loop_is_counted() -> None:
    """A step that blocks the event loop (a loaded CPU) well beyond MAX_LAG_S shows in ``behind_s`` of a real run.
    More load only adds to it."""
    _, args, perf, plan = server_parts()
    scheduler = make_scheduler(perf, scheduler_limits(args, plan))

    async def block_once() -> None:
        await asyncio.sleep(0)
        time.sleep(10 * sched.MAX_LAG_S)

    async def scenario() -> None:
        blocker = asyncio.create_task(block_once())
        await run_all(scheduler, [request("r0", 100, 20)])
        await blocker

    asyncio.run(scenario())
    assert scheduler.stats.behind_s > 0
