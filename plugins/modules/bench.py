#!/usr/bin/python
# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
from __future__ import annotations

DOCUMENTATION = r"""
module: bench

short_description: Benchmark an SGLang server with a concurrency sweep at fixed input/output lengths

version_added: 1.0.0

description:
  - Sends streaming requests to a running SGLang server and measures, for every concurrency level, aggregate output
    tokens per second, per-request tokens per second, TTFT, ITL, TPOT and end-to-end latency percentiles.
  - Each level runs warm-up requests (discarded), then O(repeats) timed runs that keep exactly C requests in flight
    until O(requests_per_level) requests have finished. Prompts are unique per request so the server's prefix cache
    cannot turn repeats into cache hits; outputs have a fixed length (C(max_tokens) plus C(ignore_eos)) and output
    token counts come from the server's usage report.
  - With O(arrival) the levels are request rates instead (open loop, Poisson, constant or bursty arrivals), with
    optional length distributions (O(lengths)), shared system prompts (O(shared_prefix)), multi-turn conversations
    (O(multi_turn)) and latency targets (O(slo)); each level then reports goodput, the requests per second that met
    every target, and the client's own send lag with a check that the client was not the bottleneck.
  - A benchmark changes nothing on the host except the optional O(output_file) and O(progress_file); the module
    always reports RV(changed=false).
  - The module runs on the GPU host (or any host that can reach the server). The V(native) engine needs C(aiohttp),
    which the SGLang virtual environment ships, so run the task with C(ansible_python_interpreter) set to that venv's
    python (for example C(/opt/sglang/venv/bin/python)).
  - Ansible cannot stream module output while it runs. Progress lines (one per level start, run and level end) are
    written to O(progress_file); follow them with C(tail -f) on the host.
  - When the server rejects the API key, cannot be reached, dies or hangs, the module fails with a message, and still
    returns (and writes) the levels completed so far in RV(sweep) with RV(sweep.error) set. RV(error_kind) says which
    of these it was, so a caller can tell a configuration that fails under load from a measurement that could not
    be made.
  - A level where more than O(max_failed_share) of the timed requests failed is no measurement. The sweep stops
    there with an error naming the level, the share and sample errors (the level is kept in
    RV(sweep.failed_level), not in RV(sweep.levels)).
  - With O(reference_sweep) (the sweep of the configuration to beat, for example the adopted one) the repeats of
    each level stop as soon as a group-sequential rule with error spending decides the comparison with that level of
    the reference - C(improved), C(regressed), or no change on the side that can still change the adoption
    (O(sequential.one_sided_stops)) - and continue, up to O(sequential.max_repeats),
    while it does not. The rule and its measured error rates are described in C(docs/run-directory.md) ("Sequential
    verdicts"). The sweep records the rule (RV(sweep.sequential)) and every level why it stopped (C(sequential) of
    each of RV(sweep.levels)), and P(llmops.sglang.compare_sweeps#filter) judges such a sweep by the same rule.
  - The result schema is documented in C(docs/bench-schema.md) of the collection; compare two sweeps with the
    P(llmops.sglang.compare_sweeps#filter) filter and render one with P(llmops.sglang.sweep_table#filter).

extends_documentation_fragment:
  - ansible.builtin.action_common_attributes

attributes:
  check_mode:
    support: full
    details: In check mode no request is sent; the module returns RV(plan) and RV(changed=false).
  diff_mode:
    support: none
  platform:
    platforms: posix

options:
  base_url:
    description:
      - Base URL of the SGLang server, for example V(http://127.0.0.1:30000).
      - Mutually exclusive with O(host) and O(port); when none is set the module uses V(http://127.0.0.1:30000).
    type: str
  host:
    description:
      - Host of the SGLang server when O(base_url) is not given. Defaults to V(127.0.0.1).
    type: str
  port:
    description:
      - Port of the SGLang server when O(base_url) is not given. Defaults to V(30000).
    type: int
  api_key:
    description:
      - "The server's C(--api-key). Sent as C(Authorization: Bearer <key>); for O(engine=sglang_bench_serving) passed
        through the E(OPENAI_API_KEY) environment variable, never on a command line."
      - A wrong or missing key makes the module fail at once with a message saying so.
      - At least 8 characters, without control characters and without whitespace at its start or end (as
        M(llmops.sglang.server) requires of it); another key fails the module before any request.
    type: str
  endpoint:
    description:
      - Which API to load.
      - V(completions) is C(/v1/completions) with a token-id prompt, V(generate) is SGLang's native C(/generate) with
        C(input_ids), V(chat) is C(/v1/chat/completions) with text whose length is calibrated once against the
        server's own prompt token count.
    type: str
    choices: [completions, chat, generate]
    default: completions
  model:
    description:
      - Model name sent in the request body. Default is the first id listed by C(/v1/models).
    type: str
  concurrency_levels:
    description:
      - Concurrency levels to measure, in this order. Every value must be a positive integer, at most 4096 (one
        connection per request in flight).
    type: list
    elements: int
    default: [1, 4, 16, 32, 64]
  requests_per_level:
    description:
      - Timed requests per run. Default (null) is V(max(2*C, 4)) for concurrency C. Must be at least the largest
        concurrency level when set.
    type: int
  warmup_requests:
    description:
      - Warm-up requests per level, sent at the level's concurrency and excluded from the results.
      - Default (null) is V(max(C, 4)) per level, so every batch size a level uses has run before timing starts.
    type: int
  warmup_output_len:
    description:
      - Output tokens of each closed-loop warm-up request (at most O(output_len)). A warm-up has to run each batch
        size and prompt shape once, not to generate full answers; 32 is what C(sglang.bench_serving) warms up with
        (C(min(output_len, 32)); engine V(sglang_bench_serving) always uses its own). Open-loop warm-ups send the
        workload's lengths.
    type: int
    default: 32
  repeats:
    description:
      - Timed runs per level. Five or more give P(llmops.sglang.compare_sweeps#filter) full-confidence verdicts;
        three is a smoke test.
      - Not used with O(reference_sweep); then O(sequential.min_repeats) to O(sequential.max_repeats) runs are made.
    type: int
    default: 3
  reference_sweep:
    description:
      - The sweep document (this module's RV(sweep)) of the configuration the one under test is compared with, for
        example the adopted configuration's C(sweep.json) read on the controller with
        C(lookup('ansible.builtin.file', path) | from_json).
      - It must have every level of O(concurrency_levels) with at least 2 runs of O(sequential.metric); its runs are
        what each look compares the new runs with.
      - When set, the repeats of each level follow O(sequential) instead of O(repeats).
    type: dict
  sequential:
    description:
      - The stopping rule used with O(reference_sweep) (required with it; all defaults when left out). After each
        run from O(sequential.min_repeats) on, the level's runs are compared with the reference's by a
        group-sequential t test on the log of O(sequential.metric) - one look per run, error spent by Lan-DeMets
        spending functions - and the level stops when the test decides.
      - Each level spends O(sequential.alpha) divided by the number of levels, so that across the whole sweep a
        configuration without a real change is claimed changed with probability at most O(sequential.alpha).
    type: dict
    suboptions:
      min_repeats:
        description: Runs per level before the first look (at least 1; the pipeline uses at least 2).
        type: int
        default: 2
      max_repeats:
        description: Runs per level at most (up to 50); the look after the last one decides what is left undecided.
        type: int
        default: 10
      spending:
        description:
          - Alpha-spending function of the efficacy boundaries (C(improved), C(regressed)).
          - V(obrien_fleming) spends almost nothing early and keeps the last look close to a fixed-count test;
            V(pocock) spends evenly, so large changes stop sooner and the last boundary is wider.
        type: str
        choices: [obrien_fleming, pocock]
        default: obrien_fleming
      futility_spending:
        description: Beta-spending function of the C(no_change) boundary (same choices).
        type: str
        choices: [obrien_fleming, pocock]
        default: pocock
      beta:
        description:
          - Largest probability (above 0, below 0.5) that a real change as large as the effect threshold is
            stopped as C(no_change).
        type: float
        default: 0.2
      stop_on_regression:
        description:
          - End the sweep at a level that stopped C(regressed). Such a configuration cannot be adopted, so the
            remaining levels are not measured (they are listed in RV(sweep.not_measured)).
        type: bool
        default: true
      one_sided_stops:
        description:
          - A candidate is adopted when a level improved and none regressed, so each level only settles the side
            of its C(no_change) interval that can still change that. Before any level of the sweep improved, a level
            stops C(not_improved) as soon as the upper side lies below the effect threshold, unless the change is
            at or below minus the threshold (a likely regression is measured on, since it ends the sweep). After a
            level improved, a level stops C(not_regressed) as soon as the lower side lies above minus the threshold.
            A true change as large as the threshold passes either way with probability at most O(sequential.beta).
          - A level that stopped C(not_improved) before a later level improved, without its interval ruling out a
            regression, is measured on right after that level (its warm-up again, then more runs) until it stops
            C(not_regressed); RV(sweep.levels) lists it there. A crossing of either efficacy boundary still stops a
            level C(improved) or C(regressed).
          - False settles both sides at every level (C(no_change)).
        type: bool
        default: true
      metric:
        description: The run metric compared (higher is better); as in P(llmops.sglang.compare_sweeps#filter).
        type: str
        choices: [agg_tok_s, per_req_tok_s, steady_agg_tok_s]
        default: agg_tok_s
      min_effect_pct:
        description:
          - Smallest change in percent that counts; the effect threshold is the larger of this and twice the pooled
            run-to-run CV, as in P(llmops.sglang.compare_sweeps#filter).
        type: float
        default: 2.0
      alpha:
        description: Two-sided significance level for the whole sweep (between 0 and 1).
        type: float
        default: 0.05
  input_len:
    description:
      - Prompt length in tokens.
    type: int
    default: 1000
  output_len:
    description:
      - Output length in tokens (C(max_tokens) or C(max_new_tokens) with C(ignore_eos)).
    type: int
    default: 1000
  request_timeout_s:
    description:
      - Time limit for one request, from sending it to its last streamed byte. A request over the limit counts as
        failed.
    type: float
    default: 600
  level_timeout_s:
    description:
      - Time limit for one concurrency level (warm-up plus all repeats) with the V(native) engine, and for one
        C(bench_serving) run with V(sglang_bench_serving). When exceeded the sweep stops with an error.
      - A number above 0; V(null) (no limit) is refused.
    type: float
    default: 3600
  steady_state:
    description:
      - Also report C(steady_agg_tok_s) for each run in RV(sweep), the output throughput counted only while at least
        90% of C requests were in flight (ramp-up and drain excluded).
    type: bool
    default: false
  max_failed_share:
    description:
      - Largest share (0 to 1) of a level's timed requests that may fail (HTTP error, timeout, aborted, no tokens)
        for the level to count as measured. Above it the module fails naming the level, the share and sample
        errors; throughput over the requests that happened to succeed is not reported as a result.
      - V(0) tolerates no failed request; V(1) only fails when every request of a run fails.
    type: float
    default: 0.01
  seed:
    description:
      - Seed of the random prompts. Prompts differ per request, run and level for a given seed.
    type: int
    default: 0
  output_file:
    description:
      - Path on the host where the sweep is written as JSON (atomically). Parent directories are created.
    type: path
  progress_file:
    description:
      - Path on the host where progress lines are appended while the sweep runs. Default is O(output_file) plus
        C(.progress); without O(output_file) no progress file is written unless this is set.
    type: path
  engine:
    description:
      - V(native) uses this collection's asyncio client.
      - V(sglang_bench_serving) runs C(python -m sglang.bench_serving) once per level and repeat with the
        C(random-ids) dataset, C(--random-range-ratio 1) and C(--max-concurrency C), and maps its JSONL results into
        the same schema. Fields it does not report (steady-state throughput, some percentiles) are null.
    type: str
    choices: [native, sglang_bench_serving]
    default: native
  python:
    description:
      - Python used to run C(sglang.bench_serving) with O(engine=sglang_bench_serving). Default is the interpreter
        running this module.
    type: path
  arrival:
    description:
      - Open-loop levels instead of closed-loop concurrency levels. Each level is a request rate; requests are sent
        at seeded arrival times whether or not earlier ones finished, as with C(bench_serving --request-rate), and
        O(concurrency_levels) is not used. Only with O(engine=native) and without O(reference_sweep).
      - Per level the timed runs send O(requests_per_level) requests (default a minute of arrivals, at least 4) after
        O(warmup_requests) (default ten seconds of arrivals, at least 4). The arrival times and lengths are the
        same for every configuration measured with the same O(seed).
      - Enables O(lengths), O(shared_prefix), O(multi_turn) and O(slo); every run reports its send lag and whether
        the client, not the server, was the limit (C(client_limited)).
    type: dict
    suboptions:
      request_rates:
        description: Request rates (requests per second, above 0) to measure, in this order; one level each.
        type: list
        elements: float
        required: true
      process:
        description:
          - V(poisson) (exponential gaps, what C(bench_serving) sends), V(constant) (equal gaps) or V(gamma) (gamma
            gaps with shape O(arrival.burstiness); the mean rate is kept, the gaps' coefficient of variation is
            1/sqrt(burstiness)).
        type: str
        choices: [poisson, constant, gamma]
        default: poisson
      burstiness:
        description:
          - Shape of the gamma gaps with O(arrival.process=gamma), as vLLM's C(--burstiness). V(1) is Poisson,
            below 1 burstier, above 1 more uniform.
        type: float
        default: 1.0
      max_concurrency:
        description:
          - Most requests in flight, as C(bench_serving --max-concurrency). Arrivals beyond it wait for a slot; that
            wait counts in their TTFT and E2E, not in the client's send lag. Default no cap.
        type: int
  lengths:
    description:
      - Input and output lengths per request with O(arrival). Default V(fixed) (O(input_len) and O(output_len)).
    type: dict
    suboptions:
      distribution:
        description:
          - V(fixed), V(uniform) (integers between the bounds, both included) or V(file) (drawn with replacement
            from O(lengths.file)).
        type: str
        choices: [fixed, uniform, file]
        default: fixed
      input_min:
        description: Smallest prompt length in tokens with V(uniform).
        type: int
      input_max:
        description: Largest prompt length in tokens with V(uniform).
        type: int
      output_min:
        description: Smallest output length in tokens with V(uniform).
        type: int
      output_max:
        description: Largest output length in tokens with V(uniform).
        type: int
      file:
        description:
          - 'JSONL file on the host with V(file), one request per line as
            C({"input_tokens": 812, "output_tokens": 164}) (other keys ignored, blank lines skipped), for example
            taken from the server''s request log. An invalid line fails the module naming the line and field before
            anything is sent.'
        type: path
  shared_prefix:
    description:
      - With O(arrival), consecutive requests (conversations with O(multi_turn)) share a system prompt, as the
        C(generated-shared-prefix) dataset of C(bench_serving) does; the server's radix cache can serve it. A
        request's prompt is the group's system prompt followed by its own unique part of the sampled input length.
    type: dict
    suboptions:
      system_prompt_len:
        description: Tokens of each group's system prompt.
        type: int
        required: true
      requests_per_group:
        description: Requests (conversations) that share one system prompt; every run uses fresh groups.
        type: int
        required: true
  multi_turn:
    description:
      - With O(arrival), each arrival starts a conversation of O(multi_turn.turns) requests. Turn n resends the
        history (every earlier user message and output, then the new user message) and is sent when turn n-1 has
        finished. The outputs resent are stand-ins of the server-reported length, not the generated text.
      - O(requests_per_level) and O(warmup_requests) count requests and are rounded up to whole conversations.
    type: dict
    suboptions:
      turns:
        description: Requests per conversation.
        type: int
        required: true
  slo:
    description:
      - Latency targets with O(arrival). Each run reports per target the share of requests that met it, the value
        at its percentile and whether the target holds there, the share of requests that met every target
        (C(slo_attainment)) and C(goodput_rps), such requests per second. Failed requests meet no target.
      - Per request, TTFT and E2E are its own, TPOT is (E2E - TTFT) / (tokens - 1) and ITL its largest gap between
        token deliveries; the percentile of V(itl_ms) is taken over all gaps, as the run's C(itl_ms).
    type: dict
    suboptions:
      ttft_ms:
        description: Time to first token.
        type: dict
        suboptions:
          target:
            description: Largest value in milliseconds that meets the target.
            type: float
            required: true
          percentile:
            description: Percentile (above 0, up to 100) at which the target must hold.
            type: float
            default: 99
      tpot_ms:
        description: Time per output token.
        type: dict
        suboptions:
          target:
            description: Largest value in milliseconds that meets the target.
            type: float
            required: true
          percentile:
            description: Percentile (above 0, up to 100) at which the target must hold.
            type: float
            default: 99
      itl_ms:
        description: Inter-token latency.
        type: dict
        suboptions:
          target:
            description: Largest value in milliseconds that meets the target.
            type: float
            required: true
          percentile:
            description: Percentile (above 0, up to 100) at which the target must hold.
            type: float
            default: 99
      e2e_ms:
        description: End-to-end latency.
        type: dict
        suboptions:
          target:
            description: Largest value in milliseconds that meets the target.
            type: float
            required: true
          percentile:
            description: Percentile (above 0, up to 100) at which the target must hold.
            type: float
            default: 99
  max_client_lag_ms:
    description:
      - With O(arrival), a run whose send lag (actual minus scheduled send time) has a p99 above this, or whose
        client used more than 90% of a core, is flagged C(client_limited) with the reason; its latencies are then
        partly the client's.
    type: float
    default: 50

notes:
  - Output token counts come from the server (C(stream_options.include_usage) or C(meta_info.completion_tokens));
    requests whose count differs from O(output_len) are counted in C(token_mismatch) of each run in RV(sweep).
  - Inter-token latency is the gap between successive deliveries of tokens (stream chunks that arrive in the same
    socket read count once); TPOT is (E2E - TTFT) / (tokens - 1).

author:
  - llmops.sglang contributors (@llmops)

seealso:
  - name: SGLang bench_serving
    description: SGLang's own serving benchmark, used by O(engine=sglang_bench_serving).
    link: https://github.com/sgl-project/sglang/blob/main/python/sglang/bench_serving.py
"""

