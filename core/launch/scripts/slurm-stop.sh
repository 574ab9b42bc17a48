#!/bin/sh
# slurm launcher, one `srun --overlap` step per node: stop several of the node's processes at once.
# $1 grace seconds; then PGID:MARKER for each process (its supervisor's process group and ATOMDECK_RUN value).
# TERM every group (with CONT: a stopped process ignores TERM until continued), wait up to the grace period
# for all, KILL what is left, verify within 10 s (a killed process still runs its exit). One line per process:
# "PGID gone ..." or "PGID left ...".
# A group's descendants that left it (an ATOM rank that called setsid is still its EngineCore's child) are read
# before the signals, signalled by PID and waited for with their group.
# One `ps` per check for all the groups: a node may hold dozens of processes, and each ps reads all of /proc.
grace=$1; shift
snap() { table=$(ps -e -o pid=,pgid=,stat= | awk '$3 !~ /^Z/ {print $1, $2}'); groups=" $(printf '%s\n' "$table" | awk '{print $2}' | sort -u | tr '\n' ' ') "; }
members() { printf '%s\n' "$table" | awk -v g="$1" '$2==g {print $1}'; }
has() { case "$groups" in *" $1 "*) return 0;; esac; return 1; }
now() { read -r u _ < /proc/uptime; echo "${u%.*}${u#*.}"; }  # centiseconds
marked() { tr '\0' '\n' < /proc/"$1"/environ 2>/dev/null | grep -qx "ATOMDECK_RUN=$2"; }
# "pgid pid comm" of every live process outside group PGID that descends from a member of it, for each group given
strays() {
  ps -e -o pid=,ppid=,pgid=,stat=,comm= | awk -v gs=" $* " '$4 !~ /^Z/ {n++; p[n]=$1; pp[n]=$2; c[$1]=$5; if (index(gs, " " $3 " ")) o[$1]=$3}
    END {do {more=0; for (i=1;i<=n;i++) if (!(p[i] in o) && (pp[i] in o)) {o[p[i]]=o[pp[i]]; s[p[i]]=1; more=1}} while (more)
         for (x in s) print o[x], x, c[x]}'
}
live() { case $(ps -o stat= -p "$1" 2>/dev/null) in ""|Z*) return 1;; esac; }
# a group is gone when no member and none of its strays is alive
gone() { has "$1" && return 1; for s in $(printf '%s\n' "$away" | awk -v g="$1" '$1==g {print $2}'); do live "$s" && return 1; done; return 0; }
note() {
  n=$(printf '%s\n' "$away" | awk -v g="$1" '$1==g' | grep -c .)
  [ "$n" -gt 0 ] && printf ' (%s outside its process group: %s)' "$n" "$(printf '%s\n' "$away" | awk -v g="$1" '$1==g {printf "%s%s %s", s, $2, $3; s=", "}')"
}
snap
todo=
for item in "$@"; do
  pg=${item%%:*}; mark=${item#*:}
  if ! has "$pg"; then echo "$pg gone already"; continue; fi
  ours=
  if marked "$pg" "$mark"; then ours=1  # the supervisor leads its group and carries the marker
  else for p in $(members "$pg"); do marked "$p" "$mark" && ours=1 && break; done; fi
  if [ -z "$ours" ]; then echo "$pg gone (group $pg now holds someone else's processes; left alone)"; continue; fi
  todo="$todo $pg"
done
# shellcheck disable=SC2086  # the groups are words
away=$(strays $todo)
for pg in $todo; do
  kill -TERM -"$pg" 2>/dev/null; kill -CONT -"$pg" 2>/dev/null
done
for s in $(printf '%s\n' "$away" | awk 'NF {print $2}'); do kill -TERM "$s" 2>/dev/null; kill -CONT "$s" 2>/dev/null; done
t0=$(now); t=0
while [ -n "$todo" ]; do
  left=; snap
  for pg in $todo; do
    if gone "$pg"; then echo "$pg gone after SIGTERM in $((t / 100)).$((t % 100 / 10))s$(note "$pg")"; else left="$left $pg"; fi
  done
  todo=$left
  [ -z "$todo" ] || [ "$t" -ge $((grace * 100)) ] && break
  sleep 0.1; t=$(($(now) - t0))
done
for pg in $todo; do
  kill -KILL -"$pg" 2>/dev/null
  for s in $(printf '%s\n' "$away" | awk -v g="$pg" '$1==g {print $2}'); do kill -KILL "$s" 2>/dev/null; done
done
n=0
while [ "$n" -lt 100 ]; do
  n=$((n + 1))
  left=; snap
  for pg in $todo; do gone "$pg" || left="$left $pg"; done
  [ -z "$left" ] && break
  sleep 0.1
done
rc=0
for pg in $todo; do
  if gone "$pg"; then echo "$pg gone after SIGKILL (grace ${grace}s)$(note "$pg")"
  else echo "$pg left pids $(members "$pg" | tr '\n' ' ')"; rc=4; fi
done
exit "$rc"
