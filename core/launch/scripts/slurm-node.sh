#!/bin/sh
# slurm launcher, one `srun --overlap` step per node (so the launching host keeps one srun client per node,
# not one per process): starts every process of the run on this node, each exactly as a step of its own
# would (its own supervisor, session and process group, log, exit-code file and ATOMDECK_RUN marker),
# prints "started NAME PID" for each, then "ended NAME CODE" as each ends (CODE: the supervisor's exit
# status, 128+N if the supervisor itself was killed by signal N), and returns when all have ended (an engine
# that outlived its killed supervisor included).
# $1 run id; $2 the supervisor's text; $3 the node's process list: a file of `start NAME MARKER LOG EXIT_FILE
# COMMAND...` lines, every word quoted by the launcher (MARKER: the supervisor's $0, see base.marker).
run=$1; sup=$2; list=$3
umask 077
start() {
  name=$1; mark=$2; log=$3; ef=$4; shift 4
  rm -f "$ef" "${ef%.exit}.child"
  (
    env ATOMDECK_RUN="$run:$name" setsid /bin/sh -c "$sup" "$mark" "$ef" "$@" >>"$log" 2>&1 </dev/null &
    p=$!
    echo "started $name $p"
    wait "$p"; echo "ended $name $?"
    # a supervisor killed while its child (the engine) lives on: the step stays while the engine does (Slurm
    # ends every process of a step when the step ends)
    c=; [ -s "$ef" ] || { [ -s "${ef%.exit}.child" ] && read -r c < "${ef%.exit}.child"; }
    while [ -n "$c" ]; do
      s=; line=; { read -r line < /proc/"$c"/stat; } 2>/dev/null
      if [ -n "$line" ]; then s=${line##*) }; s=${s%% *}; fi
      { [ -z "$s" ] || [ "$s" = Z ] || [ "$s" = X ]; } && break
      sleep 1
    done
  ) &
}
# shellcheck disable=SC1090  # the list is written by the launcher for this run
. "$list"
wait
