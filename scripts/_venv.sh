# shellcheck shell=bash
# Sourced by scripts/demo, scripts/test, scripts/test-legs and the Makefile: makes sure a
# virtualenv exists and has the project installed (editable) with the extras in
# DISTLOCK_EXTRAS (default: what the tests need; scripts/demo asks for "demo" only) and any pip
# requirement in DISTLOCK_PINS, then sets
#   ROOT  the repository's top directory (and cds there)
#   VENV  the virtualenv ($DISTLOCK_VENV, default $ROOT/.venv)
#   PY    $VENV/bin/python
# The virtualenv is made with $PYTHON when set, else the newest supported Python found
# (python3.13, 3.12, 3.11 on PATH or under pyenv, in that order: pyenv's 3.13 before a 3.12 on
# PATH), else python3; the line that creates it names the one chosen and why. The install runs again only
# when setup.cfg, constraints.txt (the pinned linter and type checker) or the pins change, or
# an extra is asked for that was not installed: a stamp file records what last worked.

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${DISTLOCK_VENV:-$ROOT/.venv}"
PY="$VENV/bin/python"
DISTLOCK_EXTRAS="${DISTLOCK_EXTRAS:-test,hiredis,django-redis,demo}"
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
    if ! "$BOOTSTRAP_PYTHON" -c 'import ensurepip, venv' 2>/dev/null; then  # Debian, Ubuntu
        _venv_log "error: $("$BOOTSTRAP_PYTHON" --version 2>&1) has no venv module: install it" \
            "first (Debian, Ubuntu: apt-get install -y python3-venv) and run again"
        exit 1
    fi
    if [ -n "${PYTHON:-}" ]; then
        _venv_chosen="PYTHON=$PYTHON"
    else
        _venv_chosen="the newest supported Python found; PYTHON=/path/to/python chooses another"
    fi
    _venv_log "creating $VENV with $(command -v "$BOOTSTRAP_PYTHON")," \
        "$("$BOOTSTRAP_PYTHON" --version 2>&1) ($_venv_chosen)"
    unset _venv_chosen
    rm -rf "$VENV"
    "$BOOTSTRAP_PYTHON" -m venv "$VENV"
fi

# The stamp is named after setup.cfg, constraints.txt and the pins, and lists the extras
# installed under them, one a line: scripts/demo's small "demo" set after scripts/test's larger
# one (or before it) installs only what is missing, and never undoes the other.
_venv_sha="$(printf '%s|%s|%s' "$(cat "$ROOT/setup.cfg")" "$(cat "$ROOT/constraints.txt")" \
    "$DISTLOCK_PINS" \
    | "$PY" -c 'import hashlib, sys; print(hashlib.sha256(sys.stdin.buffer.read()).hexdigest()[:16])')"
_venv_stamp="$VENV/.installed-$_venv_sha"

# _venv_missing: print the extras of DISTLOCK_EXTRAS that the stamp does not list.
_venv_missing() {
    local extra
    for extra in ${DISTLOCK_EXTRAS//,/ }; do
        grep -qxF "$extra" "$_venv_stamp" 2>/dev/null || echo "$extra"
    done
}

if [ -n "$(_venv_missing)" ] || [ ! -e "$_venv_stamp" ]; then
    _venv_log "installing -e '.[$DISTLOCK_EXTRAS]' $DISTLOCK_PINS into $VENV (once per change of" \
        "setup.cfg; 1 to 3 minutes on a fresh clone: each package is listed as pip gets it)"
    # pip's own lines, less the noise: one line per package fetched, then what was installed.
    # The whole output goes to install.log, shown when the install fails.
    _venv_install_log="$VENV/install.log"
    _venv_status="$VENV/install.status"
    # pip's output goes through one pipe, straight as pip writes it (a log followed with
    # `tail -f --pid` lost every line once, on a loaded machine); its exit status is written
    # to a file, as a pipe's status would be grep's.
    # shellcheck disable=SC2086 # the pins are separate words
    { "$PY" -m pip install --disable-pip-version-check --progress-bar off -e ".[$DISTLOCK_EXTRAS]" \
        $DISTLOCK_PINS -c "$ROOT/constraints.txt" --config-settings editable_mode=compat 2>&1
      echo "$?" >"$_venv_status"; } \
        | tee "$_venv_install_log" \
        | grep --line-buffered -E '^(Collecting|Building wheel|Successfully installed)' \
        | sed -u -e 's/^Successfully installed/installed:/' -e 's/^/    /' >&2 || true
    # A failed install must not leave the stamp behind (the next run would skip it): stop here.
    if [ "$(cat "$_venv_status" 2>/dev/null)" != 0 ]; then
        grep -v "^WARNING: Location" "$_venv_install_log" | tail -n 30 >&2
        _venv_log "error: the install into $VENV failed (above, and all of it in" \
            "$_venv_install_log); fix it and run again"
        exit 1
    fi
    _venv_extras="$( (cat "$_venv_stamp" 2>/dev/null || true; printf '%s\n' ${DISTLOCK_EXTRAS//,/ }) \
        | sort -u)"
    rm -f "$VENV"/.installed-*
    printf '%s\n' "$_venv_extras" >"$_venv_stamp"
    unset _venv_install_log _venv_status _venv_extras
fi
unset _venv_sha _venv_stamp

export PATH="$VENV/bin:$PATH"
export VIRTUAL_ENV="$VENV"
