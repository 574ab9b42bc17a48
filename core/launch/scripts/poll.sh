#!/bin/sh
# ssh launcher: $1 pid (the supervisor), $2 exit-code file, $3 marker value (RUN:NAME). Prints "alive"; or
# "orphan CHILD" when the supervisor is gone but its child (the engine, its PID in the .child file next to
# $2) lives on and carries the marker; or "exit=CODE" (empty CODE: unknown), with " engine=CHILD" when the
# supervisor had recorded a child whose code nobody wrote.
s=$(sed "s/.*) //" "/proc/$1/stat" 2>/dev/null | cut -d" " -f1)
c=; [ -s "${2%.exit}.child" ] && read -r c < "${2%.exit}.child"
cs=; [ -n "$c" ] && cs=$(sed "s/.*) //" "/proc/$c/stat" 2>/dev/null | cut -d" " -f1)
if [ -n "$s" ] && [ "$s" != Z ] && [ "$s" != X ]; then echo alive
elif [ -n "$cs" ] && [ "$cs" != Z ] && [ "$cs" != X ] && [ -n "$3" ] &&
     tr '\0' '\n' < "/proc/$c/environ" 2>/dev/null | grep -qx "ATOMDECK_RUN=$3"; then echo "orphan $c"
elif [ -s "$2" ]; then echo "exit=$(cat "$2")"
elif [ -n "$c" ]; then echo "exit= engine=$c"
else echo exit=; fi
