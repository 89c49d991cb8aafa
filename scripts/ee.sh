#!/usr/bin/env bash
# The execution environment's build context (`make ee`): the collection's tarball built into dist/ first, then
# `ansible-builder create`, then a check that the tarball is in the context. ansible-builder alone prints
# "Complete!" over a context without the collection when dist/ lacks the tarball (only a "No matches" line says
# so), and the image built from it fails later. Then: ansible-builder build -f CONTEXT/../execution-environment.yml,
# or `docker build CONTEXT` / `podman build CONTEXT`.
#   bash scripts/ee.sh [CONTEXT_DIR]    (default ./context)
set -euo pipefail
cd "$(dirname "$0")/.."
context=$(realpath -m "${1:-context}")
bin=$(dirname "$(realpath -s "${VENV:-.venv}/bin/python")")
version=$("$bin/python" -c "import yaml; print(yaml.safe_load(open('galaxy.yml'))['version'])")
tarball=llmops-sglang-$version.tar.gz
mkdir -p dist
rm -f "dist/$tarball"
"$bin/ansible-galaxy" collection build --output-path dist >/dev/null
PATH=$bin:$PATH "$bin/ansible-builder" create -f execution-environment.yml -c "$context"
if ! cmp -s "dist/$tarball" "$context/_build/collections/$tarball"; then
    echo "ee: $context/_build/collections/$tarball is missing or is not dist/$tarball: check" \
         "execution-environment.yml's additional_build_files (it must name galaxy.yml's version, $version)" >&2
    exit 1
fi
echo "ee: build context with $tarball in $context"
