#!/bin/bash
cd /work/main
for i in 1 2; do for D in 100 50 20; do
  /tmp/s49/cap2.sh target/release/wanblk $D ab$D-p$i --capacity-probe
  /tmp/s49/cap2.sh target/release/wanblk $D ab$D-o$i
done; done
