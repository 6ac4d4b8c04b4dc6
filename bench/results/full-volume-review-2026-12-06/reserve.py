# Usage: reserve.py MNT PHASE  (PHASE=prep|attack|check)
# prep:   NPREP files, each with 4 one-block extents (lblk 0,2,4,6): the inode's
#         extent slots are full, so one more extent needs a leaf block.
# attack: (a) write(2) one block at lblk 8 of files 0..A-1 (each then needs a leaf),
#         (b) fill the volume with write(2) until ENOSPC,
#         (c) store one page at lblk 8 of files A.. through a shared mapping and
#             msync each, until msync fails: the page-cache write-backs take half
#             the reserve, one block each, and each needs a leaf too.
# check:  every byte accepted (write returned / msync succeeded) is on disk.
import os, sys, mmap, errno, json, ctypes
libc = ctypes.CDLL(None, use_errno=True)
def wb(fd):
    # the page's write-back (a WRITE with FUSE_WRITE_CACHE), without an FSYNC
    if libc.sync_file_range(fd, ctypes.c_int64(0), ctypes.c_int64(0), 7) != 0:
        e = ctypes.get_errno(); raise OSError(e, os.strerror(e))
M, phase = sys.argv[1], sys.argv[2]
BS = os.statvfs(M).f_bsize
NPREP, A = int(os.environ.get("NPREP", 400)), int(os.environ.get("A", 10))
def name(i): return os.path.join(M, f"p{i:04d}")
def blk(tag, i): return bytes([tag]) * 16 + i.to_bytes(4, "little") * ((BS - 16) // 4)
if phase == "prep":
    for i in range(NPREP):
        with open(name(i), "wb") as f:
            for l in (0, 2, 4, 6):
                f.seek(l * BS); f.write(blk(1, i))
            f.truncate(9 * BS)
    os.sync()
elif phase == "attack":
    accepted = {}
    for i in range(A):
        with open(name(i), "r+b", buffering=0) as f:
            f.seek(8 * BS); f.write(blk(2, i)); accepted[i] = "write"
    with open(os.path.join(M, "fill"), "wb", buffering=0) as f:
        for chunk in (1 << 20, BS):
            while True:
                try: f.write(b"\x5a" * chunk)
                except OSError as e:
                    assert e.errno == errno.ENOSPC, e; break
    refused = None
    for i in range(A, NPREP):
        pid = os.fork()
        if pid == 0:  # a child, so that the kernel's SIGBUS at the fault ends only it
            fd = os.open(name(i), os.O_RDWR)
            m = mmap.mmap(fd, 9 * BS, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
            m[8 * BS:9 * BS] = blk(3, i)
            try: wb(fd)
            except OSError as e: os._exit(e.errno)
            os._exit(0)
        st = os.waitpid(pid, 0)[1]
        if st == 0: accepted[i] = "mmap"
        else:
            refused = (i, f"signal {os.WTERMSIG(st)}" if os.WIFSIGNALED(st) else errno.errorcode[os.WEXITSTATUS(st)]); break
    print(f"write(2) accepted into {A} files; mmap stores accepted into {sum(v=='mmap' for v in accepted.values())} files; first refused: {refused}")
    json.dump(accepted, open("/var/tmp/review31/accepted.json", "w"))
    st = os.statvfs(M); print("statfs free blocks", st.f_bfree)
elif phase == "check":
    accepted = json.load(open("/var/tmp/review31/accepted.json"))
    lost = []
    for i, how in accepted.items():
        i = int(i)
        with open(name(i), "rb") as f:
            f.seek(8 * BS); d = f.read(BS)
        if d != blk(2 if how == "write" else 3, i): lost.append((i, how, len(d), d[:1]))
    print(f"{len(lost)} of {len(accepted)} accepted blocks lost: {lost[:5]}")
