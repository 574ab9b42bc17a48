#!/bin/sh
# slurm launcher, one task per node through srun: $1 run id. Kill every process of the run on this node
# (found by its ATOMDECK_RUN environment marker), never this shell itself. One `grep -z` reads every environ
# file (a fork per process costs seconds on a node running a thousand); the loop is for a grep without -z.
if printf 'a\0' | grep -qz '^a$' 2>/dev/null; then
  grep -lsz "^ATOMDECK_RUN=$1:" /proc/[0-9]*/environ | while read -r f; do
    p=${f#/proc/}; p=${p%/environ}
    [ "$p" != "$$" ] && kill -9 "$p" 2>/dev/null && echo "killed $p on $(hostname)"
  done
else
  for f in /proc/[0-9]*/environ; do
    p=${f#/proc/}; p=${p%/environ}
    tr "\0" "\n" < "$f" 2>/dev/null | grep -q "^ATOMDECK_RUN=$1:" && [ "$p" != "$$" ] && kill -9 "$p" 2>/dev/null && echo "killed $p on $(hostname)"
  done
fi; true
