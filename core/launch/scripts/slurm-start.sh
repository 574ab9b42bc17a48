#!/bin/sh
# slurm launcher through a login host, one SSH command per node: write the node's process list (stdin) to $1,
# start the node's srun step (the arguments after $4) detached in its own session, its own messages in $3,
# print "srun PID", wait until the step's output $2 shows $4 "started" lines (or srun ended, or 60 s), print $2.
list=$1; out=$2; log=$3; n=$4; shift 4
umask 077
cat > "$list" || exit 1
rm -f "$out"
setsid "$@" >>"$log" 2>&1 </dev/null &
pid=$!
echo "srun $pid"
i=0
while [ "$i" -lt 3000 ]; do
  c=$(grep -c '^started ' "$out" 2>/dev/null); [ "${c:-0}" -ge "$n" ] && break
  s=$(sed 's/.*) //' /proc/"$pid"/stat 2>/dev/null | cut -d' ' -f1)
  { [ -z "$s" ] || [ "$s" = Z ]; } && break
  sleep 0.02; i=$((i + 1))
done
cat "$out" 2>/dev/null
true
