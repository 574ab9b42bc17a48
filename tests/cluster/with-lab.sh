#!/usr/bin/env bash
# Run a command (the test suite) with the lab up, and tear the lab down afterwards, also after
# a failure or an interrupt, if this script brought it up and no other session (pytest plugin,
# another with-lab.sh) holds $LAB/users.lock (a lab that was already up stays up;
# ATOMDECK_LAB_KEEP=1 keeps it in any case). Not root: runs the command without a lab (lab tests
# then skip, or fail under CI=true). Exit status: the command's.
#   tests/cluster/with-lab.sh .venv/bin/python -m pytest -q
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
[ $# -gt 0 ] || { echo "usage: $0 COMMAND [ARG...]" >&2; exit 2; }
if [ "$(id -u)" != 0 ]; then
  echo "with-lab.sh: not root, running without the Slurm lab" >&2
  exec "$@"
fi
LAB=${LAB:-/var/lib/atomdeck-lab}
started=
teardown() {
  if [ -n "$started" ] && [ "${ATOMDECK_LAB_KEEP:-}" != 1 ]; then
    # pytest sessions hold $LAB/users.lock shared while they use the lab
    if exec 9>>"$LAB/users.lock" && flock -xn 9; then
      echo "with-lab.sh: tearing the lab down" >&2
      "$HERE/down.sh" >&2 9>&-
    else
      echo "with-lab.sh: another session still uses the lab: leaving it up" >&2
    fi
  fi
  started=
}
trap teardown EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
if out=$("$HERE/up.sh" 2>&1); then
  case $out in *"already up and healthy"*) ;; *) started=1 ;; esac
  printf '%s\n' "$out" | tail -n 8 >&2
else
  printf '%s\n' "$out" >&2
  echo "with-lab.sh: up.sh failed; running the command without the lab" >&2
fi
export ATOMDECK_LAB_AUTOSTART=0     # the pytest plugin must not try again
"$@"
