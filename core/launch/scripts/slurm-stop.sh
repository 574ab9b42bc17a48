#!/bin/sh
# slurm launcher, one `srun --overlap` step per node: stop several of the node's processes at once.
# $1 grace seconds; then PGID:MARKER for each process (its supervisor's process group and ATOMDECK_RUN value).
# TERM every group (with CONT: a stopped process ignores TERM until continued), wait up to the grace period
# for all, KILL what is left, verify within 1 s. One line per process: "PGID gone ..." or "PGID left ...".
grace=$1; shift
members() { ps -e -o pid=,pgid=,stat= | awk -v g="$1" '$2==g && $3 !~ /^Z/ {print $1}'; }
# the groups with a live member, one `ps` for all; `has GROUP` asks the last snapshot
snap() { groups=" $(ps -e -o pgid=,stat= | awk '$2 !~ /^Z/ {print $1}' | sort -u | tr '\n' ' ') "; }
now() { read -r u _ < /proc/uptime; echo "${u%.*}${u#*.}"; }  # centiseconds
has() { case "$groups" in *" $1 "*) return 0;; esac; return 1; }
todo=
for item in "$@"; do
  pg=${item%%:*}; mark=${item#*:}
  m=$(members "$pg")
  if [ -z "$m" ]; then echo "$pg gone already"; continue; fi
  ours=
  for p in $m; do tr '\0' '\n' < /proc/"$p"/environ 2>/dev/null | grep -qx "ATOMDECK_RUN=$mark" && ours=1; done
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
  m=$(members "$pg")
  if [ -z "$m" ]; then echo "$pg gone after SIGKILL (grace ${grace}s)"; else echo "$pg left pids $(echo "$m" | tr '\n' ' ')"; rc=4; fi
done
exit "$rc"
