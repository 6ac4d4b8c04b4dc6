import csv,sys,collections
for f in sys.argv[1:]:
    w=[r for r in csv.DictReader(open(f)) if r['op']=='write' and r['class']=='data']
    b=collections.Counter()
    for r in w:
        n=int(r['len'])//4096
        k=1 if n==1 else 2 if n<=4 else 3 if n<=16 else 4 if n<=64 else 5 if n<=256 else 6
        b[k]+=1
    names={1:'1',2:'2-4',3:'5-16',4:'17-64',5:'65-256',6:'>256'}
    print(f, {names[k]:b[k] for k in sorted(b)})