EXAMPLES = r"""
---
- name: Sweep the baseline server on the GPU host
  llmops.sglang.bench:
    base_url: http://127.0.0.1:30000
    api_key: "{{ sglang_api_key }}"
    concurrency_levels: [1, 4, 16, 32, 64]
    input_len: 1000
    output_len: 1000
    repeats: 5
    output_file: /var/lib/sglang-bench/baseline.json
  vars:
    # The module needs aiohttp; the SGLang venv has it.
    ansible_python_interpreter: /opt/sglang/venv/bin/python
  register: baseline

- name: Show the operators' table
  ansible.builtin.debug:
    msg: "{{ baseline.table }}"

- name: Same sweep through SGLang's own bench_serving, native /generate endpoint
  llmops.sglang.bench:
    port: 30000
    endpoint: generate
    engine: sglang_bench_serving
    concurrency_levels: [16, 64]
    output_file: /var/lib/sglang-bench/bench_serving.json
  vars:
    ansible_python_interpreter: /opt/sglang/venv/bin/python

- name: Measure a candidate against the baseline's sweep, stopping each level once the verdict is decided
  llmops.sglang.bench:
    port: 30000
    concurrency_levels: [1, 4, 16, 32, 64]
    reference_sweep: "{{ baseline.sweep }}"
    sequential:
      min_repeats: 2
      max_repeats: 10
      min_effect_pct: 2.0
    output_file: /var/lib/sglang-bench/candidate.json
  vars:
    ansible_python_interpreter: /opt/sglang/venv/bin/python
  register: candidate

- name: Goodput under an SLO, bursty open-loop arrivals, lengths from the users' own requests, shared system prompts
  llmops.sglang.bench:
    port: 30000
    arrival:
      request_rates: [2, 4, 8]
      process: gamma
      burstiness: 0.5
      max_concurrency: 256
    lengths:
      distribution: file
      file: /var/lib/sglang-bench/requests.jsonl
    shared_prefix:
      system_prompt_len: 2000
      requests_per_group: 16
    slo:
      ttft_ms: {target: 2000, percentile: 99}
      tpot_ms: {target: 50, percentile: 99}
    repeats: 3
    output_file: /var/lib/sglang-bench/goodput.json
  vars:
    ansible_python_interpreter: /opt/sglang/venv/bin/python
  register: goodput

- name: Multi-turn conversations of four turns at a steady rate, uniform lengths
  llmops.sglang.bench:
    port: 30000
    endpoint: chat
    arrival:
      request_rates: [1]
      process: constant
    lengths: {distribution: uniform, input_min: 100, input_max: 400, output_min: 50, output_max: 200}
    multi_turn: {turns: 4}
    slo:
      e2e_ms: {target: 20000, percentile: 90}
  vars:
    ansible_python_interpreter: /opt/sglang/venv/bin/python

- name: Compare a candidate sweep with the baseline (a sequential sweep is judged by its own stopping rule)
  ansible.builtin.set_fact:
    verdict: "{{ baseline.sweep | llmops.sglang.compare_sweeps(candidate.sweep) }}"
"""

