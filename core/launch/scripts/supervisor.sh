#!/bin/sh
# shellcheck disable=SC3045  # ulimit -n/-Hn: not POSIX, but dash, bash, ksh and busybox sh all have them
# The supervisor every launcher runs around a process: forwards SIGTERM/SIGINT, waits for the real
# child (never a `tee`), and writes the child's exit code next to its log. The child's PID goes next to the
# exit-code file too (EXIT_FILE without .exit, plus .child): if this supervisor is killed, the child (the
# engine) lives on, and its own PID then tells atomdeck whether it still runs (base.child_path).
# Run as: sh -c "$(cat supervisor.sh)" MARKER EXIT_FILE COMMAND...
# $1 = exit-code file; the rest is the command. The marker in $0 lets teardown check a PID is ours.
# The open-files limit goes up to what Mooncake needs (65536, as InferenceX sets), or the hard limit.
ef=$1; shift
n=$(ulimit -n 2>/dev/null)
if [ -n "$n" ] && [ "$n" != unlimited ] && [ "$n" -lt 65536 ]; then
  ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null
fi
trap '' HUP
"$@" </dev/null &
child=$!
trap 'kill -TERM "$child" 2>/dev/null' TERM
trap 'kill -INT "$child" 2>/dev/null' INT
cf=${ef%.exit}.child
echo "$child" > "$cf.$$" && mv -f "$cf.$$" "$cf"
wait "$child"; rc=$?
while kill -0 "$child" 2>/dev/null; do wait "$child"; rc=$?; done
echo "$rc" > "$ef.$$" && mv -f "$ef.$$" "$ef"
exit "$rc"
