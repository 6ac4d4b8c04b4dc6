#!/bin/bash
# wrapper: the frozen 08bcf79 binary with smaller data buffers on mount
# (knows the options of the binary it wraps: image_io= and the rest)
B=/var/tmp/b08b/ext4lazy
if [ "$1" = mount ]; then
  args=(); prev=
  for a in "${@:2}"; do
    if [ "$prev" = "-o" ]; then a="$a,delalloc_mb=32,writeback_mb=16"; fi
    args+=("$a"); prev=$a
  done
  exec $B mount "${args[@]}"
fi
exec $B "$@"
