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
