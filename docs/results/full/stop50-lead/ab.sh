#!/bin/bash
# Stop 50's A/B: --capacity-probe (first train before the first request) against the plain
# search, alternated, three rounds, on the 512 KB cells (cap2.sh of stop 49).
# Logs and reports go to /tmp/s30 (log-TAG, cap-TAG.json); TAG prefix $P (default l).
cd "$(dirname "$0")/../../../.." || exit 1
mkdir -p /tmp/s30
CAP=docs/results/full/stop49-probe/cap2.sh
for i in 1 2 3; do for D in 100 50 20; do
  $CAP target/release/wanblk $D ${P:-l}$D-p$i --capacity-probe
  $CAP target/release/wanblk $D ${P:-l}$D-o$i
done; done
