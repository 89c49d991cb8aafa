#!/usr/bin/python
# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: search_step
short_description: Internal - one step of the goodput search stage of one host - the next candidate, the next probe, a verdict
version_added: 1.0.0
description:
  - Internal to the collection's stage playbooks (role C(llmops.sglang.tuning_run)), not an interface for
    playbooks of your own; its options may change in any release.
  - The search stage (C(playbooks/search.yml)) deploys candidates and runs the benchmark itself; this action says
    what comes next and records what came back in the host's search directory (O(dir), C(runs/<run_id>/search/<host>)),
    namely C(search.json) (the strategy's history, the probes of the candidate being measured, the verification) and one
    directory per trial, C(trials/<NNN>/).
  - V(plan) says how many candidates the stage may start (RV(max_candidates)) and probes each may take
    (RV(max_probes)), and where an earlier attempt left the search; it records nothing.
  - V(next) proposes the next candidate (optuna TPE over the knobs of O(search), from the history) or says the search is
    done (budget spent, space exhausted). Candidates the installed SGLang refuses (O(help_text)) or whose knobs the
    flag rules (O(rules), O(context)) say cannot take effect here are recorded as invalid without a start.
    A candidate interrupted while measured (a resumed stage) is proposed again and its earlier records removed.
  - V(probe) records the open-loop sweep of the probe just measured (O(sweep), none before the first) and returns
    the next probe's request rate and repeats with the bench options to measure it; once the highest rate that meets
    the SLO in all repeats is bracketed to the resolution of O(search) C(rate), it records the candidate's rate and returns
    RV(done).
  - V(failed_start) records the candidate as infeasible (it did not start; the server module rolled it back) with the
    failure's summary as the reason; the strategy samples less around it.
  - V(best) returns the best candidates to re-verify and the rate they are compared at; V(verdict) compares the
    goodput of each (O(candidate_sweeps)) with the adopted configuration's (O(reference_sweep)) at that rate and
    decides which, if any, is adopted (C(verify/decision.json)).
author:
  - llmops.sglang contributors (@llmops)
extends_documentation_fragment:
  - llmops.sglang.attributes.CONTROLLER
attributes:
  check_mode:
    description: Answers as it would and writes nothing.
    support: full
options:
  step:
    description: What to do.
    type: str
    required: true
    choices: [plan, next, probe, failed_start, best, verdict]
  dir:
    description: The host's search directory (C(runs/<run_id>/search/<host>)).
    type: path
    required: true
  search:
    description:
      - The search inputs (C(tuning_run_search)) - C(knobs) (server args with C({values}) or C({low, high, step, log})),
        C(budget) (C(max_restarts) and/or C(max_gpu_minutes)), C(slo) (as M(llmops.sglang.bench)'s O(llmops.sglang.bench#module:slo)),
        C(workload) (bench options of the open-loop runs), C(rate) (C(start_rps), C(min_rps), C(resolution),
        C(repeats), C(max_probes), C(contender_runs), C(contender_within_pct), C(cutoff_below_pct)), C(verify) (C(best), C(repeats),
        C(min_effect_pct), C(alpha), C(requests_per_level)),
        C(surrogate_starts), C(start_design) and C(seed).
        Errors name the field.
    type: raw
    required: true
  adopted_args:
    description: The server args adopted so far; a candidate is these with its knobs.
    type: dict
    default: {}
  help_text:
    description: The installed SGLang's C(launch_server --help); candidates it refuses are invalid.
    type: str
  rules:
    description: The flag rules (C(sglang_preflight_flag_rules), role C(llmops.sglang.sglang_preflight) entry point C(rules)).
    type: list
    elements: dict
  context:
    description: Facts the flag rules use (P(llmops.sglang.flag_compatibility#filter)), from the preflight.
    type: dict
  skip_ineffective:
    description: Whether candidates the flag rules find ineffective are skipped (C(tuning_run_skip_ineffective)).
    type: raw
    default: true
  sweep:
    description: With O(step=probe), the bench module's C(sweep) of the probe just measured (one open-loop level).
    type: dict
  facts:
    description: With O(step=probe), the candidate's server facts (its GPUs, for the GPU-minutes it cost).
    type: dict
  environment:
    description: The server environment (C(CUDA_VISIBLE_DEVICES) counts the GPUs when the facts do not).
    type: dict
  time_scale:
    description:
      - For an emulated server, its time scales C({serving, tuning, startup}) (C(tuning_run_emulator_time_scale)), so
        the GPU-minutes are in real-GPU terms; null otherwise.
    type: raw
  failure:
    description: With O(step=failed_start), the failure record of the start (P(llmops.sglang.measurement_failure#filter)).
    type: dict
  reference_sweep:
    description: With O(step=verdict), the adopted configuration's open-loop sweep at the verification rate.
    type: dict
  candidate_sweeps:
    description: With O(step=verdict), each re-verified candidate's open-loop sweep at that rate, by trial name.
    type: dict
"""

EXAMPLES = r"""
---
- name: Ask for the next candidate
  llmops.sglang.search_step:
    step: next
    dir: "{{ tuning_run_stage_dir }}"
    search: "{{ tuning_run_search }}"
    adopted_args: "{{ tuning_run_adopted.args }}"
  register: candidate
"""

RETURN = r"""
done:
  description: With V(next), the search is over (RV(reason)); with V(probe) and V(failed_start), the candidate is recorded.
  returned: with step next, probe, failed_start
  type: bool
reason:
  description: Why the search is over.
  returned: with step next when done
  type: str
  sample: "budget spent: 5 of 5 restarts"
name:
  description: The candidate's trial name (its directory C(trials/<name>)).
  returned: with step next when not done
  type: str
  sample: "003"
params:
  description: The candidate's knob values.
  returned: with step next when not done
  type: dict
args:
  description: The server args to deploy (the adopted args with the knobs).
  returned: with step next when not done
  type: dict
max_candidates:
  description: How many candidates the stage may start (the playbook's loop length).
  returned: with step plan and next
  type: int
max_probes:
  description: The most probes of one candidate (the playbook's inner loop length), C(rate.max_probes) +
    C(rate.contender_runs).
  returned: with step plan
  type: int
probe:
  description: The next probe, C(rate_rps), C(repeats), C(phase) (bracket, bisect, confirm, or contender - runs at the
    bracket's ends of a candidate that ranks first or second, close to the other).
  returned: with step probe when not done
  type: dict
bench:
  description: Options of M(llmops.sglang.bench) for that probe (or, with V(best), for the verification runs).
  returned: with step probe when not done, and best
  type: dict
result:
  description: The rate search's result (C(rate_rps), C(estimate_rps), C(goodput_rps), C(bracket), C(converged), C(reason), C(probes)).
  returned: with step probe when done
  type: dict
trial:
  description: The trial as the strategy recorded it (C(number), C(params), C(state), C(value), C(estimate_rps), C(reason), C(gpu_minutes)).
  returned: with step probe when done, and failed_start
  type: dict
candidates:
  description: The candidates to re-verify, best first (C(name), C(params), C(rate_rps), C(args)).
  returned: with step best
  type: list
  elements: dict
rate_rps:
  description: The verification rate (the best candidate's), null when no candidate met the SLO.
  returned: with step best
  type: float
spent:
  description: What the search spent, C(restarts) and C(gpu_minutes).
  returned: with step next, probe, failed_start, best
  type: dict
adopt:
  description: With V(verdict), whether a candidate is adopted (RV(candidate)).
  returned: with step verdict
  type: bool
candidate:
  description: With V(verdict), the adopted candidate's trial name, or null.
  returned: with step verdict
  type: str
summary:
  description: With V(verdict), the decision in one line.
  returned: with step verdict
  type: str
written:
  description: The records that changed.
  returned: always
  type: list
  elements: str
"""
