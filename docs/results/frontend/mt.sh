#!/bin/bash
# mt.sh BIN TAG: ext4 on a loop device over `wanblk mount` (path.sh: 1 Gbit/s, DELAY ms one way);
# 256 MiB dd conv=fsync; then the front end restarted, caches dropped, a timed mount and a timed
# read back, sha256 printed for both. Env: RA = the loop device's read-ahead (KiB), LOG = the
# mount's log filter (its log: /tmp/mtTAG-w.log and -r.log).
set -e
BIN=$1; K=$2; NAME=mt$K
. "$(dirname "$0")/path.sh"
startm() { start_mount /tmp/$NAME-$1.log --log "${LOG:-warn}"; }
stopm() { umount $F; losetup -d $DEV; DEV=; kill $MP; wait $MP || true; MP=; }
startm w
write_fs
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
