#!/usr/bin/env bash
# Quality gates, as a Galaxy / Automation Hub reviewer runs them: build the collection tarball, install it,
# ansible-test sanity on the installed artifact (no excludes) on every controller Python of ansible-core 2.19,
# galaxy-importer with Galaxy's and Automation Hub's settings, and ansible-lint (production) on the whole repository.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
venv_bin=$root/.venv/bin
export PATH=$venv_bin:$PATH

# Full sanity run on the first; on the others the tests whose result depends on the Python version (compile and
# import, ~15 s each instead of ~80 s for a full run in a fresh checkout).
full_python=3.11
other_pythons=(3.12 3.13)
source scripts/pythons.sh

# 1. The artifact, as `ansible-galaxy collection build` makes it for Galaxy (galaxy.yml build_ignore decides what
#    it holds; tests/unit/collection checks that).
rm -rf dist && mkdir -p dist
ansible-galaxy collection build --output-path dist >/dev/null
tarball=$(echo dist/llmops-sglang-*.tar.gz)
echo "lint: built $tarball ($(du -k "$tarball" | cut -f1) KiB)"

# 2. Installed where nothing of the checkout is on the collections path (not ./collections of ansible.cfg; the
#    collection has no dependency, --offline only keeps Galaxy out of it), and outside the git work tree: inside it
#    ansible-test would take its file list from git, where an ignored directory has no files.
installed=$(mktemp -d "${TMPDIR:-/tmp}/llmops-sglang-artifact.XXXXXX")
trap 'rm -rf "$installed"' EXIT
(cd "$installed" && ANSIBLE_COLLECTIONS_PATH=$installed ansible-galaxy collection install --offline --force \
    -p "$installed" "$root/$tarball" >/dev/null)
tree=$installed/ansible_collections/llmops/sglang

# 3. ansible-test sanity on the installed artifact, nothing excluded. ansible-test bootstraps pip in each venv from
#    a host this machine cannot reach; this stand-in does the same with ensurepip + PyPI.
home=$root/.cache/ansible-test-home
mkdir -p "$home/.ansible/test/cache"
cat > "$home/.ansible/test/cache/get_pip_24_2.py" <<'PY'
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
    echo "lint: ansible-test sanity --python $version $*"
    (cd "$tree" && HOME=$home PATH=$venv_bin:$dir:$PATH ansible-test sanity --venv --python "$version" --color no "$@")
}
sanity "$full_python"
for version in "${other_pythons[@]}"; do
    sanity "$version" --test compile --test import
done

# 4. galaxy-importer on the tarball with Galaxy's and with Automation Hub's settings (scripts/galaxy-importer/).
python scripts/galaxy_import.py "$tarball"

# 5. ansible-lint, production profile, on the whole repository (.ansible-lint excludes only generated/cached trees).
ansible-lint
