#!/bin/bash
# Two ext4lazy binaries on the same untar, alternating, N runs each: for changes smaller than
# the run-to-run spread of this machine, which best-of-3 series cannot resolve.
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
trap 'mountpoint -q "$MNT" && fusermount3 -u "$MNT"; rm -rf "$WORK"' EXIT
one() {
  rm -f "$IMG"; truncate -s 8G "$IMG"; mkfs.ext4 -q -F "$IMG"
  "$1" mount -o "$OPTS" "$IMG" "$MNT"
  sync; sleep 0.2
  local t0 t1; t0=$(date +%s.%N)
  tar -xf "$TAR" -C "$MNT"
  "$1" umount "$MNT"
  t1=$(date +%s.%N)
  echo "$t1 - $t0" | bc
}
ra=(); rb=()
for _ in $(seq "$N"); do ra+=("$(one "$A")"); rb+=("$(one "$B")"); done
python3 - "${ra[*]}" "${rb[*]}" <<'PY'
import statistics as st, sys
a = [float(x) for x in sys.argv[1].split()]; b = [float(x) for x in sys.argv[2].split()]
print("A", " ".join(f"{x:.2f}" for x in a)); print("B", " ".join(f"{x:.2f}" for x in b))
d = [y - x for x, y in zip(a, b)]
print(f"A min {min(a):.2f} median {st.median(a):.2f} | B min {min(b):.2f} median {st.median(b):.2f} | "
      f"mean(B - A) {st.mean(d):+.3f} s | B faster in {sum(x < 0 for x in d)} of {len(d)} pairs")
PY
