# Sourced by the demo scripts (scripts/demo.sh, scripts/demo-upgrade.sh): one sandbox host with the SGLang emulator
# (tests/sandbox), taken down when the script exits; refuses, saying why, where sandbox hosts cannot run.
# $1: the make target, named in the refusal. Sets py (the project's python).
py=.venv/bin/python
reason=$($py -c 'from tests.sandbox.fleet import unsupported_reason; print(unsupported_reason() or "")' 2>&1)
if [[ -n $reason ]]; then
    echo "make $1: cannot run here: $reason" >&2
    exit 1
fi
$py -m tests.sandbox down >/dev/null 2>&1 || true  # a fleet left by an interrupted run
trap '$py -m tests.sandbox down' EXIT
$py -m tests.sandbox up --hosts 1 --emulator || exit 1
