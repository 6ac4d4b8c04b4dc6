#!/bin/bash
# sample.sh OUT: every 2 s the daemon's RSS/anon and cache blocks while a mount is up
OUT=$1; : > $OUT
while true; do
  P=$(pgrep -x ext4lazy | head -1)
  if [ -n "$P" ]; then
    A=$(awk '/^Anonymous:/{print $2}' /proc/$P/smaps_rollup 2>/dev/null)
    R=$(awk '/^VmRSS:/{print $2}' /proc/$P/status 2>/dev/null)
    C=$(python3 -c "import json;j=json.load(open('/run/ext4lazy/var_tmp_dsk_mnt.stats.json'));print(j['cache']['blocks'], j['malloc']['in_use']>>20, j['malloc']['free_held']>>20, j['malloc']['mmapped']>>20)" 2>/dev/null)
    echo "$(date +%s) rss_kb=$R anon_kb=$A cache_blocks=$C" >> $OUT
  fi
  sleep 2
done
