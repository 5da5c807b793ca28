#!/bin/bash
# usage: loss.sh BIN LOSS CC TAG LENGTH [extra copy args]  (1 Gbit 50 ms one way, default buffers, restore)
B=$1; L=$2; C=$3; T=$4; LEN=$5; shift 5
$B netem up --name ls --rate 1gbit --delay 50ms --loss $L >/dev/null 2>&1 || { echo netem up failed; exit 1; }
ip netns exec wbk-ls-s $B target --size 64G --fill random:1 --discard-writes --listen 10.77.2.2:10809 --insecure --congestion $C 2>/dev/null &
TP=$!
sleep 1
nsenter --net=/run/netns/wbk-ls-c $B copy nbd://10.77.2.2:10809 null: --no-progress --length $LEN --congestion $C --report /tmp/s32/loss-$T.json "$@" 2>&1 | tail -1
kill $TP; wait $TP 2>/dev/null
$B netem down --name ls >/dev/null 2>&1
