"""Postmark 1.5x (J. Katcher, NetApp TR3022), its algorithm re-implemented, with the ext4-lazy paper's changes.

Why not Debian's `postmark` binary: the paper changed the benchmark (a sync after creating the working set, and
a sync instead of deleting the set at the end); the binary cannot do either without patching its source, which
Debian ships only as a source package.  So this module follows postmark-1_5.c step by step: the same file table
of 2 x `number` slots (reused from the last allocated slot, else the first hole), names `s<RND(subdirs)>/<n>`,
sizes `low + RND(high - low)`, a transaction = read-or-append (RND(10) < bias_read 5) on a random used file,
then create-or-delete (RND(10) < bias_create 5), appends of RND(high - size) + 1 bytes up to `high`, unbuffered
I/O in read/write blocks taken from a buffer of 2 x `high` printable random bytes, RND(x) = MT19937 output mod x.
The random stream differs from the C program's (Python seeds MT19937 its own way), so file names and sizes are
not the same ones, but their distributions and the operation mix are.
"""
import os
import random
import time

# Byte -> printable character (32..126), as postmark fills its source buffer with `32 + RND(95)`.
_PRINTABLE = bytes(32 + (b % 95) for b in range(256))


class Postmark:
    def __init__(self, root, number, subdirs, size_low, size_high, read_block, write_block, transactions,
                 seed=42, bias_read=5, bias_create=5):
        self.root, self.number, self.subdirs = root, number, subdirs
        self.low, self.high, self.rbs, self.wbs = size_low, size_high, read_block, write_block
        self.transactions, self.bias_read, self.bias_create = transactions, bias_read, bias_create
        self.mt = random.Random(seed)
        self.source = self.mt.randbytes(2 * size_high).translate(_PRINTABLE)
        self.table = [["", 0] for _ in range(2 * number)]    # [name, size]; size 0 = free slot
        self.allocated = 0
        self.c = dict(created=0, deleted=0, read=0, appended=0, bytes_read=0, bytes_written=0)

    def rnd(self, x):
        return self.mt.getrandbits(32) % x if x > 0 else 0

    # ---- postmark's operations
    def find_free(self):
        n2 = len(self.table)
        if self.allocated < n2 and self.table[self.allocated][1] == 0:
            self.allocated += 1
            return self.allocated - 1
        for i in range(n2):
            if self.table[i][1] == 0:
                self.allocated = i + 1
                return i
        return -1

    def find_used(self):
        while True:
            i = self.rnd(len(self.table))
            if self.table[i][1]:
                return i

    def write_blocks(self, fd, size):
        off = 0
        while size - off >= self.wbs:
            os.write(fd, self.source[off:off + self.wbs])
            off += self.wbs
        if size > off:
            os.write(fd, self.source[off:size])
        self.c["bytes_written"] += size
        os.close(fd)

    def create(self):
        slot = self.find_free()
        if slot < 0:
            return
        self.c["created"] += 1
        name = (f"s{self.rnd(self.subdirs)}/" if self.subdirs > 1 else "") + str(self.c["created"])
        size = self.low + self.rnd(self.high - self.low)
        self.table[slot] = [name, size]
        fd = os.open(os.path.join(self.root, name), os.O_RDWR | os.O_CREAT, 0o644)
        self.write_blocks(fd, size)

    def delete(self, i):
        if self.table[i][1]:
            os.remove(os.path.join(self.root, self.table[i][0]))
            self.table[i][1] = 0
            self.c["deleted"] += 1

    def read(self, i):
        name, size = self.table[i]
        fd = os.open(os.path.join(self.root, name), os.O_RDONLY)
        try:
            left = size
            while left >= self.rbs:
                os.read(fd, self.rbs)
                left -= self.rbs
            if left:
                os.read(fd, left)
        finally:
            os.close(fd)
        self.c["bytes_read"] += size
        self.c["read"] += 1

    def append(self, i):
        name, size = self.table[i]
        if size >= self.high:
            return
        fd = os.open(os.path.join(self.root, name), os.O_RDWR | os.O_APPEND)
        block = self.rnd(self.high - size) + 1
        self.write_blocks(fd, block)
        self.table[i][1] = size + block
        self.c["appended"] += 1

    # ---- the run, with the paper's modifications
    def run(self, sync, progress=lambda f: None):
        """Create the subdirectories and the working set, sync (paper), run the transactions, sync instead of
        deleting the set (paper).  Returns the counters and the phases' times (s)."""
        t = {}
        t0 = time.monotonic()
        if self.subdirs > 1:
            for i in range(self.subdirs):
                os.mkdir(os.path.join(self.root, f"s{i}"))
        for _ in range(self.number):
            self.create()
        t["create_s"] = time.monotonic() - t0
        sync()
        t1 = time.monotonic()
        t["create_sync_s"] = t1 - t0
        done, tenth = 0, max(1, self.transactions // 10)
        for i in range(self.transactions):
            if self.c["created"] == self.c["deleted"]:
                break                                     # postmark: "out of files!"
            if self.rnd(10) < self.bias_read:
                self.read(self.find_used())
            else:
                self.append(self.find_used())
            if self.rnd(10) < self.bias_create:
                self.create()
            else:
                self.delete(self.find_used())
            done = i + 1
            if done % tenth == 0:
                progress(done / self.transactions)
        t2 = time.monotonic()
        t["transactions_s"] = t2 - t1
        sync()
        t["final_sync_s"] = time.monotonic() - t2
        return dict(self.c, transactions_done=done, **t)
