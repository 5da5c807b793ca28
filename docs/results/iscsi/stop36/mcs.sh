#!/bin/bash
# usage: [CC=cubic] [LEN=15] mcs.sh BIN MODE N TAG  (backup random: -> tgtd null LUN, 1 Gbit/s 50 ms one way)
B=$1; M=$2; N=$3; T=$4; shift 4
CC=${CC:-cubic}; LEN=${LEN:-15}
OUT=${OUT:-/tmp/mcs}; mkdir -p "$OUT"
$B netem up --name mc --rate 1gbit --delay 50ms >/dev/null 2>&1 || { echo netem up failed; exit 1; }
CTL=$((RANDOM % 1000 + 100))
ip netns exec wbk-mc-s tgtd -f -C $CTL --iscsi portal=10.77.2.2:3260 >$OUT/tgtd.log 2>&1 &
TP=$!
sleep 1
A="tgtadm -C $CTL --lld iscsi"
$A --op new --mode target --tid 1 -T iqn.2024-01.org.wanblk:m
$A --op new --mode logicalunit --tid 1 --lun 1 -b null-1 --bstype null
$A --op bind --mode target --tid 1 -I ALL
for kv in MaxRecvDataSegmentLength=16777215 MaxXmitDataSegmentLength=16777215 MaxBurstLength=16777215 FirstBurstLength=16777215 InitialR2T=No MaxOutstandingR2T=16 MaxConnections=64 MaxQueueCmd=512; do
  $A --op update --mode target --tid 1 --name ${kv%%=*} --value ${kv#*=}
done
nsenter --net=/run/netns/wbk-mc-c $B copy random:1T iscsi://10.77.2.2:3260/iqn.2024-01.org.wanblk:m/1 --no-sparse --no-progress --iscsi-mode $M -C $N --stop-after $LEN --congestion $CC "$@" --iscsi-param MaxRecvDataSegmentLength=65536 --report $OUT/$T.json --tcp-log $OUT/$T-tcp.csv 2>&1 | tail -1
$A --op delete --mode system --force >/dev/null 2>&1; sleep 1; kill -9 $TP 2>/dev/null; wait $TP 2>/dev/null
$B netem down --name mc >/dev/null 2>&1
