# Copyright (c) llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Values that reach the unit file: every field refused when it holds a control character (named), quoted by its
setting's own syntax, and a command line read back as systemd reads it."""
from __future__ import annotations

import shutil
import subprocess

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils import systemd_unit as su

VALID = {"name": "sglang", "model_path": "/srv/models/m", "python": "/opt/sglang/venv/bin/python", "host": "0.0.0.0",
         "port": 30000, "user": "sglang", "group": "sglang", "working_directory": "/", "env_dir": "/etc/sglang",
         "launcher_path": "/usr/local/libexec/llmops-sglang/sglang_launcher.py", "read_write_paths": ["/srv/out"],
         "device_allow": ["/dev/nvidiactl rw", "char-nvidia-frontend rw"],
         "server_args": {"tp_size": 4, "cuda_graph_bs": [1, 2], "json_model_override_args": {"a": "x\ny"},
                         "enable_x": True, "y": None},
         "environment": {"CUDA_VISIBLE_DEVICES": "0,1", "N": 3}}
INJECTED = "x\nExecStartPre=+/usr/bin/touch /tmp/pwned\nDescription=y"


def test_valid_values_pass():
    assert su.unit_value_errors(VALID) == []
    assert su.unit_value_errors({"name": "sglang"}) == [], "left-out options get the module's valid defaults"


@pytest.mark.parametrize(("override", "field"), [
    ({"environment": {"FOO": INJECTED}}, "environment.FOO"),
    ({"server_args": {"chat_template": "chatml\n"}}, "server_args.chat_template"),
    ({"server_args": {"cuda_graph_bs": [1, "2\n"]}}, "server_args.cuda_graph_bs[1]"),
    ({"server_args": {"x\nExecStartPre": 1}}, "server_args['x\\nExecStartPre'] (a name)"),
    ({"model_path": "/srv/m\nExecStartPre=+/bin/true"}, "model_path"),
    ({"model_path": "org/name\r"}, "model_path"),
    ({"python": "/opt/py\n"}, "python"),
    ({"launcher_path": "/l.py\0"}, "launcher_path"),
    ({"host": "0.0.0.0\nExecStartPre=+/bin/true"}, "host"),
    ({"port": "30000\nExecStartPre=+/bin/true"}, "port"),
    ({"user": "sglang\nExecStartPre=+/bin/true"}, "user"),
    ({"group": "video\n"}, "group"),
    ({"working_directory": "/srv\n"}, "working_directory"),
    ({"env_dir": "/etc/sglang\t"}, "env_dir"),
    ({"read_write_paths": ["/ok", "/srv/out\nExecStartPre=+/bin/true"]}, "read_write_paths[1]"),
    ({"device_allow": ["/dev/nvidiactl rw\nExecStartPre=+/bin/true"]}, "device_allow[0]"),
    ({"name": "sglang\x7f"}, "name"),
])
def test_a_control_character_in_any_value_that_reaches_the_unit_is_refused_naming_the_field(override, field):
    errors = su.unit_value_errors({**VALID, **override})
    assert len(errors) == 1 and errors[0].startswith(f"{field}: contains "), errors
    assert "would end its setting in the unit file" in errors[0]


def test_the_error_names_the_character_and_how_to_fix_a_block_scalar():
    [error] = su.unit_value_errors({**VALID, "server_args": {"chat_template": "chatml\n"}})
    assert error.startswith("server_args.chat_template: contains a newline") and "write |- or >-" in error
    assert "a carriage return" in su.control_character_error("f", "a\rb")
    assert "a NUL character" in su.control_character_error("f", "a\0b")
    assert "U+001B" in su.control_character_error("f", "a\x1bb") and "U+007F" in su.control_character_error("f", "\x7f")
    assert su.control_character_error("f", "ünïcode, spaces and \"quotes\" 100% $HOME") is None


@pytest.mark.parametrize(("override", "message"), [
    ({"environment": {"1X": "a"}}, "environment: '1X' is not a variable name"),
    ({"environment": {"A B": "a"}}, "environment: 'A B' is not a variable name"),
    ({"environment": {"A=B": "a"}}, "environment: 'A=B' is not a variable name"),
    ({"user": "root user"}, "user: 'root user' is not a user or group name"),
    ({"user": "+root"}, "user: '+root' is not a user or group name"),
    ({"name": "../x"}, "name: '../x' is not a service name"),
    ({"name": "sglang.service x"}, "name: 'sglang.service x' is not a service name"),
    ({"python": "python3"}, "python: 'python3' is not an absolute path"),
    ({"python": "+/usr/bin/python3"}, "python: '+/usr/bin/python3' is not an absolute path"),
    ({"read_write_paths": ["srv/out"]}, "read_write_paths[0]: 'srv/out' is not an absolute path"),
    ({"read_write_paths": ["/srv/../etc"]}, "read_write_paths[0]: /srv/../etc has a '.' or '..' component"),
    ({"model_path": "/srv/models/./m"}, "model_path: /srv/models/./m has a '.' or '..' component"),
    ({"working_directory": "srv"}, "working_directory: 'srv' is not an absolute path"),
    ({"device_allow": ["/dev/nvidiactl rwx"]}, "device_allow[0]: '/dev/nvidiactl rwx' is not a DeviceAllow= entry"),
    ({"device_allow": ["/dev/null rw /dev/sda"]}, "device_allow[0]: '/dev/null rw /dev/sda' is not a DeviceAllow="),
])
def test_names_and_paths_take_their_settings_syntax_only(override, message):
    errors = su.unit_value_errors({**VALID, **override})
    assert len(errors) == 1 and errors[0].startswith(message), errors


