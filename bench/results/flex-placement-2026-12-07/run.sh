#!/bin/bash
# run.sh kernel|lazy BIN [SPEED] [PARAMS...]: Postmark scale 0.1 under 512 MiB on a served smr-seagate model (400 GB partition)
# OPTS=,name=value...: more mount options for ext4lazy (added 2026-12-07 for the held-block runs).
SYS=$1; BIN=$2; SPEED=${3:-5}; shift 3; P=""; for x in "$@"; do P="$P --param $x"; done
D=/var/tmp/smr; IMG=$D/back.img; SRV=$D/srv; MNT=$D/mnt; mkdir -p $SRV $MNT
CG=/sys/fs/cgroup/memory$(grep memory: /proc/self/cgroup | cut -d: -f3)/smr-$$
mkdir $CG; echo $((512<<20)) > $CG/memory.limit_in_bytes; echo $((512<<20)) > $CG/memory.memsw.limit_in_bytes 2>/dev/null
rm -f $IMG; B=/var/tmp/b1/ext4lazy
truncate -s 399999238144 $IMG; mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0 -J size=1024 $IMG
$B emu serve --model smr-seagate --size 399999238144 --backing $IMG --speed $SPEED $P ${TRACE:+--trace $TRACE} --log $D/srv.log $SRV
LOOP=$(losetup -f --show --direct-io=on $SRV/disk.img)
sync; echo 3 > /proc/sys/vm/drop_caches
$B emu report --json $SRV > $D/before.json
if [ $SYS = kernel ]; then mount $LOOP $MNT; else sh -c "echo \$\$ > $CG/cgroup.procs; exec $BIN mount -o rw,image_io=direct,journal=lazy${OPTS:-} $LOOP $MNT"; fi
python3 - $MNT $CG <<'Q'
import sys,os,time
sys.path.insert(0,'/work/main')
from bench.suite.postmark import Postmark
mnt,cg=sys.argv[1],sys.argv[2]
open(cg+'/cgroup.procs','w').write(str(os.getpid()))
p=Postmark(mnt,1000,2500,512,1<<20,1<<20,1<<20,10000)
t=time.time(); r=p.run(lambda: os.sync()); print('elapsed %.1f'%(time.time()-t))
Q
if [ $SYS = kernel ]; then umount $MNT; else $BIN umount $MNT; fi
losetup -d $LOOP
echo "cleaning $($B emu wait-idle --skip $SRV | tail -1)"
$B emu report --json $SRV > $D/after-$SYS.json
python3 - $D/after-$SYS.json <<'Q'
import json,sys
a=json.load(open(sys.argv[1])); s=a['state']
print({k:s[k] for k in ('streamed_bytes','cached_bytes','cache_used_bytes','bands_cleaned','cleaning_s','dirty_bands')})
for c,v in a['classes'].items():
    print(c, {d:(t['mib'],t['requests']) for d,t in v.items()})
Q
fusermount3 -u $SRV; rmdir $CG
