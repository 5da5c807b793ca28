#!/bin/bash
# usage: hostloss.sh BIN TAG [copy args]  two restores of $LEN (default 2G) started together
# sharing the host's budget (--share-scope $SCOPE, default host), 1 Gbit/s, 50 ms one way, random loss $LOSS
# (default 0.0001) both ways; reports and logs in $OUT (default /tmp/s41/hostloss). Since stop 42:
# the second copy (B) moves $LEN_B (default: $LEN), and the copies log at $RUST_LOG when it is set
B=$1; T=$2; shift 2; OUT=${OUT:-/tmp/s41/hostloss}; LEN=${LEN:-2G}; mkdir -p "$OUT"
$B netem up --name hl --rate 1gbit --delay 50ms --loss "${LOSS:-0.0001}" >/dev/null 2>&1 || { echo netem up failed; exit 1; }
ip netns exec wbk-hl-s $B target --size 64G --fill random:1 --discard-writes --listen 10.77.2.2:10809 --insecure --congestion cubic 2>/dev/null &
TP=$!
sleep 1
pids=()
for c in A B; do
  L=$LEN; [ $c = B ] && L=${LEN_B:-$LEN}
  XDG_RUNTIME_DIR=$OUT nsenter --net=/run/netns/wbk-hl-c $B copy nbd://10.77.2.2:10809 null: --length "$L" --no-progress --congestion cubic --share-scope "${SCOPE:-host}" --report $OUT/$T-$c.json "$@" > $OUT/$T-$c.log 2>&1 &
  pids+=($!)
done
wait "${pids[@]}"
for c in A B; do echo "$c: $(tail -1 $OUT/$T-$c.log)"; done
kill $TP; wait $TP 2>/dev/null
$B netem down --name hl >/dev/null 2>&1
