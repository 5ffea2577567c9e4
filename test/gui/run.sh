#!/usr/bin/env bash
# The chat in a GUI frame, as a person sees it: a graphic Emacs (not --batch, not -nw) on an X display
# of Xvfb's, light and dark themes, the screen taken with ImageMagick's import and its pixels checked.
# SAQ_GUI_SCREENSHOTS=DIR keeps the screenshots there as PNG (make gui-screens: the README's captures).
# Needs xvfb, imagemagick and an Emacs built with X (emacs-gtk): scripts/ensure-deps.sh installs them.
# Without them the suite is skipped, named, except in CI (CI set), where that is a failure.
# Usage: test/gui/run.sh [FILE-test.el ...]. Ends with one line: gui: N passed, N failed, N skipped.
set -u
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here/../.." || exit 2
. test/ert-run.sh

# An Emacs that can open an X frame: EMACS, else emacs, else Debian's emacs-gtk beside another emacs.
gui_emacs=""
for candidate in ${EMACS:-} emacs emacs-gtk; do
  if command -v "$candidate" >/dev/null 2>&1 &&
     [ "$("$candidate" -Q --batch --eval '(princ (fboundp (quote x-open-connection)))' 2>/dev/null)" = t ]; then
    gui_emacs="$candidate"
    break
  fi
done
missing=()
command -v Xvfb >/dev/null 2>&1 || missing+=("Xvfb (xvfb)")
command -v import >/dev/null 2>&1 || missing+=("import (imagemagick)")
[ -n "$gui_emacs" ] || missing+=("an Emacs with X (emacs-gtk)")
if [ "${#missing[@]}" -gt 0 ]; then
  if [ -n "${CI:-}" ]; then
    echo "gui: missing ${missing[*]}: scripts/ensure-deps.sh installs them, and CI ran it"
    failed=$((failed + 1))
  else
    ert_skip "gui" "missing ${missing[*]} (scripts/ensure-deps.sh installs them)"
  fi
  ert_summary gui
  exit
fi

# Xvfb picks a display no one uses (-displayfd) and listens on no network; the frame is the screen.
# -noreset: the server would restart when its last client leaves (the readiness check below), and a
# client connecting meanwhile is refused.
work="$(mktemp -d "${TMPDIR:-/tmp}/saq-gui-XXXXXX")"
Xvfb -displayfd 3 -nolisten tcp -noreset -screen 0 900x600x24 3>"$work/display" 2>"$work/xvfb.log" &
xvfb=$!
trap 'kill "$xvfb" 2>/dev/null; wait "$xvfb" 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 100); do
  [ -s "$work/display" ] && break
  kill -0 "$xvfb" 2>/dev/null || break
  sleep 0.1
done
if ! [ -s "$work/display" ]; then
  cat "$work/xvfb.log"
  echo "gui: Xvfb did not start"
  failed=$((failed + 1))
  ert_summary gui
  exit
fi
display=":$(head -n 1 "$work/display")"
# The number is out before the server takes clients: wait until one can read its screen.
for _ in $(seq 100); do
  import -display "$display" -window root -crop 1x1+0+0 null: 2>/dev/null && break
  sleep 0.1
done

ert_emacs_mode=()
ert_run_function=sly-agent-q-gui-run-tests-and-exit
export EMACS="$gui_emacs"
# A graphic Emacs left waiting (a question in its minibuffer) is ended sooner than a batch one.
export ERT_FILE_TIMEOUT="${ERT_FILE_TIMEOUT:-300}"
if [ "$#" -gt 0 ]; then files=("$@"); else files=("$here"/*-test.el); fi
for f in "${files[@]}"; do
  # A home of its own: what GTK and Emacs keep there (caches, settings) stays out of the user's.
  mkdir -p "$work/home"
  ert_run "gui $(basename "$f" .el)" "$f" DISPLAY="$display" HOME="$work/home"
done
ert_summary gui
