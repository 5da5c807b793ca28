# Sourced by demo.sh, test.sh and setup.sh: makes `cargo` callable.
#
# Under sudo, PATH is sudo's secure_path, which hides a toolchain that
# rustup installed in the invoking user's ~/.cargo/bin. So if cargo is not
# on PATH, look there (and in root's), and point rustup at that user's
# toolchains; if there is none, say exactly what to do.

find_cargo() {
  if command -v cargo >/dev/null 2>&1; then
    return 0
  fi
  local homes=() home
  if [[ -n "${SUDO_USER:-}" && "${SUDO_USER}" != root ]]; then
    home=$(getent passwd "$SUDO_USER" | cut -d: -f6)
    [[ -n "$home" ]] && homes+=("$home")
  fi
  homes+=("${HOME:-/root}" /root)
  for home in "${homes[@]}"; do
    if [[ -x "$home/.cargo/bin/cargo" ]]; then
      export PATH="$home/.cargo/bin:$PATH"
      # rustup's cargo looks for toolchains in RUSTUP_HOME (~/.rustup of
      # the user running it): use the ones of the user who installed it.
      if [[ -z "${RUSTUP_HOME:-}" && -d "$home/.rustup" ]]; then
        export RUSTUP_HOME="$home/.rustup"
      fi
      echo "toolchain: using $home/.cargo/bin/cargo" >&2
      return 0
    fi
  done
  cat >&2 <<MSG
cargo (Rust >= 1.90) was not found on PATH${SUDO_USER:+, in ~$SUDO_USER/.cargo/bin} or in /root/.cargo/bin.
Install it with rustup (https://rustup.rs):
  curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh
then run this script again (under sudo it finds ~/.cargo/bin of the user who runs sudo), or
name the toolchain yourself:
  sudo env PATH="\$HOME/.cargo/bin:\$PATH" RUSTUP_HOME="\$HOME/.rustup" $0
MSG
  return 1
}
