;;; sly-agent-q-package-test.el --- The package archive, installed as a user would  -*- lexical-binding: t; -*-

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

;; dist/sly-agent-q-VERSION.tar (built by `make package' from the recipe)
;; is installed with `package-install-file' into an empty
;; `package-user-dir' by a fresh `emacs -Q --batch' that knows nothing of
;; this checkout; that Emacs opens the chat and completes one turn
;; against the mock LLM, using the server and helpers from the installed
;; package.

;;; Code:

(require 'sly-agent-q-test-helper
         (expand-file-name "../elisp/sly-agent-q-test-helper"
                           (file-name-directory (or load-file-name buffer-file-name))))

(defun e2e-package-archive ()
  "The archive `make package' built."
  (car (last (file-expand-wildcards (expand-file-name "dist/sly-agent-q-*.tar" sly-agent-q-test-root)))))

(ert-deftest e2e-package-install-file-and-one-turn ()
  "package-install-file into an empty package-user-dir, then a turn that uses an Emacs tool."
  (let ((archive (e2e-package-archive)))
    (unless archive (ert-fail "No dist/sly-agent-q-*.tar: run make package"))
    (unless (sly-agent-q-test-mock-available-p) (ert-skip "the mock LLM is missing"))
    (let* ((home (file-name-as-directory (make-temp-file "agent-q-user" t)))
           (elpa (expand-file-name "elpa" home))
           (project (file-name-as-directory (expand-file-name "project" home)))
           (url (sly-agent-q-test-start-mock
                 (json-read-file (expand-file-name "test/e2e/scripts/package-install.json" sly-agent-q-test-root))))
           (script (expand-file-name "user.el" home)))
      (make-directory project t)
      (unwind-protect
          (progn
            (with-temp-file script
              (prin1 `(progn
                        (require 'package)
                        (setq package-user-dir ,elpa)
                        (package-initialize)
                        (package-install-file ,archive)
                        (require 'sly-agent-q)
                        (setq sly-agent-q-provider "anthropic"
                              sly-agent-q-base-url ,url
                              sly-agent-q-api-key "test-key"
                              sly-agent-q-project-root ,project)
                        (sly-agent-q)
                        (let ((deadline (+ (float-time) 60)) outcome)
                          (sly-agent-q-send "Where am I?" (lambda (o) (setq outcome o)))
                          (while (and (not outcome) (< (float-time) deadline))
                            (accept-process-output nil 0.05))
                          (princ (format "STATUS=%s\nLIBRARY=%s\nSERVER=%s\nHELPERS=%s\nTEXT=%s\n"
                                         (plist-get outcome :status)
                                         (locate-library "sly-agent-q")
                                         (sly-agent-q-server-locate)
                                         (file-exists-p (expand-file-name
                                                         "lisp-cl/load.lisp"
                                                         (file-name-directory (locate-library "sly-agent-q"))))
                                         (plist-get outcome :text)))
                          (sly-agent-q-server-stop)))
                     (current-buffer)))
            (let* ((out (with-temp-buffer
                          (call-process (expand-file-name invocation-name invocation-directory)
                                        nil t nil "-Q" "--batch" "-l" script)
                          (buffer-string)))
                   (field (lambda (name)
                            (and (string-match (format "^%s=\\(.*\\)$" name) out) (match-string 1 out)))))
              (should (equal (funcall field "STATUS") "finished"))
              (should (string-prefix-p (file-truename elpa) (file-truename (funcall field "LIBRARY"))))
              (should (string-prefix-p (file-truename elpa) (file-truename (funcall field "SERVER"))))
              (should (equal (funcall field "HELPERS") "t"))
              ;; current_directory ran in the installed package's Emacs tools.
              (should (string-match-p (regexp-quote (directory-file-name project)) out))))
        (sly-agent-q-test-stop-mock)
        (delete-directory home t)))))

(provide 'sly-agent-q-package-test)
;;; sly-agent-q-package-test.el ends here
