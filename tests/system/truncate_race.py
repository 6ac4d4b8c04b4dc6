#!/usr/bin/env python3
"""A writer that writes whole blocks and truncates to any byte, against
readers that read with O_DIRECT at the same time: no reader may see data
the file did not hold while its read ran.

usage: truncate_race.py FILE SECONDS [READERS] [BLOCKS] [SEED]

The writer keeps each block's history: (operation number, state), a state
being None (past the end of file) or (generation, valid): the first `valid`
bytes of the generation's pattern, then zeros. A reader notes the operations
done before its read and those begun by its end; each block it got must be
one of the states that block had in that window, checked after the run.

One exception, the kernel's and not the file system's: over FUSE, an
O_DIRECT read that comes back short (the file was truncated meanwhile) is
finished by the kernel from its page cache (generic_file_read_iter), and a
page-cache read is not atomic with a concurrent buffered write: the block
may be torn, byte by byte, between two states of the window. fuse2fs shows
the same; kernel ext4 does not (its direct reads hold the inode lock). Such
blocks are counted as torn. A byte that no state of the window held is
stale: data the truncate should have removed. The file's final contents,
read with O_DIRECT, must be the model's.

Prints one JSON line: {"ops", "blocks_checked", "torn", "stale", "final_wrong",
"examples"}; exits 1 when anything is stale or the final contents are wrong."""
import bisect
import json
import mmap
import os
import random
import struct
import sys
import threading
import time

BS = 4096


