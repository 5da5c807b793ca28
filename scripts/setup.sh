#!/usr/bin/env bash
# Installs everything wanblk's demo, tests and benchmarks need on a fresh
# Debian machine (run as root). Safe to run again: it only installs what is missing.
set -euo pipefail

packages=(
  nbdkit nbd-server libnbd-bin qemu-utils   # NBD peers: servers and nbdinfo/nbdcopy, qemu-nbd/qemu-img
  tgt libiscsi-bin                          # iSCSI target (tgtd/tgtadm) and libiscsi's tools
  iperf3 iproute2 iptables iputils-ping ethtool procps   # the emulated WAN and its ceiling
  fuse3 e2fsprogs util-linux mount fio       # wanblk mount: fusermount3, mkfs.ext4, losetup, random-read benchmark
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "setup: need root to install: ${missing[*]}" >&2
    exit 1
  fi
  echo "setup: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # A policy-rc.d that answers 101 ("action forbidden") keeps the packages'
  # scripts from starting daemons we did not ask for (tgt's tgtd would
  # take port 3260); the tests start their own. Only if there is none
  # already, and removed again afterwards.
  policy=/usr/sbin/policy-rc.d
  if [[ ! -e $policy ]]; then
    printf '#!/bin/sh\n# written by wanblk scripts/setup.sh during apt-get install\nexit 101\n' >"$policy"
    chmod 755 "$policy"
    trap 'rm -f "$policy"' EXIT
  fi
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  if [[ -e $policy ]] && grep -q 'wanblk scripts/setup.sh' "$policy"; then
    rm -f "$policy"
    trap - EXIT
  fi
fi

# shellcheck source=scripts/toolchain.sh
. "$(dirname "$0")/toolchain.sh"
find_cargo || exit 1
