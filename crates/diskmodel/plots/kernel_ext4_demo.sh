#!/bin/sh
# Kernel ext4 on a served model: a small metadata-heavy workload, its trace,
# totals by class and the cleaning time after it. Run as root.
#   kernel_ext4_demo.sh EMU MODEL SPEED OUTDIR
# EMU is the emu front end (`ext4lazy emu` or the diskmodel example binary).
set -eu
EMU=$1; MODEL=$2; SPEED=$3; OUT=$4
W=$(mktemp -d)
mkdir -p "$W/srv" "$W/mnt" "$OUT"
$EMU serve --model "$MODEL" --size 50G --backing "$W/disk.img" --speed "$SPEED" --trace "$OUT/trace-$MODEL.csv" "$W/srv"
L=$(losetup -f --show --direct-io=on "$W/srv/disk.img")
cleanup() { umount "$W/mnt" 2>/dev/null || true; losetup -d "$L" 2>/dev/null || true; fusermount3 -u "$W/srv" 2>/dev/null || true; rm -rf "$W"; }
trap cleanup EXIT
mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0 "$L"
mount "$L" "$W/mnt"
start=$(date +%s.%N)
for d in $(seq 1 200); do
  mkdir "$W/mnt/d$d"
  for f in $(seq 1 40); do head -c 4096 /dev/zero > "$W/mnt/d$d/f$f"; done
done
sync
dd if=/dev/zero of="$W/mnt/big" bs=1M count=256 oflag=direct status=none
sync
umount "$W/mnt"
end=$(date +%s.%N)
echo "workload real seconds: $(echo "$end - $start" | bc)"
$EMU wait-idle "$W/srv" | tee "$OUT/wait-idle-$MODEL.txt"
$EMU report --json "$W/srv" > "$OUT/report-$MODEL.json"
cp "$W/srv/series.json" "$OUT/series-$MODEL.json"
$EMU report "$W/srv"
