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
# start_mount LOGFILE ARGS...: `wanblk mount` of the target on $M with ARGS (stdout and stderr
# to LOGFILE), then its disk on a loop device $DEV (read-ahead RA KiB if RA is set).
start_mount() {
    local log=$1; shift
    nsenter --net=/run/netns/$C $BIN mount nbd://10.77.2.2:10809 $M --cache-size $((256<<20)) "$@" > $log 2>&1 &
    MP=$!
    while [ ! -e $M/disk ]; do sleep 0.1; done
    DEV=$(losetup -f --show $M/disk)
    if [ -n "$RA" ]; then blockdev --setra $((RA*2)) $DEV; fi
}
# write_fs: mkfs.ext4 and mount on $DEV, then 256 MiB written with dd conv=fsync;
# T0, T1 (mounted), T2 (synced) are the times.
write_fs() {
    T0=$(date +%s.%N)
    mkfs.ext4 -q -F $DEV
    mount $DEV $F
    T1=$(date +%s.%N)
    dd if=/tmp/ws-src.bin of=$F/data.bin bs=1M conv=fsync status=none
    T2=$(date +%s.%N)
}
