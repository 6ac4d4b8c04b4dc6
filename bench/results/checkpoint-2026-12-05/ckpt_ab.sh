#!/bin/bash
# Old (616749c) vs new (7012615) binary, CreateFiles 60,000 x 4 KiB in 30,000 dirs (8 workers),
# fresh 8 GiB image with mkfs.ext4's defaults (64 MiB journal) each run, pairs alternated.
cd /var/tmp/pmx
for i in 1 2 3 4 5; do
  for mode in "rw,journal=lazy,image_io=direct" "rw,image_io=direct" "rw,journal=lazy"; do
    echo "old $mode $(./cfab2.sh ./binA $mode imgB 60000)"
    echo "new $mode $(./cfab2.sh ./binC $mode imgA 60000)"
  done
  mkfs.ext4 -q -F imgA; L=$(losetup -f --show --direct-io=on imgA); mount $L imgA.mnt
  r=$(python3 cf.py imgA.mnt 60000); t0=$(date +%s.%N); umount imgA.mnt; t1=$(date +%s.%N); losetup -d $L
  echo "kernel loop-direct $r umount $(echo "$t1 - $t0" | bc) s"
done
echo finished
