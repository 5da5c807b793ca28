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
  # policy-rc.d keeps package scripts from starting daemons (tgt) we did not ask for.
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if ! command -v cargo >/dev/null 2>&1; then
  echo "setup: cargo is missing: install a Rust toolchain (rustup, Rust >= 1.90) first" >&2
  exit 1
fi
