import sys, os, time, multiprocessing as mp
sys.path.insert(0, '/work/main')
from bench.suite import shapes
root = os.path.join(sys.argv[1], 'files'); files = int(sys.argv[2]); fdirs = (files + 1) // 2
os.mkdir(root)
with mp.Pool(8) as pool:
    t = time.perf_counter()
    shapes.make_tree(root, fdirs, 2, pool, 8, 3600)
    t1 = time.perf_counter()
    shapes.make_files(root, fdirs, 2, files, 4096, pool, 8, 3600)
    t2 = time.perf_counter()
print(f"tree {t1-t:.2f} s files {t2-t1:.2f} s")
