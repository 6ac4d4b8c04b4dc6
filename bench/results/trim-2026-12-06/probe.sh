#!/bin/bash
# probe.sh TAG: malloc_info and smaps of the running daemon
P=$(pgrep -x ext4lazy | head -1); T=$1
cp /proc/$P/smaps /var/tmp/mem/smaps.$T
gdb -p $P -batch -ex 'set $f = (void*)fopen("/var/tmp/mem/mi.'$T'.xml","w")' -ex 'call (int)malloc_info(0,$f)' -ex 'call (int)fclose($f)' >/dev/null 2>&1
ls /proc/$P/task | wc -l > /var/tmp/mem/threads.$T
