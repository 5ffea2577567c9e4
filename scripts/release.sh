#!/usr/bin/env bash
# make release: checks and builds everything a release publishes, and says what to publish.
#   1. The three versions agree: package.json's, the Elisp's sly-agent-q-install-server-version (what
#      M-x sly-agent-q-install-server installs) and the package header of lisp-elisp/sly-agent-q.el.
#   2. The npm tarball (npm pack; its prepack builds the bundle) and the Elisp package tar (make package).
#   3. package-lint, the current release (scripts/ensure-package-lint.sh), on every Elisp file.
#   4. npm publish --dry-run of the tarball.
# scripts/release.sh --check-versions [ROOT] runs step 1 alone (ROOT: another checkout's files).
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"

versions() {
  local root="$1" npm elisp header
  npm="$(node -p 'require(process.argv[1]).version' "$root/package.json")"
  elisp="$(sed -nE 's/^\(defconst sly-agent-q-install-server-version "([^"]+)".*/\1/p' "$root/lisp-elisp/sly-agent-q-install.el")"
  header="$(sed -nE 's/^;; Version: *([^ ]+) *$/\1/p' "$root/lisp-elisp/sly-agent-q.el")"
  echo "package.json:                          ${npm:-?}"
  echo "sly-agent-q-install-server-version (install.el): ${elisp:-?}"
  echo "package header (sly-agent-q.el):         ${header:-?}"
  if [ -z "$npm" ] || [ "$npm" != "$elisp" ] || [ "$npm" != "$header" ]; then
    echo "release: the versions disagree; make them one before releasing." >&2
    return 1
  fi
  version="$npm"
}

if [ "${1:-}" = "--check-versions" ]; then
  versions "$(cd "${2:-$here}" && pwd)"
  exit
fi

cd "$here"
echo "== versions"
versions "$here"
out="$here/dist/release"
rm -rf "$out" && mkdir -p "$out"

echo "== npm tarball"
npm pack --pack-destination "$out" --loglevel=error >/dev/null
tarball="$out/sly-agent-q-$version.tgz"
[ -f "$tarball" ] || { echo "release: npm pack made no $tarball" >&2; exit 1; }
echo "$tarball"

echo "== Elisp package"
"${EMACS:-emacs}" -Q --batch -l scripts/make-package.el \
  --eval "(sly-agent-q-make-package-build \".\" \"$out\")" >/dev/null
package="$out/sly-agent-q-$version.tar"
[ -f "$package" ] || { echo "release: no $package was built" >&2; exit 1; }
echo "$package"

echo "== package-lint"
lint_dir="$(scripts/ensure-package-lint.sh | tail -n 1)"
SAQ_PACKAGE_LINT_DIR="$lint_dir" "${EMACS:-emacs}" -Q --batch -l scripts/lisp-modes.el --eval "
(progn
  (unless (sly-agent-q-dev-require-package-lint) (error \"package-lint is missing\"))
  (let ((package-lint-main-file (expand-file-name \"lisp-elisp/sly-agent-q.el\")) (n 0))
    (dolist (f (directory-files \"lisp-elisp\" t \"\\\\.el\\\\'\"))
      (with-current-buffer (find-file-noselect f)
        (pcase-dolist (\`(,line ,col ,type ,message) (package-lint-buffer))
          (setq n (1+ n))
          (princ (format \"%s:%d:%d: %s: %s\n\" (file-name-nondirectory f) line col type message)))))
    (princ (format \"package-lint %s: %d problem(s)\n\" (file-name-nondirectory (directory-file-name \"$lint_dir\")) n))
    (kill-emacs (if (zerop n) 0 1))))"

echo "== npm publish --dry-run"
npm publish --dry-run --loglevel=notice "$tarball" 2>&1 | grep -v '^npm warn' | tail -n 12

cat <<EOF2

Release $version is ready. To publish it:
  npm publish $tarball
  git tag v$version && git push origin v$version   (MELPA builds the Elisp package from the tag's files,
                                                    recipes/sly-agent-q; $package is the same package)
EOF2