RETURN = r"""
changed:
  description: Always V(false); a benchmark changes nothing.
  returned: always
  type: bool
  sample: false
plan:
  description:
    - What the sweep sends (or, in check mode, would send). With O(reference_sweep), C(sequential) is the stopping
      rule's design and a level's C(repeats) is the most it may take.
    - With O(arrival) each level has C(request_rate) instead of C(concurrency), and C(workload) is the open-loop
      workload (as RV(sweep.workload)).
  returned: always
  type: dict
  sample:
    engine: native
    base_url: http://127.0.0.1:30000
    endpoint: completions
    levels:
      - {concurrency: 1, warmup_requests: 4, requests: 4, repeats: 3}
      - {concurrency: 16, warmup_requests: 16, requests: 32, repeats: 3}
    sequential: null
sweep:
  description:
    - The sweep document (C(docs/bench-schema.md)). Also returned when the module fails because the server stopped
      mid-sweep; then RV(sweep.error) says why and RV(sweep.levels) holds the completed levels.
  returned: when not in check mode
  type: dict
  contains:
    schema_version:
      description: Version of the sweep schema.
      type: int
      sample: 1
    started_at:
      description: UTC start time, ISO 8601.
      type: str
      sample: "2026-11-29T10:15:02+00:00"
    finished_at:
      description: UTC end time, ISO 8601.
      type: str
      sample: "2026-11-29T10:41:37+00:00"
    engine:
      description: V(native) or V(sglang_bench_serving).
      type: str
      sample: native
    base_url:
      description: Server URL.
      type: str
      sample: http://127.0.0.1:30000
    endpoint:
      description: API loaded.
      type: str
      sample: completions
    model:
      description: Model name used in the requests.
      type: str
      sample: /models/Qwen3.5-122B-A10B
    input_len:
      description: Requested prompt tokens.
      type: int
      sample: 1000
    output_len:
      description: Requested output tokens.
      type: int
      sample: 1000
    warmup_output_len:
      description: Output tokens of each closed-loop warm-up request (V(min(output_len, warmup_output_len))).
      type: int
      sample: 32
    repeats:
      description: Timed runs per level (with O(reference_sweep) the most a level may take, O(sequential.max_repeats)).
      type: int
      sample: 3
    levels:
      description:
        - One entry per completed level, in the order the levels were settled (a level reopened by
          O(sequential.one_sided_stops) comes after the level that reopened it), with C(concurrency), C(requests),
          C(warmup_requests), C(runs) (one dict per timed run with C(agg_tok_s), C(per_req_tok_s), C(tokens),
          C(wall_s), C(ok), C(failed), C(error_samples), C(ttft_ms), C(itl_ms), C(tpot_ms), C(e2e_ms) as C({p50, p90, p99}), C(token_mismatch),
          C(steady_agg_tok_s), C(achieved_concurrency), C(client_cpu_pct)) and C(summary) (medians over runs).
        - With O(arrival) a level has C(request_rate) instead of C(concurrency) and C(open_loop) (medians over runs
          of C(achieved_rate_rps), C(goodput_rps), C(slo_attainment), C(lag_p99_ms); C(slo_holds) per target, true
          only if it held in every run; C(client_limited) and C(client_limited_reasons)); each run adds
          C(request_rate), C(achieved_rate_rps), C(lag_ms) (C({p50, p99, max})), C(client_limited),
          C(client_limited_reason) and with O(slo) C(good), C(goodput_rps), C(slo_attainment), C(slo_holds), C(slo)
          (per target C(target), C(percentile), C(observed), C(holds), C(attainment)).
        - With O(reference_sweep) also C(sequential), the look that stopped the level - C(decision) (C(improved),
          C(regressed), C(no_change), C(not_improved), C(not_regressed)), C(boundary), C(repeats), C(statistic), C(efficacy_bound),
          C(alpha_spent), C(beta_spent), C(estimate_pct), C(reason)); the look after O(sequential.max_repeats) runs
          always decides.
      type: list
      elements: dict
    sequential:
      description:
        - The stopping rule the sweep was measured with (C(design), with the comparison options it is bound to,
          and C(reference_runs), runs per level of O(reference_sweep)), or null without O(reference_sweep).
      type: dict
      sample:
        design: {min_repeats: 2, max_repeats: 10, spending: obrien_fleming, futility_spending: pocock, beta: 0.2,
                 stop_on_regression: true, one_sided_stops: true, alpha: 0.05, levels: 5, level_alpha: 0.01,
                 metric: agg_tok_s,
                 min_effect_pct: 2.0}
        reference_runs: {"1": 5, "4": 5, "16": 5, "32": 5, "64": 5}
    not_measured:
      description: Levels a stopping rule left out, C({concurrency, reason}) (a level before them regressed).
      type: list
      elements: dict
      sample: []
    error:
      description: Why the sweep stopped early, or null.
      type: str
      sample: null
    error_kind:
      description:
        - Why the sweep stopped, as a word, or null. V(auth) (HTTP 401), V(unreachable) (no connection),
          V(requests_failed) (every request of a run failed, or more than O(max_failed_share) of a level),
          V(time_limit) (O(level_timeout_s)), V(server) (an answer the benchmark cannot use), V(client) (the
          client could not run).
      type: str
      sample: null
    failed_level:
      description: The level whose failed share exceeded O(max_failed_share) (same keys as a level), or null.
      type: dict
      sample: null
    max_failed_share:
      description: The O(max_failed_share) the sweep ran with.
      type: float
      sample: 0.01
    workload:
      description:
        - With O(arrival) only, the open-loop workload the sweep ran - C(arrival), C(lengths) (with C(file_requests),
          the requests read from O(lengths.file)), C(shared_prefix), C(multi_turn), C(slo), C(max_client_lag_ms),
          C(seed).
      type: dict
      sample:
        arrival: {process: gamma, request_rates: [2, 4, 8], burstiness: 0.5, max_concurrency: 256}
        lengths: {distribution: fixed, input_min: null, input_max: null, output_min: null, output_max: null,
                  file: null, file_requests: null}
        shared_prefix: null
        multi_turn: null
        slo: {ttft_ms: {target: 2000.0, percentile: 99.0}}
        max_client_lag_ms: 50.0
        seed: 0
    client:
      description: Versions of the client side.
      type: dict
      sample: {python: 3.11.2, aiohttp: 3.13.2}
table:
  description:
    - Markdown table of the sweep, one row per level (medians over repeats; Ok is successful/attempted).
    - With O(arrival) one row per request rate with the achieved rate, goodput, SLO attainment, throughput and the
      client's send lag p99.
  returned: when not in check mode
  type: str
  sample: |-
    | C | Agg tok/s | Per-req tok/s | Tokens | Wall(s) | Ok |
    |---:|---:|---:|---:|---:|---:|
    | 1 | 121.6 | 121.7 | 4000 | 32.89 | 12/12 |
output_file:
  description: Where the sweep JSON was written, or null.
  returned: always
  type: str
  sample: /var/lib/sglang-bench/baseline.json
progress_file:
  description: Where progress lines were written, or null.
  returned: always
  type: str
  sample: /var/lib/sglang-bench/baseline.json.progress
error_kind:
  description:
    - On failure, what failed. V(input) (an option is invalid; nothing was sent), V(client) (the benchmark could not
      run here, e.g. no aiohttp), or RV(sweep.error_kind) when the sweep stopped early.
  returned: on failure
  type: str
  sample: auth
"""

