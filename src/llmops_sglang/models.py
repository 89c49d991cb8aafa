"""Typed views of what a tuning run leaves behind: summary.json, sweep.json, and the result of one API call.

The documents are described in docs/run-directory.md (run directory, summary.json) and docs/bench-schema.md
(sweep.json). Parsing is lenient about keys a run did not reach (a stage not run, a cancelled run).
"""
from __future__ import annotations

import json
import typing as t
from dataclasses import dataclass, field
from pathlib import Path

Percentiles = t.Mapping[str, float]


@dataclass(frozen=True)
class Level:
    """One concurrency level of a sweep: medians over its timed runs."""

    concurrency: int
    n_runs: int
    agg_tok_s: float | None
    per_req_tok_s: float | None
    agg_tok_s_cv_pct: float | None
    ok: int
    failed: int
    ttft_ms: Percentiles
    itl_ms: Percentiles
    e2e_ms: Percentiles

    @classmethod
    def from_dict(cls, level: dict) -> Level:
        summary = level.get("summary") or {}
        return cls(concurrency=level["concurrency"], n_runs=summary.get("n_runs", len(level.get("runs", []))),
                   agg_tok_s=summary.get("agg_tok_s"), per_req_tok_s=summary.get("per_req_tok_s"),
                   agg_tok_s_cv_pct=summary.get("agg_tok_s_cv_pct"), ok=summary.get("ok", 0),
                   failed=summary.get("failed", 0), ttft_ms=summary.get("ttft_ms") or {},
                   itl_ms=summary.get("itl_ms") or {}, e2e_ms=summary.get("e2e_ms") or {})


@dataclass(frozen=True)
class Sweep:
    """A sweep.json: the benchmark of one configuration across concurrency levels."""

    label: str
    engine: str
    endpoint: str
    input_len: int
    output_len: int
    repeats: int  # the most runs a level may have; fewer where ``sequential`` stopped it early
    error: str | None
    levels: tuple[Level, ...]
    # The stopping rule a candidate was measured with (bench ``sequential``: its design and reference), else None.
    sequential: dict | None = None
    not_measured: tuple[int, ...] = ()  # levels the rule left out (a level before them regressed)

    @classmethod
    def from_dict(cls, sweep: dict, label: str) -> Sweep:
        return cls(label=label, engine=sweep.get("engine", ""), endpoint=sweep.get("endpoint", ""),
                   input_len=sweep.get("input_len", 0), output_len=sweep.get("output_len", 0),
                   repeats=sweep.get("repeats", 0), error=sweep.get("error"),
                   levels=tuple(Level.from_dict(level) for level in sweep.get("levels", [])),
                   sequential=sweep.get("sequential"),
                   not_measured=tuple(entry["concurrency"] for entry in sweep.get("not_measured") or []))

    @classmethod
    def load(cls, path: Path, label: str | None = None) -> Sweep:
        return cls.from_dict(json.loads(Path(path).read_text(encoding="utf-8")), label or Path(path).parent.name)

    def agg_tok_s(self) -> dict[int, float]:
        """Median aggregate output tok/s by concurrency."""
        return {level.concurrency: level.agg_tok_s for level in self.levels if level.agg_tok_s is not None}


@dataclass(frozen=True)
class StageCost:
    """GPU-minutes a stage spent (stage.json ``cost``): ``gpu_minutes`` on real GPUs (for an emulated run its
    real-GPU equivalent), ``wall_gpu_minutes`` as measured, and per part (server_start, warmup, benchmark, tuning,
    kernel_benchmark, other) the GPU-minutes."""

    gpus: int
    gpu_minutes: float
    wall_gpu_minutes: float
    real_s: float
    wall_s: float
    emulated: bool
    parts: t.Mapping[str, float]

    @classmethod
    def from_dict(cls, cost: dict) -> StageCost:
        return cls(gpus=cost.get("gpus", 0), gpu_minutes=cost.get("gpu_minutes", 0.0),
                   wall_gpu_minutes=cost.get("wall_gpu_minutes", 0.0), real_s=cost.get("real_s", 0.0),
                   wall_s=cost.get("wall_s", 0.0), emulated=bool(cost.get("emulated")),
                   parts={name: part.get("gpu_minutes", 0.0) for name, part in (cost.get("parts") or {}).items()})


@dataclass(frozen=True)
class StageRecord:
    """stage.json of a host, or ``status == "not run"``; ``details`` holds stage-specific keys (trials, outcome)."""

    status: str
    finished_at: str | None = None
    details: t.Mapping[str, t.Any] = field(default_factory=dict)
    started_at: str | None = None
    cost: StageCost | None = None

    @property
    def done(self) -> bool:
        return self.status == "done"

    @classmethod
    def from_dict(cls, record: dict) -> StageRecord:
        details = {k: v for k, v in record.items()
                   if k not in ("status", "started_at", "finished_at", "stage", "host", "cost")}
        return cls(status=record.get("status", "not run"), finished_at=record.get("finished_at"), details=details,
                   started_at=record.get("started_at"),
                   cost=StageCost.from_dict(record["cost"]) if record.get("cost") else None)


