#!/usr/bin/env bash
# A short real fuzz run of every target in fuzz/ (cargo-fuzz, libFuzzer with
# AddressSanitizer), starting from the committed seeds. Needs a nightly
# toolchain (or RUSTC_BOOTSTRAP=1 on stable, see fuzz/README.md) and
# cargo-fuzz, which it installs if missing; without them it says so and
# exits 0.
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET]     (default: $WANBLK_FUZZ_SECONDS or 10)
#
# A crash stops the run with the failing input in fuzz/artifacts/<target>/
# (exit status non-zero). The working corpus grows in fuzz/corpus/ (not
# committed).
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
secs="${1:-${WANBLK_FUZZ_SECONDS:-10}}"
if cargo +nightly --version >/dev/null 2>&1; then
  toolchain=(+nightly)
elif [ "${RUSTC_BOOTSTRAP:-}" = 1 ]; then
  toolchain=()
else
  echo "fuzz.sh: no nightly toolchain (rustup toolchain install nightly, or RUSTC_BOOTSTRAP=1); skipping the fuzz run" >&2
  exit 0
fi
# With a toolchain that can fuzz, cargo-fuzz is installed from crates.io
# if missing (~30 s); where that fails (no registry) the run is skipped.
if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "fuzz.sh: installing cargo-fuzz (cargo install cargo-fuzz --locked)" >&2
  if ! cargo install cargo-fuzz --locked --quiet; then
    echo "fuzz.sh: cargo-fuzz could not be installed; skipping the fuzz run" >&2
    exit 0
  fi
fi
for t in $(cargo "${toolchain[@]}" fuzz list); do
  mkdir -p "corpus/$t"
  echo "fuzz.sh: $t for ${secs}s" >&2
  # grep hides libFuzzer's chatter; the verdict is cargo fuzz's exit status.
  set +e
  cargo "${toolchain[@]}" fuzz run -O "$t" "corpus/$t" "seeds/$t" -- -max_total_time="$secs" 2>&1 |
    grep -E '^(Done|==|SUMMARY|artifact_prefix|Test unit written|error)'
  status=${PIPESTATUS[0]}
  set -e
  [ "$status" -eq 0 ] || { echo "fuzz.sh: $t failed (see fuzz/artifacts/$t/)" >&2; exit 1; }
done
