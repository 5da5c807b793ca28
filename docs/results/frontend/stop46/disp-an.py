import sys
rows=[tuple(map(float,l.split())) for l in open(sys.argv[1])]
t0=float(sys.argv[2]) if len(sys.argv)>2 else 1.5
d=[(rows[i][0],rows[i+1][0],rows[i+1][1]-rows[i][1]) for i in range(len(rows)-1) if rows[i][0]>t0]
# runs of nonzero deltas
runs=[];cur=[]
for a,b,x in d:
    if x>0: cur.append((a,b,x))
    else:
        if cur: runs.append(cur); cur=[]
rates=[]
for r in runs:
    if len(r)>=4:
        inner=r[1:-1]
        by=sum(x for _,_,x in inner); dt=inner[-1][1]-inner[0][0]
        rates.append((by*8/dt/1e6, len(r), sum(x for *_,x in r)))
rates.sort()
print(len(runs),"runs",len(rates),"long")
for q in (0.1,0.25,0.5,0.75,0.9):
    if rates: print(q, "%.0f"%rates[int(q*(len(rates)-1))][0])
# interval rates distribution
iv=sorted(x*8/(b-a)/1e6 for a,b,x in d if x>0)
print("nonzero dt rates pct:", [int(iv[int(q*(len(iv)-1))]) for q in (0.25,0.5,0.75,0.9,0.99)])
