# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The checks llmops.sglang.server runs before it changes anything, and where a unit listens."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils import _model_path as model_access
from ansible_collections.llmops.sglang.plugins.module_utils import _port_holders as ports
from ansible_collections.llmops.sglang.plugins.module_utils import _sglang_parse_check as parse_check
from ansible_collections.llmops.sglang.plugins.module_utils import _unit_file as unit_file
from ansible_collections.llmops.sglang.plugins.module_utils import server_preflight as pre
from ansible_collections.llmops.sglang.plugins.module_utils.systemd_unit import command_line

EMULATOR = Path(__file__).resolve().parents[3] / "emulator"
TEMPLATE = Path(__file__).resolve().parents[4] / "roles" / "sglang_server" / "templates" / "sglang.service.j2"


def unit_with(exec_start: str, **settings: str) -> str:
    extra = "".join(f"{key}={value}\n" for key, value in settings.items())
    return f"[Unit]\nDescription=x\n\n[Service]\nType=simple\n{extra}ExecStart={exec_start}\nRestart=on-failure\n"


# --- where a unit listens ----------------------------------------------------------------------------


def test_exec_start_of_the_rendered_command_round_trips():
    argv = ["/opt/sglang/venv/bin/python", "-m", "sglang.launch_server", "--model-path", "/srv/models/My Model",
            "--host", "0.0.0.0", "--port", "30001", "--json-model-override-args", '{"a": "$x 100%"}']
    assert unit_file.exec_start_argv(unit_with(command_line(argv))) == argv


def test_exec_start_behind_a_launcher_with_continuations_and_prefix():
    unit = unit_with("-/opt/sglang/venv/bin/python /usr/local/libexec/llmops-sglang/sglang_launcher.py \\\n"
                     "    sglang.launch_server --model-path /srv/m \\\n    --port=31000 --tp-size 4")
    argv = unit_file.exec_start_argv(unit)
    assert argv[0] == "/opt/sglang/venv/bin/python"
    assert unit_file.launch_server_args(argv) == ["--model-path", "/srv/m", "--port=31000", "--tp-size", "4"]
    assert unit_file.unit_listen_address(unit) == ("127.0.0.1", 31000)


def test_exec_start_is_unquoted_by_systemds_rules_not_a_shells():
    """systemd reads C escapes inside single quotes too: '\\n' is a newline to it, where a shell keeps it."""
    assert unit_file.exec_start_argv(unit_with("/py --a 'x\\ny' --b \"it\\'s\" --c 'q'\"r\"s")) == [
        "/py", "--a", "x\ny", "--b", "it's", "--c", "qrs"]
    assert unit_file.exec_start_argv(unit_with(command_line(["/py", "--t", "a\\nb"])))[-1] == "a\\nb"


@pytest.mark.parametrize("exec_start", ["/py --chat-template 'chatml", "/py --x \"a"])
def test_unbalanced_quoting_is_an_error_not_a_guess(exec_start):
    """The preflight parsed such a line with str.split() and passed the truncated argv; systemd refuses the unit."""
    with pytest.raises(ValueError, match="unbalanced quoting|ends with a backslash"):
        unit_file.exec_start_argv(unit_with(exec_start))
    params = {"model_path": "org/model", "port": 30000, "python": "/py", "validate_flags": True}
    errors = pre.preflight_errors(lambda argv: (0, "", ""), params, "sglang.service", 0, unit_with(exec_start))
    assert errors[0].startswith("unit: the ExecStart= of the rendered unit cannot be read as systemd reads it: ")
    assert unit_file.unit_listen_address(unit_with(exec_start + " --port 1")) == ("127.0.0.1", 30000)


def test_the_last_exec_start_counts_and_an_empty_one_resets():
    assert unit_file.exec_start_argv(unit_with("/bin/a --port 1") + "ExecStart=\nExecStart=/bin/b --port 2\n") == [
        "/bin/b", "--port", "2"]
    assert unit_file.exec_start_argv(unit_with("/bin/a") + "ExecStart=\n") is None
    assert unit_file.exec_start_argv(None) is None and unit_file.exec_start_argv("[Service]\nType=simple\n") is None


