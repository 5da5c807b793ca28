#!/bin/bash
# ws.sh BIN SSAI TAG: ext4 on a loop device over `wanblk mount`, 256 MiB `dd conv=fsync`,
# 1 Gbit/s, 50 ms one way; SSAI = net.ipv4.tcp_slow_start_after_idle in both namespaces;
# CC (env, default cubic) = the mount's --congestion. Everything is torn down on exit.
set -e
BIN=$1; SS=$2; K=$3; NAME=ws$K
. "$(dirname "$0")/path.sh"
for ns in $C $S; do ip netns exec $ns sysctl -q -w net.ipv4.tcp_slow_start_after_idle=$SS; done
start_mount /dev/null --congestion ${CC:-cubic}
write_fs
python3 -c "print('CC=${CC:-cubic} SSAI=$SS $K: mkfs+mount %.1f s, write+sync %.0f Mbit/s' % ($T1-$T0, 256*8*1.048576/($T2-$T1)))"
