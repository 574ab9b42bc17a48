#!/bin/sh
# snapshot (issue 39): $1 py-spy to use ("" = find it: PATH, then $2/py-spy), $2 the directory a copied py-spy goes
# to, $3 how many py-spy dumps at once, then NAME:PID:KIND for each process of the run here (PID: its supervisor;
# KIND: python, or native for a program py-spy cannot read, as AToMesh's Rust router). For each process, every
# member of its tree (the supervisor and its descendants): /proc stat, wchan, current syscall, thread count, exe and
# command line; `py-spy dump --json` of each Python member, at most $3 at once, each in a file of its own so that
# parallel dumps never interleave; and the node's TCP connections (`ss -tnpH`) once. Sections start with "== ".
spy=$1; dir=$2; par=$3; shift 3
[ -z "$spy" ] && spy=$(command -v py-spy 2>/dev/null || true)
[ -z "$spy" ] && [ -x "$dir/py-spy" ] && spy=$dir/py-spy
echo "== node $(hostname) uid=$(id -u) ptrace_scope=$(cat /proc/sys/kernel/yama/ptrace_scope 2>/dev/null || echo -) capeff=$(awk '/^CapEff/ {print $2}' /proc/self/status) spy=${spy:-none}"
table=$(ps -e -o pid=,ppid=)
tree() { printf '%s\n' "$table" | awk -v r="$1" '{pp[$1]=$2; n++; p[n]=$1} END {t[r]=1; print r; do {m=0; for (i=1;i<=n;i++) if (!(p[i] in t) && (pp[p[i]] in t)) {t[p[i]]=1; print p[i]; m=1}} while (m)}'; }
pys=; all=
for item in "$@"; do
  name=${item%%:*}; rest=${item#*:}; root=${rest%%:*}; kind=${rest#*:}
  for p in $(tree "$root"); do
    [ -r "/proc/$p/stat" ] || continue
    # read with the shell's own `read` (no process per file: at 128 nodes on one machine, forks were the cost)
    stat=; wchan=; sys=; threads=
    read -r stat 2>/dev/null < "/proc/$p/stat"
    read -r wchan 2>/dev/null < "/proc/$p/wchan"
    read -r sys 2>/dev/null < "/proc/$p/syscall"
    while read -r k v; do [ "$k" = Threads: ] && threads=$v && break; done 2>/dev/null < "/proc/$p/status"
    exe=$(readlink "/proc/$p/exe" 2>/dev/null)
    echo "== proc $name $p"
    echo "stat $stat"
    echo "wchan $wchan"
    echo "syscall $sys"
    echo "threads $threads"
    echo "exe $exe"
    echo "cmdline $(tr '\0\n' '  ' < "/proc/$p/cmdline" 2>/dev/null | cut -c1-300)"
    all="$all /proc/$p/fd"
    # (an exe it may not read: ptrace is denied here, and py-spy will say so for each member but the supervisor)
    case $kind:$exe in python:*python*) pys="$pys $name:$p";; python:) [ "$p" = "$root" ] || pys="$pys $name:$p";; esac
  done
done
# the members' TCP connections: their sockets' inodes (their fd directories), joined with `ss -tneH` (inodes, no
# owners); `ss -p` would read every process's fds on the node (1,400 processes per node on the 128-node local
# cluster: 90 ms each time). Printed as `ss -tnpH` prints them.
echo "== ss"
{ for d in $all; do echo "$d:"; ls -l "$d" 2>/dev/null; done; echo "== ss"; ss -tneH 2>/dev/null; } | awk '
  /^== ss$/ {ss = 1; next}
  !ss && /^\/proc\/[0-9]+\/fd:$/ {split($0, a, "/"); pid = a[3]; next}
  !ss && /socket:\[/ {i = $NF; gsub(/[^0-9]/, "", i); owners[i] = owners[i] "((\"-\",pid=" pid ",fd=0))"; next}
  ss {for (f = 6; f <= NF; f++) if ($f ~ /^ino:/) {i = substr($f, 5); if (i in owners) print $1, $2, $3, $4, $5, "users:(" owners[i] ")"}}'
if [ -n "$spy" ] && [ -n "$pys" ]; then
  out=$(mktemp -d)
  # shellcheck disable=SC2016,SC2086  # $0-$2 belong to the inner sh (py-spy, the directory, NAME:PID); the items are words
  printf '%s\n' $pys | xargs -P "$par" -n 1 sh -c 'p=${2#*:}; timeout 20 "$0" dump --pid "$p" --json > "$1/$p" 2>&1; echo "$?" > "$1/$p.rc"' "$spy" "$out"
  for item in $pys; do
    p=${item#*:}
    echo "== spy ${item%%:*} $p $(cat "$out/$p.rc" 2>/dev/null)"
    cat "$out/$p" 2>/dev/null
  done
  rm -rf "$out"
fi
true
