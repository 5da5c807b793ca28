#!/usr/bin/env bash
# Command 1 of the README: set up, build, and run `wanblk demo`: the embedded
# target behind an emulated long-fat network, one session vs tuned N.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
cargo build --release --locked -p wanblk
exec ./target/release/wanblk demo "$@"
