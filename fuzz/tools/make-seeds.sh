#!/usr/bin/env bash
# Make the seed corpora in fuzz/seeds/ (committed; run again only to change
# them). Needs root: each image is made by mkfs.ext4, populated through a
# kernel ext4 mount (loop), and for the journal seeds copied while still
# mounted after a sync, so that its journal holds committed transactions
# (descriptor, revoke and commit blocks) not yet written home.
#
#   fuzz/tools/make-seeds.sh [OUTDIR]     (default fuzz/seeds)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/../seeds}
work=$(mktemp -d /var/tmp/ext4lazy-seeds.XXXXXX)
mnt=$work/mnt
mkdir -p "$mnt"
cleanup() { mountpoint -q "$mnt" && umount "$mnt"; rm -rf "$work"; }
trap cleanup EXIT

populate() { # $1 = mount point, $2 = block size
    local m=$1 bs=$2
    mkdir -p "$m/a/b/c" "$m/names" "$m/gone"
    echo "hello world" > "$m/a/hello.txt"
    for n in 1 30 59 60 61 100 150; do head -c "$n" /dev/zero | tr '\0' s > "$m/a/small-$n"; done
    ln -s a/hello.txt "$m/short-link"
    ln -s "$(printf 'x%.0s' $(seq 1 200))" "$m/long-link"
    ln "$m/a/hello.txt" "$m/a/b/hard-link"
    mkfifo "$m/a/fifo"
    mknod "$m/a/chr" c 4 64
    # Enough names for an htree (b1024: two index levels).
    local count=${NAMES:-100}
    local pad; pad=$(printf 'n%.0s' $(seq 1 80))
    for i in $(seq 1 "$count"); do : > "$m/names/entry-$pad-$i"; done
    # A fragmented file: every other block written, an extent tree of depth 1.
    # (Short contents: the seeds store each KiB only up to its last non-zero byte.)
    for i in $(seq 0 2 80); do printf 'block %d' "$i" | dd of="$m/a/b/frag" bs="$bs" seek="$i" count=1 conv=notrunc,sync status=none; done
    truncate -s 100M "$m/a/sparse"
    printf 'far data' | dd of="$m/a/sparse" bs=1 seek=$((50 << 20)) conv=notrunc status=none
    fallocate -l $((8 * bs)) "$m/a/prealloc" 2>/dev/null || true
    setfattr -n user.small -v tiny "$m/a/hello.txt"
    setfattr -n user.big -v "$(printf 'v%.0s' $(seq 1 300))" "$m/a/hello.txt"
    setfattr -n trusted.t -v 0x0102 "$m/a/b"
    setfacl -m u:1000:r,g:100:rw "$m/a/small-30" 2>/dev/null || true
    setfacl -d -m u:1000:rx "$m/a/b/c" 2>/dev/null || true
    for i in $(seq 1 40); do echo "$i" > "$m/gone/f$i"; done
}

# name, size, mkfs arguments, mount options
variants=(
    "default|9M|-t ext4 -b 4096 -J size=4|"
    "b1024|4M|-t ext4 -b 1024 -N 3072|"
    "inline|4M|-t ext4 -b 1024 -N 3072 -O inline_data|"
    "nocsum|4M|-t ext4 -b 1024 -N 3072 -O ^metadata_csum,^64bit|journal_checksum"
    "ext3|4M|-t ext3 -b 1024 -N 3072|"
    "nojournal|4M|-t ext4 -b 4096 -O ^has_journal|"
)
imgs=()
for v in "${variants[@]}"; do
    IFS='|' read -r name size args opts <<< "$v"
    echo "== $name" >&2
    img=$work/$name.ext4
    truncate -s "$size" "$img"
    # shellcheck disable=SC2086
    mke2fs -F -q -E root_owner=0:0 $args "$img"
    bs=$(dumpe2fs -h "$img" 2>/dev/null | awk -F: '/^Block size/ {gsub(/ /,"",$2); print $2}')
    mount -o "loop${opts:+,$opts}" "$img" "$mnt"
    NAMES=$([ "$name" = b1024 ] && echo 800 || echo 100) populate "$mnt" "$bs"
    sync
    umount "$mnt"
    imgs+=("$img")
    # Again, with changes left in the journal: copied while mounted.
    if dumpe2fs -h "$img" 2>/dev/null | grep -q has_journal; then
        mount -o "loop${opts:+,$opts}" "$img" "$mnt"
        mkdir "$mnt/brief"
        for i in $(seq 1 60); do echo "$i" > "$mnt/brief/file-with-a-name-$i"; done
        sync
        rm -rf "$mnt/brief" "$mnt/gone" "$mnt/a/b/frag"
        mkdir "$mnt/new-dir"
        for i in $(seq 1 20); do echo "$i" > "$mnt/new-dir/n$i"; done
        mv "$mnt/a/hello.txt" "$mnt/new-dir/moved"
        setfattr -n user.later -v later "$mnt/new-dir/moved"
        sync
        cp "$img" "$work/$name-dirty.ext4"
        umount "$mnt"
        imgs+=("$work/$name-dirty.ext4")
    fi
done
python3 "$here/seeds.py" "$out" "${imgs[@]}"
