#!/bin/bash
# rewrite.sh BIN: 5,000 files of 4 KiB made, then each rewritten 4 times through open(O_WRONLY|O_TRUNC)
# (as `cp` over existing files); only the rewrites are timed (printed in seconds).
B=$1; D=/var/tmp/otr/$(basename $(dirname $B)); mkdir -p $D/mnt; cd /
rm -f $D/img; truncate -s 2G $D/img; mkfs.ext4 -q -F $D/img
if [ "$B" = kernel ]; then D=/var/tmp/otr/kernel; mkdir -p $D/mnt; rm -f $D/img; truncate -s 2G $D/img; mkfs.ext4 -q -F $D/img; L=$(losetup -f --show --direct-io=on $D/img); mount $L $D/mnt; else $B mount -o rw,image_io=direct $D/img $D/mnt || exit 1; fi
python3 - $D/mnt <<'Q'
import os, sys, time
mnt = sys.argv[1]
paths = [os.path.join(mnt, f"f{i}") for i in range(5000)]
for p in paths:
    with open(p, "wb") as f: f.write(b"a" * 4096)
t = time.time()
for r in range(4):
    for p in paths:
        fd = os.open(p, os.O_WRONLY | os.O_TRUNC)
        os.write(fd, b"b" * 4096)
        os.close(fd)
print("%.3f" % (time.time() - t))
Q
if [ "$B" = kernel ]; then umount $D/mnt; losetup -d $L; else $B umount $D/mnt; fi
