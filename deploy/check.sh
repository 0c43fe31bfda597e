#!/usr/bin/env bash
# Checks the files in deploy/: the systemd unit with its drop-in (`systemd-analyze verify`
# where systemd-analyze exists; skipped, with a note, where it does not), the sysctl
# drop-in (syntax; keys this kernel knows), the limits.d file (syntax), and, when
# RINGLOGD names a ringlogd binary, that the unit's ExecStart flags load with the example
# configuration. Exit status 0 when everything checked passed.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
failed=0
fail() { echo "FAIL $*"; failed=1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

unit="$here/systemd/ringlogd.service"
exec_start=$(sed -n 's/^ExecStart=//p' "$unit")
[ -n "$exec_start" ] || fail "$unit: no ExecStart="
binary=${exec_start%% *}

# systemd-analyze verify, with the drop-in, and ExecStart's binary replaced by a stub
# (verify insists that the executable exists).
if command -v systemd-analyze >/dev/null 2>&1; then
  mkdir -p "$tmp/units/ringlogd.service.d"
  printf '#!/bin/sh\nexit 0\n' > "$tmp/ringlogd"
  chmod +x "$tmp/ringlogd"
  sed "s|^ExecStart=$binary|ExecStart=$tmp/ringlogd|" "$unit" > "$tmp/units/ringlogd.service"
  cp "$here"/systemd/ringlogd.service.d/*.conf "$tmp/units/ringlogd.service.d/"
  if out=$(SYSTEMD_UNIT_PATH="$tmp/units:" systemd-analyze verify --man=no "$tmp/units/ringlogd.service" 2>&1); then
    # verify exits 0 on some warnings; refuse those about our unit.
    if grep -i "ringlogd.service" <<<"$out" | grep -v "^$" ; then
      fail "systemd-analyze verify warned about the unit"
    else
      echo "ok   systemd-analyze verify ringlogd.service (+ $(ls "$here/systemd/ringlogd.service.d" | tr '\n' ' '))"
    fi
  else
    echo "$out"
    fail "systemd-analyze verify ringlogd.service"
  fi
else
  echo "SKIP systemd-analyze not found: unit not verified"
fi

# sysctl.d: "key = value" lines; keys absent from this kernel (or this container's
# network namespace) are reported, not failed.
for f in "$here"/sysctl.d/*.conf; do
  n=0
  bad=$failed
  failed=0
  while IFS= read -r line || [ -n "$line" ]; do
    n=$((n + 1))
    case "$line" in ''|'#'*|';'*) continue ;; esac
    if ! [[ "$line" =~ ^-?([a-z0-9_.-]+)[[:space:]]*=[[:space:]]*([^[:space:]].*)$ ]]; then
      fail "$f:$n: not key = value: $line"
      continue
    fi
    key=${BASH_REMATCH[1]}
    if [ -d /proc/sys ] && [ ! -e "/proc/sys/${key//.//}" ]; then
      echo "note $f:$n: $key is not in this kernel's /proc/sys"
    fi
  done < "$f"
  [ "$failed" = 1 ] || echo "ok   $f"
  failed=$((failed | bad))
done

# limits.d: DOMAIN TYPE ITEM VALUE.
for f in "$here"/limits.d/*.conf; do
  if awk '!/^[[:space:]]*(#|$)/ { if (NF != 4 || $2 !~ /^(soft|hard|-)$/ || $3 !~ /^(nofile|memlock|nproc|core)$/) { print FILENAME ":" FNR ": " $0; bad = 1 } } END { exit bad }' "$f"; then
    echo "ok   $f"
  else
    fail "$f: want DOMAIN soft|hard|- ITEM VALUE"
  fi
done

# The unit's flags, with the example configuration in place of /etc/ringlog/ringlogd.yaml.
if [ -n "${RINGLOGD:-}" ]; then
  args=${exec_start#"$binary"}
  args=${args//\/etc\/ringlog\/ringlogd.yaml/$here/../docs/ringlogd.example.yaml}
  # shellcheck disable=SC2086
  if "$RINGLOGD" $args --print-config >/dev/null; then
    echo "ok   ExecStart flags load the example configuration"
  else
    fail "ExecStart flags: $RINGLOGD$args --print-config"
  fi
fi
exit $failed
