#!/bin/sh
# The supervisor every launcher runs around a process: forwards SIGTERM/SIGINT, waits for the real
# child (never a `tee`), and writes the child's exit code next to its log.
# Run as: sh -c "$(cat supervisor.sh)" MARKER EXIT_FILE COMMAND...
# $1 = exit-code file; the rest is the command. The marker in $0 lets teardown check a PID is ours.
ef=$1; shift
trap '' HUP
"$@" </dev/null &
child=$!
trap 'kill -TERM "$child" 2>/dev/null' TERM
trap 'kill -INT "$child" 2>/dev/null' INT
wait "$child"; rc=$?
while kill -0 "$child" 2>/dev/null; do wait "$child"; rc=$?; done
echo "$rc" > "$ef.$$" && mv -f "$ef.$$" "$ef"
exit "$rc"
