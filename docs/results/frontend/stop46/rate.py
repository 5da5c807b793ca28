import time,sys
out=open(sys.argv[1],'w',buffering=1); T=float(sys.argv[2])
t0=time.time()
while time.time()-t0<T:
    for l in open('/proc/net/dev'):
        if 'c0:' in l:
            f=l.split(':')[1].split(); out.write("%.3f %s %s\n"%(time.time(),f[0],f[8]))
    time.sleep(0.01)
