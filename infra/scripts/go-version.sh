#!/usr/bin/env bash
# Sourced by build-kube.sh and check-prereqs.sh: one Go version comparison.

# go_at_least GOVERSION MIN: whether `go env GOVERSION` (go1.26.8, go1.27rc1)
# is at least the dotted MIN (1.26 or 1.26.0). Pure bash.
go_at_least() {
  local have need i
  [[ "$1" =~ go([0-9]+)\.([0-9]+)(\.([0-9]+))? ]] || return 1
  have=("${BASH_REMATCH[1]}" "${BASH_REMATCH[2]}" "${BASH_REMATCH[4]:-0}")
  IFS=. read -r -a need <<<"$2"
  for i in 0 1 2; do
    if ((${have[i]:-0} > ${need[i]:-0})); then return 0; fi
    if ((${have[i]:-0} < ${need[i]:-0})); then return 1; fi
  done
  return 0
}
