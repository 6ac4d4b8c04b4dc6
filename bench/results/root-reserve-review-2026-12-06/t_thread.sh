#!/bin/bash
# member of the reserve's group (supplementary) fills from a secondary thread (header pid = TID)
. /var/tmp/review34/lib.sh
P="setpriv --reuid=65534 --regid=65534 --groups=4242"
for who in kern lazy; do
  img=$W/th-$who.img; m=$W/th-$who-mnt
  mkimg $img 32 -m 10 -b 4096; tune2fs -g 4242 $img >/dev/null
  opt=; [ $who = kern ] && opt=resgid=4242
  mnt_$who $img $m $opt
  $P /usr/bin/python3 -c "
import os, threading, sys
def w():
    fd=os.open(sys.argv[1],os.O_WRONLY|os.O_CREAT,0o644); n=0
    try:
        while True: n+=os.write(fd,b'z'*4096)
    except OSError as e: print('thread wrote',n,e.strerror)
    os.fsync(fd); os.close(fd)
t=threading.Thread(target=w); t.start(); t.join()
" $m/f | sed "s/^/$who /"
  echo "$who free $(stat -f -c %f $m)"
  um_$who $m >/dev/null; fsck $img | grep -v "rc=0"
done
