#!/usr/bin/env bash
# Installs what the build and the tests need when it is missing: Debian packages (Emacs, SBCL, ECL, CLISP, ASDF, git, ripgrep,
# SLIME, FiveAM, cl-ppcre, iterate, RT, tmux, package-lint, markdown-mode, Xvfb, ImageMagick, a font) and the npm dependencies. Safe to run again; does nothing
# when all is there.
set -euo pipefail
cd "$(dirname "$0")/.."

# cl-swank is SLIME's Lisp half, the SWANK every Lisp's run loads (there is no per-Lisp package).
# git and ripgrep: the project tools' tests (search with and without rg, real repositories).
# cl-ppcre, cl-flexi-streams (which cl-ppcre's tests need), cl-iterate and cl-rt: run_tests' tests on real
# libraries (cl-ppcre's own runner; iterate's tests on SB-RT, on RT in the other Lisps).
# emacs-gtk: an Emacs that can open a GUI frame (the GUI suite, test/gui/); its `emacs` runs -nw and --batch
# as emacs-nox's does, which it replaces. xvfb, imagemagick (import) and a font: that suite's X display and
# its screenshots.
DEBIAN_PACKAGES=(emacs-gtk sbcl ecl clisp cl-asdf slime cl-swank cl-fiveam cl-ppcre cl-flexi-streams cl-iterate cl-rt
  tmux elpa-package-lint elpa-markdown-mode git ripgrep xvfb imagemagick fonts-dejavu-core)

missing=()
for pkg in "${DEBIAN_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
# emacs-gtk is only one way to have an Emacs; any emacs >= 28 that can open an X frame will do. One
# without X (emacs-nox, a build --without-x) runs every suite but the GUI one, which needs emacs-gtk.
if command -v emacs >/dev/null 2>&1 &&
   [ "$(emacs -Q --batch --eval '(princ (fboundp (quote x-open-connection)))' 2>/dev/null)" = t ]; then
  missing=("${missing[@]/emacs-gtk}")
fi
missing=($(printf '%s\n' "${missing[@]}" | grep -v '^$' || true))

if [ ${#missing[@]} -gt 0 ]; then
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "ensure-deps: missing ${missing[*]} and no apt-get here; install them by hand." >&2
    exit 1
  fi
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "ensure-deps: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

node_major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
if [ "$node_major" -lt 20 ]; then
  echo "ensure-deps: Node.js 20 or newer is needed (found ${node_major:-none})." >&2
  exit 1
fi

# npm ci when node_modules is absent or older than the lock file.
if [ ! -d node_modules ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  npm ci --no-audit --no-fund --loglevel=error
fi
