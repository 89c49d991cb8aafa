# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""What the server module does: take the unit the action plugin rendered on the controller, check everything that can
be known before a change (SGLang's flags, the model path, the port, ``systemd-analyze verify``), install it and the API
key file, restart and wait until the server is really ready, return the start's log and facts; a failure after the first
change is undone (the previous unit restored and restarted) and the task fails saying what went wrong and what was put
back. ``state`` stopped and absent stop, disable and remove. The module holds its docs, argument_spec and a main() that
calls :func:`deploy` once.

Private to the llmops.sglang collection. Runs on the managed host (Ansiballz ships it with the module): stdlib and
ansible.module_utils only.
"""
from __future__ import annotations

import os
import pwd

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.llmops.sglang.plugins.module_utils._server_facts import startup_facts
from ansible_collections.llmops.sglang.plugins.module_utils.action_request import read_request
from ansible_collections.llmops.sglang.plugins.module_utils.command_runner import CommandRunner
from ansible_collections.llmops.sglang.plugins.module_utils.secrets import api_key_problem
from ansible_collections.llmops.sglang.plugins.module_utils.server_args import (
    deprecated_alias_warnings, parse_help_flags, validate_server_args)
from ansible_collections.llmops.sglang.plugins.module_utils.server_preflight import preflight_errors, verify_unit
from ansible_collections.llmops.sglang.plugins.module_utils.server_guard import guarded_work
from ansible_collections.llmops.sglang.plugins.module_utils.startup_log import parse_startup_log
from ansible_collections.llmops.sglang.plugins.module_utils.systemd_service import (
    SYSTEMD_ENVIRON, invocation_log, start_failure, unit_state)
from ansible_collections.llmops.sglang.plugins.module_utils.unit_change import (
    BACKUP_SUFFIX, DeployError, StartFailed, UnitChange, back_up, discard_backup, read_text, systemctl,
    write_file)

MODULE = "llmops.sglang.server"
# HTTP timeout of /server_info for the facts (server_facts' default).
SERVER_INFO_TIMEOUT_S = 10.0


class ServerDeployment:
    def __init__(self, module: AnsibleModule, rendered: dict) -> None:
        self.module = module
        self.params = module.params
        # From the action plugin (module_utils/action_request.py): the unit and the launcher source.
        self.unit_content: str | None = rendered.get("unit_content")
        self.launcher_content: str | None = rendered.get("launcher_content")
        self.name = self.params["name"]
        self.unit = f"{self.name}.service"
        self.unit_path = os.path.join(self.params["unit_dir"], self.unit)
        self.env_path = os.path.join(self.params["env_dir"], f"{self.name}.env")
        self.actions: list[str] = []
        self.unit_verify: dict | None = None  # what systemd-analyze verify said of a changed unit
        # every command of the deploy; a systemctl that changes the host is not run in check mode
        self.run = CommandRunner(module, environ=SYSTEMD_ENVIRON)

    # ---- helpers --------------------------------------------------------------------------

    def fail(self, msg: str, **extra) -> None:
        self.module.fail_json(msg=msg, unit_path=self.unit_path, actions=self.actions, **extra)

    read = staticmethod(read_text)

    def env_content(self) -> str | None:
        key = self.params["api_key"]
        problem = api_key_problem(key) if key else None
        if problem:
            self.fail(f"api_key: {problem}; nothing was changed")
        return f"SGLANG_API_KEY={key}\n" if key else None

    def base_url(self) -> str:
        host = self.params["host"]
        host = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
        return f"http://{host}:{self.params['port']}"

    def health_url(self) -> str:
        return f"{self.base_url()}/health"

    def facts(self, invocation_id: str, log: str) -> dict:
        """The start's log and its facts (what server_facts returns for it), from the log already read."""
        try:
            facts = startup_facts(log, self.base_url(), self.params["api_key"], SERVER_INFO_TIMEOUT_S)
            facts_error = None
        except PermissionError as exc:
            facts, facts_error = {"facts": None, "sources": {}, "mismatches": [], "server_info": None,
                                  "log_lines": log.count("\n")}, str(exc)
        return {"invocation_id": invocation_id, "startup_log": log, **facts, "facts_error": facts_error}

    # ---- validation -----------------------------------------------------------------------
    def run_server_python(self, argv: list, environ: dict) -> tuple:
        """``argv`` of the server's python, run as root (in check mode too), so without what another user could write
        onto its import path: ``-c`` and ``-m`` put the working directory on ``sys.path`` (cwd ``/``, not the unit's
        working directory, where a planted ``sglang`` package would run as root), ``-s`` no user site-packages. The
        service itself runs as its ``User=`` with its own working directory."""
        return self.run([argv[0], "-s", *argv[1:]], environ=environ, cwd="/")

    def validate_flags(self) -> None:
        python = self.params["python"]
        if not os.path.exists(python):
            self.fail(f"python: {python} does not exist on the host; set `python` to the SGLang venv's interpreter")
        rc, out, err = self.run_server_python([python, "-m", "sglang.launch_server", "--help"], environ={})
        if rc != 0:
            self.fail(f"`{python} -m sglang.launch_server --help` failed (rc={rc}); is SGLang installed there? {err.strip()[-500:]}")
        requested = dict(self.params["server_args"])
        requested.update({"model_path": self.params["model_path"], "port": self.params["port"], "host": self.params["host"]})
        known_flags = parse_help_flags(out)
        errors = validate_server_args(requested, known_flags)
        if errors:
            self.fail("invalid SGLang flags, nothing was changed: " + "; ".join(errors), errors=errors)
        for warning in deprecated_alias_warnings(requested, known_flags):  # the release takes them as aliases
            self.module.warn(warning)

    def preflight(self) -> None:
        """Model path, SGLang's own parser (with validate_flags) and the port, before anything changes."""
        def run_python(argv: list) -> tuple:  # with the server's environment
            environ = {key: str(value) for key, value in self.params["environment"].items()}
            return self.run_server_python(argv, environ=environ)
        errors = preflight_errors(self.run, self.params, self.unit, unit_state(self.run, self.unit).main_pid,
                                  self.unit_content, run_python=run_python, current_unit=self.read(self.unit_path))
        if errors:
            self.fail("cannot deploy, nothing was changed: " + "; ".join(errors), errors=errors)

    def verify_unit(self) -> None:
        """systemd-analyze verify of a changed unit before it replaces the installed one (in check mode too)."""
        if self.unit_content == self.read(self.unit_path):
            return
        self.unit_verify = verify_unit(self.run, self.unit, self.unit_content, self.unit_path, self.module.tmpdir)
        if self.unit_verify["skipped"]:
            self.module.warn(f"the unit was not checked with `systemd-analyze verify`: {self.unit_verify['skipped']}")
        elif not self.unit_verify["verified"]:
            error = (f"unit: systemd-analyze verify refuses the rendered unit (rc={self.unit_verify['rc']}): "
                     + "; ".join(self.unit_verify["messages"]))
            self.fail("cannot deploy, nothing was changed: " + error, errors=[error], unit_verify=self.unit_verify)

    # ---- state changes --------------------------------------------------------------------
    def install_launcher(self) -> bool:
        """Install (or update) the collection's launcher; True when it changed (or would, in check mode)."""
        path, content = self.params["launcher_path"], self.launcher_content
        if not content:
            return False
        try:
            current = os.stat(path)
            unchanged = (self.read(path) == content and current.st_uid == 0 and current.st_mode & 0o7777 == 0o755)
        except FileNotFoundError:
            unchanged = False
        if unchanged:
            return False
        if not self.module.check_mode:
            write_file(path, content, 0o755)
            os.chown(path, 0, 0)
        self.actions.append("write launcher")
        return True

    def check_user(self) -> None:
        """The service user must exist before the unit changes (in check mode the role may not have created it yet)."""
        user = self.params["user"]
        try:
            pwd.getpwnam(user)
        except KeyError:
            if not self.module.check_mode:
                self.fail(f"user: {user} does not exist on the host; create it (the llmops.sglang.sglang_server role "
                          f"does) or set `user`; nothing was changed")

    def enabled(self) -> bool:
        return self.run(["systemctl", "is-enabled", self.unit])[1].strip() == "enabled"

    def systemctl(self, *args: str) -> None:
        systemctl(self.run, self.actions, *args)

    # ---- states ---------------------------------------------------------------------------
    def present(self, force_restart: bool) -> dict:
        new_unit = self.unit_content
        new_env = self.env_content()
        self.check_user()
        old_unit, old_env = self.read(self.unit_path), self.read(self.env_path)
        unit_changed = old_unit != new_unit
        env_changed = old_env != new_env  # a key given, changed or taken away
        launcher_changed = self.install_launcher()  # not a restart: the code only matters at the next start
        state = unit_state(self.run, self.unit)
        was_enabled = self.enabled()
        needs_enable = unit_changed or not was_enabled
        needs_restart = force_restart or unit_changed or env_changed or not state.running
        result = {"changed": unit_changed or env_changed or needs_restart or needs_enable or launcher_changed,
                  "restarted": False,
                  "diff": {"before": old_unit or "", "after": new_unit,
                           "before_header": self.unit_path, "after_header": self.unit_path}}
        if self.module.check_mode or not (unit_changed or env_changed or needs_restart or needs_enable):
            env_action = "write API key file" if new_env else "remove API key file"
            self.actions += [a for a, on in (("write unit", unit_changed), (env_action, env_changed),
                                             (f"enable {self.unit}", needs_enable), ("restart", needs_restart)) if on]
            if state.running and not self.module.check_mode:
                result.update(self.facts(state.invocation_id, invocation_log(self.run, state.invocation_id)))
            return result

        change = UnitChange(self.run, self.unit, self.unit_path, self.env_path, was_enabled=was_enabled,
                            was_running=state.running, ready_timeout=self.params["ready_timeout"],
                            actions=self.actions)
        ready = None
        try:
            change.backup()
            if unit_changed:
                change.write("unit", new_unit, 0o644)
            if env_changed:
                change.write("API key file", new_env, 0o600)
            change.systemctl("daemon-reload")
            if needs_enable:
                change.enable()
            if needs_restart:
                ready = change.restart(self.health_url())
                result.update(restarted=True, invocation_id=ready.invocation_id, startup_log=ready.log,
                              ready_seconds=round(ready.seconds, 3))
                if not ready.ready:
                    raise StartFailed(ready)
        except BaseException as exc:  # the one way out after a change: undone, then failed
            self.fail_undone(exc, change)
        change.finish()
        if ready is not None:
            result.update(self.facts(ready.invocation_id, ready.log))  # the followed log: the journal is read once
        return result

    def fail_undone(self, error: BaseException, change: UnitChange) -> None:
        """Undo what the deploy changed, then fail saying what went wrong and what was put back. An interrupt is
        undone too and goes on."""
        undo = change.undo()
        if not isinstance(error, Exception):
            raise error
        message, tail, details = self.failure(error)
        if undo.rollback_seconds is not None:
            details["rollback_seconds"] = undo.rollback_seconds
        self.fail(f"{message}; {change.describe(undo)}{tail}", rolled_back=undo.rolled_back, **details)

    @staticmethod
    def failure(error: Exception) -> tuple[str, str, dict]:
        """(message, what follows the undo's account, result fields) of what failed: a failed start classified in
        the operator's terms from its log, else the error itself."""
        if not isinstance(error, StartFailed):
            return str(error), "", dict(getattr(error, "details", {}))
        ready = error.ready
        failure = parse_startup_log(ready.log).get("error") or start_failure(ready.reason)
        suggestion = failure.get("suggestion")
        lines = "\n".join(failure.get("lines") or [])
        tail = (f". SGLang suggests: {suggestion}" if suggestion else "") + (f"\nLog lines:\n{lines}" if lines else "")
        return (f"SGLang failed to start ({failure['kind']}): {failure['message']}. {ready.reason}", tail,
                {"failure": failure, "startup_log": ready.log, "invocation_id": ready.invocation_id})

    def stopped(self) -> dict:
        state = unit_state(self.run, self.unit)
        changed = state.running
        if changed and not self.module.check_mode:
            self.systemctl("stop", self.unit)
        return {"changed": changed, "restarted": False}

    def absent(self) -> dict:
        result = self.stopped()
        exists = any(os.path.exists(p) for p in (self.unit_path, self.env_path, self.env_path + BACKUP_SUFFIX))
        result["changed"] = result["changed"] or exists
        result["diff"] = {"before": self.read(self.unit_path) or "", "after": ""}
        if exists and not self.module.check_mode:
            if os.path.exists(self.unit_path):
                self.systemctl("disable", self.unit)
            back_up((self.unit_path, self.env_path))
            discard_backup(self.env_path)  # the unit's backup is kept; a key is not kept for a removed server
            for path in (self.unit_path, self.env_path):
                if os.path.exists(path):
                    os.remove(path)
            self.systemctl("daemon-reload")
            self.actions.append("remove unit")
        return result


def deploy(module: AnsibleModule) -> dict:
    """The module's result: the service brought to ``state``, with the unit's path and the actions taken."""
    state = module.params["state"]
    try:
        rendered = read_request(module.tmpdir, MODULE) or {}
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    if state in ("started", "restarted") and not rendered.get("unit_content"):
        module.fail_json(msg=f"state={state} needs the unit the {MODULE} action plugin renders on the controller; "
                             "run the module as a task (ansible -m / a playbook), not on its own")
    deployment = ServerDeployment(module, rendered)
    with guarded_work():  # a start can take many minutes: the host's guard of this stage must not fire meanwhile
        if state in ("started", "restarted"):
            if module.params["validate_flags"]:
                deployment.validate_flags()
            deployment.preflight()
            deployment.verify_unit()
            result = deployment.present(force_restart=state == "restarted")
        else:
            try:
                result = deployment.stopped() if state == "stopped" else deployment.absent()
            except DeployError as exc:
                deployment.fail(str(exc))
    if deployment.unit_verify is not None:
        result["unit_verify"] = deployment.unit_verify
    if not module._diff:
        result.pop("diff", None)
    return {"unit_path": deployment.unit_path, "actions": deployment.actions, **result}
