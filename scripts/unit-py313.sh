#!/usr/bin/env bash
# The unit tests on Python 3.13 with the highest supported ansible-core (the project venv, and so the rest of
# `make test`, is on 3.11 with the lowest): a second venv, .cache/venv-3.13, with constraints/ansible-core-2.21.txt's
# versions and this checkout installed editable, made by scripts/setup.sh (its stamp on the hash of pyproject.toml and
# the constraints: a warm run installs nothing); then ansible-test sanity on that ansible-core (scripts/lint.sh runs
# it on the lowest).
set -euo pipefail
cd "$(dirname "$0")/.."
version=3.13
source scripts/pythons.sh
dir=$(python_dir "$version")
export VENV=$PWD/.cache/venv-$version
PYTHON=$dir/python$version CONSTRAINTS=$PWD/constraints/ansible-core-2.21.txt bash scripts/setup.sh

# Left to the 3.11 run, being slow and about nothing that depends on the controller's Python:
# - tests/unit/emulator: the SGLang stand-in, which runs on the hosts' Python (the venvs of tests/emulator/build.py),
#   never on the controller's; no code of the collection is in them (~4 min, most of it Ray).
# - the sequential verdict's Monte-Carlo error rates: thousands of simulated sweeps through the functions the file's
#   other tests run here (~40 s).
verdict=tests/unit/plugins/module_utils/test_sequential_verdict.py
tests=0
bash scripts/pytest.sh tests/unit --ignore=tests/unit/emulator \
    --deselect "$verdict::test_false_adopt_rate_of_whole_sweeps_is_at_most_five_percent" \
    --deselect "$verdict::test_improvements_of_three_percent_and_more_are_missed_no_more_than_by_five_fixed_repeats" \
    || tests=$?
# ansible-test sanity with the highest supported ansible-core (~2 min; scripts/lint.sh runs it with the lowest).
sanity=0
bash scripts/sanity.sh "$version" || sanity=$?
((tests == 0 && sanity == 0))