@pytest.mark.parametrize(("argv", "address"), [
    ([], ("127.0.0.1", 30000)),  # SGLang's defaults
    (["x", "--port", "30001"], ("127.0.0.1", 30001)),
    (["x", "--host", "0.0.0.0", "--port", "1", "--port", "2"], ("0.0.0.0", 2)),  # argparse: the last one wins
    (["x", "--host=::1", "--port=8080"], ("::1", 8080)),
    (["x", "--port", "not-a-number"], ("127.0.0.1", 30000)),
    (["x", "--portx", "5", "--port"], ("127.0.0.1", 30000)),
])
def test_listen_address(argv, address):
    assert unit_file.listen_address(argv) == address


@pytest.mark.parametrize(("host", "url"), [
    ("127.0.0.1", "http://127.0.0.1:30000/health"),
    ("0.0.0.0", "http://127.0.0.1:30000/health"),
    ("", "http://127.0.0.1:30000/health"),
    ("::", "http://[::1]:30000/health"),
    ("::1", "http://[::1]:30000/health"),
    ("gpu1.example", "http://gpu1.example:30000/health"),
])
def test_health_url(host, url):
    assert unit_file.health_url(host, 30000) == url


def test_unit_health_url_is_the_units_own_port():
    unit = unit_with(command_line(["/py", "/launcher.py", "sglang.launch_server", "--model-path", "/m",
                                        "--host", "127.0.0.1", "--port", "30000"]))
    assert unit_file.unit_health_url(unit) == "http://127.0.0.1:30000/health"


def test_launch_server_args_forms():
    assert unit_file.launch_server_args(["/py", "-m", "sglang.launch_server", "--tp", "2"]) == ["--tp", "2"]
    assert unit_file.launch_server_args(["/py", "/opt/v/lib/python3.12/site-packages/sglang/launch_server.py", "--tp", "2"]) == [
        "--tp", "2"]
    assert unit_file.launch_server_args(["/py", "-m", "vllm.entrypoints"]) is None
    assert unit_file.launch_server_args(None) is None


def test_unit_argv_falls_back_to_the_modules_options():
    params = {"model_path": "/m", "host": "127.0.0.1", "port": 30001, "server_args": {"tp_size": "four"}}
    assert pre.unit_argv("[Service]\nExecStart=/opt/run-it\n", params) == [
        "--model-path", "/m", "--host", "127.0.0.1", "--port", "30001", "--tp-size", "four"]
    assert pre.unit_argv(unit_with("/py -m sglang.launch_server --tp-size four"), params) == ["--tp-size", "four"]


# --- who holds a port --------------------------------------------------------------------------------

SS_OUTPUT = """\
LISTEN 0      4096         0.0.0.0:22          0.0.0.0:*    users:(("sshd",pid=101,fd=3))
LISTEN 0      2048       127.0.0.1:30000       0.0.0.0:*    users:(("python",pid=4242,fd=41))
LISTEN 0      5          127.0.0.1:30001       0.0.0.0:*    users:(("python3",pid=5150,fd=3),("python3",pid=5151,fd=3))
LISTEN 0      4096   127.0.0.53%lo:53          0.0.0.0:*    users:(("systemd-resolve",pid=77,fd=14))
LISTEN 0      4096            [::]:22             [::]:*    users:(("sshd",pid=101,fd=4))
LISTEN 0      128                *:8080              *:*
LISTEN 0      128  [::ffff:10.0.0.5]:9000             *:*    users:(("java",pid=9,fd=1))
"""


def test_parse_ss_listeners():
    listeners = ports.parse_ss_listeners(SS_OUTPUT + "garbage line\n\n")
    assert [(item.address, item.port) for item in listeners] == [
        ("0.0.0.0", 22), ("127.0.0.1", 30000), ("127.0.0.1", 30001), ("127.0.0.53", 53), ("::", 22), ("::", 8080),
        ("10.0.0.5", 9000)]
    assert listeners[2].processes == [("python3", 5150), ("python3", 5151)]
    assert listeners[5].processes == []