import contextlib
import json
import sys
import traceback
import typing as t
from pathlib import Path

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmops.sglang.plugins.module_utils.atomic_write import write_atomically
from ansible_collections.llmops.sglang.plugins.module_utils._bench_config import (
    DEFAULT_CONCURRENCY_LEVELS,
    ENDPOINT_PATHS,
    WARMUP_OUTPUT_LEN,
    BenchConfig,
)
from ansible_collections.llmops.sglang.plugins.module_utils._bench_sweep import format_progress, workload_document
from ansible_collections.llmops.sglang.plugins.module_utils.bench_client import run_sweep
from ansible_collections.llmops.sglang.plugins.module_utils.bench_serving import run_bench_serving_sweep
from ansible_collections.llmops.sglang.plugins.module_utils.sequential_verdict import (
    DESIGN_DEFAULTS,
    SPENDING_FUNCTIONS,
)
from ansible_collections.llmops.sglang.plugins.module_utils.server_guard import guarded_work
from ansible_collections.llmops.sglang.plugins.module_utils.workload import (
    ARRIVAL_PROCESSES,
    DEFAULT_MAX_CLIENT_LAG_MS,
    DEFAULT_SLO_PERCENTILE,
    LENGTH_DISTRIBUTIONS,
    SLO_METRICS,
    Arrival,
    Lengths,
    rate_table,
    read_length_file,
)
from ansible_collections.llmops.sglang.plugins.module_utils.sweep_stats import (
    THROUGHPUT_METRICS,
    sequential_plan,
    sequential_stop_rule,
    sweep_table,
)

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 30000
ENGINES = ("native", "sglang_bench_serving")


