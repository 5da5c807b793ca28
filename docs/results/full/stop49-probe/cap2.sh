#!/bin/bash
# cap2.sh BIN DELAY TAG [args]: cap.sh with the log kept in /tmp/s30/log-TAG
# (PROF: the sysctl profile, default capped:512K; LOGF: the --log filter)
B=$1; D=$2; T=$3; shift 3
$B netem up --name cp --rate 1gbit --delay ${D}ms --sysctl-profile ${PROF:-capped:512K} >/dev/null 2>&1 || { echo netem up failed; exit 1; }
ip netns exec wbk-cp-s $B target --size 64G --fill random:1 --discard-writes --listen 10.77.2.2:10809 --insecure --congestion cubic 2>/dev/null &
TP=$!
sleep 1
nsenter --net=/run/netns/wbk-cp-c $B --log ${LOGF:-wanblk_remote=info} copy nbd://10.77.2.2:10809 null: -C auto --no-progress --length 2580M --congestion cubic --report /tmp/s30/cap-$T.json "$@" > /tmp/s30/log-$T 2>&1
tail -1 /tmp/s30/log-$T; grep -a 'capacity' /tmp/s30/log-$T
python3 -c "
import json
r=json.load(open('/tmp/s30/cap-$T.json'))
print([s['n'] for s in r['tuning']['steps']][:14], {k:round(v,1) for k,v in r['timing'].items() if 'time' in k})"
kill $TP; wait $TP 2>/dev/null
$B netem down --name cp >/dev/null 2>&1
