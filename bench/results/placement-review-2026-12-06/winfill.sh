#!/bin/bash
# usage: winfill.sh SIZE_M BS MODE NBLK [mkfs opts]
SZ=$1; BS=$2; MODE=$3; NB=$4; shift 4
D=/var/tmp/review34/r; B=${BIN:-/var/tmp/review34/ext4lazy}; I=$D/wf
rm -f $I.img; truncate -s ${SZ}M $I.img; mkfs.ext4 -q -F -b $BS "$@" $I.img; cp --sparse=always $I.img $I.k.img
mkdir -p $I.mnt
echo "== ext4lazy"; $B mount -o rw,image_io=direct${OPTS:+,$OPTS} $I.img $I.mnt || exit 1
python3 $D/winfill.py $I.mnt $MODE $NB; $B umount $I.mnt
e2fsck -fn $I.img > $I.fsck 2>&1; echo "e2fsck rc=$?"; tail -1 $I.fsck
echo "== kernel"; mount -o loop $I.k.img $I.mnt && python3 $D/winfill.py $I.mnt $MODE $NB; umount $I.mnt
