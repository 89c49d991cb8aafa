"""Run the tuning pipeline (or one stage, or any playbook) from Python through ansible-runner.

    result = run("tune", "inventory/prod/", on_event=print)
    result.summary.hosts["gpu1"].decisions

Each call uses a fresh ansible-runner private data directory (removed afterwards) and runs ansible-playbook in the
caller's current directory, as if typed there: relative paths, ./ansible.cfg and the default run directory (runs/)
are the caller's. The Python environment's own ansible comes first on PATH; a development install also hands the
checkout's ansible.cfg to the run (llmops_sglang.collection).
"""
from __future__ import annotations

import asyncio
import functools
import os
import signal
import sys
import tempfile
import threading
import time
import typing as t
from pathlib import Path

import ansible_runner

from llmops_sglang.collection import Collection, find_collection, stage_registry
from llmops_sglang.events import artifacts_of, failures_of, host_stats, output_of, progress_events, run_dir_of
from llmops_sglang.models import ProgressEvent, RunResult
from llmops_sglang.runs import is_run_dir, read_summary

TUNE_PLAYBOOK = "llmops.sglang.tune"  # ansible-runner hands the FQCN to ansible-playbook, which resolves it
# How often ansible-runner asks whether to stop (cancel flag, timeout) while the playbook prints nothing.
POLL_SECONDS = 0.5
NO_HOSTS = ("no host ran a task: no play matched a host of the inventory (the stage playbooks target the "
            "sglang_hosts group)")


class InventoryNotFound(FileNotFoundError):
    """The inventory given is no file or directory, and no inline host list either."""


OnEvent = t.Callable[[ProgressEvent], None]
StageList = t.Union[str, t.Sequence[str], None]


def playbook_for(playbook_or_stage: str | os.PathLike, collection: Collection) -> str:
    """``tune`` -> the tune playbook by FQCN, a stage name -> playbooks/<stage>.yml of ``collection``, else a path or
    an FQCN."""
    name = str(playbook_or_stage)
    if name == "tune":
        return TUNE_PLAYBOOK
    registry = stage_registry(collection)
    if name in registry.ROUTINE:
        return str(collection.path / registry.get(name).playbook)
    return caller_path(name)


def caller_path(name: str) -> str:
    """An existing file or directory as an absolute path (ansible-runner takes a relative inventory path for inline
    inventory text, and the result names the playbook unambiguously); anything else (an FQCN, an inline host list)
    as given."""
    return str(Path(name).resolve()) if Path(name).exists() else name


def pipeline_vars(extravars: t.Mapping[str, t.Any] | None, run_id: str | None, stages: StageList,
                  force: StageList | bool, runs_dir: str | os.PathLike | None) -> dict[str, t.Any]:
    """Extra vars with the pipeline's own options (docs/run-directory.md) added where given."""
    variables = dict(extravars or {})
    options = {"run_id": run_id, "stages": _comma_list(stages),
               "force": force if isinstance(force, bool) else _comma_list(force),
               "tuning_run_root": None if runs_dir is None else str(Path(runs_dir).resolve())}
    variables.update({name: value for name, value in options.items() if value is not None})
    return variables


def _comma_list(value: StageList) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return ",".join(value)


def runner_env(collection: Collection) -> dict[str, str]:
    """The ansible of this Python environment first on PATH, and the ansible.cfg ``collection`` was found with when
    that is not ansible's own choice (a development install: the checkout's)."""
    env = {"PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", os.defpath)])}
    if collection.config is not None:
        env["ANSIBLE_CONFIG"] = str(collection.config)
    return env


def playbook_cmdline(check: bool, diff: bool) -> str | None:
    """ansible-playbook's --check / --diff, which ansible-runner takes as extra command line text."""
    return " ".join(flag for flag, wanted in (("--check", check), ("--diff", diff)) if wanted) or None


