;;; make-package.el --- Build the package archive from the MELPA-style recipe  -*- lexical-binding: t; -*-

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

;; emacs -Q --batch -l scripts/make-package.el -f sly-agent-q-make-package
;;
;; Builds the package archive the way package-build (MELPA) does from
;; recipes/sly-agent-q: copies the files its :files spec names (globs,
;; and (DIR GLOB...) entries placing files in DIR), writes
;; sly-agent-q-pkg.el from the main file's headers, and tars it all as
;; NAME-VERSION.tar, which `package-install-file' installs.
;;
;; The recipe names tracked files only, so a package built from the git
;; tree alone works (it installs its server with npm).  `make package'
;; adds the bundled server (dist/sly-agent-q-server.js, built by `make
;; build') for offline installs; the tests also build from a clean
;; `git archive' with `sly-agent-q-make-package-build'.

;;; Code:

(require 'package)
(require 'lisp-mnt)
(require 'cl-lib)

(defun sly-agent-q-make-package--expand (spec)
  "Expand one :files SPEC into a list of (SOURCE . DEST-RELATIVE) pairs.
Globs are relative to `default-directory'."
  (if (stringp spec)
      (mapcar (lambda (f) (cons (expand-file-name f) (file-name-nondirectory f)))
              (or (file-expand-wildcards spec)
                  (error "Recipe file %s matches nothing" spec)))
    (let ((dir (car spec)))
      (cl-loop for glob in (cdr spec)
               append (mapcar (lambda (f) (cons (expand-file-name f)
                                                (concat dir "/" (file-name-nondirectory f))))
                              (or (file-expand-wildcards glob)
                                  (error "Recipe file %s matches nothing" glob)))))))

(defun sly-agent-q-make-package-build (source output &optional with-server)
  "Build the package archive from the tree SOURCE into the directory OUTPUT.
The files are those recipes/sly-agent-q names; WITH-SERVER adds the
bundled server dist/sly-agent-q-server.js at the package's top level.
Return the archive's file name."
  (let* ((default-directory (file-name-as-directory (expand-file-name source)))
         (output (expand-file-name output))
         (recipe (with-temp-buffer
                   (insert-file-contents "recipes/sly-agent-q")
                   (read (current-buffer))))
         (name (symbol-name (car recipe)))
         (files (cl-mapcan #'sly-agent-q-make-package--expand (plist-get (cdr recipe) :files)))
         (files (cl-remove-if (lambda (f) (string-match-p "-test\\.el\\'\\|-pkg\\.el\\'" (car f))) files))
         (files (if (not with-server) files
                  (let ((bundle (expand-file-name "dist/sly-agent-q-server.js")))
                    (unless (file-exists-p bundle)
                      (error "No %s: run make build first" bundle))
                    (append files (list (cons bundle "sly-agent-q-server.js"))))))
         (main (or (car (cl-find-if (lambda (f) (equal (cdr f) (concat name ".el"))) files))
                   (error "No %s.el among the recipe's files" name)))
         (desc (with-temp-buffer
                 (insert-file-contents main)
                 (package-buffer-info)))
         (version (package-version-join (package-desc-version desc)))
         (dirname (format "%s-%s" name version))
         (stage (make-temp-file "sly-agent-q-package" t))
         (root (expand-file-name dirname stage))
         (tar (expand-file-name (concat dirname ".tar") output)))
    (make-directory root t)
    (dolist (f files)
      (let ((dest (expand-file-name (cdr f) root)))
        (make-directory (file-name-directory dest) t)
        (copy-file (car f) dest t)))
    (package-generate-description-file desc (expand-file-name (concat name "-pkg.el") root))
    (make-directory output t)
    (when (file-exists-p tar) (delete-file tar))
    (let ((default-directory (file-name-as-directory stage)))
      (unless (zerop (call-process "tar" nil nil nil "-cf" tar dirname))
        (error "The tar command failed")))
    (delete-directory stage t)
    (message "Built %s (%d files)" tar (1+ (length files)))
    tar))

(defun sly-agent-q-make-package ()
  "Build dist/sly-agent-q-VERSION.tar, with the bundled server, from this checkout."
  (sly-agent-q-make-package-build "." "dist" t))

(provide 'make-package)
;;; make-package.el ends here
