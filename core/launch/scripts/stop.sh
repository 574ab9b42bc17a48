#!/bin/sh
# ssh launcher: $1 process group, $2 marker value, $3 grace seconds: TERM (with CONT: a stopped process
# ignores TERM until continued), wait, KILL, verify within 1 s.
# One line of result.
pg=$1; mark=$2; grace=$3
members() { ps -e -o pid=,pgid=,stat= | awk -v g="$pg" '$2==g && $3 !~ /^Z/ {print $1}'; }
m=$(members)
[ -z "$m" ] && { echo "gone already"; exit 0; }
ours=
for p in $m; do tr '\0' '\n' < /proc/"$p"/environ 2>/dev/null | grep -qx "ATOMDECK_RUN=$mark" && ours=1; done
[ -z "$ours" ] && { echo "gone (group $pg now holds someone else's processes; left alone)"; exit 0; }
kill -TERM -"$pg" 2>/dev/null; kill -CONT -"$pg" 2>/dev/null
t=0
while [ -n "$(members)" ]; do
  if [ "$t" -ge $((grace * 10)) ]; then break; fi
  sleep 0.1; t=$((t + 1))
done
if [ -z "$(members)" ]; then echo "gone after SIGTERM in $((t / 10)).$((t % 10))s"; exit 0; fi
kill -KILL -"$pg" 2>/dev/null
for _ in 1 2 3 4 5 6 7 8 9 10; do [ -z "$(members)" ] && break; sleep 0.1; done
if [ -z "$(members)" ]; then echo "gone after SIGKILL (grace ${grace}s)"; exit 0; fi
echo "left pids $(members | tr '\n' ' ')"; exit 4
