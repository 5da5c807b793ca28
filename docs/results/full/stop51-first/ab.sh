#!/bin/bash
# Stop 51's A/B: the capacity probe (now sizing the first point) against the search without
# it, alternated, three rounds, on the 512 KB cells (cap2.sh of stop 49). The probe is on by
# default for copy in stop 51's intermediate commits, so both arms name it. Logs and reports go to /tmp/s30
# (log-TAG, cap-TAG.json); TAG prefix $P (default c).
cd "$(dirname "$0")/../../../.." || exit 1
mkdir -p /tmp/s30
CAP=docs/results/full/stop49-probe/cap2.sh
for i in 1 2 3; do for D in 100 50 20; do
  $CAP target/release/wanblk $D ${P:-c}$D-p$i --capacity-probe
  $CAP target/release/wanblk $D ${P:-c}$D-o$i --no-capacity-probe
done; done
