#!/usr/bin/env bash
# ansible-test sanity as a Galaxy / Automation Hub reviewer runs it: on the collection tarball
# `ansible-galaxy collection build` makes, installed where nothing of the checkout is on the collections path, with
# the ansible-core of $VENV (default .venv), a full run on the first Python given and the tests whose result depends
# on the Python version (compile and import, ~15 s each instead of ~80 s) on the others.
#   scripts/sanity.sh 3.11 3.12 3.13                                  # scripts/lint.sh: the lowest ansible-core, 2.19
#   VENV=.cache/venv-3.13 scripts/sanity.sh 3.13                      # scripts/unit-py313.sh: the highest, 2.21
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
venv_bin=$(cd "${VENV:-$root/.venv}" && pwd)/bin
export PATH=$venv_bin:$PATH
full_python=$1
shift
source scripts/pythons.sh

# Outside the git work tree: inside it ansible-test would take its file list from git, where an ignored directory
# has no files. The collection has no dependency; --offline keeps Galaxy out of it.
work=$(mktemp -d "${TMPDIR:-/tmp}/llmops-sglang-sanity.XXXXXX")
trap 'rm -rf "$work"' EXIT
ansible-galaxy collection build --output-path "$work/dist" >/dev/null
(cd "$work" && ANSIBLE_COLLECTIONS_PATH=$work ansible-galaxy collection install --offline --force -p "$work" \
    "$work"/dist/llmops-sglang-*.tar.gz >/dev/null)
tree=$work/ansible_collections/llmops/sglang
core=$(python -c 'from ansible.release import __version__; print(__version__)')
[[ -f $tree/tests/sanity/ignore-${core%.*}.txt ]] || {
    echo "sanity: no tests/sanity/ignore-${core%.*}.txt for ansible-core $core (one per supported line)" >&2; exit 1; }

# ansible-test bootstraps pip in each venv from a host this machine cannot reach; this stand-in does the same with
# ensurepip + PyPI, under the name of the pip version this ansible-test asks for (24.2 for 2.19, 25.2 for 2.21).
home=$root/.cache/ansible-test-home
mkdir -p "$home/.ansible/test/cache"
# One sanity run at a time uses that home (its venvs, its get-pip): `make test` runs lint.sh's beside the unit tests
# whose unit-py313.sh runs another.
exec 9>"$home.lock"
flock 9
pip_version=$(python -c 'from types import SimpleNamespace
from ansible_test._internal.python_requirements import get_venv_packages
print(get_venv_packages(SimpleNamespace(version=None))["pip"].replace(".", "_"))')
cat > "$home/.ansible/test/cache/get_pip_$pip_version.py" <<'PY'
import subprocess, sys
subprocess.check_call([sys.executable, "-m", "ensurepip", "--upgrade"])
args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
if args:
    subprocess.check_call([sys.executable, "-m", "pip", "install", *args])
PY
sanity() {
    local version=$1 dir
    shift
    dir=$(python_dir "$version") || return 1
    echo "sanity: ansible-core $core, ansible-test sanity --python $version $*"
    (cd "$tree" && HOME=$home PATH=$venv_bin:$dir:$PATH ansible-test sanity --venv --python "$version" --color no "$@")
}
sanity "$full_python"
for version in "$@"; do
    sanity "$version" --test compile --test import
done
