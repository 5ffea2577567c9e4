;;; sly-agent-q-package-test.el --- The package byte-compiles cleanly and passes checkdoc  -*- lexical-binding: t; -*-

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

;; Each check runs in a fresh `emacs -Q --batch': every lisp-elisp file
;; byte-compiled with `byte-compile-error-on-warn', without SLY or SLIME
;; on the load path, with SLIME, and with SLY (SLY_DIR); then checkdoc.

;;; Code:

(require 'sly-agent-q-test-helper
         (expand-file-name "sly-agent-q-test-helper"
                           (file-name-directory (or load-file-name buffer-file-name))))

(defun sly-agent-q-test--batch (extra-load-path form)
  "Run FORM in a fresh emacs -Q --batch with EXTRA-LOAD-PATH; return (STATUS . OUTPUT)."
  (with-temp-buffer
    (let ((status
           (apply #'call-process (expand-file-name invocation-name invocation-directory)
                  nil t nil "-Q" "--batch"
                  (append (cl-mapcan (lambda (d) (list "-L" d)) extra-load-path)
                          (list "--eval" (prin1-to-string form))))))
      (cons status (buffer-string)))))

(defun sly-agent-q-test--compile-all (extra-load-path)
  "Byte-compile every lisp-elisp file with EXTRA-LOAD-PATH; return (STATUS . OUTPUT)."
  (let ((out (make-temp-file "agent-q-elc" t)))
    (sly-agent-q-test--batch
     (cons (expand-file-name "lisp-elisp" sly-agent-q-test-root) extra-load-path)
     `(progn
        (require 'bytecomp)
        (setq byte-compile-error-on-warn t load-prefer-newer t)
        (let ((byte-compile-dest-file-function
               (lambda (f) (expand-file-name (concat (file-name-nondirectory f) "c") ,out)))
              (ok t))
          (dolist (f (directory-files ,(expand-file-name "lisp-elisp" sly-agent-q-test-root) t "\\.el\\'"))
            (unless (byte-compile-file f) (setq ok nil)))
          (kill-emacs (if ok 0 1)))))))

(ert-deftest sly-agent-q-package-compiles-without-sly-or-slime ()
  "No warnings with neither SLY nor SLIME on the load path."
  (let ((r (sly-agent-q-test--compile-all nil)))
    (should (equal r (cons 0 (cdr r))))
    (should-not (string-match-p "Warning\\|Error" (cdr r)))))

(ert-deftest sly-agent-q-package-compiles-with-slime ()
  "No warnings with SLIME on the load path."
  (unless (sly-agent-q-dev-require-slime) (ert-skip "SLIME cannot be found"))
  (let ((r (sly-agent-q-test--compile-all
            (list (file-name-directory (locate-library "slime"))))))
    (should (equal r (cons 0 (cdr r))))
    (should-not (string-match-p "Warning\\|Error" (cdr r)))))

(ert-deftest sly-agent-q-package-compiles-with-sly ()
  "No warnings with SLY on the load path."
  (unless (getenv "SLY_DIR") (ert-skip "SLY_DIR is not set"))
  (let ((r (sly-agent-q-test--compile-all (list (expand-file-name (getenv "SLY_DIR"))))))
    (should (equal r (cons 0 (cdr r))))
    (should-not (string-match-p "Warning\\|Error" (cdr r)))))

(ert-deftest sly-agent-q-package-checkdoc ()
  "Every lisp-elisp file passes checkdoc."
  (let ((r (sly-agent-q-test--batch
            nil
            `(progn
               (require 'checkdoc)
               (require 'cl-lib)
               (require 'subr-x)
               (let ((checkdoc-diagnostic-buffer "*checkdoc*"))
                 (dolist (f (directory-files ,(expand-file-name "lisp-elisp" sly-agent-q-test-root)
                                             t "\\.el\\'"))
                   (with-current-buffer (find-file-noselect f)
                     (checkdoc-current-buffer t))))
               (with-current-buffer (get-buffer-create "*checkdoc*")
                 (goto-char (point-min))
                 (let ((problems (cl-remove-if
                                  (lambda (l) (or (string-match-p "\\`[ \t\f\r]*\\'" l) (string-prefix-p "***" l)))
                                  (split-string (buffer-string) "\n"))))
                   (princ (mapconcat #'identity problems "\n"))
                   (kill-emacs (if problems 1 0))))))))
    (should (equal r (cons 0 "")))))

(ert-deftest sly-agent-q-package-lint ()
  "package-lint finds nothing in any lisp-elisp file, sly-agent-q.el being the main file."
  (let ((r (sly-agent-q-test--batch
            nil
            `(progn
               (load ,(expand-file-name "scripts/lisp-modes" sly-agent-q-test-root) nil t)
               (unless (sly-agent-q-dev-require-package-lint) (kill-emacs 2))
               (let ((package-lint-main-file ,(expand-file-name "lisp-elisp/sly-agent-q.el"
                                                                 sly-agent-q-test-root))
                     (problems nil))
                 (dolist (f (directory-files ,(expand-file-name "lisp-elisp" sly-agent-q-test-root)
                                             t "\\.el\\'"))
                   (with-current-buffer (find-file-noselect f)
                     (pcase-dolist (`(,line ,col ,type ,message) (package-lint-buffer))
                       ;; package-lint 0.16 (Debian's) predates Emacs 28's release and calls any
                       ;; (emacs "28.x") dependency uninstallable; this Emacs is 28 or newer.
                       (unless (and (>= emacs-major-version 28)
                                    (string-prefix-p "This makes the package uninstallable in all released"
                                                     message))
                         (push (format "%s:%d:%d: %s: %s" (file-name-nondirectory f) line col type message)
                               problems)))))
                 (princ (mapconcat #'identity (nreverse problems) "\n"))
                 (kill-emacs (if problems 1 0)))))))
    (when (equal (car r) 2) (ert-skip "package-lint is not installed (Debian: elpa-package-lint)"))
    (should (equal r (cons 0 "")))))

