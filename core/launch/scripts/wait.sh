#!/bin/sh
# ssh launcher: $1: the logs directory; then PID:NAME for each process. Every 0.05 s, for each process
# that has ended (zombies count as ended) print "ended PID CODE" once (CODE from $1/NAME.exit, empty if
# unknown); return when all have ended. One channel per node watches all of its processes: SSH allows
# 10 channels per connection, and each process's log tail needs one.
dir=$1; shift
procs="$*"; done=
while :; do
  left=0
  for item in $procs; do
    pid=${item%%:*}; name=${item#*:}
    case " $done " in *" $pid "*) continue;; esac
    # read (a builtin), not sed | cut: no fork per process and turn, so the turn can be short
    s=; line=; { read -r line < /proc/"$pid"/stat; } 2>/dev/null
    if [ -n "$line" ]; then s=${line##*) }; s=${s%% *}; fi
    if [ -z "$s" ] || [ "$s" = Z ] || [ "$s" = X ]; then
      code=; [ -s "$dir/$name.exit" ] && code=$(cat "$dir/$name.exit")
      echo "ended $pid $code"; done="$done $pid"
    else
      left=$((left + 1))
    fi
  done
  [ "$left" -eq 0 ] && break
  sleep 0.05
done
