# Sourced by the scripts that run on more than the project venv's Python (lint.sh: sanity; unit-py313.sh: unit tests).

# python_dir X.Y: the directory of an interpreter for pythonX.Y, on PATH, else pyenv's (this machine and CI keep
# 3.12 and 3.13 there, unselected; uv cannot download one: its Pythons come from outside the package registries).
python_dir() {
    local found
    found=$(command -v "python$1" 2>/dev/null) && "$found" -c '' 2>/dev/null && { dirname "$found"; return; }
    for found in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$1".*/bin/"python$1"; do
        [[ -x $found ]] && { dirname "$found"; return; }
    done
    echo "Python $1 not found (python$1 on PATH or under pyenv's versions/): a supported ansible-core runs on it as" \
         "controller Python and the sanity gate and the unit tests run on it; install it (pyenv install $1)" >&2
    return 1
}
