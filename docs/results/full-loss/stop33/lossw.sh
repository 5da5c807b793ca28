#!/bin/bash
# usage: [BACKUP=1] lossw.sh BIN LOSS CC TAG LENGTH [extra copy args]
# One copy over 1 Gbit/s, 50 ms one way, default buffers, random loss LOSS:
# a restore (the target's image to null:), or with BACKUP=1 a backup (random
# data to the target); the report goes to /tmp/s33/loss-TAG.json and the
# process's wall time is printed after the copy's own line.
B=$1; L=$2; C=$3; T=$4; LEN=$5; shift 5
$B netem up --name ls --rate 1gbit --delay 50ms --loss $L >/dev/null 2>&1 || { echo netem up failed; exit 1; }
ip netns exec wbk-ls-s $B target --size 64G --fill random:1 --discard-writes --listen 10.77.2.2:10809 --insecure --congestion $C 2>/dev/null &
TP=$!
sleep 1
if [ -n "$BACKUP" ]; then SD=(random:$LEN nbd://10.77.2.2:10809); else SD=(nbd://10.77.2.2:10809 null: --length $LEN); fi
t0=$(date +%s.%N)
nsenter --net=/run/netns/wbk-ls-c $B copy "${SD[@]}" --no-progress --congestion $C --report /tmp/s33/loss-$T.json "$@" 2>&1 | tail -1
t1=$(date +%s.%N)
echo "wall $(echo "$t1 - $t0" | bc) s"
kill $TP; wait $TP 2>/dev/null
$B netem down --name ls >/dev/null 2>&1
