#!/bin/sh
# slurm launcher with pyxis, one step per node (outside any container): remove the run's named enroot containers,
# then verify that nothing of the run is left. $1 the enroot command, $2 pyxis's runtime_path, $3 the job id, then
# the run's container names on this node.
# pyxis names a container NAME `pyxis_NAME` (container_scope=global, its default) or `pyxis_JOB_NAME` (job scope;
# pyxis_slurmstepd.c), an unnamed one `pyxis_JOB.STEP` / `pyxis_JOB_JOB.STEP` (removed by pyxis when its step
# ends), and keeps an imported image as RUNTIME_PATH/UID/JOB.STEP.squashfs while the step runs.
# One line each: "removed C", "failed C: why", "left container C", "left file F"; "clean" last when nothing of
# the run is left. Exit 3 when enroot itself cannot list its containers.
enroot=$1; rt=$2; job=$3; shift 3
if ! out=$("$enroot" list 2>&1); then echo "error $enroot list: $(printf '%s\n' "$out" | tail -n 1)"; exit 3; fi
for n; do
  for c in "pyxis_$n" "pyxis_${job}_$n"; do
    printf '%s\n' "$out" | grep -qx "$c" || continue
    if err=$("$enroot" remove -f "$c" 2>&1); then echo "removed $c"; else echo "failed $c: $(printf '%s\n' "$err" | tail -n 1)"; fi
  done
done
left=
for c in $("$enroot" list 2>/dev/null); do
  mine=
  case $c in "pyxis_$job."*|"pyxis_${job}_$job."*) mine=1;; esac
  for n; do case $c in "pyxis_$n"|"pyxis_${job}_$n") mine=1;; esac; done
  [ -n "$mine" ] && { left=1; echo "left container $c"; }
done
for f in "$rt"/*/"$job".*; do [ -e "$f" ] && { left=1; echo "left file $f"; }; done
[ -z "$left" ] && echo clean
exit 0