class _EventRelay:
    """ansible-runner's event handler: keeps the events, hands progress events to ``on_event``.

    An exception in ``on_event`` cancels the run (the playbook is stopped) and is raised by ``run``
    afterwards, instead of escaping into ansible-runner's output processing. The ``finished`` event is held back
    until ``finish``: callbacks print after the play recap too (ansible.posix.profile_tasks' timings are output
    events after the stats event), and a caller may take ``finished`` as the last event it gets."""

    def __init__(self, on_event: OnEvent | None, cancel: threading.Event) -> None:
        self.on_event = on_event
        self.cancel = cancel
        self.events: list[dict] = []
        self.error: BaseException | None = None
        self.finished: list[ProgressEvent] = []

    def __call__(self, event: dict) -> bool:
        self.events.append(event)
        if self.on_event is None:  # nobody to tell: no progress events to make
            return True
        progress = progress_events(event)
        self.finished += [p for p in progress if p.kind == "finished"]
        self._deliver([p for p in progress if p.kind != "finished"])
        return True

    def finish(self) -> None:
        """Hands over the ``finished`` event, once ansible-playbook has ended."""
        self._deliver(self.finished)

    def _deliver(self, progress: list[ProgressEvent]) -> None:
        if self.on_event is None or self.error is not None:
            return
        try:
            for event in progress:
                self.on_event(event)
        except Exception as exc:  # pylint: disable=broad-exception-caught  # re-raised by run()
            self.error = exc
            self.cancel.set()


def playbook_processes(private_data_dir: str) -> list[int]:
    """ansible-playbook and its forked workers of one call (their command line names its private data dir)."""
    marker = private_data_dir.encode()
    pids = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if marker in cmdline.read_bytes():
                pids.append(int(cmdline.parent.name))
        except OSError:  # the process ended meanwhile
            continue
    return pids


class _Stopper:
    """ansible-runner's cancel_callback: stop on the cancel event or at the deadline.

    ansible-runner kills only the process group of ansible-playbook; ansible-core's workers run in sessions of
    their own and would finish their current task unattended (and their SSH connections with them). So the
    whole playbook is sent SIGTERM first, as ansible-playbook itself forwards it to its workers."""

    def __init__(self, cancel: threading.Event, timeout: float | None, private_data_dir: str) -> None:
        self.cancel = cancel
        self.deadline = None if timeout is None else time.monotonic() + timeout
        self.private_data_dir = private_data_dir
        self.timed_out = False

    def __call__(self) -> bool:
        self.timed_out = self.timed_out or (self.deadline is not None and time.monotonic() > self.deadline)
        if not (self.timed_out or self.cancel.is_set()):
            return False
        for pid in playbook_processes(self.private_data_dir):
            try:
                os.killpg(pid, signal.SIGTERM)  # workers lead their own process group (setsid)
            except (ProcessLookupError, PermissionError):
                continue
        return True


