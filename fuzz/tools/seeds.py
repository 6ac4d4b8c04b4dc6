#!/usr/bin/env python3
"""Cut seed inputs for every fuzz target out of ext4 images.

    seeds.py OUTDIR IMAGE...

Writes OUTDIR/TARGET/NAME files in the input layouts fuzz/src/parsers.rs
and fuzz/src/volume.rs describe: whole images (volume), journals (journal),
and single structures (superblocks, descriptors, inodes, extent nodes,
directory and htree blocks, xattr blocks and areas, bitmaps, jbd2 blocks).
Only enough of ext4 is parsed here to find those structures.
"""
import hashlib
import os
import struct
import sys

PIECE = 1024


def le16(b, o):
    return struct.unpack_from("<H", b, o)[0]


def le32(b, o):
    return struct.unpack_from("<I", b, o)[0]


def be32(b, o):
    return struct.unpack_from(">I", b, o)[0]


def encode(img):
    """crate::image's input form: size in KiB, then (index, len, bytes) records."""
    kib = len(img) // PIECE
    out = bytearray(struct.pack("<H", kib))
    for i in range(kib):
        piece = img[i * PIECE:(i + 1) * PIECE].rstrip(b"\0")
        if piece:
            out += struct.pack("<HH", i, len(piece)) + piece
    return bytes(out)


