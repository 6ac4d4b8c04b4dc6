#!/bin/bash
# sample the smr-* memory cgroup (MiB) and the daemon's live figures, every 2 s
OUT=$1; : > $OUT
for i in $(seq 1 400); do
  CG=$(find /sys/fs/cgroup/memory -maxdepth 4 -type d -name "smr-*" 2>/dev/null | head -1)
  if [ -n "$CG" ] && [ -f $CG/memory.stat ]; then
    S=$(awk '$1=="total_rss"||$1=="total_cache"||$1=="total_dirty"{printf "%s=%d ",$1,$2/1048576}' $CG/memory.stat)
    L=$(python3 -c "
import json
try:
  j=json.load(open('/run/ext4lazy/var_tmp_smr_mnt.stats.json'))
  bs=j['block_size']; m=j.get('malloc',{})
  print('cache_mib=%d delalloc_mib=%d malloc_in_use_mib=%d free_held_mib=%d' % (j['cache']['blocks']*bs>>20, j['delalloc_bytes_waiting']>>20, m.get('in_use',0)>>20, m.get('free_held',0)>>20))
except Exception as e: print('-')
" 2>/dev/null)
    echo "$(date +%T) $S $L" >> $OUT
  fi
  sleep 2
done
