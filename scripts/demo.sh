#!/usr/bin/env bash
# Command 1 of the README: set up, build, and run `wanblk-bench demo`: the
# embedded target behind an emulated long-fat network, one session vs tuned N.
# wanblk-bench (the demo and the benchmarks) drives the wanblk binary built
# next to it; the shipped wanblk links no benchmark code.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
cargo build --release --locked -p wanblk -p wanblk-bench
exec ./target/release/wanblk-bench demo "$@"
