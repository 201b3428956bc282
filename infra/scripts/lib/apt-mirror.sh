# Sourced by build-kvm-guest.sh and build-node-images.sh: the Debian mirror
# their mmdebstrap runs fetch from is the one this machine's apt already uses,
# so a machine behind its own mirror (or a snapshot) builds from it too.
#
#   MIRROR="$(apt_mirror bookworm KVM_GUEST_MIRROR)"
#
# prints the named variable's value when it is set; otherwise the URI of the
# first enabled `deb` entry whose suites include the wanted one and whose
# components include main, read where and in the order apt-get reads them:
# Dir::Etc::sourcelist (/etc/apt/sources.list, one-line), then the *.list
# (one-line) and *.sources (deb822) files of Dir::Etc::sourceparts
# (/etc/apt/sources.list.d/) in name order. The two locations come from
# `apt-config`, so APT_CONFIG (a file setting those options) points the
# lookup elsewhere, as it does apt's. Finding none, it says in one line what
# it looked for and which variable to set, and fails. Messages go through the
# caller's `say` when it has one.

am_say() {
  if declare -F say >/dev/null; then say "$*"; else echo "$*" >&2; fi
}

# One file's entries, one a line: "<types>|<uris>|<suites>|<components>";
# deb822 stanzas with `Enabled: no` left out.
am_entries() {
  case "$1" in
    *.sources)
      awk '
        function flush() {
          if (uris != "" && tolower(enabled) != "no") print types "|" uris "|" suites "|" comps
          types = uris = suites = comps = enabled = key = ""
        }
        function set(k, v, more) {
          if (k == "types") types = (more ? types " " : "") v
          else if (k == "uris") uris = (more ? uris " " : "") v
          else if (k == "suites") suites = (more ? suites " " : "") v
          else if (k == "components") comps = (more ? comps " " : "") v
          else if (k == "enabled") enabled = v
        }
        /^#/ { next }
        /^[ \t]*$/ { flush(); next }
        # A line starting with a blank continues the field above it.
        /^[ \t]/ { v = $0; sub(/^[ \t]+/, "", v); set(key, v, 1); next }
        {
          key = tolower(substr($0, 1, index($0, ":") - 1))
          v = substr($0, index($0, ":") + 1)
          sub(/^[ \t]+/, "", v)
          set(key, v, 0)
        }
        END { flush() }
      ' "$1"
      ;;
    *)
      # deb [option=value ...] uri suite component...
      awk '
        { sub(/#.*/, "") }
        NF == 0 { next }
        {
          type = $1
          rest = substr($0, index($0, type) + length(type))
          sub(/^[ \t]+/, "", rest)
          if (substr(rest, 1, 1) == "[") rest = substr(rest, index(rest, "]") + 1)
          n = split(rest, f, " ")
          comps = ""
          for (i = 3; i <= n; i++) comps = comps (i > 3 ? " " : "") f[i]
          print type "|" f[1] "|" f[2] "|" comps
        }
      ' "$1"
      ;;
  esac
}

apt_mirror() {
  local suite="$1" override="$2"
  if [[ -n "${!override:-}" ]]; then
    echo "${!override%/}"
    return 0
  fi
  local list=/etc/apt/sources.list parts=/etc/apt/sources.list.d/
  if command -v apt-config >/dev/null 2>&1; then
    eval "$(apt-config shell list Dir::Etc::sourcelist/f parts Dir::Etc::sourceparts/d)"
  fi
  parts="${parts%/}"
  local types uris suites comps f
  while IFS='|' read -r types uris suites comps; do
    [[ " $types " == *" deb "* && " $suites " == *" $suite "* && " $comps " == *" main "* ]] || continue
    uris="${uris%% *}"
    echo "${uris%/}"
    return 0
  done < <(
    if [[ -f "$list" ]]; then am_entries "$list"; fi
    # One glob: the two kinds interleave in name order, as apt reads them.
    for f in "$parts"/*; do
      if [[ -f "$f" && ("$f" == *.list || "$f" == *.sources) ]]; then am_entries "$f"; fi
    done
  )
  am_say "no Debian mirror for $suite (an enabled deb entry with component main) in $list or $parts/*.list, *.sources; set $override to the mirror's URL (the directory holding dists/)"
  return 1
}
