#!/bin/sh
# ssh launcher, run by a start whose start token already exists: the start ran before (RemoteShell re-runs a
# command whose connection dropped), so report that process, never start a second one.
# $1 marker value, $2 pidfile. The supervisor is found by its marker and by leading its own process group
# (setsid); else the pidfile. Prints the PID.
mark=$1; pf=$2
for f in /proc/[0-9]*/environ; do
  p=${f#/proc/}; p=${p%/environ}
  tr '\0' '\n' 2>/dev/null < "$f" | grep -qx "ATOMDECK_RUN=$mark" || continue
  [ "$(sed 's/.*) //' /proc/"$p"/stat 2>/dev/null | cut -d' ' -f3)" = "$p" ] && { echo "$p"; exit 0; }
done
i=0; while [ ! -s "$pf" ] && [ "$i" -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
[ -s "$pf" ] && { cat "$pf"; exit 0; }
echo "started before, but no process and no pidfile left" >&2; exit 3
