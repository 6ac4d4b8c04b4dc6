#!/bin/bash
# run.sh kernel|lazy BIN: Postmark scale 0.2 under a 1 GiB memcg, vda stats over the transactions only
set -e
SYS=$1; BIN=$2; IMG=/var/tmp/dsk/img; MNT=/var/tmp/dsk/mnt; mkdir -p $MNT
CG=/sys/fs/cgroup/memory$(grep memory: /proc/self/cgroup | cut -d: -f3)/dsk-$$
mkdir $CG; echo ${LIM:-$((1<<30))} > $CG/memory.limit_in_bytes; echo ${LIM:-$((1<<30))} > $CG/memory.memsw.limit_in_bytes 2>/dev/null || true
rm -f $IMG; truncate -s 8G $IMG; mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0 $IMG
sync; echo 3 > /proc/sys/vm/drop_caches
if [ $SYS = kernel ]; then LOOP=$(losetup -f --show --direct-io=on $IMG); mount $LOOP $MNT;
else OPTS=$OPTS sh -c "echo \$\$ > $CG/cgroup.procs; exec $BIN mount -o rw$OPTS $IMG $MNT"; fi
python3 - $MNT $CG <<'Q'
import sys,os,time,json
sys.path.insert(0,'/work/main')
from bench.suite.postmark import Postmark
mnt,cg=sys.argv[1],sys.argv[2]
open(cg+'/cgroup.procs','w').write(str(os.getpid()))
def ds():
    for l in open('/proc/diskstats'):
        f=l.split()
        if f[2]=='vda': return [int(x) for x in f[3:]]
p=Postmark(mnt,1000,2500,512,1<<20,1<<20,1<<20,10000)
a=ds(); t=time.time(); t0=os.times()
r=p.run(lambda: os.sync())
b=ds(); el=time.time()-t; t1=os.times()
print('postmark cpu user %.2f sys %.2f'%(t1.user-t0.user, t1.system-t0.system))
d=[y-x for x,y in zip(a,b)]
# fields: rd_ios rd_merges rd_sect rd_ticks wr_ios wr_merges wr_sect wr_ticks inflight io_ticks weighted
print('elapsed %.2f tx_s %.2f | reads %d (%.0f MiB, avg %.0f KiB, %.2f ms) writes %d (%.0f MiB, avg %.0f KiB, %.2f ms) busy %.0f%% avgQD %.2f'%(
  el, r['transactions_s'], d[0], d[2]/2048, d[2]/2/max(d[0],1), d[3]/max(d[0],1), d[4], d[6]/2048, d[6]/2/max(d[4],1), d[7]/max(d[4],1), 100*d[9]/1000/el, d[10]/1000/el))
print('postmark read %.0f MiB written %.0f MiB'%(r.get('bytes_read',0)/2**20, r.get('bytes_written',0)/2**20))
st={l.split()[0]:int(l.split()[1]) for l in open(cg+'/memory.stat')}
print('cgroup cache %.0f MiB rss %.0f MiB'%(st['total_cache']/2**20, st['total_rss']/2**20))
Q
cp /run/ext4lazy/var_tmp_dsk_mnt.stats.json /var/tmp/dsk/last.stats.json 2>/dev/null || true
if [ $SYS = kernel ]; then umount $MNT; losetup -d $LOOP; else $BIN umount $MNT; fi
sleep 1; rmdir $CG
