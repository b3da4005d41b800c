# browser_ensure (sourced): Debian's Chromium and a CJK font (apt, as root;
# otherwise one line saying what to install), and Playwright's Python
# package in a project venv ($BROWSER_VENV, default .venv/browser).
# Playwright never downloads a browser here: the scripts drive
# /usr/bin/chromium (`executable_path`). Used by scripts/mail-screenshots.sh
# (the mail) and scripts/smoke-dev.sh (the operator console).
source "$(dirname "${BASH_SOURCE[0]}")/venv.sh"
BROWSER_VENV="${BROWSER_VENV:-.venv/browser}"
PLAYWRIGHT_PIN="playwright==1.65.2"
export PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1

browser_ensure() {
  if ! command -v chromium >/dev/null || ! fc-list 2>/dev/null | grep -qi "CJK"; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      echo "==> installing Debian's chromium and a CJK font (apt)"
      DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        chromium fonts-noto-cjk fonts-dejavu-core fontconfig >/dev/null
    else
      echo "error: needs Debian's chromium and a CJK font: sudo apt-get install chromium fonts-noto-cjk" >&2
      return 1
    fi
  fi
  if ! "$BROWSER_VENV/bin/python" -c 'import playwright' 2>/dev/null; then
    echo "==> installing $PLAYWRIGHT_PIN in $BROWSER_VENV (the Python package only; no browser download)"
    venv_create "$BROWSER_VENV"
    "$BROWSER_VENV/bin/pip" install -q "$PLAYWRIGHT_PIN"
  fi
}
