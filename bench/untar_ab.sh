#!/bin/bash
# Two ext4lazy binaries on the same untar, alternating, N runs each: for changes smaller than
# the run-to-run spread of this machine, which best-of-3 series cannot resolve. BIN_A may be the
# word `kernel`: the kernel's ext4 on a loop mount (the clock then runs over tar and umount), and
# each pair's ratio B / A is printed too, to judge a goal against the kernel. For ext4lazy it also
# prints the daemon's CPU time during tar (all its threads, user + system, from /proc): steadier than
# the clock when the change is to the daemon's own work.
#
#   bash bench/untar_ab.sh N BIN_A BIN_B [MOUNT_OPTIONS] [TARBALL]
#
# Each run: a fresh 8 GiB sparse image (mkfs.ext4 defaults), `BIN mount -o MOUNT_OPTIONS` (default rw),
# sync, then the clock runs over `tar -xf TARBALL` and `BIN umount` (which returns once everything is
# on the image). TARBALL defaults to the write-path benchmark's cached tarball of /usr/include
# (bench/writepath.py makes it). Prints every run, each binary's minimum and median, the mean of the
# pairs' differences (B - A) and how many pairs B won. Needs root (mount).
set -euo pipefail
N=$1; A=$2; B=$3; OPTS=${4:-rw}
TAR=${5:-$(ls /var/tmp/ext4lazy-bench/writepath-src-usr-include-*.tar 2>/dev/null | head -1)}
[ -f "$TAR" ] || { echo "no tarball: run bench/writepath.py --workloads untar once, or name one" >&2; exit 2; }
WORK=$(mktemp -d /var/tmp/untar-ab.XXXXXX)
IMG=$WORK/ab.img; MNT=$WORK/mnt; mkdir -p "$MNT"
trap 'mountpoint -q "$MNT" && umount "$MNT"; rm -rf "$WORK"' EXIT
one() {
  rm -f "$IMG"; truncate -s 8G "$IMG"; mkfs.ext4 -q -F "$IMG"
  if [ "$1" = kernel ]; then mount -o loop "$IMG" "$MNT"; else "$1" mount -o "$OPTS" "$IMG" "$MNT"; fi
  sync; sleep 0.2
  local t0 t1 pid="" c0=0 c1=0
  [ "$1" = kernel ] || pid=$(pgrep -n -f "ext4lazy.*$MNT")
  cpu() { [ -n "$pid" ] && awk '{print $14 + $15}' "/proc/$pid/stat" || echo 0; }
  c0=$(cpu); t0=$(date +%s.%N)
  tar -xf "$TAR" -C "$MNT"
  c1=$(cpu)
  if [ "$1" = kernel ]; then umount "$MNT"; else "$1" umount "$MNT"; fi
  t1=$(date +%s.%N)
  echo "$(echo "$t1 - $t0" | bc):$(( c1 - c0 ))"
}
ra=(); rb=()
for _ in $(seq "$N"); do ra+=("$(one "$A")"); rb+=("$(one "$B")"); done
python3 - "${ra[*]}" "${rb[*]}" <<'PY'
import statistics as st, sys
tick = 100  # clock ticks a second in /proc/PID/stat
a, ca = zip(*[(float(t), int(c) / tick) for t, c in (x.split(":") for x in sys.argv[1].split())])
b, cb = zip(*[(float(t), int(c) / tick) for t, c in (x.split(":") for x in sys.argv[2].split())])
print("A", " ".join(f"{x:.2f}" for x in a)); print("B", " ".join(f"{x:.2f}" for x in b))
d = [y - x for x, y in zip(a, b)]
print(f"A min {min(a):.2f} median {st.median(a):.2f} | B min {min(b):.2f} median {st.median(b):.2f} | "
      f"mean(B - A) {st.mean(d):+.3f} s | B faster in {sum(x < 0 for x in d)} of {len(d)} pairs")
r = sorted(y / x for x, y in zip(a, b))
print(f"B / A per pair: min {r[0]:.2f}x median {st.median(r):.2f}x max {r[-1]:.2f}x | "
      f"at most 2x in {sum(x <= 2 for x in r)} of {len(r)} pairs")
for side, c in (("A", ca), ("B", cb)):
    if any(c):
        print(f"{side} daemon CPU during tar: mean {st.mean(c):.3f} s")
PY
