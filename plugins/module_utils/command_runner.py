# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The one way the collection's modules run a program on the host: ``AnsibleModule.run_command`` with the locale
forced to C (the parsers read English output: systemctl properties, nvidia-smi, ``--help`` texts, error messages),
check-mode aware, with a clear error naming the command, its rc and the tail of its stderr.

The idea is community.general's ``plugins/module_utils/cmd_runner.py`` (``force_lang="C"`` puts ``LANGUAGE`` and
``LC_ALL`` into ``environ_update``; ``check_mode_skip``), kept small: the callers build their own argv.

A process that must be followed while it runs (``journalctl --follow`` in ``systemd_service.wait_until_ready``,
the MoE tuner in ``moe_tuning.run_tuner``) or that needs a time limit (``run_command`` has none) is started with
``subprocess`` by its own module_utils; it gets its environment from :func:`command_environment`, so every program
sees the same forced locale.

Private to the llmops.sglang collection. Runs on the managed host: stdlib and ansible.module_utils only.
"""
from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence

# LANGUAGE too: GNU gettext prefers it to LC_ALL for messages when the locale is not C (cmd_runner does the same).
FORCED_LOCALE = {"LANGUAGE": "C", "LC_ALL": "C"}
ERROR_TAIL_CHARS = 800


def command_environment(extra: Mapping | None = None, base: Mapping | None = None) -> dict[str, str]:
    """The environment of a program: ``base`` (``os.environ`` for a process started with ``subprocess``; nothing for
    ``run_command``, which adds it to the module's own), ``extra`` over it, the forced locale over both."""
    env = {key: str(value) for key, value in (base or {}).items()}
    env.update({key: str(value) for key, value in (extra or {}).items()})
    env.update(FORCED_LOCALE)
    return env


class CommandError(RuntimeError):
    """A command that failed: the message names it, its rc and the tail of its stderr (else stdout)."""

    def __init__(self, argv: Sequence, rc: int, out: str, err: str) -> None:
        self.argv, self.rc, self.out, self.err = list(argv), rc, out, err
        tail = (err or "").strip() or (out or "").strip()
        super().__init__(f"`{shlex.join(str(arg) for arg in argv)}` failed (rc={rc})"
                         + (f": {tail[-ERROR_TAIL_CHARS:]}" if tail else ""))


class CommandRunner:
    """``run(argv) -> (rc, out, err)`` for a module, the callable the module_utils take.

    ``environ``: extra environment of every command of this runner (e.g. ``SYSTEMD_PAGER``). Per call:
    ``environ`` (over the runner's), ``cwd``, ``changes=True`` for a command that changes the host's state (not run in
    check mode: it returns ``(0, "", "")``; read-only commands run in check mode too) and ``check=True`` to raise
    :class:`CommandError` on a non-zero rc.
    """

    def __init__(self, module, environ: Mapping | None = None) -> None:
        self.module = module
        self.environ = dict(environ or {})

    def __call__(self, argv: Sequence, *, environ: Mapping | None = None, cwd: str | None = None,
                 changes: bool = False, check: bool = False) -> tuple[int, str, str]:
        if changes and self.module.check_mode:
            return 0, "", ""
        rc, out, err = self.module.run_command(
            [str(arg) for arg in argv], environ_update=command_environment({**self.environ, **(environ or {})}),
            cwd=cwd)
        if check and rc != 0:
            raise CommandError(argv, rc, out, err)
        return rc, out, err

    def bound(self, *, environ: Mapping | None = None, cwd: str | None = None):
        """A ``run(argv)`` of this runner with ``environ`` and ``cwd`` fixed (for module_utils that take one)."""
        return lambda argv: self(argv, environ=environ, cwd=cwd)
