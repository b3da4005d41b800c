# cargo-lambda helpers (sourced). cargo-lambda comes from PyPI into a
# project-local, git-ignored venv (.venv/lambda); it brings its own zig.
source scripts/lib/venv.sh

LAMBDA_VENV="${LAMBDA_VENV:-.venv/lambda}"
CARGO_LAMBDA_PIN="cargo-lambda==1.9.2"

lambda_ensure_installed() {
  if [ ! -x "$LAMBDA_VENV/bin/cargo-lambda" ]; then
    echo "==> installing $CARGO_LAMBDA_PIN into $LAMBDA_VENV" >&2
    venv_create "$LAMBDA_VENV"
    "$LAMBDA_VENV/bin/pip" install -q --disable-pip-version-check "$CARGO_LAMBDA_PIN" >&2
  fi
  # `cargo lambda` finds `cargo-lambda` on PATH.
  export PATH="$PWD/$LAMBDA_VENV/bin:$PATH"
}

# A C compiler for the host: cargo-lambda's zig links the Lambda target,
# but build scripts and proc-macros are linked for this machine with `cc`
# (without one: "linker `cc` not found", minutes into the build). Says what
# to install, before anything is built. CC_PROBE names another compiler to
# look for (a test of this message).
host_cc_required() {
  local cc="${CC_PROBE:-cc}"
  command -v "$cc" >/dev/null 2>&1 && return 0
  echo "error: no C compiler ($cc) on PATH. cargo links build scripts and proc-macros for this machine with it" >&2
  echo "  (cargo-lambda's zig links only the Lambda binaries). Install one, then run this again:" >&2
  echo "  Debian/Ubuntu: sudo apt install build-essential   Fedora/Amazon Linux: sudo dnf install gcc   macOS: xcode-select --install" >&2
  return 1
}