def sequential_spec() -> dict:
    return dict(
        min_repeats=dict(type="int", default=DESIGN_DEFAULTS["min_repeats"]),
        max_repeats=dict(type="int", default=DESIGN_DEFAULTS["max_repeats"]),
        spending=dict(type="str", choices=list(SPENDING_FUNCTIONS), default=DESIGN_DEFAULTS["spending"]),
        futility_spending=dict(type="str", choices=list(SPENDING_FUNCTIONS),
                               default=DESIGN_DEFAULTS["futility_spending"]),
        beta=dict(type="float", default=DESIGN_DEFAULTS["beta"]),
        stop_on_regression=dict(type="bool", default=DESIGN_DEFAULTS["stop_on_regression"]),
        one_sided_stops=dict(type="bool", default=DESIGN_DEFAULTS["one_sided_stops"]),
        metric=dict(type="str", choices=list(THROUGHPUT_METRICS), default="agg_tok_s"),
        min_effect_pct=dict(type="float", default=2.0),
        alpha=dict(type="float", default=0.05),
    )


def slo_spec() -> dict:
    target = dict(target=dict(type="float", required=True),
                  percentile=dict(type="float", default=DEFAULT_SLO_PERCENTILE))
    return {metric: dict(type="dict", options=target) for metric in SLO_METRICS}


