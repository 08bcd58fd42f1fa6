# shellcheck shell=bash
# Sourced by scripts/demo, scripts/test, scripts/test-legs and the Makefile: makes sure a
# virtualenv exists and has the project installed (editable) with the extras in
# DISTLOCK_EXTRAS (and any pip requirement in DISTLOCK_PINS), then sets
#   ROOT  the repository's top directory (and cds there)
#   VENV  the virtualenv ($DISTLOCK_VENV, default $ROOT/.venv)
#   PY    $VENV/bin/python
# The virtualenv is made with $PYTHON when set, else the newest supported Python found
# (python3.13, 3.12, 3.11 on PATH or under pyenv), else python3. The install runs again only
# when setup.cfg, constraints.txt (the pinned linter and type checker), the extras or the pins
# change: a stamp file records the last one that worked.

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${DISTLOCK_VENV:-$ROOT/.venv}"
PY="$VENV/bin/python"
DISTLOCK_EXTRAS="${DISTLOCK_EXTRAS:-test,hiredis,django-redis}"
DISTLOCK_PINS="${DISTLOCK_PINS:-}"
cd "$ROOT"

_venv_log() { printf '\033[1m[venv]\033[0m %s\n' "$*" >&2; }

# find_python X.Y: print the path of a working python X.Y (PATH first, then pyenv's versions).
find_python() {
    local version="$1" candidate
    for candidate in "python$version" \
        "$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")"/versions/"$version"*/bin/"python$version"; do
        if command -v "$candidate" >/dev/null 2>&1 && "$candidate" -c '' >/dev/null 2>&1; then
            command -v "$candidate"
            return 0
        fi
    done
    return 1
}

if [ ! -x "$PY" ] || ! "$PY" -c '' 2>/dev/null; then
    BOOTSTRAP_PYTHON="${PYTHON:-}"
    if [ -z "$BOOTSTRAP_PYTHON" ]; then
        BOOTSTRAP_PYTHON="$(find_python 3.13 || find_python 3.12 || find_python 3.11 || echo python3)"
    fi
    if ! command -v "$BOOTSTRAP_PYTHON" >/dev/null 2>&1; then
        _venv_log "error: $BOOTSTRAP_PYTHON not found; install Python 3.11 or newer (or set PYTHON=...)"
        exit 1
    fi
    if ! "$BOOTSTRAP_PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
        _venv_log "error: $("$BOOTSTRAP_PYTHON" --version 2>&1) is too old; distlock needs Python >= 3.11 (set PYTHON=...)"
        exit 1
    fi
    _venv_log "creating $VENV with $("$BOOTSTRAP_PYTHON" --version 2>&1)"
    rm -rf "$VENV"
    "$BOOTSTRAP_PYTHON" -m venv "$VENV"
fi

_venv_sha="$(printf '%s|%s|%s|%s' "$(cat "$ROOT/setup.cfg")" "$(cat "$ROOT/constraints.txt")" \
    "$DISTLOCK_EXTRAS" "$DISTLOCK_PINS" \
    | "$PY" -c 'import hashlib, sys; print(hashlib.sha256(sys.stdin.buffer.read()).hexdigest()[:16])')"
_venv_stamp="$VENV/.installed-$_venv_sha"

if [ ! -e "$_venv_stamp" ]; then
    _venv_log "installing -e '.[$DISTLOCK_EXTRAS]' $DISTLOCK_PINS into $VENV (once per change of setup.cfg)"
    # shellcheck disable=SC2086 # the pins are separate words
    # A failed install must not leave the stamp behind (the next run would skip it): stop here.
    if ! "$PY" -m pip install --disable-pip-version-check -q -e ".[$DISTLOCK_EXTRAS]" $DISTLOCK_PINS \
        -c "$ROOT/constraints.txt" --config-settings editable_mode=compat; then
        _venv_log "error: the install into $VENV failed (see above); fix it and run again"
        exit 1
    fi
    rm -f "$VENV"/.installed-*
    touch "$_venv_stamp"
fi
unset _venv_sha _venv_stamp

export PATH="$VENV/bin:$PATH"
export VIRTUAL_ENV="$VENV"
