#!/usr/bin/env bash
# Quality gates, as a Galaxy / Automation Hub reviewer runs them: build the collection tarball, install it,
# ansible-test sanity on the installed artifact (no excludes) on every controller Python of ansible-core 2.19,
# the lowest supported line (scripts/sanity.sh),
# galaxy-importer with Galaxy's and Automation Hub's settings, and ansible-lint (production) on the whole repository.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
venv_bin=$root/.venv/bin
export PATH=$venv_bin:$PATH

# 1. The artifact, as `ansible-galaxy collection build` makes it for Galaxy (galaxy.yml build_ignore decides what
#    it holds; tests/unit/collection checks that), in a directory of its own: `make test` runs the unit tests beside
#    this, and their EE test rebuilds dist/ (scripts/ee.sh).
dist=.cache/lint-dist
rm -rf "$dist" && mkdir -p "$dist"
ansible-galaxy collection build --output-path "$dist" >/dev/null
tarball=$(echo "$dist"/llmops-sglang-*.tar.gz)
echo "lint: built $tarball ($(du -k "$tarball" | cut -f1) KiB)"

# 2-3. ansible-test sanity on that artifact installed, nothing excluded: a full run on Python 3.11, compile and import
#    on 3.12 and 3.13, with this venv's ansible-core, the lowest supported (scripts/unit-py313.sh: the highest).
bash scripts/sanity.sh 3.11 3.12 3.13

# 4. galaxy-importer on the tarball with Galaxy's and with Automation Hub's settings (scripts/galaxy-importer/).
python scripts/galaxy_import.py "$tarball"

# 5. ansible-lint, production profile, on the whole repository (.ansible-lint excludes only generated/cached trees).
ansible-lint
