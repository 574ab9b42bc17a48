#!/bin/sh
# ssh launcher: $1 process group, $2 marker value, $3 grace seconds: TERM (with CONT: a stopped process
# ignores TERM until continued), wait, KILL, verify within 10 s (a killed process still runs its exit: its
# memory unmapped, a GPU's VRAM freed by the driver). The group's descendants that left it (an ATOM rank that
# called setsid is still its EngineCore's child) are read before the signals and signalled by PID.
# One line of result.
pg=$1; mark=$2; grace=$3
members() { ps -e -o pid=,pgid=,stat= | awk -v g="$pg" '$2==g && $3 !~ /^Z/ {print $1}'; }
# "pid pgid comm" of the group's live processes and of every live descendant of them, however deep
tree() {
  ps -e -o pid=,ppid=,pgid=,stat=,comm= | awk -v g="$pg" '$4 !~ /^Z/ {n++; p[n]=$1; pp[n]=$2; grp[$1]=$3; c[$1]=$5; if ($3==g) t[$1]=1}
    END {do {more=0; for (i=1;i<=n;i++) if (!(p[i] in t) && (pp[i] in t)) {t[p[i]]=1; more=1}} while (more)
         for (x in t) print x, grp[x], c[x]}'
}
live() { case $(ps -o stat= -p "$1" 2>/dev/null) in ""|Z*) return 1;; esac; }
left() { members; for s in $out; do live "$s" && echo "$s"; done; }
m=$(members)
[ -z "$m" ] && { echo "gone already"; exit 0; }
ours=
for p in $m; do tr '\0' '\n' < /proc/"$p"/environ 2>/dev/null | grep -qx "ATOMDECK_RUN=$mark" && ours=1; done
[ -z "$ours" ] && { echo "gone (group $pg now holds someone else's processes; left alone)"; exit 0; }
all=$(tree)
out=$(printf '%s\n' "$all" | awk -v g="$pg" 'NF && $2!=g {print $1}')
note=
[ -n "$out" ] && note=" ($(printf '%s\n' "$all" | grep -c .) processes, $(printf '%s\n' "$out" | grep -c .) outside its process group: $(printf '%s\n' "$all" | awk -v g="$pg" 'NF && $2!=g {printf "%s%s %s", s, $1, $3; s=", "}'))"
kill -TERM -"$pg" 2>/dev/null; kill -CONT -"$pg" 2>/dev/null
for s in $out; do kill -TERM "$s" 2>/dev/null; kill -CONT "$s" 2>/dev/null; done
t=0
while [ -n "$(left)" ]; do
  if [ "$t" -ge $((grace * 10)) ]; then break; fi
  sleep 0.1; t=$((t + 1))
done
if [ -z "$(left)" ]; then echo "gone after SIGTERM in $((t / 10)).$((t % 10))s$note"; exit 0; fi
kill -KILL -"$pg" 2>/dev/null
for s in $out; do kill -KILL "$s" 2>/dev/null; done
n=0; while [ -n "$(left)" ] && [ "$n" -lt 100 ]; do sleep 0.1; n=$((n + 1)); done
if [ -z "$(left)" ]; then echo "gone after SIGKILL (grace ${grace}s)$note"; exit 0; fi
echo "left pids $(left | tr '\n' ' ')"; exit 4
