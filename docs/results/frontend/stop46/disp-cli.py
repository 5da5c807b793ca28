import socket, threading, time, struct, sys
N = int(sys.argv[1]); T = float(sys.argv[2]); out = sys.argv[3]
socks = [socket.create_connection(("10.77.2.2", 5001)) for _ in range(N)]
stop = False
def rd(s):
    while not stop:
        if not s.recv(1 << 20): break
for s in socks: threading.Thread(target=rd, args=(s,), daemon=True).start()
def br(s):
    b = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 232)
    return struct.unpack_from("Q", b, 128)[0]
rows = []
t0 = time.monotonic()
while True:
    t = time.monotonic()
    if t - t0 > T: break
    rows.append((t - t0, sum(br(s) for s in socks)))
    time.sleep(0.0002)
stop = True
with open(out, "w") as f:
    for t, b in rows: f.write(f"{t:.6f} {b}\n")
print(len(rows), "samples", rows[-1])
