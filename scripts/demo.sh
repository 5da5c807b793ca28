#!/usr/bin/env bash
# Command 1 of the README: set up, build, and run `wanblk-bench demo`: the
# embedded target behind an emulated long-fat network, one session vs tuned N.
# wanblk-bench (the demo and the benchmarks) drives the wanblk binary built
# next to it; the shipped wanblk links no benchmark code.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
# setup.sh found cargo in a subshell; find it here too (under sudo it may
# be in the invoking user's ~/.cargo/bin, off sudo's PATH).
# shellcheck source=scripts/toolchain.sh
. scripts/toolchain.sh
find_cargo || exit 1
cargo build --release --locked -p wanblk -p wanblk-bench
exec ./target/release/wanblk-bench demo "$@"