@dataclass(frozen=True)
class Decision:
    """One adopt/revert decision (a flag trial or the tuned MoE configs) and why."""

    stage: str
    label: str
    action: str
    summary: str
    reasons: tuple[str, ...]

    @property
    def adopted(self) -> bool:
        return self.action == "adopt"

    @classmethod
    def from_dict(cls, decision: dict) -> Decision:
        return cls(stage=decision["stage"], label=decision["label"], action=decision["action"],
                   summary=decision["summary"], reasons=tuple(decision.get("reasons") or ()))


@dataclass(frozen=True)
class Adopted:
    """The configuration adopted last (adopted.json): server args, environment, tuned MoE config files."""

    stage: str
    args: t.Mapping[str, t.Any]
    environment: t.Mapping[str, str]
    moe_configs: tuple[str, ...]
    # Where its evidence lies, relative to the run directory.
    sweep_file: str | None
    facts_file: str | None

    @classmethod
    def from_dict(cls, adopted: dict) -> Adopted:
        return cls(stage=adopted["stage"], args=adopted.get("args") or {}, environment=adopted.get("environment") or {},
                   moe_configs=tuple(adopted.get("moe_configs") or ()), sweep_file=adopted.get("sweep_file"),
                   facts_file=adopted.get("facts_file"))


@dataclass(frozen=True)
class Drift:
    """verify's drift check: the adopted configuration's fresh start against its own earlier measurement, and the
    decisions of the run (labels) that a drift of that size could have flipped."""

    drifted: bool
    earlier: str
    same_start: bool
    drift_pct: t.Mapping[int, float]
    largest_pct: float
    summary: str
    within_drift: tuple[str, ...]

    @classmethod
    def from_dict(cls, drift: dict) -> Drift:
        return cls(drifted=drift["drifted"], earlier=drift["earlier"], same_start=drift["same_start"],
                   drift_pct={int(c): v for c, v in (drift.get("drift_pct") or {}).items()},
                   largest_pct=drift["largest_pct"], summary=drift["summary"],
                   within_drift=tuple(entry["label"] for entry in drift.get("within_drift") or ()))


@dataclass(frozen=True)
class Numbers:
    """Baseline and final throughput by concurrency and the change at the key level (highest in both)."""

    baseline_agg_tok_s: t.Mapping[int, float]
    final_agg_tok_s: t.Mapping[int, float]
    baseline_max_running_requests: int | None
    final_max_running_requests: int | None
    key_concurrency: int | None
    key_change_pct: float | None

    @classmethod
    def from_dict(cls, numbers: dict) -> Numbers:
        def by_level(name: str) -> dict[int, float]:
            return {int(c): v for c, v in (numbers.get(name) or {}).items()}  # JSON keys are strings

        return cls(baseline_agg_tok_s=by_level("baseline_agg_tok_s"), final_agg_tok_s=by_level("final_agg_tok_s"),
                   baseline_max_running_requests=numbers.get("baseline_max_running_requests"),
                   final_max_running_requests=numbers.get("final_max_running_requests"),
                   key_concurrency=numbers.get("key_concurrency"), key_change_pct=numbers.get("key_change_pct"))


@dataclass(frozen=True)
class TrialCost:
    """GPU-minutes of one measured configuration (baseline, a flag trial, the tuned MoE configs, verify); a skipped
    candidate costs nothing and ``saved_gpu_minutes`` estimates what measuring it would have cost."""

    stage: str
    label: str
    gpu_minutes: float | None
    skipped: bool
    saved_gpu_minutes: float | None
    forced_by: str | None

    @classmethod
    def from_dict(cls, trial: dict) -> TrialCost:
        return cls(stage=trial["stage"], label=trial["label"], gpu_minutes=trial.get("gpu_minutes"),
                   skipped=bool(trial.get("skipped")), saved_gpu_minutes=trial.get("saved_gpu_minutes"),
                   forced_by=trial.get("forced_by"))


@dataclass(frozen=True)
class MoeCost:
    """The MoE stage's estimate (made before the server stopped) next to what it cost."""

    estimate_gpu_minutes: float
    estimate_tuning_gpu_minutes: float
    actual_gpu_minutes: float | None
    actual_tuning_gpu_minutes: float | None
    seconds_per_config: float
    measured_seconds_per_config: float | None

    @classmethod
    def from_dict(cls, moe: dict) -> MoeCost:
        return cls(**{name: moe.get(name) for name in cls.__dataclass_fields__})