@pytest.mark.parametrize(("listening", "requested", "overlap"), [
    ("127.0.0.1", "127.0.0.1", True),
    ("127.0.0.1", "10.0.0.5", False),
    ("0.0.0.0", "127.0.0.1", True),
    ("127.0.0.1", "0.0.0.0", True),
    ("0.0.0.0", "::1", False),
    ("::", "127.0.0.1", True),  # Linux dual-stack default
    ("::1", "::", True),
    ("::1", "127.0.0.1", False),
    ("*", "10.1.1.1", True),
    ("127.0.0.1", "gpu1.local", True),  # not an address: assume the worst
])
def test_addresses_overlap(listening, requested, overlap):
    assert ports.addresses_overlap(listening, requested) is overlap


def test_conflicting_listeners_by_port_and_address():
    listeners = ports.parse_ss_listeners(SS_OUTPUT)
    assert [item.port for item in ports.conflicting_listeners(listeners, ["127.0.0.1"], 30001)] == [30001]
    assert ports.conflicting_listeners(listeners, ["10.0.0.6"], 30001) == []
    assert [item.address for item in ports.conflicting_listeners(listeners, ["0.0.0.0"], 22)] == ["0.0.0.0", "::"]


def test_proc_parsers():
    assert ports.parse_proc_cgroup("12:pids:/system.slice/a.service\n0::/system.slice/sglang.service\n") == [
        "/system.slice/sglang.service", "/system.slice/a.service"]
    assert ports.unit_of_cgroup(["/system.slice/sglang.service/payload"]) == "sglang.service"
    assert ports.unit_of_cgroup(["/user.slice/user-0.slice/session-3.scope"]) == "session-3.scope"
    assert ports.unit_of_cgroup(["/"]) is None
    assert ports.parse_proc_stat_ppid("4242 (python (x) y) S 4200 4242 4242 0 -1") == 4200
    assert ports.parse_proc_stat_ppid("garbage") is None
    assert ports.descendants(10, {10: 1, 11: 10, 12: 11, 13: 1, 14: 12}) == {10, 11, 12, 14}
    assert ports.descendants(0, {1: 0}) == set()


def fake_proc(root: Path, pid: int, ppid: int, cmdline: list[str], cgroup: str, comm: str = "python3") -> None:
    directory = root / str(pid)
    directory.mkdir(parents=True)
    (directory / "stat").write_text(f"{pid} ({comm}) S {ppid} {pid} {pid} 0 -1 4194304\n")
    (directory / "cmdline").write_bytes(b"\0".join(part.encode() for part in cmdline) + b"\0")
    (directory / "cgroup").write_text(f"0::{cgroup}\n")


@pytest.fixture
def proc(tmp_path: Path) -> Path:
    root = tmp_path / "proc"
    fake_proc(root, 1, 0, ["/sbin/init"], "/init.scope", "systemd")
    fake_proc(root, 4242, 1, ["/opt/sglang/venv/bin/python", "-m", "sglang.launch_server", "--port", "30000"],
              "/system.slice/sglang.service")
    fake_proc(root, 4243, 4242, ["python", "-c", "from multiprocessing.spawn import spawn_main"],
              "/system.slice/sglang.service")
    fake_proc(root, 5150, 1, ["python3", "-m", "http.server", "30001"], "/system.slice/run-u7.service")
    fake_proc(root, 6000, 1, ["/opt/sglang/venv/bin/python", "-m", "sglang.launch_server", "--port", "30002"],
              "/system.slice/sglang-b.service")
    (root / "self").mkdir()
    return root


def ss_runner(output: str):
    calls = []

    def run(argv):
        calls.append(argv)
        return 0, output, ""
    run.calls = calls
    return run