def argument_spec() -> dict:
    return dict(
        base_url=dict(type="str"),
        host=dict(type="str"),
        port=dict(type="int"),
        api_key=dict(type="str", no_log=True),
        endpoint=dict(type="str", choices=list(ENDPOINT_PATHS), default="completions"),
        model=dict(type="str"),
        concurrency_levels=dict(type="list", elements="int", default=list(DEFAULT_CONCURRENCY_LEVELS)),
        requests_per_level=dict(type="int"),
        warmup_requests=dict(type="int"),
        warmup_output_len=dict(type="int", default=WARMUP_OUTPUT_LEN),
        repeats=dict(type="int", default=3),
        reference_sweep=dict(type="dict"),
        sequential=dict(type="dict", options=sequential_spec()),
        input_len=dict(type="int", default=1000),
        output_len=dict(type="int", default=1000),
        request_timeout_s=dict(type="float", default=600.0),
        level_timeout_s=dict(type="float", default=3600.0),
        steady_state=dict(type="bool", default=False),
        seed=dict(type="int", default=0),
        max_failed_share=dict(type="float", default=0.01),
        output_file=dict(type="path"),
        progress_file=dict(type="path"),
        engine=dict(type="str", choices=list(ENGINES), default="native"),
        python=dict(type="path"),
        arrival=dict(type="dict", options=dict(
            request_rates=dict(type="list", elements="float", required=True),
            process=dict(type="str", choices=list(ARRIVAL_PROCESSES), default="poisson"),
            burstiness=dict(type="float", default=1.0),
            max_concurrency=dict(type="int"),
        )),
        lengths=dict(type="dict", options=dict(
            distribution=dict(type="str", choices=list(LENGTH_DISTRIBUTIONS), default="fixed"),
            input_min=dict(type="int"), input_max=dict(type="int"),
            output_min=dict(type="int"), output_max=dict(type="int"),
            file=dict(type="path"),
        )),
        shared_prefix=dict(type="dict", options=dict(system_prompt_len=dict(type="int", required=True),
                                                     requests_per_group=dict(type="int", required=True))),
        multi_turn=dict(type="dict", options=dict(turns=dict(type="int", required=True))),
        slo=dict(type="dict", options=slo_spec()),
        max_client_lag_ms=dict(type="float", default=DEFAULT_MAX_CLIENT_LAG_MS),
    )


