#!/bin/sh
# snapshot (issue 39): $1 py-spy to use ("" = find it: PATH, then $2/py-spy), $2 the directory a copied py-spy goes
# to, $3 how many py-spy dumps at once, then NAME:PID:KIND for each process of the run here (PID: its supervisor;
# KIND: python, or native for a program py-spy cannot read, as AToMesh's Rust router). For each process, every
# member of its tree (the supervisor and its descendants): /proc stat, wchan, current syscall and thread count; the
# members' executables (`ls -l` of their exe links) and command lines (`head`) in one command each; `py-spy dump
# --json` of each Python member, at most $3 at once, each in a file of its own so that parallel dumps never
# interleave; and the members' TCP connections. Sections start with "== ".
# Few processes per node on purpose: at 128 nodes on one machine (the local cluster) every fork was paid 128 times.
spy=$1; dir=$2; par=$3; shift 3
[ -z "$spy" ] && spy=$(command -v py-spy 2>/dev/null || true)
[ -z "$spy" ] && [ -x "$dir/py-spy" ] && spy=$dir/py-spy
host=; uid=; cap=; scope=-
read -r host < /proc/sys/kernel/hostname
read -r scope 2>/dev/null < /proc/sys/kernel/yama/ptrace_scope
while read -r k v _; do case $k in Uid:) uid=$v;; CapEff:) cap=$v;; esac; done < /proc/self/status
echo "== node $host uid=$uid ptrace_scope=$scope capeff=$cap spy=${spy:-none}"
# every process's tree at once: "NAME PID KIND ROOT" for the root and each descendant (children listed by parent)
members=$(ps -e -o pid=,ppid= | awk -v items="$*" '
  {kids[$2] = kids[$2] " " $1}
  END {
    n = split(items, it, " ")
    for (i = 1; i <= n; i++) {
      split(it[i], f, ":"); todo = f[2]
      while (todo != "") {
        sub(/^ +/, "", todo); p = todo; sub(/ .*/, "", p); sub(/^[^ ]+/, "", todo)
        if (p == "" || (p in seen)) continue
        seen[p] = 1; print f[1], p, f[3], f[2]; todo = todo kids[p]
      }
    }
  }')
pys=; fds=; exes=; cmds=; known=" "
while read -r name p kind root; do
  [ -r "/proc/$p/stat" ] || continue
  # read with the shell's own `read` (no process per file)
  stat=; wchan=; sys=; threads=
  read -r stat 2>/dev/null < "/proc/$p/stat"
  read -r wchan 2>/dev/null < "/proc/$p/wchan"
  read -r sys 2>/dev/null < "/proc/$p/syscall"
  while read -r k v; do [ "$k" = Threads: ] && threads=$v && break; done 2>/dev/null < "/proc/$p/status"
  echo "== proc $name $p"
  echo "stat $stat"
  echo "wchan $wchan"
  echo "syscall $sys"
  echo "threads $threads"
  fds="$fds /proc/$p/fd"; exes="$exes /proc/$p/exe"; cmds="$cmds /proc/$p/cmdline"; known="$known$p:$name:$kind:$root "
done <<MEMBERS
$members
MEMBERS
[ "$known" = " " ] && exit 0
# shellcheck disable=SC2086  # the lists are words (paths under /proc)
links=$(ls -l $exes 2>/dev/null)
echo "== exe"
printf '%s\n' "$links"
echo "== cmdline"
# one line: "==> /proc/PID/cmdline <== ARGS" for each member (newlines in a command line are spaces, as NULs are)
# shellcheck disable=SC2086  # (/dev/null first: head names every file, even when there is one member)
head -c 300 /dev/null $cmds 2>/dev/null | tr '\0\n' '  '
echo
# the Python members: an exe with "python" in it, or one that cannot be read (ptrace is denied here, and py-spy will
# say so for each member but the supervisor)
for m in $known; do
  p=${m%%:*}; rest=${m#*:}; name=${rest%%:*}; rest=${rest#*:}; kind=${rest%%:*}; root=${rest#*:}
  [ "$kind" = python ] || continue
  case $links in
    *"/proc/$p/exe -> "*) exe=${links#*"/proc/$p/exe -> "}; exe=${exe%%
*} ;;
    *) exe= ;;
  esac
  case $exe in *python*) pys="$pys $name:$p";; "") [ "$p" = "$root" ] || pys="$pys $name:$p";; esac
done
# the members' TCP connections: their sockets' inodes (their fd directories), joined with `ss -tneH` (inodes, no
# owners); `ss -p` would read every process's fds on the node (1,400 processes per node on the 128-node local
# cluster: 90 ms each time). Printed as `ss -tnpH` prints them.
echo "== ss"
# shellcheck disable=SC2086  # (ls names each directory when given two or more: the lone one is named here)
{ set -- $fds; [ $# -eq 1 ] && echo "$1:"; ls -l "$@" 2>/dev/null; echo "== ss"; ss -tneH 2>/dev/null; } | awk '
  /^== ss$/ {ss = 1; next}
  !ss && /^\/proc\/[0-9]+\/fd:$/ {split($0, a, "/"); pid = a[3]; next}
  !ss && /socket:\[/ {i = $NF; gsub(/[^0-9]/, "", i); owners[i] = owners[i] "((\"-\",pid=" pid ",fd=0))"; next}
  ss {for (f = 6; f <= NF; f++) if ($f ~ /^ino:/) {i = substr($f, 5); if (i in owners) print $1, $2, $3, $4, $5, "users:(" owners[i] ")"}}'
if [ -n "$spy" ] && [ -n "$pys" ]; then
  out=$(mktemp -d)
  # each dump's section whole in its own file (header, py-spy's output, its exit code); $par at once, a few per shell
  # shellcheck disable=SC2086  # the items are words
  set -- $pys
  # shellcheck disable=SC2016  # $0 and $1 belong to the inner sh (py-spy, the directory), then its items
  printf '%s\n' "$@" | xargs -P "$par" -n $((($# + par - 1) / par)) sh -c 'spy=$0; out=$1; shift
    for m; do p=${m#*:}; { echo "== spy ${m%%:*} $p"; timeout 20 "$spy" dump --pid "$p" --json 2>&1; echo "== spyrc $?"; } > "$out/$p"; done' "$spy" "$out"
  cat "$out"/* 2>/dev/null
  rm -rf "$out"
fi
true
