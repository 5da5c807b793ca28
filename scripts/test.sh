#!/usr/bin/env bash
# Command 2 of the README: set up and run the whole test suite: format and
# lint checks, unit and property tests, and the integration tests against
# real peers (nbdkit, qemu-nbd, nbd-server, tgtd, nbdinfo, nbdcopy, qemu-img)
# and the emulated WAN (needs root for network namespaces); then, where a
# nightly toolchain exists, a short real run of every fuzz target
# (scripts/fuzz.sh, which installs cargo-fuzz if missing;
# WANBLK_FUZZ_SECONDS per target, default 10, 0 skips it).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
# setup.sh found cargo in a subshell; find it here too (under sudo it may
# be in the invoking user's ~/.cargo/bin, off sudo's PATH).
# shellcheck source=scripts/toolchain.sh
. scripts/toolchain.sh
find_cargo || exit 1
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked "$@"
if [ "${WANBLK_FUZZ_SECONDS:-10}" != 0 ]; then
  ./scripts/fuzz.sh
fi
