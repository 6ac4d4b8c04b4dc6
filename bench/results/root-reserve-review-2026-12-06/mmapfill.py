import mmap, os, sys, signal
# extend a file to N bytes via ftruncate, then dirty every page via mmap, msync
path, n = sys.argv[1], int(sys.argv[2])
fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
os.ftruncate(fd, n)
m = mmap.mmap(fd, n)
try:
    for off in range(0, n, 4096):
        m[off] = 1
    m.flush()
    print("msync ok")
except Exception as e:
    print("error", e)
m.close(); 
try:
    os.fsync(fd); print("fsync ok")
except Exception as e:
    print("fsync error", e)
os.close(fd)
