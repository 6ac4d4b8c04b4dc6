# make directories whose blocks are exactly full, and sparse files
import os, sys
d = sys.argv[1]; bs = os.statvfs(d).f_bsize
for sub in ("full", "full2", "full3"):
    p = f"{d}/{sub}"; os.mkdir(p); os.chmod(p, 0o777)
    i = 0
    while True:
        os.close(os.open(f"{p}/e{i:05d}", os.O_CREAT | os.O_WRONLY, 0o644)); i += 1
        if os.stat(p).st_size > bs:
            os.unlink(f"{p}/e{i-1:05d}"); break
for tag in ("nobody", "root"):
    fd = os.open(f"{d}/sparse-{tag}", os.O_CREAT | os.O_WRONLY, 0o666); os.pwrite(fd, b"a", 0); os.pwrite(fd, b"b", 16 << 20); os.close(fd)
    os.chmod(f"{d}/sparse-{tag}", 0o666)
