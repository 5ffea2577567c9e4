;;; sly-agent-q-sly-test.el --- The bridge with real SBCL and SLY  -*- lexical-binding: t; -*-

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

;; The same bridge code path as with SLIME, through the SLY adapter.
;; Needs a SLY checkout named by the SLY_DIR environment variable;
;; skipped with a message otherwise.

;;; Code:

(require 'sly-agent-q-test-helper
         (expand-file-name "sly-agent-q-test-helper"
                           (file-name-directory (or load-file-name buffer-file-name))))

(declare-function sly-start "ext:sly")
(declare-function sly-connected-p "ext:sly")
(declare-function sly-inferior-process "ext:sly")
(defvar sly-contribs)

(defun sly-agent-q-test--sly ()
  "Make sure SLY is connected to an SBCL; return (ADAPTER . CONNECTION)."
  (unless (getenv "SLY_DIR") (ert-skip "SLY_DIR is not set (point it at a SLY checkout to test SLY)"))
  (unless (executable-find "sbcl") (ert-skip "sbcl is not installed"))
  (unless (sly-agent-q-dev-require-sly) (ert-skip "SLY cannot be loaded from SLY_DIR"))
  (unless (sly-connected-p)
    (sly-setup '(sly-mrepl))
    (sly-start :program "sbcl" :program-args '("--noinform" "--no-userinit"))
    (sly-agent-q-test-wait #'sly-connected-p 180 "SLY to connect to SBCL"))
  (let ((cur (sly-agent-q-bridge-current)))
    (should cur)
    (should (equal (sly-agent-q-bridge-adapter-name (car cur)) "SLY"))
    cur))

(defun sly-agent-q-test--sly-eval (form &optional timeout)
  "Evaluate FORM through the SLY bridge; return (VALUE ERROR)."
  (let* ((cur (sly-agent-q-test--sly)) result)
    (sly-agent-q-bridge-eval (car cur) (cdr cur) form "CL-USER" (or timeout 10)
                             (lambda (v e) (setq result (list v e))))
    (sly-agent-q-test-wait (lambda () result) (+ 5 (or timeout 10)) "the evaluation")
    result))

(ert-deftest sly-agent-q-sly-eval-and-abort ()
  "SLY: an evaluation answers; an abort is an error reply."
  (should (equal (sly-agent-q-test--sly-eval '(cl:+ 1 2)) '(3 nil)))
  (let ((r (sly-agent-q-test--sly-eval '(cl:abort))))
    (should-not (car r))
    (should (string-match-p "aborted" (cadr r))))
  (sly-agent-q-test-wait #'sly-agent-q-bridge-current-package 10 "the REPL's package")
  (should (member (sly-agent-q-bridge-current-package) '("COMMON-LISP-USER" "CL-USER"))))

(ert-deftest sly-agent-q-sly-helpers ()
  "SLY: lisp-cl loads and describe_symbol answers on the fixture."
  (sly-agent-q-test--sly)
  (unless (sly-agent-q-bridge-helpers-file) (ert-skip "lisp-cl/load.lisp is not there yet"))
  (let ((fixture (expand-file-name "test/fixtures/my-app/load.lisp" sly-agent-q-test-root))
        result)
    (should (equal (car (sly-agent-q-test--sly-eval `(cl:progn (cl:load ,fixture) t) 120)) t))
    (sly-agent-q-bridge-call-tool "describe_symbol" '(:symbol "process-data" :package "MY-APP") nil
                                  (lambda (c e) (setq result (list c e))))
    (sly-agent-q-test-wait (lambda () result) 120 "describe_symbol")
    (should-not (cadr result))
    (should (string-match-p "PROCESS-DATA" (car result)))))

(ert-deftest sly-agent-q-sly-zz-lisp-killed-mid-call ()
  "SLY: killing the Lisp during a call answers it with an error."
  (let* ((cur (sly-agent-q-test--sly)) result)
    (sly-agent-q-bridge-eval (car cur) (cdr cur) '(cl:sleep 60) "CL-USER" 90
                             (lambda (v e) (setq result (list v e))))
    (sly-agent-q-test-sleep 0.3)
    (should-not result)
    (delete-process (sly-inferior-process (cdr cur)))
    (sly-agent-q-test-wait (lambda () result) 10 "the error after the kill")
    (should (string-match-p "connection to the Lisp image closed" (cadr result)))))

(provide 'sly-agent-q-sly-test)
;;; sly-agent-q-sly-test.el ends here
