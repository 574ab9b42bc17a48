#!/bin/sh
# ssh launcher, before a launch: the ATOMDECK_RUN marker (RUN:NAME) of every process on this node that carries
# one, a line each as PID/environ:ATOMDECK_RUN=RUN:NAME (a process whose environment cannot be read is left out).
cd /proc 2>/dev/null || exit 0
grep -z -s -H -o '^ATOMDECK_RUN=.*' [0-9]*/environ | tr '\0' '\n'
true