def pattern(gen, lblk):
    return struct.pack("<QQ", gen, lblk) * (BS // 16)


def render(state, lblk):
    """The bytes of a block in `state`."""
    if state is None or state[0] == 0:
        return bytes(BS)
    gen, valid = state
    return pattern(gen, lblk)[:valid] + bytes(BS - valid)


def compact(data):
    """What a reader keeps of a block: a block that is one state of the
    block its head names as (length, head, nonzero length), anything else
    whole (memory: millions of blocks are read)."""
    short = (len(data), struct.unpack_from("<QQ", data + bytes(16), 0), len(data.rstrip(b"\0")))
    return short if expand(short) == data else data


def expand(seen):
    if isinstance(seen, bytes):
        return seen
    length, head, nz = seen
    return pattern(*head)[:nz] + bytes(length - nz)


class Race:
    def __init__(self, path, seconds, readers, nblk, seed):
        self.path, self.seconds, self.readers, self.nblk, self.seed = path, seconds, readers, nblk, seed
        self.hist = [[(0, None)] for _ in range(nblk)]
        self.lock = threading.Lock()
        self.done_ops = 0
        self.started_ops = 0
        self.size = 0
        self.stop = threading.Event()
        self.created = threading.Event()
        self.seen = []

    def write_op(self, fd, rnd, gen):
        """One pwrite of whole blocks: the blocks' new states."""
        a = rnd.randrange(self.nblk)
        n = rnd.randint(1, min(32, self.nblk - a))
        os.pwrite(fd, b"".join(pattern(gen, b) for b in range(a, a + n)), a * BS)
        new = {b: (gen, BS) for b in range(a, a + n)}
        # Whole blocks between the old end of file and the write read as zeros.
        for b in range(self.size // BS, a):
            if b * BS >= self.size:
                new[b] = (0, 0)
        self.size = max(self.size, (a + n) * BS)
        return new

    def truncate_op(self, fd, rnd):
        t = rnd.randrange(0, self.nblk * BS + 1)
        os.ftruncate(fd, t)
        new = {}
        for b in range(self.nblk):
            lo, cur = b * BS, self.hist[b][-1][1]
            if lo >= t:
                new[b] = None
            elif t < lo + BS:
                # The block the new end falls in keeps its bytes before it.
                new[b] = (0, 0) if cur is None or cur[0] == 0 else (cur[0], min(cur[1], t - lo))
            elif cur is None:
                new[b] = (0, 0)  # extended: a hole
        self.size = t
        return new

    def writer(self):
        rnd = random.Random(self.seed)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        self.created.set()
        try:
            end = time.monotonic() + self.seconds
            gen = 0
            while time.monotonic() < end:
                gen += 1
                with self.lock:
                    self.started_ops = gen
                new = self.write_op(fd, rnd, gen) if rnd.random() < 0.6 else self.truncate_op(fd, rnd)
                with self.lock:
                    for b, st in new.items():
                        if self.hist[b][-1][1] != st:
                            self.hist[b].append((gen, st))
                    self.done_ops = gen
            os.fsync(fd)
        finally:
            self.stop.set()
            os.close(fd)

    def reader(self, k):
        rnd = random.Random(self.seed * 100 + k)
        self.created.wait()
        fd = os.open(self.path, os.O_RDONLY | os.O_DIRECT)
        buf = mmap.mmap(-1, self.nblk * BS)
        mine = []
        try:
            while not self.stop.is_set():
                a = rnd.randrange(self.nblk)
                n = rnd.randint(1, self.nblk - a)
                with self.lock:
                    lo_op = self.done_ops
                got = os.preadv(fd, [memoryview(buf)[:n * BS]], a * BS)
                with self.lock:
                    hi_op = self.started_ops
                for i in range((got + BS - 1) // BS):
                    mine.append((a + i, lo_op, hi_op, compact(bytes(buf[i * BS:i * BS + min(BS, got - i * BS)]))))
        finally:
            os.close(fd)
            with self.lock:
                self.seen.extend(mine)

    def window(self, b, lo_op, hi_op):
        """Block b's states in [lo_op, hi_op]: the one current at lo_op, and every later one up to hi_op."""
        h, ops = self.hist[b], self.hist_ops[b]
        j = max(bisect.bisect_right(ops, lo_op) - 1, 0)
        return [st for _, st in h[j:bisect.bisect_right(ops, hi_op)]]

    def check(self):
        self.hist_ops = [[op for op, _ in h] for h in self.hist]
        torn, stale = 0, []
        for b, lo_op, hi_op, seen in self.seen:
            data = expand(seen)
            window = self.window(b, lo_op, hi_op)
            states = [render(st, b)[:len(data)] for st in window]
            if data in states:
                continue
            if all(any(s[i] == data[i] for s in states) for i in range(len(data))):
                torn += 1
                continue
            gen, lblk = struct.unpack_from("<QQ", data + bytes(16), 0)
            stale.append({"block": b, "ops": [lo_op, hi_op], "head": [gen, lblk], "length": len(data),
                          "nonzero": len(data.rstrip(b"\0")), "whole": isinstance(seen, bytes),
                          "states": [list(s) if s else s for s in window]})
        return torn, stale

    def final_contents(self):
        """Blocks whose final contents (read with O_DIRECT) differ from the model."""
        fd = os.open(self.path, os.O_RDONLY | os.O_DIRECT)
        buf = mmap.mmap(-1, self.nblk * BS + BS)
        try:
            got = os.preadv(fd, [buf], 0)
        finally:
            os.close(fd)
        wrong = [] if got == self.size else [{"size": got, "want": self.size}]
        for b in range(self.nblk):
            want = render(self.hist[b][-1][1], b)[:max(0, min(BS, self.size - b * BS))]
            if bytes(buf[b * BS:b * BS + len(want)]) != want:
                wrong.append({"block": b})
        return wrong

    def run(self):
        threads = [threading.Thread(target=self.writer)]
        threads += [threading.Thread(target=self.reader, args=(k,)) for k in range(self.readers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        torn, stale = self.check()
        final_wrong = self.final_contents()
        return {"ops": self.done_ops, "blocks_checked": len(self.seen), "torn": torn, "stale": len(stale),
                "final_wrong": final_wrong, "examples": stale[:5]}


def main():
    path, seconds = sys.argv[1], float(sys.argv[2])
    readers = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    nblk = int(sys.argv[4]) if len(sys.argv) > 4 else 256
    seed = int(sys.argv[5]) if len(sys.argv) > 5 else 1
    r = Race(path, seconds, readers, nblk, seed).run()
    print(json.dumps(r))
    sys.exit(1 if r["stale"] or r["final_wrong"] else 0)


if __name__ == "__main__":
    main()
