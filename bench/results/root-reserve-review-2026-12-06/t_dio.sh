#!/bin/bash
# nobody: leave 512 KiB below its limit, then a 1 MiB O_DIRECT / O_SYNC / buffered write: what does write(2) return?
. /var/tmp/review34/lib.sh
for mode in direct sync buffered; do for who in kern lazy; do
  img=$W/dio-$who.img; m=$W/dio-$who-mnt
  mkimg $img 64 -m 10 -b 4096
  mnt_$who $img $m
  av=$(df -B1 --output=avail $m | tail -1)
  $NOBODY fallocate -l $((av - 524288)) $m/pad
  $NOBODY /usr/bin/python3 -c "
import os, mmap, sys
fl={'direct':os.O_DIRECT,'sync':os.O_SYNC,'buffered':0}[sys.argv[2]]
fd=os.open(sys.argv[1],os.O_WRONLY|os.O_CREAT|fl,0o644)
b=mmap.mmap(-1,1<<20); b.write(b'q'*(1<<20))
try: print('write returned',os.write(fd,b))
except OSError as e: print('write error',e.strerror)
try: os.fsync(fd); print('fsync ok')
except OSError as e: print('fsync error', e.strerror)
" $m/f $mode | tr '\n' ' ' | sed "s/^/$mode $who: /"; echo " size $(stat -c %s $m/f) free $(stat -f -c %f $m)"
  um_$who $m >/dev/null; fsck $img | grep -v "rc=0"
done; done
