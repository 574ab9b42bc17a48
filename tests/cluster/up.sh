#!/usr/bin/env bash
# Bring up atomdeck's Slurm + SSH lab on this one Debian 12 machine (root, no systemd needed).
#
#   mia1-p01-g01..g04  10.77.0.11-14   slurmd (8 fake GPUs each, GRES) + sshd, own netns + host name
#   mia1-p01-g37       10.77.0.37      same, but DRAINED with a reason (the "bad node")
#   mia1-login         10.77.0.2       sshd only: the login/jump host; Slurm clients work there
#   this machine       10.77.0.1       bridge adlab0; munged, MariaDB, slurmdbd, slurmctld
#
# The namespaces only know 10.77.0.0/24 (no default route, no forwarding): nothing leaves the box.
# Shape (names, IPs, timeouts) lives in lab.env. Everything started is recorded by PID under
# $LAB/run; every file outside $LAB that is replaced is backed up under $LAB/backup; down.sh
# undoes both. If the lab is already up and healthy this exits 0 at once.
#
# With WITH_PYXIS=1 (default) the nodes' slurmd load real pyxis (PlugStackConfig) and run real enroot,
# both built from the vendored sources (pyxis.sh); a lab that is up without them gets them added in place
# (slurmd restarted one by one: running steps survive), without a teardown.
#
# env: LAB=/var/lib/atomdeck-lab  WITH_ACCT=1 (slurmdbd+MariaDB, for sacct)  FRESH=1 (wipe Slurm
#      state + accounting: job ids restart at 1)  SKIP_INSTALL=1  KEEP_ON_FAIL=1 (no auto-down)
#      WITH_PYXIS=1  ATOMDECK_VENDOR_DIR=<repo>/../shared/vendor (the pyxis and enroot archives)
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$HERE/lib.sh"
source "$HERE/pyxis.sh"
WITH_PYXIS=${WITH_PYXIS:-1}
WITH_ACCT=${WITH_ACCT:-1}
FRESH=${FRESH:-1}
CTL=$(hostname -s)                # SlurmctldHost / DbdHost must equal `hostname -s`
DB=atomdeck_lab_acct; DBUSER=atomdeck_lab; DBPASS=atomdeck-lab

[ "$(id -u)" = 0 ] || { echo "up.sh: must run as root (namespaces, daemons, /etc/hosts)" >&2; exit 2; }

