#!/bin/sh
# ssh launcher: $1 pid, $2 exit-code file. Prints "alive", or "exit=CODE" (empty CODE: unknown).
s=$(sed "s/.*) //" "/proc/$1/stat" 2>/dev/null | cut -d" " -f1)
if [ -n "$s" ] && [ "$s" != Z ] && [ "$s" != X ]; then echo alive
elif [ -s "$2" ]; then echo "exit=$(cat "$2")"
else echo exit=; fi
