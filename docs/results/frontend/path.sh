# Sourced by ws.sh and mt.sh with BIN, NAME and K set: the bench's path (1 Gbit/s, DELAY ms
# one way, default 50), a 2 GiB `wanblk target` behind it, 256 MiB of random data in
# /tmp/ws-src.bin, and a cleanup on exit of everything they start (F: file system mount
# point, DEV: loop device, MP: front end, TP: target).
M=/tmp/$NAME-mnt; F=/tmp/$NAME-fs; DEV=; MP=; TP=
cleanup() {
    mountpoint -q $F && umount $F
    [ -n "$DEV" ] && losetup -d $DEV
    [ -n "$MP" ] && kill $MP 2>/dev/null && wait $MP 2>/dev/null
    [ -n "$TP" ] && kill $TP 2>/dev/null && wait $TP 2>/dev/null
    $BIN netem down --name $NAME > /dev/null 2>&1
    return 0
}
trap cleanup EXIT
[ -f /tmp/ws-src.bin ] || head -c 256M /dev/urandom > /tmp/ws-src.bin
$BIN netem up --name $NAME --rate 1gbit --delay ${DELAY:-50}ms > /dev/null
C=wbk-$NAME-c; S=wbk-$NAME-s
ip netns exec $S $BIN target --size $((2<<30)) --listen 10.77.2.2:10809 --insecure > /dev/null 2>&1 &
TP=$!
sleep 1
mkdir -p $M $F
