# Open FILE with O_WRONLY|O_TRUNC inside a Landlock domain that allows writing files but not truncating.
import ctypes, os, sys, errno
libc = ctypes.CDLL(None, use_errno=True)
abi = libc.syscall(444, None, 0, 1)
print("landlock abi", abi)
WRITE_FILE, READ_FILE, TRUNCATE = 1 << 1, 1 << 2, 1 << 14
class Attr(ctypes.Structure): _fields_ = [("handled_access_fs", ctypes.c_uint64)]
class PB(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]
attr = Attr(WRITE_FILE | READ_FILE | TRUNCATE)
rs = libc.syscall(444, ctypes.byref(attr), ctypes.sizeof(attr), 0)
assert rs >= 0, ctypes.get_errno()
fd = os.open("/", os.O_PATH)
pb = PB(WRITE_FILE | READ_FILE, fd)
assert libc.syscall(445, rs, 1, ctypes.byref(pb), 0) == 0, ctypes.get_errno()
libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS
assert libc.syscall(446, rs, 0) == 0, ctypes.get_errno()
f = sys.argv[1]
try: os.close(os.open(f, os.O_WRONLY | os.O_TRUNC)); r = "ok"
except OSError as e: r = errno.errorcode[e.errno]
print("open(O_WRONLY|O_TRUNC) without LANDLOCK_ACCESS_FS_TRUNCATE:", r, "size now", os.stat(f).st_size)
