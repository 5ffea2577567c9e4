#!/usr/bin/env bash
# Installs Emacs 30.1 beside the system's Emacs, for running the Emacs suites on a second version.
# Debian 12 ships Emacs 28.2; its backports suite has 30.1. The .debs are unpacked into the ignored
# .deps/emacs30/ (never installed over the system's Emacs), and .deps/emacs30/bin/emacs starts that
# Emacs with its own Lisp, data and dump file. The backports suite is added to apt with the mirror
# the machine already uses for Debian, at backports' default low priority, so nothing else changes.
# Prints the path of the emacs wrapper on success. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
dest="$PWD/.deps/emacs30"
version=30.1
wrapper="$dest/bin/emacs"

if [ -x "$wrapper" ] && "$wrapper" -Q --batch --eval "(princ emacs-version)" 2>/dev/null | grep -q "^$version"; then
  echo "$wrapper"
  exit 0
fi

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
codename="$(. /etc/os-release && echo "${VERSION_CODENAME:-}")"
if [ "$codename" != bookworm ]; then
  echo "ensure-emacs30: Emacs $version is taken from Debian 12's backports; this is '${codename:-unknown}'." >&2
  exit 1
fi

# The Debian mirror this machine uses (deb822 .sources files first, then sources.list).
mirror="$(awk -v RS= -v c="$codename" '/(^|\n)Suites:[^\n]*( |:)'"$codename"'( |\n|$)/ && /Components:[^\n]*main/ {
            if (match($0, /URIs: *[^ \n]+/)) { u = substr($0, RSTART, RLENGTH); sub(/URIs: */, "", u); print u; exit } }' \
            /etc/apt/sources.list.d/*.sources 2>/dev/null || true)"
if [ -z "$mirror" ] && [ -f /etc/apt/sources.list ]; then
  mirror="$(awk -v c="$codename" '$1 == "deb" && $3 == c { print $2; exit }' /etc/apt/sources.list)"
fi
if [ -z "$mirror" ]; then
  echo "ensure-emacs30: no Debian source for $codename found in /etc/apt to add backports beside." >&2
  exit 1
fi
list=/etc/apt/sources.list.d/sly-agent-q-backports.sources
if ! apt-cache policy 2>/dev/null | grep -q "$codename-backports/main"; then
  printf 'Types: deb\nURIs: %s\nSuites: %s-backports\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
    "$mirror" "$codename" | $SUDO tee "$list" >/dev/null
  $SUDO apt-get update -qq
fi

# The libraries Emacs 30 links against that Emacs 28 does not.
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq libtree-sitter0 libgccjit0 >/dev/null

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
(cd "$work" && apt-get download -qq \
   "emacs-nox/$codename-backports" "emacs-bin-common/$codename-backports" \
   "emacs-common/$codename-backports" "emacs-el/$codename-backports" 2>/dev/null)
rm -rf "$dest"
mkdir -p "$dest/root" "$dest/bin"
for deb in "$work"/*.deb; do dpkg -x "$deb" "$dest/root"; done

share="$dest/root/usr/share/emacs/$version"
libexec="$(ls -d "$dest/root/usr/libexec/emacs/$version"/*/ | head -n 1)"
# Beside the binary, the dump is found by every Emacs this one starts (invocation-name) too.
cp "$(ls "$libexec"*.pdmp | head -n 1)" "$dest/root/usr/bin/emacs-nox.pdmp"
# Debian's SLIME and package-lint are elpa packages whose sources the system Emacs compiled for
# itself; this Emacs reads their sources (scripts/lisp-modes.el looks in SAQ_SYSTEM_ELPA).
cat >"$wrapper" <<EOF
#!/bin/sh
# Emacs $version unpacked by scripts/ensure-emacs30.sh; made again by running that script.
export EMACSLOADPATH="$share/lisp"
export EMACSDATA="$share/etc"
export EMACSDOC="$share/etc"
export EMACSPATH="${libexec%/}"
export SAQ_SYSTEM_ELPA="\${SAQ_SYSTEM_ELPA:-/usr/share/emacs/site-lisp/elpa-src}"
exec "$dest/root/usr/bin/emacs-nox" "\$@"
EOF
chmod +x "$wrapper"
got="$("$wrapper" -Q --batch --eval "(princ emacs-version)")"
case "$got" in
  "$version"*) echo "$wrapper" ;;
  *) echo "ensure-emacs30: the unpacked Emacs answers '$got', not $version." >&2; exit 1 ;;
esac
