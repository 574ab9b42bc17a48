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
pys=
for item in "$@"; do
  name=${item%%:*}; rest=${item#*:}; root=${rest%%:*}; kind=${rest#*:}
  for p in $(tree "$root"); do
    [ -r "/proc/$p/stat" ] || continue
    exe=$(readlink "/proc/$p/exe" 2>/dev/null)
    echo "== proc $name $p"
    echo "stat $(cat "/proc/$p/stat" 2>/dev/null)"
    echo "wchan $(cat "/proc/$p/wchan" 2>/dev/null)"
    echo "syscall $(cat "/proc/$p/syscall" 2>/dev/null)"
    echo "threads $(awk '/^Threads/ {print $2}' "/proc/$p/status" 2>/dev/null)"
    echo "exe $exe"
    echo "cmdline $(tr '\0\n' '  ' < "/proc/$p/cmdline" 2>/dev/null | cut -c1-300)"
    # (an exe it may not read: ptrace is denied here, and py-spy will say so for each member but the supervisor)
    case $kind:$exe in python:*python*) pys="$pys $name:$p";; python:) [ "$p" = "$root" ] || pys="$pys $name:$p";; esac
  done
done
echo "== ss"
ss -tnpH 2>/dev/null
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
