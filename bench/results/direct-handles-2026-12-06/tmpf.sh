#!/bin/bash
# tmpf.sh BIN: a file made O_RDWR, 64 MiB written, read back through the same handle in 4 KiB reads (as a temp file)
BIN=$1; D=/var/tmp/rw; IMG=$D/img.$$; MNT=$D/mnt.$$; mkdir -p $MNT
truncate -s 2G $IMG; mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0 $IMG
$BIN mount -o rw$OPTS $IMG $MNT
python3 - $MNT/t <<'Q'
import os,sys,time
fd=os.open(sys.argv[1],os.O_RDWR|os.O_CREAT|os.O_EXCL,0o600)
blk=os.urandom(1<<20); t=time.time()
for _ in range(64): os.write(fd,blk)
w=time.time()-t; os.lseek(fd,0,0); t=time.time(); n=0
while True:
    b=os.read(fd,4096)
    if not b: break
    n+=len(b)
r=time.time()-t
print('write %.2f s, read back %.2f s (%.0f MiB/s)'%(w,r,n/2**20/r))
Q
$BIN umount $MNT; rm -f $IMG; rmdir $MNT