SS_HOST = """\
LISTEN 0 2048 127.0.0.1:30000 0.0.0.0:* users:(("python",pid=4242,fd=41))
LISTEN 0 2048 127.0.0.1:30000 0.0.0.0:* users:(("python",pid=4243,fd=9))
LISTEN 0 5    127.0.0.1:30001 0.0.0.0:* users:(("python3",pid=5150,fd=3))
LISTEN 0 5    0.0.0.0:30002   0.0.0.0:* users:(("python",pid=6000,fd=3))
LISTEN 0 5    127.0.0.1:30003 0.0.0.0:*
"""


def test_port_error_free_port_and_own_socket(proc, monkeypatch):
    monkeypatch.setattr(pre, "_which", lambda program: "/usr/bin/ss")
    run = ss_runner(SS_HOST)
    assert pre.port_error(run, "sglang.service", "127.0.0.1", 30009, 4242, None, str(proc)) is None
    assert run.calls == [["/usr/bin/ss", "-ltnpH"]]
    # the service's own processes (MainPID tree), even after a MainPID change (cgroup)
    assert pre.port_error(run, "sglang.service", "127.0.0.1", 30000, 4242, None, str(proc)) is None
    assert pre.port_error(run, "sglang.service", "127.0.0.1", 30000, 0, None, str(proc)) is None


def test_port_error_names_the_foreign_process(proc, monkeypatch):
    monkeypatch.setattr(pre, "_which", lambda program: "/usr/bin/ss")
    message = pre.port_error(ss_runner(SS_HOST), "sglang.service", "127.0.0.1", 30001, 4242, None, str(proc))
    assert message == ("port: 127.0.0.1:30001 is already in use by pid 5150 (python3 -m http.server 30001; "
                       "run-u7.service), not by sglang.service; the server could not bind it. Stop that process or "
                       "set `port` to a free port")
    # another SGLang instance on the wildcard address collides with 127.0.0.1
    other = pre.port_error(ss_runner(SS_HOST), "sglang.service", "127.0.0.1", 30002, 4242, None, str(proc))
    assert "pid 6000" in other and "sglang-b.service" in other


def test_port_error_socket_without_process(proc, monkeypatch):
    monkeypatch.setattr(pre, "_which", lambda program: "/usr/bin/ss")
    message = pre.port_error(ss_runner(SS_HOST), "sglang.service", "127.0.0.1", 30003, 0, None, str(proc))
    assert message.startswith("port: 127.0.0.1:30003 is already in use by a process this user cannot see")
    # ...unless the running service's unit is the one listening there
    unit = unit_with("/py -m sglang.launch_server --port 30003")
    assert pre.port_error(ss_runner(SS_HOST), "sglang.service", "127.0.0.1", 30003, 4242, unit, str(proc)) is None


def test_port_error_without_ss_probes_the_bind(monkeypatch):
    import socket
    monkeypatch.setattr(pre, "_which", lambda program: None)
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        assert "already in use" in pre.port_error(ss_runner(""), "sglang.service", "127.0.0.1", port, 0, None)
    assert pre.port_error(ss_runner(""), "sglang.service", "127.0.0.1", port, 0, None) is None


def test_port_error_ss_failure(monkeypatch):
    monkeypatch.setattr(pre, "_which", lambda program: "/usr/bin/ss")
    assert pre.port_error(lambda argv: (1, "", "Cannot open netlink socket"), "s.service", "127.0.0.1", 1, 0, None) == (
        "port: `ss -ltnpH` failed (rc=1): Cannot open netlink socket")


# --- SGLang's own parser -----------------------------------------------------------------------------


