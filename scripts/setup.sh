#!/usr/bin/env bash
# Installs everything `make test` and `make demo` need on a fresh Debian 12 machine:
# Debian packages (when root), the project venv with pinned Python dependencies, and
# the gitignored self-link that puts this checkout on Ansible's collections path.
# VENV and PYTHON choose another venv and its interpreter, CONSTRAINTS its exact versions (pyproject.toml declares
# ranges; constraints/ansible-core-2.19.txt by default, the lowest supported ansible-core; scripts/unit-py313.sh: a
# second venv on Python 3.13 with constraints/ansible-core-2.21.txt, the highest).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
venv=${VENV:-$root/.venv}
python=${PYTHON:-python3}
constraints=${CONSTRAINTS:-$root/constraints/ansible-core-2.19.txt}

# Packages the sandbox hosts and the controller need, and the headless browser (with its
# driver and a font) that renders report.html in the tests. Only installed when missing;
# policy-rc.d keeps the package scripts from starting a real sshd on this machine.
apt_packages=(openssh-server openssh-client iproute2 util-linux systemd python3-venv rsync
              chromium chromium-driver fonts-dejavu-core)
missing=()
for p in "${apt_packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
    if [[ $(id -u) -ne 0 ]]; then
        echo "setup: missing Debian packages: ${missing[*]} (run as root, or install them first)" >&2
        exit 1
    fi
    created_policy=0
    if [[ ! -e /usr/sbin/policy-rc.d ]]; then
        printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d
        created_policy=1
    fi
    trap '[[ $created_policy == 1 ]] && rm -f /usr/sbin/policy-rc.d' EXIT
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

stamp=$venv/.installed-$(cat pyproject.toml constraints/common.txt "$constraints" | sha256sum | cut -c1-16)
if [[ ! -f $stamp ]]; then
    [[ -x $venv/bin/python ]] || "$python" -m venv "$venv"
    "$venv/bin/python" -m pip install -q --upgrade "pip==25.3"
    "$venv/bin/python" -m pip install -q -e ".[test]" -c "$constraints"
    rm -f "$venv"/.installed-*
    touch "$stamp"
fi

mkdir -p collections/ansible_collections/llmops
ln -sfn ../../.. collections/ansible_collections/llmops/sglang
