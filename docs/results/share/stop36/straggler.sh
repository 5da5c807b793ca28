#!/bin/bash
# usage: straggler.sh BIN TAG  (OUT=/tmp/strag)
# Four restores over one 1 Gbit/s, 50 ms one way path, started together, each
# tuning on its own (`--share fair`, the default): copy A of 2 GiB and copies
# B, C, D of 512 MiB. A is cut while the four share the path and runs on
# alone once the others end. Prints each copy's last line; A's report (ceilings,
# samples) goes to $OUT/TAG-A.json.
B=$1; T=$2; OUT=${OUT:-/tmp/strag}; mkdir -p "$OUT"
$B netem up --name st --rate 1gbit --delay 50ms >/dev/null 2>&1 || { echo netem up failed; exit 1; }
ip netns exec wbk-st-s $B target --size 64G --fill random:1 --discard-writes --listen 10.77.2.2:10809 --insecure --congestion cubic 2>/dev/null &
TP=$!
sleep 1
pids=()
for c in A B C D; do
  len=512M; [ $c = A ] && len=2G
  nsenter --net=/run/netns/wbk-st-c $B copy nbd://10.77.2.2:10809 null: --length $len --no-progress --congestion cubic --report $OUT/$T-$c.json > $OUT/$T-$c.log 2>&1 &
  pids+=($!)
done
wait "${pids[@]}"
for c in A B C D; do echo "$c: $(tail -1 $OUT/$T-$c.log)"; done
kill $TP; wait $TP 2>/dev/null
$B netem down --name st >/dev/null 2>&1
