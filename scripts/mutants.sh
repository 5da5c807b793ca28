#!/usr/bin/env bash
# Shows that the test suite catches deliberately broken builds: for each
# patch in scripts/mutants/, a throw-away git worktree of HEAD gets the
# patch and the tests that should catch it run there. Every patch must make
# at least one of them fail; a patch the tests let through is reported and
# the script exits 1. Not part of CI: the mutated tree builds in its own
# target/mutants/ (the first run builds everything, 10-15 minutes on two
# cores; later runs about 5), so no mutated binary can reach the normal
# target/debug/.
#
#   auto-pinned-at-1      the tuner never leaves N = 1
#                         (caught by copy_auto and copy_known_answer)
#   hedge-one-block-off   a hedged request lands 512 bytes off
#                         (caught by pool_work_pulling's block data check)
#
# A patch that no longer applies (the code it changes moved) is an error:
# update the patch.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/toolchain.sh
. scripts/toolchain.sh
find_cargo || exit 1
root=$(pwd)
tree=$(mktemp -d /tmp/wanblk-mutant.XXXXXX)
logs=$(mktemp -d /tmp/wanblk-mutant-logs.XXXXXX)
git worktree add -q --detach "$tree" HEAD
trap 'git -C "$root" worktree remove --force "$tree"' EXIT
export CARGO_TARGET_DIR="$root/target/mutants"

declare -A tests=(
  [auto-pinned-at-1]="-p wanblk --test copy_auto --test copy_known_answer"
  [hedge-one-block-off]="-p wanblk-blockdev --test pool_work_pulling --test pool_io"
)
missed=0
for name in auto-pinned-at-1 hedge-one-block-off; do
  git -C "$tree" checkout -q -- .
  if ! git -C "$tree" apply "$root/scripts/mutants/$name.patch"; then
    echo "mutants: $name.patch no longer applies to HEAD" >&2
    exit 2
  fi
  echo "mutants: $name: cargo test --no-fail-fast ${tests[$name]}"
  # shellcheck disable=SC2086
  if (cd "$tree" && cargo test --no-fail-fast ${tests[$name]} >"$logs/$name.log" 2>&1); then
    echo "mutants: $name was NOT caught (log: $logs/$name.log)" >&2
    missed=1
  else
    grep -E '^test .* FAILED$|panicked at' "$logs/$name.log" | head -6 | sed "s/^/  /"
    echo "mutants: $name caught"
  fi
done
exit "$missed"
