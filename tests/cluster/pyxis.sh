# Real pyxis + enroot for the lab (sourced by up.sh and down.sh after lib.sh, never run).
#
# Neither is packaged by Debian or PyPI: both are built from the unmodified upstream archives in the
# vendor directory (default ../shared/vendor next to the repository; ATOMDECK_VENDOR_DIR overrides it):
#   enroot-8ea147d.tar.gz          NVIDIA/enroot v4.1.2-14 (+ makeself, kernel headers; no musl)
#   pyxis-v0.24.0-1075199.tar.gz   NVIDIA/pyxis v0.24.0
# Everything goes under $LAB/containers (down.sh leaves it, like the logs: a rebuild costs ~15 s):
#   enroot/      enroot's prefix (bin/enroot, etc/enroot/enroot.conf pointing into state/)
#   state/       ENROOT_{RUNTIME,CACHE,DATA,TEMP}_PATH (named containers live in state/data)
#   pyxis/       spank_pyxis.so + plugstack.conf (slurm.conf's PlugStackConfig names it)
#   pyxis-run/   pyxis's runtime_path (imported images as <uid>/<job>.<step>.squashfs)
#   images/      atomsim.sqsh: the simulator's image (busybox rootfs; the host's /usr, /lib, /lib64 and the
#                repository are mounted in by the cluster file and the simulator's runtime)
# pyxis runs `enroot` from slurmd's PATH, so every lab slurmd starts with enroot/bin first on PATH
# (slurmd_path; lab.py's start_slurmd does the same).
PYXIS_PKGS="libslurm-dev build-essential libbsd-dev squashfs-tools busybox-static jq parallel zstd pigz bsdmainutils curl gawk passwd"
CT=$LAB/containers
REPO_ROOT=$(cd "$HERE/../.." && pwd)
VENDOR=${ATOMDECK_VENDOR_DIR:-$REPO_ROOT/../shared/vendor}
ENROOT_TGZ=enroot-8ea147d.tar.gz
PYXIS_TGZ=pyxis-v0.24.0-1075199.tar.gz
PLUGSTACK=$CT/pyxis/plugstack.conf
SIM_IMAGE=$CT/images/atomsim.sqsh
SIM_IMAGE_VERSION=2   # bump when pyxis_image builds a different root file system

slurmd_path() { echo "$CT/enroot/bin:$PATH"; }

# 0 when srun knows pyxis's options (the plugin loads where srun runs) and every slurmd has enroot on its PATH
pyxis_ok() {
  local n p
  [ -x "$CT/enroot/bin/enroot" ] && [ -s "$SIM_IMAGE" ] && grep -q "^PlugStackConfig=$PLUGSTACK" /etc/slurm/slurm.conf || return 1
  case $(timeout 5 srun --help 2>/dev/null) in *--container-image*) ;; *) return 1;; esac
  for n in "${NODES[@]}"; do
    p=$(cat "$RUN/slurmd-$n.pid" 2>/dev/null) || return 1
    tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -q "^PATH=$CT/enroot/bin:" || return 1
  done
}

