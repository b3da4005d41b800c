# SAM CLI helpers (sourced): aws-sam-cli and cfn-lint, pinned, in a
# project-local, git-ignored venv (.venv/sam). cfn-lint newer than 1.53.x
# no longer runs the SAM translator (misses bad event properties, !Refs and
# runtimes), so it is pinned with SAM.
source scripts/lib/venv.sh

SAM_VENV="${SAM_VENV:-.venv/sam}"
SAM_CLI_PIN="aws-sam-cli==1.170.0"
CFN_LINT_PIN="cfn-lint==1.53.3"

sam_ensure_installed() {
  if [ ! -x "$SAM_VENV/bin/sam" ]; then
    echo "==> installing $SAM_CLI_PIN and $CFN_LINT_PIN into $SAM_VENV" >&2
    venv_create "$SAM_VENV"
    "$SAM_VENV/bin/pip" install -q --disable-pip-version-check "$SAM_CLI_PIN" "$CFN_LINT_PIN" >&2
  fi
  export SAM_CLI_TELEMETRY=0
  SAM="$SAM_VENV/bin/sam"
}
