#!/bin/bash
# usage: etxt.sh MNT FLAGS(python expr)
M=$1; FL=$2
cp /usr/bin/sleep $M/exe; chmod 755 $M/exe; sync
$M/exe 3 & P=$!
sleep 0.5
python3 - "$M/exe" "$FL" <<'PY'
import os,sys,errno
fl = eval(sys.argv[2], {"os": os})
try: os.close(os.open(sys.argv[1], fl)); r="ok"
except OSError as e: r=errno.errorcode[e.errno]
print(sys.argv[2], r, "size now", os.stat(sys.argv[1]).st_size)
PY
wait $P; echo "running program exit status $?"
