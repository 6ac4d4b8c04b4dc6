import sys, os, time
sys.path.insert(0, '/work/main')
from bench.suite.postmark import Postmark
root = sys.argv[1]
p = Postmark(root, 200, 500, 512, 1<<20, 1<<20, 1<<20, int(sys.argv[2]) if len(sys.argv)>2 else 2000)
r = p.run(lambda: os.sync())
print({k: round(v,3) for k,v in r.items() if k.endswith('_s')})