def lengths_from_params(params: dict | None) -> Lengths:
    """The length distribution; a JSONL file is read and validated here, before any request is sent."""
    if not params:
        return Lengths()
    samples = read_length_file(params["file"]) if params["distribution"] == "file" and params["file"] else ()
    return Lengths(**params, samples=samples)


def arrival_from_params(params: dict) -> Arrival | None:
    arrival = params["arrival"]
    if arrival is None:
        return None
    if params["engine"] != "native":
        raise ValueError("arrival (open-loop levels) needs engine=native; sglang_bench_serving runs closed-loop levels")
    if params["reference_sweep"] is not None:
        raise ValueError("reference_sweep compares closed-loop concurrency levels; unset it or arrival")
    return Arrival(request_rates=tuple(arrival["request_rates"]), process=arrival["process"],
                   burstiness=arrival["burstiness"], max_concurrency=arrival["max_concurrency"])


def warmup_output_len_from_params(params: dict) -> int:
    if params["engine"] != "native" and params["warmup_output_len"] != WARMUP_OUTPUT_LEN:
        raise ValueError(f"warmup_output_len: sglang.bench_serving warms up with min(output_len, {WARMUP_OUTPUT_LEN}) "
                         "tokens of its own; leave it unset with engine=sglang_bench_serving")
    return params["warmup_output_len"]


