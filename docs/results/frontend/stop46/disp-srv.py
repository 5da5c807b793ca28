import socket, threading
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("10.77.2.2", 5001)); s.listen(256)
buf = b"\0" * (1 << 20)
def serve(c):
    try:
        while True: c.sendall(buf)
    except OSError: pass
while True:
    c, _ = s.accept(); threading.Thread(target=serve, args=(c,), daemon=True).start()