(ert-deftest sly-agent-q-package-loads-without-sly-or-slime ()
  "Loading the package needs neither SLY nor SLIME and loads neither."
  (let ((r (sly-agent-q-test--batch
            (list (expand-file-name "lisp-elisp" sly-agent-q-test-root))
            '(progn (require 'sly-agent-q)
                    (princ (list (featurep 'sly) (featurep 'slime)
                                 (fboundp 'sly-agent-q) (fboundp 'sly-agent-q-tool-call-run)))))))
    (should (equal r '(0 . "(nil nil t t)")))))

(defun sly-agent-q-test--release-versions (root)
  "Run scripts/release.sh --check-versions on ROOT; return (STATUS . OUTPUT)."
  (with-temp-buffer
    (let ((status (call-process (expand-file-name "scripts/release.sh" sly-agent-q-test-root)
                                nil t nil "--check-versions" root)))
      (cons status (buffer-string)))))

(ert-deftest sly-agent-q-package-release-versions-agree ()
  "package.json, `sly-agent-q-install-server-version' and the package header say one version;
`make release' refuses when any of them differs."
  (should (equal (car (sly-agent-q-test--release-versions sly-agent-q-test-root)) 0))
  (dolist (edit '(("package.json" "\"version\": \"[^\"]+\"" "\"version\": \"9.9.9\"")
                  ("lisp-elisp/sly-agent-q-install.el" "^(defconst sly-agent-q-install-server-version \"[^\"]+\""
                   "(defconst sly-agent-q-install-server-version \"9.9.9\"")
                  ("lisp-elisp/sly-agent-q.el" "^;; Version: .*$" ";; Version: 9.9.9")))
    (let ((root (make-temp-file "agent-q-release" t)))
      (unwind-protect
          (progn
            (make-directory (expand-file-name "lisp-elisp" root))
            (dolist (f '("package.json" "lisp-elisp/sly-agent-q-install.el" "lisp-elisp/sly-agent-q.el"))
              (copy-file (expand-file-name f sly-agent-q-test-root) (expand-file-name f root)))
            (with-temp-file (expand-file-name (car edit) root)
              (insert-file-contents (expand-file-name (car edit) root))
              (goto-char (point-min))
              (should (re-search-forward (nth 1 edit) nil t))
              (replace-match (nth 2 edit) t t))
            (let ((r (sly-agent-q-test--release-versions root)))
              (should-not (equal (car r) 0))
              (should (string-match-p "9\\.9\\.9" (cdr r)))
              (should (string-match-p "the versions disagree" (cdr r)))))
        (delete-directory root t)))))

(provide 'sly-agent-q-package-test)
;;; sly-agent-q-package-test.el ends here
