#!/bin/bash
# 20,000 mkdirs (200 x 99) on a fresh 3 GiB image with a 768 MiB journal, image_io=direct; prints the
# workload and the `ext4lazy umount` times. $1: binary, $2: journal mode. The A/B files alternate two binaries.
set -e
B=$1; J=$2; X=${3:-}
IMG=/var/tmp/md/img; MNT=/var/tmp/md/mnt; mkdir -p $MNT
rm -f $IMG; truncate -s 3G $IMG; mkfs.ext4 -qF -J size=768 $IMG
$B mount -o rw,journal=$J,image_io=direct,stats=/var/tmp/md/stats.json$X $IMG $MNT
PID=$(pgrep -f "^$B mount" | head -1)
t0=$(date +%s.%N)
python3 - <<'PY'
import os
m="/var/tmp/md/mnt"
for a in range(200):
    os.mkdir(f"{m}/d{a}")
    for b in range(99):
        os.mkdir(f"{m}/d{a}/e{b}")
PY
t1=$(date +%s.%N)
t2=$(date +%s.%N); $B umount $MNT; t3=$(date +%s.%N)
python3 -c "print('work %.2f umount %.2f' % ($t1-$t0, $t3-$t2))"