class Ext4:
    def __init__(self, data):
        self.b = data
        sb = data[1024:2048]
        self.sb = sb
        self.bs = 1024 << le32(sb, 0x18)
        self.first = le32(sb, 0x14)
        self.bpg = le32(sb, 0x20)
        self.ipg = le32(sb, 0x28)
        self.isz = le16(sb, 0x58) if le32(sb, 0x4C) >= 1 else 128
        self.is64 = le32(sb, 0x60) & 0x80
        self.dsz = le16(sb, 0xFE) if self.is64 else 32
        blocks = le32(sb, 0x04) | ((le32(sb, 0x150) << 32) if self.is64 else 0)
        self.groups = -(-(blocks - self.first) // self.bpg)
        self.csum = le32(sb, 0x64) & 0x400

    def block(self, n):
        return self.b[n * self.bs:(n + 1) * self.bs]

    def gd(self, g):
        off = (self.first + 1) * self.bs + g * self.dsz
        return self.b[off:off + self.dsz]

    def table(self, g, lo, hi):
        d = self.gd(g)
        return le32(d, lo) | ((le32(d, hi) << 32) if self.dsz >= 64 else 0)

    def inode(self, ino):
        g, i = divmod(ino - 1, self.ipg)
        off = self.table(g, 8, 0x28) * self.bs + i * self.isz
        return self.b[off:off + self.isz]

    def extent_nodes(self, rec):
        """(root, [non-root node blocks], [(lblk, pblk, len)])."""
        root = rec[0x28:0x28 + 60]
        nodes, runs, stack = [], [], [root]
        while stack:
            n = stack.pop()
            if le16(n, 0) != 0xF30A:
                continue
            depth = le16(n, 6)
            for k in range(le16(n, 2)):
                e = n[12 + 12 * k:24 + 12 * k]
                if depth == 0:
                    ln = le16(e, 4)
                    runs.append((le32(e, 0), le32(e, 8) | (le16(e, 6) << 32), ln - 32768 if ln > 32768 else ln))
                else:
                    child = le32(e, 4) | (le16(e, 8) << 32)
                    blk = self.block(child)
                    nodes.append(blk)
                    stack.append(blk)
        return root, nodes, runs

    def blocks(self, rec):
        """Logical-order physical blocks of a file (extents, or direct and single indirect)."""
        flags = le32(rec, 0x20)
        if flags & 0x10000000:
            return []
        if flags & 0x80000:
            out = []
            for lblk, pblk, ln in sorted(self.extent_nodes(rec)[2]):
                out += [pblk + k for k in range(ln)]
            return out
        out = [le32(rec, 0x28 + 4 * k) for k in range(12)]
        ind = le32(rec, 0x28 + 48)
        if ind:
            blk = self.block(ind)
            out += [le32(blk, 4 * k) for k in range(self.bs // 4)]
        dind = le32(rec, 0x28 + 52)
        if dind:
            for k in range(self.bs // 4):
                i = le32(self.block(dind), 4 * k)
                if i:
                    out += [le32(self.block(i), 4 * m) for m in range(self.bs // 4)]
        size = le32(rec, 4) | (le32(rec, 0x6C) << 32)
        return [b for b in out[:-(-size // self.bs)] if b]

    def entries(self, ino):
        for blk in self.blocks(self.inode(ino)):
            data, pos = self.block(blk), 0
            while pos + 8 <= len(data):
                child, rec_len, nl = le32(data, pos), le16(data, pos + 4), data[pos + 6]
                if rec_len < 8:
                    break
                if child and nl:
                    yield data[pos + 8:pos + 8 + nl], child
                pos += rec_len

    def lookup(self, path):
        ino = 2
        for part in path.strip("/").split("/"):
            found = dict(self.entries(ino)).get(part.encode())
            if found is None:
                return None
            ino = found
        return ino


def journal_layout(jsb):
    """The layout byte of parsers::jbd2_layout and the journal uuid."""
    bs = be32(jsb, 0x0C)
    compat, incompat = be32(jsb, 0x24), be32(jsb, 0x28)
    csum = 3 if incompat & 0x10 else 2 if incompat & 0x8 else 1 if compat & 1 else 0
    return bytes([(bs // 1024).bit_length() - 1 | csum << 2 | (0x10 if incompat & 2 else 0)]), jsb[0x30:0x40]


def main():
    out, images = sys.argv[1], sys.argv[2:]
    seen = set()

    def put(target, name, data):
        h = hashlib.sha1(data).hexdigest()
        if (target, h) in seen:
            return
        seen.add((target, h))
        os.makedirs(os.path.join(out, target), exist_ok=True)
        with open(os.path.join(out, target, name), "wb") as f:
            f.write(data)

    u32 = lambda v: struct.pack("<I", v)
    for path in images:
        name = os.path.basename(path).rsplit(".", 1)[0]
        raw = open(path, "rb").read()
        fs = Ext4(raw)
        enc = encode(raw)
        # Every image plainly; journaled ones also reopened after the
        # read-write half, and in lazy mode with another write parameter.
        put("volume", f"{name}", b"\x00" + enc)
        if name in ("default-dirty", "inline-dirty", "nocsum-dirty"):
            put("volume", f"{name}-reopen", b"\x34" + enc)
            put("volume", f"{name}-lazy", b"\x58" + enc)
        sb = fs.sb
        put("superblock", name, b"\x00" + sb)
        for g in range(min(fs.groups, 2)):
            put("group_desc", f"{name}-g{g}", b"\x00" + sb + u32(g) + fs.gd(g))
            put("bitmap", f"{name}-g{g}-blocks", b"\x00" + sb + u32(0) + u32(fs.bpg) + u32(64) + fs.block(fs.table(g, 0, 0x20)))
            put("bitmap", f"{name}-g{g}-inodes", b"\x00" + sb + u32(11) + u32(fs.ipg) + u32(8) + fs.block(fs.table(g, 4, 0x24)))
        dir_ctl = b"\x00" if fs.csum else b"\x02"
        for p in ["", "a", "a/b", "a/b/c", "names", "a/hello.txt", "new-dir/moved", "a/small-30", "a/small-150",
                  "a/b/frag", "a/sparse", "a/prealloc", "long-link", "short-link", "a/chr"]:
            ino = fs.lookup(p) if p else 2
            if ino is None:
                continue
            tag = p.replace("/", "_") or "root"
            rec = fs.inode(ino)
            put("inode", f"{name}-{tag}", b"\x00" + sb + u32(ino) + rec)
            flags, mode = le32(rec, 0x20), le16(rec, 0)
            if fs.isz > 128:
                area = rec[128 + le16(rec, 0x80):]
                if le32(area, 0) == 0xEA020000:
                    put("xattr_ibody", f"{name}-{tag}", b"\x00" + area)
            acl = le32(rec, 0x68)
            if acl:
                put("xattr_block", f"{name}-{tag}", (b"\x00" if fs.csum else b"\x01") + u32(0) + struct.pack("<Q", acl) + fs.block(acl))
            if flags & 0x80000:
                root, nodes, _ = fs.extent_nodes(rec)
                put("extent", f"{name}-{tag}-root", b"\x00" + u32(ino) + root)
                for k, n in enumerate(nodes[:2]):
                    put("extent", f"{name}-{tag}-node{k}", b"\x00" + u32(ino) + n)
            if mode & 0xF000 == 0x4000:
                for k, blk in enumerate(fs.blocks(rec)[:4]):
                    data = fs.block(blk)
                    if flags & 0x1000 and k == 0:
                        put("htree", f"{name}-{tag}-root", b"\x00" + u32(ino) + sb[0xEC:0xFC] + data)
                    elif flags & 0x1000 and le32(data, 0) == 0 and le16(data, 4) in (fs.bs, 0xFFFF):
                        put("htree", f"{name}-{tag}-node{k}", b"\x01" + u32(ino) + sb[0xEC:0xFC] + data)
                    else:
                        put("dir", f"{name}-{tag}-{k}", dir_ctl + u32(ino) + data)
        # The journal, whole and block by block.
        if le32(sb, 0x5C) & 0x4:
            jblocks = fs.blocks(fs.inode(le32(sb, 0xE0) or 8))
            journal = b"".join(fs.block(b) for b in jblocks)
            if journal:
                put("journal", name, b"\x00" + encode(journal))
                if name == "default":
                    put("journal", f"{name}-plain", b"\x06" + encode(journal))
                jsb = journal[:1024]
                put("jbd2_superblock", name, b"\x00" + u32(len(jblocks)) + jsb)
                layout, uuid = journal_layout(jsb)
                counts = {}
                for j in range(1, len(jblocks)):
                    blk = journal[j * fs.bs:(j + 1) * fs.bs]
                    if be32(blk, 0) != 0xC03B3998:
                        continue
                    kind = {1: "jbd2_descriptor", 2: "jbd2_commit", 5: "jbd2_revoke"}.get(be32(blk, 4))
                    if kind and counts.get(kind, 0) < 4:
                        counts[kind] = counts.get(kind, 0) + 1
                        put(kind, f"{name}-j{j}", b"\x00" + layout + uuid + blk)


if __name__ == "__main__":
    main()