def run(playbook_or_stage: str | os.PathLike, inventory: str | os.PathLike,
        extravars: t.Mapping[str, t.Any] | None = None, run_id: str | None = None,
        on_event: OnEvent | None = None, *, stages: StageList = None, force: StageList | bool = None,
        runs_dir: str | os.PathLike | None = None, limit: str | None = None, tags: StageList = None,
        check: bool = False, diff: bool = False, verbosity: int = 0, timeout: float | None = None,
        cancel: threading.Event | None = None) -> RunResult:
    """Run ``tune`` (the whole pipeline), a stage (``baseline``, ``flags``, ...) or a playbook path/FQCN.

    ``run_id`` resumes a run, ``stages``/``force`` select stages (list or comma-separated), ``runs_dir`` is the
    pipeline's ``tuning_run_root`` (default: the role's, runs/ of the current directory). ``limit``, ``tags`` (list or
    comma-separated), ``check``, ``diff`` and ``verbosity`` are ansible-playbook's --limit, --tags, --check, --diff and
    -v (count). ``on_event`` gets
    ProgressEvents while the playbook runs. Setting ``cancel`` or exceeding ``timeout`` seconds stops the playbook:
    status ``canceled`` or ``timeout``. A task that was running on a host when the playbook stopped may still
    complete there (modules run on the host). Raises CollectionNotFound before anything runs when llmops.sglang is
    not on the collections path, and InventoryNotFound when ``inventory`` is neither a file, a directory nor an
    inline host list (``host1,host2``). A run where no host ran a task (the plays matched none of the inventory's
    hosts) is ``failed``, with that ``reason``.
    """
    check_inventory(inventory)
    cancel = cancel or threading.Event()
    relay = _EventRelay(on_event, cancel)
    collection = find_collection()
    playbook = playbook_for(playbook_or_stage, collection)
    with tempfile.TemporaryDirectory(prefix="llmops-sglang-runner-") as private_data_dir:
        stopper = _Stopper(cancel, timeout, private_data_dir)
        runner = ansible_runner.run(
            private_data_dir=private_data_dir, playbook=playbook, inventory=caller_path(str(inventory)),
            extravars=pipeline_vars(extravars, run_id, stages, force, runs_dir), limit=limit, tags=_comma_list(tags),
            # ansible-runner runs ansible-playbook in project_dir (else in its private data directory, removed
            # afterwards): the caller's directory makes a relative tuning_run_root (the default runs/) the caller's.
            cmdline=playbook_cmdline(check, diff), verbosity=verbosity or None, project_dir=os.getcwd(),
            envvars=runner_env(collection), quiet=True, event_handler=relay, cancel_callback=stopper,
            settings={"pexpect_timeout": POLL_SECONDS})
    relay.finish()
    if relay.error is not None:
        raise relay.error
    return _result("timeout" if stopper.timed_out else runner.status, runner.rc, playbook, relay.events, run_id)


def check_inventory(inventory: str | os.PathLike) -> None:
    """ansible-playbook only warns about an inventory path that does not exist and runs on the implicit localhost
    (or on nothing); a comma makes it an inline host list, as ansible-playbook reads it."""
    if "," not in str(inventory) and not Path(inventory).exists():
        raise InventoryNotFound(f"inventory {inventory}: no such file or directory ({Path(inventory).resolve()}); "
                                "give an inventory file or directory (-i), or an inline host list such as 'gpu1,'")


def _result(status: str, rc: int, playbook: str, events: list[dict], run_id: str | None) -> RunResult:
    run_dir = run_dir_of(events)
    stats = next((e.get("event_data") for e in events if e.get("event") == "playbook_on_stats"), None)
    hosts = host_stats(stats)
    reason = None
    if status == "successful" and not hosts:  # ansible-playbook exits 0 when no play matched a host
        status, reason = "failed", NO_HOSTS
    return RunResult(status=status, rc=rc, playbook=playbook, hosts=hosts, artifacts=artifacts_of(events),
                     reason=reason, run_id=run_dir.name if run_dir else run_id, run_dir=run_dir,
                     summary=read_summary(run_dir) if run_dir and is_run_dir(run_dir) else None,
                     failures=failures_of(events), events=tuple(events), stdout=output_of(events))


async def run_async(playbook_or_stage: str | os.PathLike, inventory: str | os.PathLike,
                    extravars: t.Mapping[str, t.Any] | None = None, run_id: str | None = None,
                    on_event: OnEvent | None = None, **options: t.Any) -> RunResult:
    """``run`` in a worker thread. ``on_event`` is called on the event loop. Cancelling the awaiting task stops
    the playbook (ansible-runner's cancel), waits until it has stopped, then raises CancelledError."""
    loop = asyncio.get_running_loop()
    cancel = options.pop("cancel", None) or threading.Event()
    deliver = None if on_event is None else functools.partial(loop.call_soon_threadsafe, on_event)
    worker = loop.run_in_executor(None, functools.partial(run, playbook_or_stage, inventory, extravars, run_id,
                                                          deliver, cancel=cancel, **options))
    try:
        return await asyncio.shield(worker)
    except asyncio.CancelledError:
        cancel.set()
        await worker
        raise