def sequential_from_params(params: dict) -> dict | None:
    """The stopping rule against ``reference_sweep`` (``sweep.sequential``), or None for a fixed repeat count."""
    if params["reference_sweep"] is None:
        return None
    return sequential_plan(params["reference_sweep"], params["concurrency_levels"], params["sequential"] or {})


def config_from_params(params: dict, sequential: dict | None) -> BenchConfig:
    base_url = params["base_url"] or f"http://{params['host'] or DEFAULT_HOST}:{params['port'] or DEFAULT_PORT}"
    # A stopping rule caps the repeats at max_repeats; the rule ends most levels before.
    repeats = sequential["design"]["max_repeats"] if sequential else params["repeats"]
    return BenchConfig(
        base_url=base_url, endpoint=params["endpoint"], model=params["model"],
        concurrency_levels=tuple(params["concurrency_levels"]), requests_per_level=params["requests_per_level"],
        warmup_requests=params["warmup_requests"], warmup_output_len=warmup_output_len_from_params(params),
        repeats=repeats,
        input_len=params["input_len"],
        output_len=params["output_len"], request_timeout_s=params["request_timeout_s"],
        level_timeout_s=params["level_timeout_s"], steady_state=params["steady_state"], api_key=params["api_key"],
        seed=params["seed"], max_failed_share=params["max_failed_share"],
        arrival=arrival_from_params(params), lengths=lengths_from_params(params["lengths"]),
        shared_prefix=params["shared_prefix"], multi_turn=params["multi_turn"], slo=params["slo"],
        max_client_lag_ms=params["max_client_lag_ms"],
    )


@contextlib.contextmanager
def progress_writer(path: str | None) -> t.Iterator[t.Callable[[dict], None] | None]:
    """Callback appending one line per progress event to ``path`` (flushed, so ``tail -f`` sees it at once)."""
    if not path:
        yield None
        return
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as stream:
        def write(event: dict) -> None:
            stream.write(format_progress(event) + "\n")
            stream.flush()
        yield write


def write_json_atomically(path: str, document: dict) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, (json.dumps(document, indent=2) + "\n").encode("utf-8"))


def run(module: AnsibleModule, config: BenchConfig, on_progress: t.Callable[[dict], None] | None,
        sequential: dict | None) -> dict:
    stop_rule = sequential_stop_rule(module.params["reference_sweep"], sequential) if sequential else None
    if module.params["engine"] == "native":
        sweep = run_sweep(config, on_progress, stop_rule)
    else:
        # module.tmpdir is removed when the module exits, together with bench_serving's per-run JSONL files.
        sweep = run_bench_serving_sweep(config, python=module.params["python"] or sys.executable,
                                        workdir=Path(module.tmpdir), on_progress=on_progress, stop_rule=stop_rule)
    sweep["sequential"] = sequential
    return sweep


def main() -> None:
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True,
                           mutually_exclusive=[("base_url", "host"), ("base_url", "port")],
                           required_by={"sequential": "reference_sweep"})
    params = module.params
    try:
        sequential = sequential_from_params(params)
        config = config_from_params(params, sequential)
    except ValueError as exc:
        module.fail_json(msg=str(exc), error_kind="input")
    progress_file = params["progress_file"] or (params["output_file"] + ".progress" if params["output_file"] else None)
    result: dict[str, t.Any] = {
        "changed": False, "output_file": params["output_file"], "progress_file": progress_file,
        "plan": {"engine": params["engine"], "base_url": config.base_url, "endpoint": config.endpoint,
                 "model": config.model, "levels": config.plan(),
                 "sequential": sequential["design"] if sequential else None},
    }
    if config.arrival is not None:
        result["plan"]["workload"] = workload_document(config)
    if module.check_mode:
        module.exit_json(msg="check mode: no request sent", **result)
    try:
        with guarded_work(), progress_writer(progress_file) as on_progress:
            sweep = run(module, config, on_progress, sequential)
        result.update(sweep=sweep, table=rate_table(sweep["levels"]) if config.arrival else sweep_table(sweep))
        if params["output_file"]:
            write_json_atomically(params["output_file"], sweep)
    except (RuntimeError, OSError) as exc:
        module.fail_json(msg=f"benchmark could not run: {exc}", exception=traceback.format_exc(), error_kind="client",
                         **result)
    if sweep["error"]:
        module.fail_json(msg=f"benchmark stopped early: {sweep['error']}", error_kind=sweep["error_kind"], **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
