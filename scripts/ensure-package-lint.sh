#!/usr/bin/env bash
# Unpacks the current package-lint (Debian 13's elpa-package-lint, 0.26 or newer) into the ignored
# .deps/package-lint/ and prints the directory that holds package-lint.el. Debian 12 packages 0.16,
# which predates Emacs 30 and knows nothing of what it removed. The newer package is read with a
# private apt state (its own source list, lists and cache), so the machine's apt is not changed:
# the suite is looked up on the mirror the machine already uses for Debian. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
dest="$PWD/.deps/package-lint"
suite=trixie

found() { ls -d "$dest"/root/usr/share/emacs/site-lisp/elpa-src/package-lint-[0-9]*/ 2>/dev/null | head -n 1; }
if [ -n "$(found)" ]; then found; exit 0; fi

codename="$(. /etc/os-release && echo "${VERSION_CODENAME:-}")"
mirror="$(awk -v RS= '/(^|\n)Suites:[^\n]*( |:)'"$codename"'( |\n|$)/ && /Components:[^\n]*main/ {
            if (match($0, /URIs: *[^ \n]+/)) { u = substr($0, RSTART, RLENGTH); sub(/URIs: */, "", u); print u; exit } }' \
            /etc/apt/sources.list.d/*.sources 2>/dev/null || true)"
if [ -z "$mirror" ] && [ -f /etc/apt/sources.list ]; then
  mirror="$(awk -v c="$codename" '$1 == "deb" && $3 == c { print $2; exit }' /etc/apt/sources.list)"
fi
[ -n "$mirror" ] || { echo "ensure-package-lint: no Debian source found in /etc/apt." >&2; exit 1; }

state="$(mktemp -d)"
trap 'rm -rf "$state"' EXIT
mkdir -p "$state/parts" "$state/lists/partial" "$state/cache/archives/partial"
printf 'Types: deb\nURIs: %s\nSuites: %s\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
  "$mirror" "$suite" >"$state/parts/package-lint.sources"
apt_opts=(-o "Dir::Etc::SourceList=/dev/null" -o "Dir::Etc::SourceParts=$state/parts"
          -o "Dir::State::Lists=$state/lists" -o "Dir::Cache=$state/cache" -o "APT::Sandbox::User=root")
apt-get "${apt_opts[@]}" update -qq
(cd "$state" && apt-get "${apt_opts[@]}" download -qq "elpa-package-lint/$suite")
rm -rf "$dest" && mkdir -p "$dest/root"
dpkg -x "$state"/elpa-package-lint_*.deb "$dest/root"
[ -n "$(found)" ] || { echo "ensure-package-lint: the package held no package-lint.el." >&2; exit 1; }
found
