#!/bin/sh
# slurm launcher, one task per node through srun: $1 run id. Kill every process of the run on this node
# (found by its ATOMDECK_RUN environment marker), never this shell itself.
for f in /proc/[0-9]*/environ; do
  p=${f#/proc/}; p=${p%/environ}
  tr "\0" "\n" < "$f" 2>/dev/null | grep -q "^ATOMDECK_RUN=$1:" && [ "$p" != "$$" ] && kill -9 "$p" 2>/dev/null && echo "killed $p on $(hostname)"
done; true
