#!/bin/bash
# usage: cap.sh BIN DELAY_MS TAG [extra copy args]
B=$1; D=$2; T=$3; shift 3
$B netem up --name cp --rate 1gbit --delay ${D}ms --sysctl-profile capped:512K >/dev/null 2>&1 || { echo netem up failed; exit 1; }
ip netns exec wbk-cp-s $B target --size 64G --fill random:1 --discard-writes --listen 10.77.2.2:10809 --insecure --congestion cubic 2>/dev/null &
TP=$!
sleep 1
nsenter --net=/run/netns/wbk-cp-c $B copy nbd://10.77.2.2:10809 null: -C auto --no-progress --length 2580M --congestion cubic --report /tmp/s30/cap-$T.json "$@" 2>&1 | tail -3
kill $TP; wait $TP 2>/dev/null
$B netem down --name cp >/dev/null 2>&1
