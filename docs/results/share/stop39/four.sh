#!/bin/bash
# usage: four.sh BIN TAG [copy args]  four 1 GiB restores together, each with --tcp-log
B=$1; T=$2; shift 2; OUT=${OUT:-/tmp/s39/four}; mkdir -p "$OUT"
$B netem up --name fo --rate 1gbit --delay 50ms >/dev/null 2>&1 || { echo netem up failed; exit 1; }
ip netns exec wbk-fo-s $B target --size 64G --fill random:1 --discard-writes --listen 10.77.2.2:10809 --insecure --congestion cubic 2>/dev/null &
TP=$!
sleep 1
pids=()
for c in A B C D; do
  nsenter --net=/run/netns/wbk-fo-c $B copy nbd://10.77.2.2:10809 null: --length 1G --no-progress --congestion cubic --report $OUT/$T-$c.json --tcp-log $OUT/$T-$c.tcp.csv "$@" > $OUT/$T-$c.log 2>&1 &
  pids+=($!)
done
wait "${pids[@]}"
for c in A B C D; do echo "$c: $(tail -1 $OUT/$T-$c.log)"; done
kill $TP; wait $TP 2>/dev/null
$B netem down --name fo >/dev/null 2>&1