@pytest.mark.parametrize("argv", [
    ["/opt/sglang/venv/bin/python", "-m", "sglang.launch_server", "--model-path", "/srv/models/My Model"],
    ["/py", "--json-model-override-args", '{"a": "$x 100%", "b": "it\'s"}'],
    ["/py", "--chat-template", "a\\nb", "--x", "C:\\path\\", "--y", "'", "--z", '"', "--e", ""],
    ["/py", ";", "&&", "|", "$HOME", "${HOME}", "%n", "%%", "ünï côdé", "tab\tinside"],
])
def test_a_command_line_reads_back_as_the_argv_it_was_made_of(argv):
    line = su.command_line(argv)
    assert "\n" not in line
    # what systemd does before splitting (specifiers) and after (variables)
    assert [w.replace("$$", "$") for w in su.split_command_line(line.replace("%%", "%"))] == argv


def test_command_line_words_without_special_characters_are_written_as_before():
    """shlex's safe words stay bare, so units of earlier releases render the same and do not restart."""
    assert su.command_line(["/opt/py", "--tp-size", "4", "--mem-fraction-static", "0.8", "--x=a,b:c@d"]) == (
        "/opt/py --tp-size 4 --mem-fraction-static 0.8 --x=a,b:c@d")
    assert su.command_line(["/py", '{"a": 50%}', "$HOME"]) == "/py '{\"a\": 50%%}' '$$HOME'"


@pytest.mark.parametrize(("text", "words"), [
    ("/bin/a 'b c' \"d e\" f", ["/bin/a", "b c", "d e", "f"]),
    ("/bin/a 'x'\"y\"z", ["/bin/a", "xyz"]),  # quotes anywhere in a word
    ("/bin/a 'a\\nb' \"\\x41\\101\\u00e9\" \\s", ["/bin/a", "a\nb", "AAé", " "]),  # C escapes, in quotes too
    ("/bin/a '' \"\"", ["/bin/a", "", ""]),
    ("/bin/a \\q", ["/bin/a", "\\q"]),  # an unknown escape stays (systemd warns and keeps it)
    ("  /bin/a\t b  ", ["/bin/a", "b"]),
])
def test_split_command_line_follows_systemd(text, words):
    assert su.split_command_line(text) == words


@pytest.mark.parametrize("text", ["/bin/a 'b", '/bin/a "b', "/bin/a b\\"])
def test_split_command_line_refuses_what_systemd_refuses(text):
    with pytest.raises(ValueError, match="unbalanced quoting|ends with a backslash"):
        su.split_command_line(text)


def test_each_setting_is_quoted_by_its_own_syntax():
    assert su.environment_assignment("A", 'x "q" \\ 100%') == '"A=x \\"q\\" \\\\ 100%%"'
    assert su.environment_assignment("CUDA_VISIBLE_DEVICES", "0,1") == '"CUDA_VISIBLE_DEVICES=0,1"'
    assert su.optional_path("/srv/models/m") == "-/srv/models/m"
    assert su.optional_path("/srv/my models/it's 100%") == "'-/srv/my models/it\\'s 100%%'"
    variables = su.template_variables({**VALID, "model_path": "/srv/50% models", "api_key": "k",
                                       "working_directory": "/srv/%h"}, ["/py"], ())
    assert variables["sglang_description"] == "SGLang server sglang (/srv/50%% models)"
    assert variables["sglang_read_only_paths"] == ["'-/srv/50%% models'"]
    assert variables["sglang_working_directory"] == "/srv/%%h"
    assert variables["sglang_api_key_file"] == "/etc/sglang/sglang.env"
    assert variables["sglang_environment"] == ['"CUDA_VISIBLE_DEVICES=0,1"', '"N=3"']
    assert su.template_variables({**VALID, "model_path": "org/name"}, ["/py"], ())["sglang_read_only_paths"] == []


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_systemd_accepts_the_quoted_settings(tmp_path):
    """What systemd-analyze verify says of a unit holding every hard value: no warning about any of its lines."""
    argv = ["/bin/true", "--a", "b c", "--j", '{"a": "$x 100%"}', "--q", "it's \\ \"x\"", "--e", "", ";"]
    value = 'x "q" 100% $y'
    unit = tmp_path / "llmops-quoting-test.service"
    unit.write_text(f"[Unit]\nDescription={su.specifiers_escaped('x (100% /a b)')}\n[Service]\nType=oneshot\n"
                    f"ExecStart={su.command_line(argv)}\nEnvironment={su.environment_assignment('A', value)}\n"
                    f"ReadOnlyPaths={su.optional_path('/srv/my models/50%')}\n")
    done = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, check=False)
    assert done.returncode == 0 and str(unit) not in done.stderr, done.stderr
