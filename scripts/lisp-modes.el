;;; lisp-modes.el --- Find SLIME or SLY for `make run', the tests and the benchmarks  -*- lexical-binding: t; -*-

;; Copyright (C) 2026 The sly-agent-q authors

;; This file is not part of GNU Emacs.

;; This program is free software; you can redistribute it and/or modify
;; it under the terms of the GNU General Public License as published by
;; the Free Software Foundation, either version 3 of the License, or
;; (at your option) any later version.

;; This program is distributed in the hope that it will be useful,
;; but WITHOUT ANY WARRANTY; without even the implied warranty of
;; MERCHANTABILITY or FITNESS FOR A PARTICULAR PURPOSE.  See the
;; GNU General Public License for more details.

;; You should have received a copy of the GNU General Public License
;; along with this program.  If not, see <https://www.gnu.org/licenses/>.

;;; Commentary:

;; Under `emacs -Q' the system's package directories are not active, so
;; Debian's SLIME (an elpa package under site-lisp) cannot be required as
;; it is.  SLY is not packaged by Debian: it comes from a checkout named
;; by SLY_DIR.  One place knows how to find each.

;;; Code:

(require 'package)

(defun sly-agent-q-dev-require-slime ()
  "Load SLIME from the load path, SLIME_DIR or the system's package directories.
Return non-nil when it is loaded."
  (or (require 'slime nil t)
      (let ((dir (getenv "SLIME_DIR")))
        (when (and dir (file-directory-p dir))
          (add-to-list 'load-path (expand-file-name dir))
          (require 'slime nil t)))
      (progn (sly-agent-q-dev-system-packages)
             (require 'slime nil t))))

(defun sly-agent-q-dev-system-packages ()
  "Activate the system's Emacs packages (Debian's elpa-* ones) under `emacs -Q'."
  (let ((version-dir (file-name-directory (directory-file-name data-directory))))
    ;; What Debian's site start-up adds to `package-directory-list'.
    ;; SAQ_SYSTEM_ELPA names them for an Emacs unpacked elsewhere (scripts/ensure-emacs30.sh).
    (dolist (d (list (getenv "SAQ_SYSTEM_ELPA")
                     (expand-file-name "site-lisp/elpa" version-dir)
                     (expand-file-name "../site-lisp/elpa" version-dir)))
      (when (and d (file-directory-p d)) (add-to-list 'package-directory-list d t)))
    (package-initialize)))

(defun sly-agent-q-dev-require-package-lint ()
  "Load package-lint; return non-nil when loaded.
The one in SAQ_PACKAGE_LINT_DIR (the current release, unpacked by
scripts/ensure-package-lint.sh) comes first, then Debian's elpa-package-lint."
  (let ((dir (getenv "SAQ_PACKAGE_LINT_DIR")))
    (when (and dir (file-directory-p dir))
      (add-to-list 'load-path (directory-file-name (expand-file-name dir)))))
  (or (require 'package-lint nil t)
      (progn (sly-agent-q-dev-system-packages)
             (require 'package-lint nil t))))

(defun sly-agent-q-dev-require-sly ()
  "Load SLY from the checkout named by SLY_DIR; return non-nil when loaded."
  (let ((dir (getenv "SLY_DIR")))
    (when (and dir (file-directory-p dir))
      (add-to-list 'load-path (expand-file-name dir))
      (require 'sly nil t))))

(provide 'lisp-modes)
;;; lisp-modes.el ends here
