#!/bin/bash
# usage: one.sh BIN TAG [copy args]: one restore of $LEN (2G) on the loss path ($LOSS default 0.0001)
B=$1; T=$2; shift 2; OUT=${OUT:-/tmp/s45/one}; LEN=${LEN:-2G}; mkdir -p "$OUT"
$B netem up --name o1 --rate 1gbit --delay 50ms --loss "${LOSS:-0.0001}" >/dev/null 2>&1 || { echo netem up failed; exit 1; }
ip netns exec wbk-o1-s $B target --size 64G --fill random:1 --discard-writes --listen 10.77.2.2:10809 --insecure --congestion cubic 2>/dev/null &
TP=$!
sleep 1
XDG_RUNTIME_DIR=$OUT nsenter --net=/run/netns/wbk-o1-c $B copy nbd://10.77.2.2:10809 null: --length "$LEN" --no-progress --congestion cubic --report $OUT/$T.json "$@" > $OUT/$T.log 2>&1
echo "$T: $(tail -1 $OUT/$T.log)"
kill $TP; wait $TP 2>/dev/null
$B netem down --name o1 >/dev/null 2>&1
