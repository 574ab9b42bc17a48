#!/usr/bin/env bash
# Tear down what up.sh started, by PID, and put back every file it touched:
#   jobs cancelled; sshd + slurmd of every lab host, then every process still inside a lab
#   network namespace (job steps, ssh sessions, srun clients on the login host); slurmctld,
#   slurmdbd, and munged / MariaDB only if up.sh started them; the accounting database and user;
#   namespaces, veths, bridge; /etc/hosts block; /etc/slurm files (originals restored); paths
#   up.sh created; enroot's containers and pyxis's runtime files (pyxis.sh). Packages stay installed; $LAB keeps
#   logs, keys and the pyxis/enroot build (PURGE=1 deletes $LAB).
# Exits 0 when nothing is up.
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$HERE/lib.sh"
source "$HERE/pyxis.sh"
[ "$(id -u)" = 0 ] || { echo "down.sh: must run as root" >&2; exit 2; }
did=

pids_in() { [ -e "$RUN/$1" ] || return 0; local p; p=$(cat "$RUN/$1" 2>/dev/null); rm -f "$RUN/$1"; [ -n "$p" ] && echo "$p"; return 0; }

rm -f "$RUN/up.ok"
# 1. cancel jobs while slurmctld + slurmd are still up, so slurmstepd's end cleanly
if pidfile_alive "$RUN/slurmctld.pid"; then
  did=1
  jobs=$(timeout 5 squeue -h -o %i 2>/dev/null | tr '\n' ' ')
  if [ -n "${jobs// }" ]; then
    timeout 5 scancel $jobs 2>/dev/null
    for i in $(seq 50); do [ -z "$(timeout 2 squeue -h -o %i 2>/dev/null)" ] && break; sleep 0.1; done
  fi
fi

[ -n "$did" ] && t "jobs cancelled"
# 2. daemons of the lab hosts, then whatever is left in their network namespaces
p=$(for h in "${HOSTS[@]}"; do pids_in "sshd-$h.pid"; pids_in "slurmd-$h.pid"; done)
[ -n "$p" ] && did=1
stop_pids $p
for round in 1 2 3; do              # a dying job step can fork once more: look again
  p=$(for h in "${HOSTS[@]}"; do [ -e "/run/netns/$h" ] && ip netns pids "$h" 2>/dev/null; done)
  live=; for x in $p; do alive "$x" && live="$live $x"; done
  [ -z "$live" ] && break
  did=1; stop_pids $live
done

[ -n "$did" ] && t "lab hosts' processes stopped"
# 2b. enroot's containers (named ones outlive their steps) and pyxis's imported images: state, not build
if [ -d "$CT/state" ] || [ -d "$CT/pyxis-run" ]; then
  for m in $(awk -v ct="$CT/" 'index($2, ct) == 1 {print $2}' /proc/self/mounts | sort -r); do umount -l "$m" 2>/dev/null; done
  rm -rf "$CT/state" "$CT/pyxis-run"
  t "enroot containers and pyxis runtime files removed"
fi
# 3. daemons on this machine (munged / MariaDB only if up.sh started them: pid file in $RUN)
p=$(pids_in slurmctld.pid; pids_in slurmdbd.pid); [ -n "$p" ] && did=1; stop_pids $p
[ -n "$did" ] && t "slurmctld + slurmdbd stopped"
if [ -e "$RUN/acct-db" ]; then     # the accounting DB + user up.sh created
  if mariadb -e 'select 1' >/dev/null 2>&1; then
    mariadb -e "DROP DATABASE IF EXISTS atomdeck_lab_acct; DROP USER IF EXISTS 'atomdeck_lab'@'localhost';" 2>/dev/null
  fi
  rm -f "$RUN/acct-db"
fi
p=$(pids_in mariadbd.pid; pids_in munged.pid); [ -n "$p" ] && did=1; STOP_WAIT=15 stop_pids $p
[ -e /run/munge/munged.pid ] && ! pidfile_alive /run/munge/munged.pid && rm -f /run/munge/munged.pid

[ -n "$did" ] && t "daemons on this machine stopped"
# 4. network + UTS namespaces
for h in "${HOSTS[@]}"; do
  [ -e "/run/netns/$h" ] && { did=1; ip netns del "$h" 2>/dev/null; }
  ip link del "$(veth "$h")" 2>/dev/null
  if [ -e "$UTSDIR/$h" ]; then umount "$UTSDIR/$h" 2>/dev/null; rm -f "$UTSDIR/$h"; fi
done
ip link show "$LAB_BRIDGE" >/dev/null 2>&1 && { did=1; ip link del "$LAB_BRIDGE"; }

# 5. files outside $LAB
if grep -q "# $MARK BEGIN" /etc/hosts; then
  did=1
  sed "/# $MARK BEGIN/,/# $MARK END/d" /etc/hosts > "$LAB/hosts.new" && cat "$LAB/hosts.new" > /etc/hosts
  rm -f "$LAB/hosts.new"
fi
for f in slurm.conf gres.conf slurmdbd.conf; do
  if [ -e "$BACKUP/$f.orig" ]; then
    did=1; mv -f "$BACKUP/$f.orig" "/etc/slurm/$f"
  elif [ -e "/etc/slurm/$f" ] && grep -q "$MARK" "/etc/slurm/$f"; then
    did=1; rm -f "/etc/slurm/$f"
  fi
done
rm -f "$BACKUP/hosts.orig"
if [ -s "$RUN/created" ]; then      # paths up.sh created, newest first
  did=1
  # /run/netns is a bind mount of itself (ip netns): unmount it if no namespace is left in it,
  # first (umount may recreate /run/mount/utab, which we remove next)
  while read -r path; do
    [ -d "$path" ] && mountpoint -q "$path" && [ -z "$(ls -A "$path")" ] && umount "$path"
  done < "$RUN/created"
  tac "$RUN/created" | while read -r path; do
    if [ -d "$path" ]; then
      case $path in
        /run/netns) rmdir "$path" 2>/dev/null ;;   # may hold other people's namespaces
        /run/sshd)                                  # privsep dir of every sshd: keep while one runs
          other=; for p in $(pgrep -x sshd); do alive "$p" && other=1; done
          [ -z "$other" ] && rmdir "$path" 2>/dev/null ;;
        *) rm -rf "$path" ;;                       # sockets/pid files of daemons we ran
      esac
    else
      rm -f "$path"
    fi
  done
  rm -f "$RUN/created"
fi
[ -n "${PURGE:-}" ] && rm -rf "$LAB"
if [ -n "$did" ]; then t "lab down"; else echo "lab not up: nothing to do"; fi
exit 0