pyxis_build() {   # idempotent: rebuilt only when an archive changed (its sha256 is the stamp)
  local stamp src arch
  for f in "$ENROOT_TGZ" "$PYXIS_TGZ"; do
    [ -r "$VENDOR/$f" ] || { echo "pyxis: $VENDOR/$f is missing (set ATOMDECK_VENDOR_DIR to the directory that holds $ENROOT_TGZ and $PYXIS_TGZ)" >&2; return 1; }
  done
  stamp=$(cd "$VENDOR" && sha256sum "$ENROOT_TGZ" "$PYXIS_TGZ")
  if [ "$(cat "$CT/built" 2>/dev/null)" = "$stamp" ] && [ -x "$CT/enroot/bin/enroot" ] && [ -s "$CT/pyxis/spank_pyxis.so" ]; then
    t "pyxis + enroot already built ($CT)"; return 0
  fi
  rm -rf "$CT/src" "$CT/enroot" "$CT/pyxis"; mkdir -p "$CT/src" "$CT/pyxis"
  tar -xzf "$VENDOR/$ENROOT_TGZ" -C "$CT/src"; tar -xzf "$VENDOR/$PYXIS_TGZ" -C "$CT/src"
  src=$CT/src/${ENROOT_TGZ%.tar.gz}
  arch=$(gcc -dumpmachine)
  # deps/musl is not in the archive: glibc (FORCE_GLIBC=1). glibc 2.36 has no strlcpy/strlcat: libbsd's.
  # Two steps, since those CPPFLAGS break the deps build (FPARSELN_UNESCALL).
  make -C "$src" FORCE_GLIBC=1 deps >"$LAB/log/enroot-build.log" 2>&1
  make -C "$src" FORCE_GLIBC=1 prefix="$CT/enroot" LDLIBS="-l:libbsd.a /usr/lib/$arch/libbsd.so" \
    CPPFLAGS='-D_GNU_SOURCE -include bsd/string.h' install >>"$LAB/log/enroot-build.log" 2>&1
  make -C "$CT/src/${PYXIS_TGZ%.tar.gz}" >"$LAB/log/pyxis-build.log" 2>&1
  cp "$CT/src/${PYXIS_TGZ%.tar.gz}/spank_pyxis.so" "$CT/pyxis/"
  echo "$stamp" > "$CT/built"
  t "pyxis + enroot built from $VENDOR"
}

pyxis_configure() {
  local k
  mkdir -p "$CT"/state/{run,cache,data,tmp} "$CT/pyxis-run" "$CT/images"
  chmod 1777 "$CT/state/tmp"
  {
    echo "# $MARK: written by tests/cluster/up.sh"
    for k in RUNTIME:run CACHE:cache DATA:data TEMP:tmp; do echo "ENROOT_${k%%:*}_PATH $CT/state/${k#*:}"; done
  } > "$CT/enroot/etc/enroot/enroot.conf"
  echo "required $CT/pyxis/spank_pyxis.so runtime_path=$CT/pyxis-run" > "$PLUGSTACK"
}

# The simulator's image: a busybox rootfs (sh, env, setsid... for atomdeck's node scripts), squashed.
# Python is not in it: the host's /usr, /lib, /lib64 are mounted in (recipes/clusters/lab-pyxis.yaml).
pyxis_image() {
  local root=$CT/images/rootfs a
  [ -s "$SIM_IMAGE" ] && [ "$SIM_IMAGE" -nt /bin/busybox ] && \
    [ "$(cat "$SIM_IMAGE.version" 2>/dev/null)" = "$SIM_IMAGE_VERSION" ] && return 0
  rm -rf "$root"; mkdir -p "$root"/{bin,etc,dev,proc,sys,tmp,run,root,usr,lib,lib64,var}
  cp /bin/busybox "$root/bin/busybox"
  for a in $("$root/bin/busybox" --list); do [ -e "$root/bin/$a" ] || ln -s busybox "$root/bin/$a"; done
  printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' > "$root/etc/passwd"
  printf 'root:x:0:\nvideo:x:44:\nnogroup:x:65534:\n' > "$root/etc/group"   # video: docker/podman --group-add
  chmod 1777 "$root/tmp"
  rm -f "$SIM_IMAGE.new"
  mksquashfs "$root" "$SIM_IMAGE.new" -comp lzo -noD -all-root -quiet >/dev/null
  mv -f "$SIM_IMAGE.new" "$SIM_IMAGE"
  echo "$SIM_IMAGE_VERSION" > "$SIM_IMAGE.version"
  t "simulator image $SIM_IMAGE ($(du -k "$SIM_IMAGE" | cut -f1) KiB)"
}

# Restart a node's slurmd with enroot on its PATH (its steps, slurmstepd, outlive it)
pyxis_restart_slurmd() {
  local n=$1 p
  p=$(cat "$RUN/slurmd-$n.pid" 2>/dev/null)
  [ -n "$p" ] && stop_pids "$p"
  rm -f "$RUN/slurmd-$n.pid"
  nsrun "$n" env PATH="$(slurmd_path)" /usr/sbin/slurmd -N "$n" </dev/null >>"$LAB/log/daemons.out" 2>&1
}
