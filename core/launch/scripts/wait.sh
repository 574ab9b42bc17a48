#!/bin/sh
# ssh launcher: $1: the logs directory; $2 the run id; then PID:NAME for each process (PID:NAME:o once its
# orphan line was said). Every 0.05 s, for each process that has ended (zombies count as ended) print
# "ended PID CODE" once (CODE from $1/NAME.exit, empty if unknown); return when all have ended. A supervisor
# that is gone while its child (the engine: its PID in $1/NAME.child, carrying the run's marker) lives on is
# not an end: "orphan PID CHILD" is printed once, and the child is watched until it ends. One channel per node
# watches all of its processes: SSH allows 10 channels per connection, and each process's log tail needs one.
dir=$1; run=$2; shift 2
procs="$*"; done=; said=; ours=
alive_pid() {  # a builtin read, not sed | cut: no fork per process and turn, so the turn can be short
  s=; line=; { read -r line < /proc/"$1"/stat; } 2>/dev/null
  if [ -n "$line" ]; then s=${line##*) }; s=${s%% *}; fi
  [ -n "$s" ] && [ "$s" != Z ] && [ "$s" != X ]
}
while :; do
  left=0
  for item in $procs; do
    pid=${item%%:*}; rest=${item#*:}; name=${rest%%:*}
    case " $done " in *" $pid "*) continue;; esac
    if alive_pid "$pid"; then left=$((left + 1)); continue; fi
    c=; [ -s "$dir/$name.child" ] && { read -r c < "$dir/$name.child"; } 2>/dev/null
    if [ -n "$c" ] && alive_pid "$c"; then
      case " $ours " in *" $c "*) ;; *)
        tr '\0' '\n' < /proc/"$c"/environ 2>/dev/null | grep -qx "ATOMDECK_RUN=$run:$name" && ours="$ours $c";;
      esac
      case " $ours " in *" $c "*)
        case " $said " in *" $pid "*) ;; *)
          [ "$rest" = "$name" ] && echo "orphan $pid $c"; said="$said $pid";;
        esac
        left=$((left + 1)); continue;;
      esac
    fi
    code=; [ -s "$dir/$name.exit" ] && code=$(cat "$dir/$name.exit")
    echo "ended $pid $code"; done="$done $pid"
  done
  [ "$left" -eq 0 ] && break
  sleep 0.05
done
