#!/bin/bash
# ss.sh OUT SECONDS: ss -tin of port 10809 every 100 ms
end=$(( $(date +%s) + $2 ))
while [ $(date +%s) -lt $end ]; do echo "T $(date +%s.%N)"; ss -tinH dst 10.77.2.2:10809; sleep 0.1; done > $1