healthy() {   # quiet; 0 if every daemon is alive and Slurm answers with all nodes registered
  local h
  [ -e "$RUN/up.ok" ] || return 1
  pidfile_alive "$RUN/slurmctld.pid" || return 1
  if [ "$WITH_ACCT" = 1 ]; then pidfile_alive "$RUN/slurmdbd.pid" || return 1; fi
  for h in "${HOSTS[@]}"; do
    [ -e "/run/netns/$h" ] && [ -e "$UTSDIR/$h" ] || return 1
    pidfile_alive "$RUN/sshd-$h.pid" || return 1
  done
  for h in "${NODES[@]}"; do pidfile_alive "$RUN/slurmd-$h.pid" || return 1; done
  [ "$(timeout 5 sinfo -h -N -o '%N %T' 2>/dev/null | grep -cv '\*$')" = "${#NODES[@]}" ]
}
partly_up() {
  local f h
  for f in "$RUN"/*.pid; do [ -e "$f" ] && pidfile_alive "$f" && return 0; done
  for h in "${HOSTS[@]}"; do [ -e "/run/netns/$h" ] && return 0; done
  ip link show "$LAB_BRIDGE" >/dev/null 2>&1 && return 0
  grep -q "$MARK BEGIN" /etc/hosts && return 0
  return 1
}

add_pyxis=
if healthy; then
  if [ "$WITH_PYXIS" != 1 ] || pyxis_ok; then
    echo "lab already up and healthy ($LAB, slurmctld pid $(cat "$RUN/slurmctld.pid")); nothing to do"
    exit 0
  fi
  echo "lab up but without pyxis/enroot: adding them in place"
  add_pyxis=1
fi
if [ -z "$add_pyxis" ] && partly_up; then
  echo "lab partly up or unhealthy: tearing it down first"
  LAB=$LAB "$HERE/down.sh"
fi
prc=
cleanup_prc() { if [ -n "$prc" ]; then rm -f /usr/sbin/policy-rc.d; prc=; fi; }
fail_at=
trap 'fail_at="line $LINENO: $BASH_COMMAND"' ERR    # not inherited by $(...): only remembers
finish() {                                          # EXIT: failure, error or Ctrl-C after this point
  local rc=$? f
  cleanup_prc
  [ "$rc" = 0 ] && return 0
  echo "up.sh FAILED (rc=$rc) at ${fail_at:-a signal}" >&2
  for f in "$LAB"/log/*.log "$LAB"/log/*.err; do
    [ -s "$f" ] && { echo "--- tail $f" >&2; tail -n 15 "$f" >&2; }
  done
  if [ -n "$add_pyxis" ]; then
    echo "up.sh: the lab was up before: left as it is (pyxis not added)" >&2
  elif [ -z "${KEEP_ON_FAIL:-}" ]; then
    echo "up.sh: tearing down what was started (KEEP_ON_FAIL=1 keeps it for debugging)" >&2
    LAB=$LAB "$HERE/down.sh" >&2 || true
  fi
  exit "$rc"
}
trap finish EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ------------------------------------------------------------------------------ 1. packages
PKGS="slurmctld slurmd slurm-client munge openssh-server openssh-client iproute2"
[ "$WITH_ACCT" = 1 ] && PKGS="$PKGS slurmdbd mariadb-server"
[ "$WITH_PYXIS" = 1 ] && PKGS="$PKGS $PYXIS_PKGS"
if [ -z "${SKIP_INSTALL:-}" ]; then
  missing=
  for p in $PKGS; do
    s=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
    [ "$s" = "install ok installed" ] || missing="$missing $p"
  done
  if [ -n "$missing" ]; then
    t "installing:$missing"
    # keep the packages' postinst from starting daemons through init.d (there is no systemd)
    [ -e /usr/sbin/policy-rc.d ] || { printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d; chmod +x /usr/sbin/policy-rc.d; prc=1; }
    inst() { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
               -o Dpkg::Options::=--force-confold $missing >"$1" 2>&1; }
    # package lists younger than a day: try without `apt-get update` first (saves seconds)
    if [ -n "$(find /var/lib/apt/lists -maxdepth 1 -name '*Packages*' -mmin -1440 2>/dev/null)" ] \
       && inst /tmp/atomdeck-lab-apt.log; then :; else
      apt-get update -qq >/tmp/atomdeck-lab-apt.log 2>&1
      inst /tmp/atomdeck-lab-apt.log || { tail -n 30 /tmp/atomdeck-lab-apt.log >&2; false; }
    fi
    cleanup_prc
  fi
fi
t "packages ok"

# ------------------------------------------------------------------------------ 1b. pyxis + enroot (pyxis.sh)
if [ "$WITH_PYXIS" = 1 ]; then
  mkdir -p "$LAB/log"
  pyxis_build
  pyxis_configure
  pyxis_image
fi
if [ -n "$add_pyxis" ]; then   # into the running lab: slurm.conf names the plugin, each slurmd restarted
  grep -q "^PlugStackConfig=" /etc/slurm/slurm.conf || echo "PlugStackConfig=$PLUGSTACK" >> /etc/slurm/slurm.conf
  scontrol reconfigure
  for n in "${NODES[@]}"; do pyxis_restart_slurmd "$n"; done
  for i in $(seq 100); do pyxis_ok && break; sleep 0.1; done
  pyxis_ok || { echo "pyxis: srun --help does not list --container-image, or a slurmd lacks enroot" >&2; false; }
  for i in $(seq 100); do healthy && break; sleep 0.1; done
  healthy
  t "pyxis + enroot added to the running lab"
  exit 0
fi

# ------------------------------------------------------------------------------ 2. layout
if [ "$FRESH" = 1 ]; then rm -rf "$LAB/state" "$LAB/spool" "$LAB/log" "$LAB"/jobs; fi
mkdir -p "$RUN" "$BACKUP" "$LAB"/{log,state,spool,ssh,fakegpu,jobs}
rm -f "$RUN/up.ok"
chown slurm:slurm "$LAB/state" "$LAB/log"
chmod 1777 "$LAB/jobs"            # job output files (-o) of any user
for d in /run/munge /run/sshd /run/mysqld "${UTSDIR%/*}" "$UTSDIR"; do [ -d "$d" ] || { mkdir -p "$d"; mark_created "$d"; }; done
for d in /run/netns /run/mount; do [ -e "$d" ] || mark_created "$d"; done   # made by ip netns / umount

# ------------------------------------------------------------------------------ 3. munge
if [ ! -s /etc/munge/munge.key ]; then
  mungekey -c -k /etc/munge/munge.key; chown munge:munge /etc/munge/munge.key; chmod 400 /etc/munge/munge.key
  mark_created /etc/munge/munge.key
fi
chown munge:munge /run/munge; chmod 755 /run/munge
if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
  t "munged already running (not ours: left alone)"
else
  runuser -u munge -- /usr/sbin/munged --pid-file=/run/munge/munged.pid </dev/null >/dev/null 2>&1
  cp /run/munge/munged.pid "$RUN/munged.pid"
  for i in $(seq 50); do munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.1; done
  t "munged started (pid $(cat "$RUN/munged.pid"))"
fi

# ------------------------------------------------------------------------------ 4. MariaDB (async)
if [ "$WITH_ACCT" = 1 ]; then
  chown mysql:mysql /run/mysqld
  if mariadb -e 'select 1' >/dev/null 2>&1; then
    t "mariadb already running (not ours: left alone)"
  else
    setsid /usr/sbin/mariadbd --user=mysql --skip-networking --socket=/run/mysqld/mysqld.sock \
      --pid-file=/run/mysqld/mysqld.pid --log-error="$LAB/log/mariadb.err" </dev/null >/dev/null 2>&1 &
    echo $! > "$RUN/mariadbd.pid"
  fi
fi

# ------------------------------------------------------------------------------ 5. network
ip link add "$LAB_BRIDGE" type bridge
ip addr add "$LAB_HOST_IP/$LAB_PREFIX" dev "$LAB_BRIDGE"
ip link set "$LAB_BRIDGE" up
for h in "${HOSTS[@]}"; do
  v=$(veth "$h")
  ip netns add "$h"
  ip link add "$v" type veth peer name "$v-n"
  ip link set "$v" master "$LAB_BRIDGE" up
  ip link set "$v-n" netns "$h"
  ip -n "$h" link set "$v-n" name eth0
  ip -n "$h" addr add "${IP[$h]}/$LAB_PREFIX" dev eth0
  ip -n "$h" link set lo up
  ip -n "$h" link set eth0 up
  touch "$UTSDIR/$h"                              # persistent UTS namespace = the host name
  unshare --uts="$UTSDIR/$h" hostname "$h"
done
# names resolve everywhere (the namespaces share this machine's /etc/hosts)
block=$(echo "# $MARK BEGIN (tests/cluster/up.sh; down.sh removes this block)"
        echo "$LAB_HOST_IP $LAB_CLUSTER-ctl"
        for h in "${HOSTS[@]}"; do echo "${IP[$h]} $h"; done
        echo "# $MARK END")
if ! grep -q "# $MARK BEGIN" /etc/hosts; then
  cp /etc/hosts "$BACKUP/hosts.orig"
  printf '%s\n' "$block" >> /etc/hosts
fi
t "network: bridge $LAB_BRIDGE $LAB_HOST_IP + ${#HOSTS[@]} namespaces"

# ------------------------------------------------------------------------------ 6. ssh keys + config
K=$LAB/ssh
[ -e "$K/id_lab" ] || ssh-keygen -q -t ed25519 -N '' -C atomdeck-lab-client -f "$K/id_lab"
cp "$K/id_lab.pub" "$K/authorized_keys"; chmod 600 "$K/authorized_keys"
: > "$K/known_hosts.new"
for h in "${HOSTS[@]}"; do
  [ -e "$K/hostkey-$h" ] || ssh-keygen -q -t ed25519 -N '' -C "$h" -f "$K/hostkey-$h"
  echo "$h,${IP[$h]} $(cut -d' ' -f1,2 "$K/hostkey-$h.pub")" >> "$K/known_hosts.new"
  cat > "$K/sshd-$h.conf" <<EOF
# $MARK: sshd of $h (${IP[$h]}), runs inside its network namespace
Port 22
ListenAddress 0.0.0.0
HostKey $K/hostkey-$h
PidFile $RUN/sshd-$h.pid
AuthorizedKeysFile $K/authorized_keys
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
AllowTcpForwarding yes
X11Forwarding no
PrintMotd no
Subsystem sftp internal-sftp
EOF
done
mv "$K/known_hosts.new" "$K/known_hosts"
{
  echo "# $MARK: OpenSSH client config for the lab.   ssh -F $K/ssh_config mia1-p01-g01 hostname"
  echo "# Through the login host:  ssh -F $K/ssh_config -J $LOGIN mia1-p01-g01 hostname"
  echo "# or the ready-made aliases NODE-via-login below (ProxyJump $LOGIN)."
  for h in "${NODES[@]}"; do printf 'Host %s-via-login\n  HostName %s\n  ProxyJump %s\n' "$h" "$h" "$LOGIN"; done
  cat <<EOF
Host $LOGIN mia1-p01-* ${LAB_HOST_IP%.*}.*
  User root
  Port 22
  IdentityFile $K/id_lab
  IdentitiesOnly yes
  StrictHostKeyChecking yes
  UserKnownHostsFile $K/known_hosts
  GlobalKnownHostsFile /dev/null
  UpdateHostKeys no
  BatchMode yes
  ConnectTimeout 5
  LogLevel ERROR
EOF
} > "$K/ssh_config"
t "ssh keys + $K/ssh_config + known_hosts"

# ------------------------------------------------------------------------------ 7. slurm config
for i in $(seq 0 $((LAB_GPUS_PER_NODE - 1))); do
  [ -c "$LAB/fakegpu/nvidia$i" ] || { rm -f "$LAB/fakegpu/nvidia$i"; mknod "$LAB/fakegpu/nvidia$i" c 195 "$i"; }
done
if [ ! -d /etc/slurm ]; then mkdir -p /etc/slurm; mark_created /etc/slurm; fi
for f in slurm.conf gres.conf slurmdbd.conf; do     # back up originals (never our own files)
  if [ -e "/etc/slurm/$f" ] && ! grep -q "$MARK" "/etc/slurm/$f" && [ ! -e "$BACKUP/$f.orig" ]; then
    cp -p "/etc/slurm/$f" "$BACKUP/$f.orig"
  fi
done
ACCT=none; GATHER=none
[ "$WITH_ACCT" = 1 ] && { ACCT=slurmdbd; GATHER=linux; }
cat > /etc/slurm/slurm.conf <<EOF
# $MARK: generated by tests/cluster/up.sh; down.sh restores the original
ClusterName=$LAB_CLUSTER
SlurmctldHost=$CTL($LAB_HOST_IP)
SlurmUser=slurm
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
JobAcctGatherType=jobacct_gather/$GATHER
AccountingStorageType=accounting_storage/$ACCT
AccountingStorageHost=$LAB_HOST_IP
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
SlurmdParameters=config_overrides
GresTypes=gpu
ReturnToService=2
# fast failure detection: slurmctld pings every SlurmdTimeout/3 s; a failed ping marks the node
# NOT_RESPONDING ("idle*"), no answer for SlurmdTimeout s marks it DOWN ("down*")
SlurmdTimeout=$LAB_SLURMD_TIMEOUT
MessageTimeout=$LAB_MESSAGE_TIMEOUT
InactiveLimit=0
MinJobAge=300
KillWait=5
MailProg=/bin/true
SlurmctldPort=6817
SlurmdPort=6818
StateSaveLocation=$LAB/state
SlurmdSpoolDir=$LAB/spool/%n
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmdPidFile=$RUN/slurmd-%n.pid
SlurmctldLogFile=$LAB/log/slurmctld.log
SlurmdLogFile=$LAB/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
NodeName=DEFAULT CPUs=$LAB_CPUS_PER_NODE RealMemory=$LAB_MEM_MB Gres=gpu:$LAB_GPUS_PER_NODE State=UNKNOWN
$(for n in "${NODES[@]}"; do echo "NodeName=$n NodeAddr=${IP[$n]} NodeHostname=$n"; done)
PartitionName=$LAB_PARTITION Nodes=ALL Default=YES MaxTime=INFINITE State=UP
$([ "$WITH_PYXIS" = 1 ] && echo "PlugStackConfig=$PLUGSTACK")
EOF
cat > /etc/slurm/gres.conf <<EOF
# $MARK: generated by tests/cluster/up.sh (fake GPUs: real char devices, or the node goes INVAL)
Name=gpu File=$LAB/fakegpu/nvidia[0-$((LAB_GPUS_PER_NODE - 1))]
EOF
if [ "$WITH_ACCT" = 1 ]; then
  cat > /etc/slurm/slurmdbd.conf <<EOF
# $MARK: generated by tests/cluster/up.sh
DbdHost=$CTL
DbdAddr=$LAB_HOST_IP
DbdPort=6819
SlurmUser=slurm
AuthType=auth/munge
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=$DBUSER
StoragePass=$DBPASS
StorageLoc=$DB
PidFile=$RUN/slurmdbd.pid
LogFile=$LAB/log/slurmdbd.log
DebugLevel=info
EOF
  chown slurm:slurm /etc/slurm/slurmdbd.conf; chmod 600 /etc/slurm/slurmdbd.conf
fi
t "slurm.conf written"

# ------------------------------------------------------------------------------ 8. daemons
start() { "$@" </dev/null >>"$LAB/log/daemons.out" 2>&1; }   # never inherit the caller's pipes
if [ "$WITH_ACCT" = 1 ]; then
  for i in $(seq 150); do mariadb -e 'select 1' >/dev/null 2>&1 && break; sleep 0.1; done
  [ "$FRESH" = 1 ] && mariadb -e "DROP DATABASE IF EXISTS $DB"
  mariadb -e "CREATE USER IF NOT EXISTS '$DBUSER'@'localhost' IDENTIFIED BY '$DBPASS';
              GRANT ALL ON $DB.* TO '$DBUSER'@'localhost';"
  touch "$RUN/acct-db"                             # down.sh drops $DB and $DBUSER again
  t "mariadb ready"
  start slurmdbd
  for i in $(seq 100); do sacctmgr -n list cluster >/dev/null 2>&1 && break; sleep 0.1; done
  sacctmgr -i -Q add cluster "$LAB_CLUSTER" >/dev/null 2>&1 || true
  t "slurmdbd ready"
fi
start slurmctld
for n in "${NODES[@]}"; do
  mkdir -p "$LAB/spool/$n"
  start nsrun "$n" env PATH="$(slurmd_path)" /usr/sbin/slurmd -N "$n"   # pyxis runs enroot from it
done
for h in "${HOSTS[@]}"; do
  start nsrun "$h" /usr/sbin/sshd -f "$K/sshd-$h.conf" -E "$LAB/log/sshd-$h.log"
done
t "slurmctld, ${#NODES[@]} slurmd, ${#HOSTS[@]} sshd started"

# ------------------------------------------------------------------------------ 9. wait until usable
idle=0
for i in $(seq 300); do
  idle=$(sinfo -h -N -t idle -o %N 2>/dev/null | sort -u | wc -l || true)
  [ "$idle" = "${#NODES[@]}" ] && break
  if [ "$i" -gt 5 ] && ! pidfile_alive "$RUN/slurmctld.pid"; then
    echo "slurmctld is not running (see $LAB/log/slurmctld.log, $LAB/log/daemons.out)" >&2; false
  fi
  sleep 0.1
done
if [ "$idle" != "${#NODES[@]}" ]; then sinfo -N -l >&2 || true; echo "only $idle/${#NODES[@]} nodes idle" >&2; false; fi
scontrol update nodename="$LAB_DRAINED" state=drain reason="$LAB_DRAIN_REASON"
for h in "${HOSTS[@]}"; do
  for i in $(seq 50); do pidfile_alive "$RUN/sshd-$h.pid" && break; sleep 0.1; done
  pidfile_alive "$RUN/sshd-$h.pid"
done
if [ "$WITH_PYXIS" = 1 ]; then
  for i in $(seq 50); do pyxis_ok && break; sleep 0.1; done
  pyxis_ok || { echo "pyxis: srun --help does not list --container-image, or a slurmd lacks enroot" >&2; false; }
fi
date +%s > "$RUN/up.ok"
t "lab up"
sinfo -N -o '%N %T %G %E'
echo "ssh: ssh -F $K/ssh_config mia1-p01-g01 hostname   (via login: ssh -F $K/ssh_config -J $LOGIN mia1-p01-g01 hostname)"
