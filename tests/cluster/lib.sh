# Shared by up.sh and down.sh (sourced, never run). Reads lab.env; defines the lab's names,
# paths and the process helpers. Needs bash 4+.
HERE=${HERE:-$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)}
# shellcheck source=lab.env
source "$HERE/lab.env"
LAB=${LAB:-/var/lib/atomdeck-lab}
RUN=$LAB/run                      # pid files + markers of what we started/created
BACKUP=$LAB/backup                # originals of files outside $LAB that up.sh replaced
UTSDIR=/run/atomdeck-lab/uts      # persistent UTS namespaces (one host name per netns)
MARK="atomdeck-lab"               # marker in files we generate / blocks we insert
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

declare -A IP
NODES=()
for kv in $LAB_NODES; do NODES+=("${kv%%=*}"); IP[${kv%%=*}]=${kv#*=}; done
LOGIN=${LAB_LOGIN%%=*}
IP[$LOGIN]=${LAB_LOGIN#*=}
HOSTS=("$LOGIN" "${NODES[@]}")    # everything that gets a netns + UTS ns + sshd

veth() { echo "adl-${1##*-}"; }   # host side of a host's veth pair: adl-g01, adl-login

T0=${T0:-$(date +%s%N)}
t() { local ms=$(( ($(date +%s%N) - T0) / 1000000 )); printf '[%3d.%03ds] %s\n' $((ms/1000)) $((ms%1000)) "$*"; }

# PID 1 on these machines reaps orphans only every ~2 s: a killed daemon lingers as a zombie and
# `kill -0` still succeeds. State Z counts as dead.
alive() { local s; s=$(ps -o stat= -p "$1" 2>/dev/null) || return 1; [[ $s != Z* ]]; }
pidfile_alive() { local p; [ -s "$1" ] && p=$(cat "$1") && [ -n "$p" ] && alive "$p"; }

stop_pids() {      # SIGTERM the given pids, wait up to ${STOP_WAIT:-5} s, SIGKILL what is left
  local p live i n=$(( ${STOP_WAIT:-5} * 10 ))
  [ $# -eq 0 ] && return 0
  for p in "$@"; do alive "$p" && kill "$p" 2>/dev/null; done
  for ((i = 0; i < n; i++)); do
    live=; for p in "$@"; do alive "$p" && { live=1; break; }; done
    [ -z "$live" ] && return 0
    sleep 0.1
  done
  for p in "$@"; do alive "$p" && kill -9 "$p" 2>/dev/null; done
  return 0
}

# Run a command inside a lab host: its network namespace (nsenter --net, NOT `ip netns exec`,
# which remounts /sys and hides /sys/fs/cgroup so slurmd 22.05 refuses to start) and its UTS
# namespace (own host name).
nsrun() { local h=$1; shift; nsenter --net="/run/netns/$h" --uts="$UTSDIR/$h" -- "$@"; }

# Remember a path that did not exist before up.sh made it; down.sh removes it again.
mark_created() { grep -qxF -- "$1" "$RUN/created" 2>/dev/null || echo "$1" >> "$RUN/created"; }
