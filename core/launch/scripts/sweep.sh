#!/bin/sh
# ssh launcher: $1 run id. Kill every process on this node whose environment carries the run's
# ATOMDECK_RUN marker (a process whose start was cut short has no handle, but may be running).
run=$1
for f in /proc/[0-9]*/environ; do
  p=${f#/proc/}; p=${p%/environ}
  [ "$p" = "$$" ] && continue
  tr '\0' '\n' < "$f" 2>/dev/null | grep -q "^ATOMDECK_RUN=$run:" && kill -9 "$p" 2>/dev/null && echo "killed $p"
done; true