@dataclass(frozen=True)
class HostCost:
    """GPU-minutes of a host over the run: the stages' total, per configuration, what skipping saved, the MoE
    estimate."""

    gpu_minutes: float = 0.0
    wall_gpu_minutes: float = 0.0
    emulated: bool = False
    trials: tuple[TrialCost, ...] = ()
    saved_gpu_minutes: float = 0.0
    moe: MoeCost | None = None

    @classmethod
    def from_dict(cls, cost: dict) -> HostCost:
        return cls(gpu_minutes=cost.get("gpu_minutes", 0.0), wall_gpu_minutes=cost.get("wall_gpu_minutes", 0.0),
                   emulated=bool(cost.get("emulated")),
                   trials=tuple(TrialCost.from_dict(trial) for trial in cost.get("trials") or ()),
                   saved_gpu_minutes=cost.get("saved_gpu_minutes", 0.0),
                   moe=MoeCost.from_dict(cost["moe"]) if cost.get("moe") else None)


@dataclass(frozen=True)
class HostSummary:
    stages: t.Mapping[str, StageRecord]
    decisions: tuple[Decision, ...]
    adopted: Adopted | None
    numbers: Numbers
    cost: HostCost = field(default_factory=HostCost)
    drift: Drift | None = None
    emulated: bool = False  # its numbers come from the emulator, not from GPUs

    @classmethod
    def from_dict(cls, host: dict) -> HostSummary:
        return cls(stages={name: StageRecord.from_dict(record) for name, record in host["stages"].items()},
                   decisions=tuple(Decision.from_dict(d) for d in host.get("decisions", [])),
                   adopted=Adopted.from_dict(host["adopted"]) if host.get("adopted") else None,
                   numbers=Numbers.from_dict(host.get("numbers") or {}),
                   cost=HostCost.from_dict(host.get("cost") or {}),
                   drift=Drift.from_dict(host["drift"]) if host.get("drift") else None,
                   emulated=bool(host.get("emulated")))

    def stages_done(self) -> list[str]:
        return [name for name, record in self.stages.items() if record.done]


@dataclass(frozen=True)
class Summary:
    """summary.json of a run (schema_version 1) plus the run directory it describes."""

    run_id: str
    created_at: str | None
    run_dir: Path
    hosts: t.Mapping[str, HostSummary]
    gpu_minutes: float = 0.0

    @property
    def emulated_hosts(self) -> list[str]:
        return [name for name, host in self.hosts.items() if host.emulated]

    @classmethod
    def from_dict(cls, summary: dict, run_dir: Path) -> Summary:
        return cls(run_id=summary["run_id"], created_at=summary.get("created_at"), run_dir=Path(run_dir),
                   hosts={name: HostSummary.from_dict(host) for name, host in summary.get("hosts", {}).items()},
                   gpu_minutes=summary.get("gpu_minutes", 0.0))


@dataclass(frozen=True)
class HostStats:
    """Task counts of one host from the play recap."""

    ok: int = 0
    changed: int = 0
    failures: int = 0
    unreachable: int = 0
    skipped: int = 0
    rescued: int = 0
    ignored: int = 0


@dataclass(frozen=True)
class ProgressEvent:
    """A simplified runner event. ``kind``: stage (a play starts), task (a task starts), ok, changed, failed,
    unreachable, skipped (a host finished a task), progress (a line of progress while a task runs or a sweep's
    levels when it ends; also Ansible's warnings and errors), finished (the recap). ``stage`` is the play name."""

    kind: str
    stage: str | None = None
    task: str | None = None
    host: str | None = None
    message: str | None = None


@dataclass(frozen=True)
class TaskFailure:
    host: str
    stage: str | None
    task: str | None
    message: str
    ignored: bool


@dataclass(frozen=True)
class RunResult:
    """What one API call did. ``status``: successful, failed, canceled or timeout (ansible-runner's status, except
    that a run where no host ran a task is failed); ``rc``: ansible-playbook's exit status; ``reason``: why the run
    failed where no task's failure says it."""

    status: str
    rc: int
    playbook: str
    hosts: t.Mapping[str, HostStats]
    artifacts: t.Mapping[str, t.Any]
    run_id: str | None
    run_dir: Path | None
    summary: Summary | None
    failures: tuple[TaskFailure, ...] = ()
    reason: str | None = None
    # every ansible-runner job event of the run, in order (what AWX stores of a job), and the playbook's output
    events: tuple[dict, ...] = field(default=(), repr=False)
    stdout: str = field(default="", repr=False)

    @property
    def succeeded(self) -> bool:
        return self.status == "successful" and self.rc == 0
