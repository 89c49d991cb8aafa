#!/usr/bin/env bash
# Quality gates: ansible-test sanity on the collection and ansible-lint (production profile).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
venv_bin=$root/.venv/bin

# ansible-test needs the collection at .../ansible_collections/llmops/sglang with the cwd inside it;
# a symlink is resolved away, a bind mount is not (needs root), a copy works everywhere.
tree=$root/.cache/ansible-test/ansible_collections/llmops/sglang
home=$root/.cache/ansible-test-home
mkdir -p "$tree" "$home/.ansible/test/cache"
# ansible-test bootstraps pip in each venv from a host this machine cannot reach; this stand-in
# does the same with ensurepip + PyPI.
cat > "$home/.ansible/test/cache/get_pip_24_2.py" <<'PY'
import subprocess, sys
subprocess.check_call([sys.executable, "-m", "ensurepip", "--upgrade"])
args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
if args:
    subprocess.check_call([sys.executable, "-m", "pip", "install", *args])
PY
cleanup() { mountpoint -q "$tree" && umount "$tree"; return 0; }
trap cleanup EXIT
if [[ $(id -u) -eq 0 ]]; then
    mountpoint -q "$tree" || mount --bind "$root" "$tree"
else
    rm -rf "$tree" && mkdir -p "$tree"
    git ls-files -z --cached --others --exclude-standard | rsync -a --from0 --files-from=- ./ "$tree/"
fi
# Test harnesses, benchmarks and the Python API are not collection content (see build_ignore).
excludes=()
for d in tests/emulator tests/sandbox tests/integration tests/unit tests/conformance tests/fixtures benchmarks src scripts; do
    [[ -n $(git ls-files --cached --others --exclude-standard "$d" | head -n1) ]] && excludes+=(--exclude "$d/")
done
(cd "$tree" && HOME=$home PATH=$venv_bin:$PATH "$venv_bin/ansible-test" sanity --venv --python 3.11 \
    --color no "${excludes[@]}")

if compgen -G "playbooks/*.yml" >/dev/null || compgen -G "roles/*/tasks/main.yml" >/dev/null; then
    PATH=$venv_bin:$PATH "$venv_bin/ansible-lint" --profile production --offline playbooks roles
fi
