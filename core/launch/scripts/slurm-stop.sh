#!/bin/sh
# slurm launcher, one `srun --overlap` step per node: stop several of the node's processes at once.
# $1 grace seconds; then PGID:MARKER for each process (its supervisor's process group and ATOMDECK_RUN value).
# TERM every group (with CONT: a stopped process ignores TERM until continued), wait up to the grace period
# for all, KILL what is left, verify within 1 s. One line per process: "PGID gone ..." or "PGID left ...".
# One `ps` per check for all the groups: a node may hold dozens of processes, and each ps reads all of /proc.
grace=$1; shift
snap() { table=$(ps -e -o pid=,pgid=,stat= | awk '$3 !~ /^Z/ {print $1, $2}'); groups=" $(printf '%s\n' "$table" | awk '{print $2}' | sort -u | tr '\n' ' ') "; }
members() { printf '%s\n' "$table" | awk -v g="$1" '$2==g {print $1}'; }
has() { case "$groups" in *" $1 "*) return 0;; esac; return 1; }
now() { read -r u _ < /proc/uptime; echo "${u%.*}${u#*.}"; }  # centiseconds
marked() { tr '\0' '\n' < /proc/"$1"/environ 2>/dev/null | grep -qx "ATOMDECK_RUN=$2"; }
snap
todo=
for item in "$@"; do
  pg=${item%%:*}; mark=${item#*:}
  if ! has "$pg"; then echo "$pg gone already"; continue; fi
  ours=
  if marked "$pg" "$mark"; then ours=1  # the supervisor leads its group and carries the marker
  else for p in $(members "$pg"); do marked "$p" "$mark" && ours=1 && break; done; fi
  if [ -z "$ours" ]; then echo "$pg gone (group $pg now holds someone else's processes; left alone)"; continue; fi
  kill -TERM -"$pg" 2>/dev/null; kill -CONT -"$pg" 2>/dev/null
  todo="$todo $pg"
done
t0=$(now); t=0
while [ -n "$todo" ]; do
  left=; snap
  for pg in $todo; do
    if ! has "$pg"; then echo "$pg gone after SIGTERM in $((t / 100)).$((t % 100 / 10))s"; else left="$left $pg"; fi
  done
  todo=$left
  [ -z "$todo" ] || [ "$t" -ge $((grace * 100)) ] && break
  sleep 0.1; t=$(($(now) - t0))
done
for pg in $todo; do kill -KILL -"$pg" 2>/dev/null; done
for _ in 1 2 3 4 5 6 7 8 9 10; do
  left=; snap
  for pg in $todo; do has "$pg" && left="$left $pg"; done
  [ -z "$left" ] && break
  sleep 0.1
done
rc=0
for pg in $todo; do
  if ! has "$pg"; then echo "$pg gone after SIGKILL (grace ${grace}s)"
  else echo "$pg left pids $(members "$pg" | tr '\n' ' ')"; rc=4; fi
done
exit "$rc"
