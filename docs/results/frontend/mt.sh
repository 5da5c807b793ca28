#!/bin/bash
# mt.sh BIN TAG: ext4 over wanblk mount at 100 ms RTT; write 256 MiB + sync; then cold remount (traced) and read back.
set -e
BIN=$1; K=$2; NAME=mt$K
M=/tmp/mt-mnt-$K; F=/tmp/mt-fs-$K; DEV=; MP=; TP=
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
startm() {
  nsenter --net=/run/netns/$C $BIN mount nbd://10.77.2.2:10809 $M --cache-size $((256<<20)) --log "${LOG:-warn}" > /tmp/s37/mt-$K-$1.log 2>&1 &
  MP=$!
  while [ ! -e $M/disk ]; do sleep 0.1; done
  DEV=$(losetup -f --show $M/disk); [ -n "$RA" ] && blockdev --setra $((RA*2)) $DEV; cat /sys/block/${DEV#/dev/}/queue/read_ahead_kb >&2
}
stopm() { umount $F; losetup -d $DEV; DEV=; kill $MP; wait $MP || true; MP=; }
startm w
T0=$(date +%s.%N)
mkfs.ext4 -q -F $DEV
mount $DEV $F
T1=$(date +%s.%N)
dd if=/tmp/ws-src.bin of=$F/data.bin bs=1M conv=fsync status=none
T2=$(date +%s.%N)
stopm
sync; echo 3 > /proc/sys/vm/drop_caches
startm r
T3=$(date +%s.%N)
mount $DEV $F
T4=$(date +%s.%N)
dd if=$F/data.bin of=/dev/null bs=1M status=none
T5=$(date +%s.%N)
sha256sum $F/data.bin | cut -c1-16; sha256sum /tmp/ws-src.bin | cut -c1-16
python3 -c "
b=256*8*1.048576
print('$K: mkfs+mount %.1f s, write+sync %.0f Mbit/s, mount %.2f s, read %.0f Mbit/s, mount+read %.0f' % ($T1-$T0, b/($T2-$T1), $T4-$T3, b/($T5-$T4), b/($T5-$T3)))"
