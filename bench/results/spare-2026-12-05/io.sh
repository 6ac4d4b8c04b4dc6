#!/bin/bash
IMG=/var/tmp/pmx/img; MNT=$IMG.mnt; mkfs.ext4 -q -F $IMG
$BIN mount -o rw,image_io=direct$OPTS $IMG $MNT
PID=$(pgrep -n -f "mount -o rw,image_io")
python3 - $PID $MNT ${N:-2000} <<'P'
import sys,os,time,subprocess
pid,mnt=sys.argv[1],sys.argv[2]
def st():
    io=dict(l.split(': ') for l in open(f'/proc/{pid}/io').read().split('\n') if l)
    f=open(f'/proc/{pid}/stat').read().rsplit(')',1)[1].split()
    return int(io['read_bytes']),int(io['write_bytes']),(int(f[11])+int(f[12]))/os.sysconf('SC_CLK_TCK')
a=st(); t=time.time()
out=subprocess.run(['python3','/var/tmp/pmx/pm.py',mnt,sys.argv[3] if len(sys.argv)>3 else '2000'],capture_output=True,text=True).stdout.strip()
b=st(); print(out, 'wall %.2f read %.1fMiB write %.1fMiB cpu %.2fs'%(time.time()-t,(b[0]-a[0])/2**20,(b[1]-a[1])/2**20,b[2]-a[2]))
P
$BIN umount $MNT
