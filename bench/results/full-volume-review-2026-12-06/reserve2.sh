#!/bin/bash
# reserve2.sh MOUNTOPTS MKFSOPTS...   (the daemon in the foreground, its stderr in daemon.log)
set -u
cd /var/tmp/review31; B=/work/main/target/release/ext4lazy; O=$1; shift
truncate -s 0 r.img; truncate -s ${SIZE:-64M} r.img; mkfs.ext4 -q -F -m 0 "$@" r.img
$B mount -o rw r.img fm && python3 reserve.py fm prep; $B umount fm
$B mount -o $O,foreground r.img fm 2> daemon.log & DP=$!
sleep 1
python3 reserve.py fm attack
for k in 1 2; do sync -f fm; echo "syncfs rc=$?"; done
ls -l fm/fill | awk '{print "fill size", $5}'
$B umount fm; echo "umount rc=$?"; wait $DP; echo "daemon exit $?"
echo "--- daemon log:"; head -c 1500 daemon.log; echo
e2fsck -fn r.img > fsck.out 2>&1; echo "e2fsck -fn rc=$?"; grep -v "^Pass\|^e2fsck 1" fsck.out | head -5
$B mount -o rw r.img fm && python3 reserve.py fm check; ls -l fm/fill | awk '{print "fill size after remount", $5}'; $B umount fm
e2fsck -fn r.img > fsck.out 2>&1; echo "e2fsck after remount rc=$?"; tail -1 fsck.out
