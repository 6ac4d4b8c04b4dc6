#!/bin/bash
# rw.sh BIN: 256 MiB file; cold sequential 4 KiB reads and warm random 4 KiB preads, both through an O_RDWR handle
BIN=$1; D=/var/tmp/rw; IMG=$D/img.$$; MNT=$D/mnt.$$; mkdir -p $MNT
truncate -s 2G $IMG; mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0 $IMG
$BIN mount -o rw$OPTS $IMG $MNT
dd if=/dev/urandom of=$MNT/f bs=1M count=256 status=none conv=fsync
$BIN umount $MNT; sync; echo 3 > /proc/sys/vm/drop_caches
$BIN mount -o rw$OPTS $IMG $MNT
python3 - $MNT/f <<'Q'
import os,sys,time,random
fd=os.open(sys.argv[1],os.O_RDWR)
t=time.time(); n=0
while True:
    b=os.read(fd,4096)
    if not b: break
    n+=len(b)
seq=time.time()-t
random.seed(1); t=time.time()
for _ in range(50000):
    os.pread(fd,4096,random.randrange(0,65536)*4096)
rnd=time.time()-t
print('seq %.2f s (%.0f MiB/s) rand50k %.2f s'%(seq,n/2**20/seq,rnd))
Q
$BIN umount $MNT; rm -f $IMG; rmdir $MNT
