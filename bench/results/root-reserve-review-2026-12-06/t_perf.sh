#!/bin/bash
# nobody untar (~21 MB, ~1.6k files) + 20k small appends far from full: new vs old binary, alternated
W=/var/tmp/review34
NOBODY="setpriv --reuid=65534 --regid=65534 --clear-groups"
for round in 1 2 3; do for bin in old new; do
  B=$W/ext4lazy; [ $bin = old ] && B=$W/ext4lazy.old
  img=$W/perf.img; m=$W/perf-mnt; mkdir -p $m
  rm -f $img; truncate -s 128M $img; mkfs.ext4 -F -q -m 10 $img
  $B mount -o rw,allow_other,default_permissions $img $m || exit 1; chmod 777 $m
  t0=$(date +%s.%N)
  $NOBODY tar -C $m -xf $W/src.tar
  t1=$(date +%s.%N)
  $NOBODY /usr/bin/python3 -c "
import os
fd=os.open('$m/small',os.O_WRONLY|os.O_CREAT|os.O_APPEND,0o644)
for i in range(20000): os.write(fd,b'x'*100)
os.close(fd)
for i in range(2000):
    with open(f'$m/s{i}','w') as f: f.write('y'*300)
"
  t2=$(date +%s.%N)
  $B umount $m
  echo "$bin round $round: untar $(echo "$t1-$t0"|bc) s; small writes $(echo "$t2-$t1"|bc) s"
done; done
