import csv,sys
for f in sys.argv[1:]:
    w=[r for r in csv.DictReader(open(f)) if r['op']=='write' and r['class']=='data']
    starts=set(int(r['offset']) for r in w)
    one=[r for r in w if int(r['len'])==4096]
    nxt=sum(1 for r in one if int(r['offset'])+4096 in starts)
    print(f, 'data writes',len(w),'single-block',len(one),'followed at next block',nxt)
