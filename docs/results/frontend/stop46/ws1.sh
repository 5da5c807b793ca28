#!/bin/bash
# ws1.sh BIN TAG [mount args]: one ext4 256 MiB write + sync over `wanblk mount` on the bench path (../path.sh), the mount log in $OUT/TAG.log (LOGF: its filter)
set -e
BIN=$1; K=$2; shift 2; NAME=wt$K
. "$(dirname "$0")/../path.sh"
start_mount ${OUT:-/tmp}/$K.log --log ${LOGF:-info} "$@"
write_fs
python3 -c "print('$K: mkfs+mount %.1f s, write+sync %.0f Mbit/s (%.2f s)' % ($T1-$T0, 256*8*1.048576/($T2-$T1), $T2-$T1))"
date -d @$T1 +%T.%N
