;;; sly-agent-q-harness-test.el --- The suites' batch Emacs is an interactive one for pipes  -*- lexical-binding: t; -*-

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

;; An interactive Emacs ignores SIGPIPE: a write to a process whose
;; reading end is gone (a server killed an instant before, its death not
;; yet seen) is an error the package handles.  `emacs --batch' keeps
;; SIGPIPE's default action and dies of it instead (exit 141): the fault
;; suite, which kills the server after every message, died so once.
;; test/ert-run.sh starts the suites' Emacs with SIGPIPE ignored, as an
;; interactive Emacs runs; this file fails when run without it.

;;; Code:

(require 'ert)
(require 'sly-agent-q-test-helper
         (expand-file-name "sly-agent-q-test-helper"
                           (file-name-directory (or load-file-name buffer-file-name))))

(ert-deftest sly-agent-q-harness-write-to-a-closed-pipe-is-an-error ()
  "A write to a live process that closed its input signals an error; Emacs goes on."
  (let ((p (make-process :name "saq-closed-input" :connection-type 'pipe :noquery t
                         :command (list "sh" "-c" "exec 0<&-; sleep 5"))))
    (unwind-protect
        (progn
          (accept-process-output nil 0.3)
          (should (process-live-p p))
          (should-error (dotimes (_ 3) (process-send-string p (make-string 70000 ?x)))))
      (delete-process p))))

(ert-deftest sly-agent-q-harness-backend-failing-while-connecting-is-seen ()
  "SWANK's own failure to set up a connection (ECL) is seen from what it printed
since this start, not from an earlier Lisp's text in a reused buffer."
  (let ((buffer (get-buffer-create "*inferior-lisp*")))
    (unwind-protect
        (with-current-buffer buffer
          (insert ";; swank:close-connection: an earlier Lisp's\n")
          (let ((sly-agent-q-test--connect-from (list (cons buffer (buffer-size)))))
            (should-not (sly-agent-q-test--backend-failed-connecting))
            (insert ";; Swank started at port: 42519.\n> ;; swank:close-connection: NIL fell through ETYPECASE expression.\n")
            (should (string-match-p "NIL fell through" (sly-agent-q-test--backend-failed-connecting)))))
      (kill-buffer buffer))))

(provide 'sly-agent-q-harness-test)
;;; sly-agent-q-harness-test.el ends here
