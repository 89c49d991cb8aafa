# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The upgrade guard's canary verdict (docs/upgrade.md, "The canary"): the new release measured against the serving
one on the same host and workload, promoted only when it serves at least as well.

An upgrade is not a tuning candidate: it need not be faster, it must not be worse. So the verdict takes the tuning
stages' own pieces and asks that other question of them: the throughput comparison (sweep_stats.compare_sweeps,
judged by the sequential rule the bench module stopped on) must show no regressed level; the startup facts diff
(server_diff.diff_server_facts) must show no capacity drop beyond ``max_capacity_loss_pct`` (max_running_requests,
KV tokens: decisions.capacity_losses), whatever the throughput did, since a smaller server sheds load a short
benchmark never reaches; the new server must load every tuned MoE config the old one loaded; and, unless
``latency_limits`` is null, the error rate and the p99 TTFT and TPOT must stay within the rollout's limits
(rollout_analysis.analyse); and, when the run has an SLO, the new release must meet it in every run at the serving
release's goodput rate less ``max_goodput_loss_pct`` (plugin_utils/canary_goodput.py measures both). Every crossed
limit is a reason to roll back.

Pure: the two measurements (what the tuning_run role's measure.yml keeps), the prediction, the carry and the options
in; the decision, its evidence and a Markdown report out.

Private to the llmops.sglang collection.
"""
from __future__ import annotations

import re
import typing as t
from pathlib import PurePosixPath

from ansible_collections.llmops.sglang.plugins.module_utils import rollout_analysis
from ansible_collections.llmops.sglang.plugins.module_utils.decisions import capacity_losses, throughput_reason
from ansible_collections.llmops.sglang.plugins.module_utils.server_diff import diff_server_facts
from ansible_collections.llmops.sglang.plugins.module_utils.sweep_stats import compare_sweeps
from ansible_collections.llmops.sglang.plugins.module_utils.workload import DEFAULT_SLO_PERCENTILE

# What an operator who dreads upgrades would pick: 10 % fewer concurrent requests or KV tokens is a smaller server,
# rejected; latency limits as a rollout's (1 % errors, p99 TTFT and TPOT at most 10 % up); under the run's SLO the new
# release must hold the serving release's rate less 5 %, the rate search's own resolution (rate_search.py).
DEFAULT_OPTIONS = {"max_capacity_loss_pct": 10.0, "latency_limits": {}, "max_goodput_loss_pct": 5.0}


def validated_options(options: dict | None) -> dict:
    """``options`` over the defaults; ValueError naming ``upgrade_canary_policy.<key>`` and the fix."""
    unknown = sorted(set(options or {}) - set(DEFAULT_OPTIONS))
    if unknown:
        raise ValueError(f"upgrade_canary_policy: unknown {', '.join(unknown)} (known: {', '.join(DEFAULT_OPTIONS)})")
    merged = {**DEFAULT_OPTIONS, **(options or {})}
    for key, high in (("max_capacity_loss_pct", None), ("max_goodput_loss_pct", 100.0)):
        limit = merged[key]
        if not isinstance(limit, (int, float)) or isinstance(limit, bool) or limit < 0 or (high and limit >= high):
            bound = f"a number >= 0 and < {high:g}" if high else "a number >= 0"
            raise ValueError(f"upgrade_canary_policy.{key}: {bound} (percent), not {limit!r}")
    if merged["latency_limits"] is not None:
        if not isinstance(merged["latency_limits"], dict):
            raise ValueError("upgrade_canary_policy.latency_limits: a mapping of the rollout analysis' limits, or null "
                             f"for none, not {merged['latency_limits']!r}")
        try:
            merged["latency_limits"] = rollout_analysis.limits_with_defaults(merged["latency_limits"])
        except ValueError as exc:
            raise ValueError(f"upgrade_canary_policy.latency_limits: {exc}") from None
    return merged


def judge(old: dict, new: dict, *, compare: dict | None = None, options: dict | None = None,
          goodput: dict | None = None) -> dict:
    """The canary's decision: ``promote`` (bool), ``reasons`` (each limit crossed; empty when promoted), ``notes``
    (what changed within the limits), ``summary`` (one line), and the evidence: ``comparison``, ``side_effects``,
    ``analysis`` (latency, None without limits), ``moe_lost`` (config files the new server reports missing and the
    old one did not), ``goodput`` (None without an SLO), ``options``. ``goodput`` is ``{old, new}``, the results of
    the two releases' goodput steps (canary_goodput.py). ``old`` must be a measurement: without one nothing is
    compared, so ValueError."""
    options = validated_options(options)
    if old.get("failure") or not old.get("sweep"):
        raise ValueError(f"the serving release's measurement failed, so there is nothing to compare the new release "
                         f"with: {old.get('failure') or 'no sweep'}")
    evidence: dict[str, t.Any] = {"comparison": None, "side_effects": None, "analysis": None, "moe_lost": [],
                                  "goodput": None}
    reasons: list[str] = []
    notes: list[str] = []
    if new.get("failure"):
        reasons.append(f"the new release failed on the canary: {new['failure']}")
    else:
        evidence.update(_evidence(old, new, compare or {}, options))
        evidence["goodput"] = goodput_evidence(goodput)
        reasons, notes = _reasons(evidence, options)
    promote = not reasons
    head = "promote" if promote else "roll back"
    summary = f"{head}: " + "; ".join(reasons or notes or ["the new release serves as the old one did"])
    return {"promote": promote, "reasons": reasons, "notes": notes, "summary": summary, **evidence,
            "options": options}


def _evidence(old: dict, new: dict, compare: dict, options: dict) -> dict:
    old_facts, new_facts = old.get("facts") or {}, new.get("facts") or {}
    old_missing = {PurePosixPath(path).name for path in old_facts.get("missing_moe_configs") or ()}
    new_missing = {PurePosixPath(path).name for path in new_facts.get("missing_moe_configs") or ()}
    limits = options["latency_limits"]
    return {
        "comparison": compare_sweeps(old["sweep"], new["sweep"], **compare),
        "side_effects": diff_server_facts(old_facts, new_facts, old.get("requested_args"), new.get("requested_args")),
        "analysis": rollout_analysis.analyse(old["sweep"], new["sweep"], limits) if limits is not None else None,
        "moe_lost": sorted(new_missing - old_missing),
    }


def _reasons(evidence: dict, options: dict) -> tuple[list[str], list[str]]:
    comparison, reasons, notes = evidence["comparison"], [], []
    throughput = "throughput " + throughput_reason(comparison)
    (reasons if comparison["regressed"] else notes).append(throughput)
    limit = options["max_capacity_loss_pct"]
    for loss in capacity_losses(evidence["side_effects"]):
        text = f"capacity dropped {abs(loss['change_pct']):.0f}% ({loss['metric']} {loss['baseline']} -> {loss['candidate']})"
        if abs(loss["change_pct"]) > limit:
            reasons.append(f"{text}, beyond the limit of {limit:g}%")
        else:
            notes.append(f"{text}, within the limit of {limit:g}%")
    if evidence["moe_lost"]:
        reasons.append(f"the new release runs default kernels where the old one loaded tuned MoE configs: "
                       f"{', '.join(evidence['moe_lost'])}")
    analysis = evidence["analysis"]
    if analysis is not None and not analysis["passed"]:
        reasons.extend(analysis["reasons"])
    goodput = evidence["goodput"]
    if goodput is not None:
        (notes if goodput["held"] is not False else reasons).append(goodput["line"])
    return reasons, notes


def goodput_evidence(goodput: dict | None) -> dict | None:
    """The two goodput results (``{old, new}``) as the verdict's evidence: the SLO, the serving release's rate (the
    highest at which all its runs met the SLO) and estimate, the rate the new release was held to, whether every
    run of it met the SLO there (``held``; None when nothing was compared), the runs' median goodput, and the
    ``line`` the verdict lists. None when the run has no SLO."""
    if not goodput:
        return None
    old, new = goodput.get("old") or {}, goodput.get("new") or {}
    record = {"slo": old.get("slo"), "serving_rate_rps": old.get("rate_rps"),
              "serving_estimate_rps": old.get("estimate_rps"), "serving_goodput_rps": old.get("goodput_rps"),
              "check_rate_rps": new.get("rate_rps"), "max_loss_pct": new.get("max_loss_pct"),
              "held": new.get("held"), "runs": new.get("runs"), "failed_runs": new.get("failed_runs"),
              "new_goodput_rps": new.get("goodput_rps")}
    return {**record, "line": _goodput_line(record, new.get("reason"))}


def _goodput_line(record: dict, reason: str | None) -> str:
    if record["held"] is None:
        return f"goodput under the SLO not compared: {reason}"
    where = (f"at {record['check_rate_rps']:.3g} req/s (the serving release's {record['serving_rate_rps']:.3g} less "
             f"{record['max_loss_pct']:g}%)")
    if record["held"]:
        return f"goodput under the SLO held: all {record['runs']} runs of the new release met the SLO {where}"
    return (f"goodput under the SLO fell: the new release missed the SLO in {record['failed_runs']} of "
            f"{record['runs']} runs {where}")


def retune_summary(tuned: t.Sequence[dict], estimate: dict | None = None) -> dict | None:
    """What the canary's retune did, from its llmops.sglang.moe_tune results (engine ``llmops``): the files it tuned, the
    engine's GPU-minutes (0 for a task the cache or a checkpoint answered), per file whether the controller's cache
    answered, and what ``estimate`` (the moe_cost_estimate filter's, made before the server stopped) expected: the
    engine's GPU-minutes, comparable to the spent ones, and the deployment's GPUs held meanwhile. None when nothing
    was retuned."""
    tuned = [task for task in tuned if task and task.get("output_file")]
    if not tuned:
        return None
    expected = {key: estimate[key] for key in ("engine_gpu_minutes", "gpu_minutes", "gpus", "summary")} if estimate else None
    return {"files": [task["file_name"] for task in tuned],
            "gpu_minutes": round(sum((task.get("engine") or {}).get("gpu_minutes") or 0.0 for task in tuned), 3),
            "cache": {task["file_name"]: (task.get("cache") or {}).get("status") for task in tuned},
            "estimate": expected}


def report(verdict: dict, prediction: dict, *, host: str, carried: t.Sequence[str] = (),
           retuned: dict | None = None) -> dict:
    """What the upgrade's record shows about the canary (``canary.json``) and its Markdown (``markdown``): old and new
    versions, the startup facts diff, the MoE configs found / fallback / missing / carried / retuned / to retune (with
    the retune's GPU-minutes and cache statuses: :func:`retune_summary`), throughput and latency, and the decision."""
    record = {"host": host, "decision": "promote" if verdict["promote"] else "roll back", "summary": verdict["summary"],
              "reasons": verdict["reasons"], "notes": verdict["notes"], "versions": versions(prediction),
              "configs": configs(prediction, carried, (retuned or {}).get("files") or ()),
              "retune_cost": retuned, "facts_diff": (verdict["side_effects"] or {}).get("summary_lines") or [],
              "throughput": (verdict["comparison"] or {}).get("table", ""),
              "latency": _latency_rows(verdict["analysis"]), "goodput": verdict.get("goodput")}
    return {**record, "markdown": _markdown(record)}


def prediction_markdown(prediction: dict, host: str, before: dict | None = None) -> str:
    """``prediction.md``: the prediction's summary lines, and first, where the carry or the retune changed what the
    new release finds, the prediction made before them (what the new release would have done on its own)."""
    lines = [f"# Upgrade prediction: {host}", ""]
    if before:
        lines += ["## Before the carry and the retune", "", *(f"- {line}" for line in before.get("summary") or ()),
                  "", "## What the new release starts with", ""]
    return "\n".join([*lines, *(f"- {line}" for line in prediction.get("summary") or ())]) + "\n"


def versions(prediction: dict) -> dict:
    """The serving (``current``) and the new release's sglang, triton and torch versions of a prediction."""
    found = prediction.get("versions") or {}
    return {side: _version_line(found.get(side) or {}) for side in ("current", "new")}


def configs(prediction: dict, carried: t.Iterable[str] = (), retuned: t.Iterable[str] = ()) -> dict:
    """A host's MoE config files by what the new release does with them (the prediction made after the carry and the
    retune): kept (or gained), fallback, missing (lost, untuned, error); the ``carried`` and ``retuned`` file names;
    and those the prediction still lists under retune. A file ``retuned`` after the prediction (the canary's, shipped
    to another host at its promotion) is neither missing nor still to retune."""
    retuned = sorted(retuned)
    return {"kept": _names(prediction, ("kept", "gained")), "fallback": _names(prediction, ("fallback",)),
            "missing": [name for name in _names(prediction, ("lost", "untuned", "error")) if name not in retuned],
            "carried": sorted(carried), "retuned": retuned,
            "retune": [row["file_name"] for row in prediction.get("retune") or () if row["file_name"] not in retuned]}


def _names(prediction: dict, verdicts: tuple[str, ...]) -> list[str]:
    return [row["file_name"] for row in prediction.get("moe") or () if row["verdict"] in verdicts]


def _version_line(versions: dict) -> dict:
    return {key: versions.get(key) for key in ("sglang", "triton", "torch")}


def _latency_rows(analysis: dict | None) -> list[dict]:
    if not analysis:
        return []
    return [{"concurrency": level, **{metric: analysis["levels"][level][metric]
                                      for metric in ("error_rate", "ttft_ms", "tpot_ms")}}
            for level in analysis["levels"]]


def _markdown(record: dict) -> str:
    old, new = record["versions"]["current"], record["versions"]["new"]
    lines = [f"# Upgrade canary: {record['host']}", "", f"**Decision: {record['decision']}.** {record['summary']}", "",
             "| | serving (old) | new |", "|---|---|---|"]
    lines += [f"| {key} | {old.get(key) or '-'} | {new.get(key) or '-'} |" for key in ("sglang", "triton", "torch")]
    lines += ["", "## MoE configs", ""]
    lines += [f"- {what}: {', '.join(names) or 'none'}" for what, names in record["configs"].items()]
    if record["retune_cost"]:
        lines += [f"- {retune_text(record['retune_cost'])}"]
    lines += ["", "## Startup facts, new against old", ""]
    lines += [f"- {line}" for line in record["facts_diff"]] or ["- no difference"]
    lines += ["", "## Throughput (new against old, same host and workload)", "", record["throughput"] or "not measured"]
    if record["latency"]:
        lines += ["", "## Latency (p99, ms)", "", "| C | TTFT old | TTFT new | TPOT old | TPOT new | errors new |",
                  "|---|---|---|---|---|---|"]
        lines += [f"| {row['concurrency']} | {_ms(row['ttft_ms']['before_p99'])} | {_ms(row['ttft_ms']['after_p99'])} "
                  f"| {_ms(row['tpot_ms']['before_p99'])} | {_ms(row['tpot_ms']['after_p99'])} "
                  f"| {row['error_rate']['after']:.1%} |" for row in record["latency"]]
    if record["goodput"]:
        lines += ["", "## Goodput under the SLO", "", *_goodput_markdown(record["goodput"])]
    return "\n".join(lines) + "\n"


def _goodput_markdown(goodput: dict) -> list[str]:
    slo = ", ".join(f"p{target.get('percentile', DEFAULT_SLO_PERCENTILE):g} {metric} <= {target['target']:g} ms"
                    for metric, target in (goodput["slo"] or {}).items())
    lines = [f"- SLO: {slo or '-'}", f"- {goodput['line']}"]
    if goodput["serving_rate_rps"] is not None:
        lines.insert(1, f"- the serving release met it up to {goodput['serving_rate_rps']:.3g} req/s (estimate "
                        f"{_rps(goodput['serving_estimate_rps'])}, goodput {_rps(goodput['serving_goodput_rps'])}); "
                        f"the new release's goodput at its check: {_rps(goodput['new_goodput_rps'])}")
    return lines


def _rps(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g} req/s"


def retune_text(cost: dict) -> str:
    """The retune's cost (:func:`retune_summary`) in one line: spent, estimated, the engine cache per file."""
    cache = "; ".join(f"{name}: {status}" for name, status in cost["cache"].items())
    estimate = cost.get("estimate")
    expected = (f" (estimated {estimate['engine_gpu_minutes']:g} before the server stopped; the deployment's "
                f"{estimate['gpus']} GPUs held for an estimated {estimate['gpu_minutes']:g})") if estimate else ""
    return f"retuned on this host with the engine: {cost['gpu_minutes']:g} GPU-minutes{expected}; engine cache: {cache}"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


# A prediction's summary lines that say why it is not ready (sglang_upgrade_check: a config lost, a lookup error, a
# server argument the new release refuses).
_NOT_READY = re.compile(r": (lost|error): |^flag error: ")


def retune_plan(host: str, *, canary: str, prediction: dict | None, retune: bool = True, measured: bool = True,
                carry: bool = True, check_mode: bool = False) -> dict:
    """Whether ``host`` retunes before its switch (docs/upgrade.md, "Retune on the canary"), and what.

    ``names``: the config files ``prediction`` lists under retune (every host: the promotion matches them against the
    canary's); ``retune``: true on the canary only, when it is measured (``measured``: upgrade_canary_ab and not check
    mode), ``retune`` is on, the prediction lists files and has no refused flag or lookup error (a retune cannot
    fix those), and what it would carry is carried (a retune beside a skipped carry would serve a half-upgraded
    directory); ``down``: the down kernel is among them (it is tuned with the tuned up configs);
    ``expected``: the file name the tuner must write for each kernel, as the prediction names it."""
    prediction = prediction or {}
    rows = prediction.get("retune") or ()
    expected = {row["kernel"]: row["file_name"] for row in prediction.get("moe") or ()}
    retunes = (retune and measured and not check_mode and host == canary and bool(rows) and _only_lost(prediction)
               and (carry or not prediction.get("carry")))
    return {"retune": retunes, "names": [row["file_name"] for row in rows],
            "down": any(row.get("kernel") == "down" for row in rows),
            "expected": {"up": expected.get("up"), "down": expected.get("down")}}


def made_prediction(prediction: t.Mapping | None) -> dict | None:
    """A prediction as a filter gets it: None where none was made (null, or the skipped prediction task's result)."""
    return None if not prediction or prediction.get("skipped") else dict(prediction)


def promotion(host: str, *, canary: str, prediction: dict | None, retune_names: t.Sequence[str] = (),
              canary_retuned: dict | None = None, gpu: str | None = None, canary_gpu: str | None = None,
              measured: bool = True, promote: bool = True, check_mode: bool = False) -> dict:
    """What the promotion (the rollout's batches, after the canary passed) does with ``host``: ``mismatches`` (why it
    is left out; empty: it is switched) and ``moe_configs`` (the canary's retuned config files it gets, installed into
    the new release's directory before its switch).

    ``prediction`` is the host's (after its carry; None when none was made); ``retune_names`` the files it says need
    retuning; ``canary_retuned`` the canary's moe_configs install of its retuned files (None or skipped: none).
    The canary's files fit a host with the canary's GPU that needs exactly those files retuned, so such a host's
    prediction, not ready for want of them, is ready with them (unless a flag or a lookup error stands)."""
    retuned = _retuned_files(canary_retuned)
    fits = bool(retuned) and host != canary and gpu == canary_gpu and sorted(retune_names) == sorted(retuned)
    if check_mode:
        why = "check mode: the canary is not measured, so nothing is promoted"
    elif not measured:
        why = "upgrade_canary_ab=false: no canary measured, so nothing is promoted"
    elif not promote:
        why = "upgrade_promote=false: the canary passed, the rest is left for a later run"
    elif host == canary:
        why = "the canary of this upgrade: switched and measured by its A/B"
    elif prediction is None or not prediction.get("ready") and not (fits and _only_lost(prediction)):
        findings = "; ".join(line for line in (prediction or {}).get("summary") or () if _NOT_READY.search(line))
        misfit = (f"; the canary retuned {', '.join(retuned)} on {canary_gpu}, this host has {gpu} and needs "
                  f"{', '.join(retune_names) or 'none'} retuned: retune it on its own canary") if retuned else ""
        why = f"the prediction is not ready here: {findings or 'not made'}{misfit}"
    else:
        why = None
    return {"mismatches": [why] if why else [], "moe_configs": retuned if fits else []}


def _retuned_files(install: dict | None) -> list[str]:
    """The file names the canary's retune installed (its moe_configs result), none when it did not run."""
    if not install or install.get("skipped"):
        return []
    return [PurePosixPath(path).name for path in install.get("installed") or ()]


def _only_lost(prediction: dict) -> bool:
    """Whether what keeps ``prediction`` from being ready is only configs to retune: no refused flag, no lookup error."""
    return not (prediction.get("flags") or {}).get("errors") and not any(
        row.get("verdict") == "error" for row in prediction.get("moe") or ())
