#!/bin/bash
# two.sh BIN TAG [args]: two copies together, 2048 MiB each, --share fair, 1 Gbit/s, 50 ms,
# 0.01 % loss (the share profile's case, by hand); reports and logs in /tmp/s51 (mkdir it)
B=$1; T=$2; shift 2
$B netem up --name tw --rate 1gbit --delay 50ms --loss 0.0001 >/dev/null 2>&1 || { echo netem up failed; exit 1; }
ip netns exec wbk-tw-s $B target --size 64G --fill random:1 --discard-writes --listen 10.77.2.2:10809 --insecure --congestion cubic 2>/dev/null &
TP=$!
sleep 1
CP=()
for k in 1 2; do
nsenter --net=/run/netns/wbk-tw-c $B copy nbd://10.77.2.2:10809 null: -C auto --share fair --no-progress --length 2048M --congestion cubic --report /tmp/s51/two-$T-$k.json "$@" > /tmp/s51/two-$T-$k.log 2>&1 &
CP+=($!)
done
wait "${CP[@]}"
for k in 1 2; do python3 -c "
import json; r=json.load(open('/tmp/s51/two-$T-$k.json')); print('$T-$k', round(r['seconds'],1), round(r['goodput_mbps']), [s['n'] for s in r['tuning']['steps']][:10], r['timing'].get('capacity_mbps'))"; grep -a "echo train" /tmp/s51/two-$T-$k.log | sed 's/.*mbps=\([0-9.]*\).*/  est \1/'; done
kill $TP; wait $TP 2>/dev/null
$B netem down --name tw >/dev/null 2>&1
