#!/bin/sh
# slurm launcher, release in one command where Slurm commands run (through a login host: one SSH round trip,
# not one per squeue, sweep, scancel and sacct): $1 job id, $2 run id, $3 1 if the job is atomdeck's (cancel it),
# $4 the job-name prefix of the node steps, $5 the leftover sweep (scripts/slurm-sweep.sh). Prints
# "job STATE|NODELIST|NODES" (just "job" if squeue does not list it); for a running job, once the node steps
# ended (up to 1 s), the sweep's "killed ..." lines and "sweep RC"; for ours, scancel, then "listed" if squeue
# still lists it after 20 s, else "acct STATE" read back from sacct.
job=$1 run=$2 owned=$3 agent=$4 sweep=$5
line=$(squeue -h -j "$job" -o '%T|%N|%D' 2>/dev/null | head -n 1)
echo "job $line"
case $line in
  RUNNING\|*)
    nodes=$(echo "$line" | cut -d'|' -f2); n=$(echo "$line" | cut -d'|' -f3)
    i=0  # the node steps end on their own once their processes have (ms after a stop)
    while [ "$i" -lt 10 ] && squeue -h -s -j "$job" -o '%j' 2>/dev/null | grep -q "^$agent"; do
      sleep 0.1; i=$((i + 1))
    done
    srun --jobid "$job" --overlap -w "$nodes" -N"$n" -n"$n" --ntasks-per-node=1 --job-name=atomdeck-sweep \
      sh -c "$sweep" sweep "$run"
    echo "sweep $?"
    ;;
esac
[ "$owned" = 1 ] || exit 0
if [ -n "$line" ]; then
  scancel "$job"
  i=0
  while :; do
    q=$(squeue -h -j "$job" 2>/dev/null) && [ -z "$q" ] && break
    i=$((i + 1))
    [ "$i" -ge 100 ] && { echo "listed"; exit 0; }
    sleep 0.2
  done
fi
echo "acct $(sacct -n -X -P -j "$job" -o State 2>/dev/null | head -n 1)"