def run_program(argv: list[str], pythonpath: str) -> tuple[int, str, str]:
    done = subprocess.run([sys.executable, "-c", parse_check.PARSE_CHECK_PROGRAM, *argv], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": pythonpath}, timeout=60, check=False)
    return done.returncode, done.stdout, done.stderr


EMULATOR_PATH = f"{EMULATOR / 'sglang'}:{EMULATOR / 'triton'}"
GOOD_ARGV = ["--model-path", "/srv/models/m", "--host", "127.0.0.1", "--port", "30000", "--tp-size", "4",
             "--speculative-algorithm", "NEXTN", "--enable-metrics"]


def test_program_accepts_a_good_command_line():
    assert parse_check.parse_check_result(*run_program(GOOD_ARGV, EMULATOR_PATH)) == {"errors": []}


def test_program_reports_every_bad_value_named_by_the_users_field():
    argv = [*GOOD_ARGV, "--tp-size", "four", "--mem-fraction-static=lots", "--port", "http", "--cuda-graph-max-bs", "8"]
    result = parse_check.parse_check_result(*run_program(argv, EMULATOR_PATH))
    fields = parse_check.argument_fields({"tp_size": "four", "mem_fraction_static": "lots", "cuda_graph_max_bs": 8})
    assert parse_check.parse_check_errors(result, fields, "/py") == [
        "server_args.tp_size: invalid int value 'four' (SGLang's parser)",
        "server_args.mem_fraction_static: invalid float value 'lots' (SGLang's parser)",
        "port: invalid int value 'http' (SGLang's parser)",
    ]


def test_program_import_failure_names_python(tmp_path: Path):
    package = tmp_path / "sglang" / "srt"
    package.mkdir(parents=True)
    (tmp_path / "sglang" / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "server_args.py").write_text("import torch_that_is_not_installed\n")
    result = parse_check.parse_check_result(*run_program(GOOD_ARGV, str(tmp_path)))
    assert result == {"import_error": "ModuleNotFoundError: No module named 'torch_that_is_not_installed'"}
    assert parse_check.parse_check_errors(result, {}, "/opt/sglang/venv/bin/python") == [
        "python: /opt/sglang/venv/bin/python cannot import sglang.srt.server_args (ModuleNotFoundError: No module "
        "named 'torch_that_is_not_installed'), which the check of server_args with SGLang's own parser needs; set "
        "`python` to the interpreter of the SGLang installation (or validate_flags: false to skip the checks)"]


def test_real_sglang_option_order_maps_to_the_users_field():
    """Real SGLang declares ``--tensor-parallel-size`` first: argparse names the argument by all its options."""
    errors = [{"message": "argument --tensor-parallel-size/--tp-size: invalid int value: 'four'",
               "option_strings": ["--tensor-parallel-size", "--tp-size"], "dest": "tp_size"}]
    assert parse_check.parser_error_messages(errors, parse_check.argument_fields({"tp_size": "four"})) == [
        "server_args.tp_size: invalid int value 'four' (SGLang's parser)"]
    # the user spelled the alias as a field name
    assert parse_check.parser_error_messages(errors, parse_check.argument_fields({"tensor_parallel_size": "four"})) == [
        "server_args.tensor_parallel_size: invalid int value 'four' (SGLang's parser)"]


def test_parse_check_result_fallbacks():
    stderr = ("usage: python -m sglang.launch_server [-h] --model-path MODEL_PATH\n"
              "python -m sglang.launch_server: error: argument --tp-size/--tensor-parallel-size: invalid int value: 'x'\n")
    result = parse_check.parse_check_result(2, "", stderr)
    assert parse_check.parser_error_messages(result["errors"], parse_check.argument_fields({"tp_size": "x"})) == [
        "server_args.tp_size: invalid int value 'x' (SGLang's parser)"]
    crash = parse_check.parse_check_result(1, "", "Traceback (most recent call last):\n  File x\nAttributeError: no add_cli_args\n")
    assert crash == {"failure": "rc=1: Traceback (most recent call last):   File x AttributeError: no add_cli_args"}
    assert parse_check.parse_check_errors(crash, {}, "/py")[0].startswith("python: checking the arguments with SGLang's parser")
    assert parse_check.parse_check_result(0, "noise\n" + parse_check.PARSE_CHECK_MARKER + '{"errors": []}\n', "") == {"errors": []}
    assert parse_check.parser_error_messages([{"message": "the following arguments are required: --model-path"}], {}) == [
        "SGLang's parser: the following arguments are required: --model-path"]


# --- the model path ----------------------------------------------------------------------------------

NOBODY = model_access.Identity("nobody", 65534, {65534})
OPEN_DIR = os.stat_result((0o40755, 0, 0, 2, 0, 0, 4096, 0, 0, 0))


def stat_below(root: Path):
    """os.stat for paths below ``root``; directories above it (pytest's basetemp is private) look world-searchable."""
    def stat(path: str) -> os.stat_result:
        return os.stat(path) if path == str(root) or path.startswith(str(root) + "/") else OPEN_DIR
    return stat


@pytest.fixture
def model(tmp_path: Path) -> Path:
    directory = tmp_path / "models" / "Qwen"
    directory.mkdir(parents=True)
    (directory / "config.json").write_text("{}")
    for path in (tmp_path, tmp_path / "models", directory):
        path.chmod(0o755)
    (directory / "config.json").chmod(0o644)
    return directory


def test_a_readable_model_directory_passes(model: Path):
    assert model_access.model_path_errors(str(model), "/", NOBODY, stat=stat_below(model.parent.parent)) == []
    assert model_access.model_path_errors(str(model), "/", None) == []


@pytest.mark.parametrize("hub_id", ["Qwen/Qwen3.5-122B-A10B", "gpt2", "org_x/name.v2"])
def test_a_hub_id_is_accepted_as_is(hub_id, tmp_path: Path):
    assert model_access.model_path_errors(hub_id, str(tmp_path), NOBODY) == []


def test_missing_paths(tmp_path: Path):
    assert model_access.model_path_errors("/srv/models/nope", "/", NOBODY) == [
        "model_path: /srv/models/nope does not exist on the host"]
    assert model_access.model_path_errors("./models/nope", str(tmp_path), NOBODY) == [
        f"model_path: ./models/nope does not exist on the host (relative to working_directory {tmp_path})"]
    assert model_access.model_path_errors("models/a/b", str(tmp_path), NOBODY) == [
        f"model_path: models/a/b does not exist on the host (relative to working_directory {tmp_path}) "
        f"and is not a hub id (org/name)"]


def test_relative_path_resolves_against_the_working_directory(model: Path):
    assert model_access.model_path_errors("models/Qwen", str(model.parent.parent), NOBODY, stat=stat_below(model.parent.parent)) == []


def test_not_a_model_directory(model: Path):
    assert model_access.model_path_errors(str(model / "config.json"), "/", NOBODY) == [
        f"model_path: {model}/config.json is not a directory (a model directory holds config.json)"]
    (model / "config.json").unlink()
    assert model_access.model_path_errors(str(model), "/", NOBODY) == [
        f"model_path: {model} has no config.json; it is not a model directory "
        f"(point it at the directory holding config.json and the weights)"]


def test_gguf_file_is_a_model(tmp_path: Path):
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    tmp_path.chmod(0o755)
    gguf.chmod(0o644)
    assert model_access.model_path_errors(str(gguf), "/", NOBODY, stat=stat_below(tmp_path)) == []


def test_unreadable_for_the_servers_user(model: Path):
    stat = stat_below(model.parent.parent)
    model.parent.chmod(0o700)
    assert model_access.model_path_errors(str(model), "/", NOBODY, stat=stat) == [
        f"model_path: {model} is not readable by the server's user nobody (no search permission on {model.parent})"]
    owner = model_access.Identity("owner", os.stat(model).st_uid, set())
    assert model_access.model_path_errors(str(model), "/", owner, stat=stat) == [] or owner.uid == 0
    model.parent.chmod(0o755)
    model.chmod(0o711)
    assert model_access.model_path_errors(str(model), "/", NOBODY, stat=stat) == [
        f"model_path: {model} is not readable by the server's user nobody (no read+search permission on {model})"]
    model.chmod(0o755)
    (model / "config.json").chmod(0o600)
    assert model_access.model_path_errors(str(model), "/", NOBODY, stat=stat) == [
        f"model_path: {model}/config.json is not readable by the server's user nobody"]
    # group membership grants it; a POSIX ACL gets the benefit of the doubt
    (model / "config.json").chmod(0o640)
    member = model_access.Identity("member", 65534, {os.stat(model / "config.json").st_gid})
    assert model_access.model_path_errors(str(model), "/", member, stat=stat) == []
    assert model_access.model_path_errors(str(model), "/", NOBODY, stat=stat, has_acl=lambda path: path.endswith("config.json")) == []


def test_hidden_by_the_units_sandboxing(model: Path, monkeypatch):
    assert model_access.hidden_by_unit("/home/me/models/q", unit_with("/x", ProtectHome="yes")) == "ProtectHome=yes"
    assert model_access.hidden_by_unit("/root/q", unit_with("/x", ProtectHome="tmpfs")) == "ProtectHome=tmpfs"
    assert model_access.hidden_by_unit("/home/me/q", unit_with("/x", ProtectHome="read-only")) is None
    assert model_access.hidden_by_unit("/tmp/q", unit_with("/x", PrivateTmp="yes")) == "PrivateTmp=yes"
    assert model_access.hidden_by_unit("/srv/models/q", unit_with("/x", ProtectHome="yes", PrivateTmp="yes")) is None
    assert model_access.hidden_by_unit("/homework/q", unit_with("/x", ProtectHome="yes")) is None
    # Where the model really is decides, not where pytest put it (a checkout under /tmp would be hidden itself).
    monkeypatch.setattr(model_access.os.path, "realpath", lambda path: "/srv/models/Qwen")
    assert model_access.model_path_errors(str(model), "/", None, unit_text=unit_with("/x", PrivateTmp="yes")) == []
    monkeypatch.setattr(model_access.os.path, "realpath", lambda path: "/tmp/models/Qwen")  # the model seen through a link
    assert model_access.model_path_errors(str(model), "/", None, unit_text=unit_with("/x", PrivateTmp="yes")) == [
        f"model_path: {model} is hidden from the server by the unit's PrivateTmp=yes; put the model elsewhere "
        f"(e.g. /srv/models)"]


def test_the_collections_unit_template_settings_are_read():
    template = TEMPLATE.read_text()
    assert unit_file.unit_setting(template, "PrivateTmp") == "yes"


def test_server_identity_of_root_and_of_a_missing_user():
    root = model_access.server_identity("root", None)
    assert root.uid == 0 and 0 in root.gids
    assert model_access.server_identity("no-such-user-llmops", None) is None


# --- all of it ---------------------------------------------------------------------------------------


def test_preflight_errors_collects_every_problem(monkeypatch):
    monkeypatch.setattr(pre, "_which", lambda program: "/usr/bin/ss")
    monkeypatch.setattr(pre, "process_parents", lambda proc_root="/proc": {4243: 4242, 4242: 1})
    monkeypatch.setattr(pre, "describe_process", lambda pid, name, proc_root="/proc": ports.PortHolder(
        pid, name, "python3 -m http.server 30001", "run-u7.service"))
    argv = ["/py", "-m", "sglang.launch_server", "--model-path", "/srv/models/nope", "--host", "127.0.0.1",
            "--port", "30001", "--tp-size", "four"]
    params = {"model_path": "/srv/models/nope", "host": "127.0.0.1", "port": 30001, "server_args": {"tp_size": "four"},
              "python": sys.executable, "user": "root", "group": None, "working_directory": "/",
              "validate_flags": True}
    unit_text = unit_with(command_line(argv))

    def run(argv):
        if argv[0] == "/usr/bin/ss":
            return 0, SS_HOST, ""
        done = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": EMULATOR_PATH},
                              check=False)
        return done.returncode, done.stdout, done.stderr

    errors = pre.preflight_errors(run, params, "sglang.service", 4242, unit_text)
    assert errors[0] == "model_path: /srv/models/nope does not exist on the host"
    assert errors[1] == "server_args.tp_size: invalid int value 'four' (SGLang's parser)"
    assert errors[2].startswith("port: 127.0.0.1:30001 is already in use by pid 5150 (python3 -m http.server 30001")
    assert len(errors) == 3
    assert pre.preflight_errors(run, {**params, "validate_flags": False}, "sglang.service", 4242,
                                unit_text)[1].startswith("port:")
