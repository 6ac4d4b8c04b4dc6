#!/bin/bash
# cfab2.sh BIN OPTS IMG N -> prints the cf.py line and the unmount time
M=$1; IMG=$3; MNT=$IMG.mnt; mkdir -p $MNT; mkfs.ext4 -q -F $IMG
$M mount -o $2 $IMG $MNT; r=$(python3 /var/tmp/pmx/cf.py $MNT $4); t0=$(date +%s.%N); $M umount $MNT; t1=$(date +%s.%N)
echo "$r umount $(echo "$t1 - $t0" | bc) s"
