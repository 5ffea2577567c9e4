;;; sly-agent-q-chats-screen-test.el --- Two chats side by side on a real terminal  -*- lexical-binding: t; -*-

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

;; `make run', then as a user with two projects and two images: a second
;; SBCL (M-x slime, an additional one), a file of another project, M-x
;; sly-agent-q there, and both chats side by side: each header names its
;; project and its Lisp.

;;; Code:

(require 'sly-agent-q-tui-helper
         (expand-file-name "sly-agent-q-tui-helper"
                           (file-name-directory (or load-file-name buffer-file-name))))

(ert-deftest sly-agent-q-tui-two-chats-side-by-side ()
  "Two chats side by side, each header naming its project and its Lisp."
  (let* ((beta (file-name-as-directory (make-temp-file "beta-project" t)))
         (beta-name (file-name-nondirectory (directory-file-name beta)))
         (alpha-name (file-name-nondirectory (directory-file-name sly-agent-q-test-root)))
         (alpha-label (regexp-quote (concat alpha-name " · sbcl (SLIME)")))
         (beta-label (regexp-quote (concat beta-name " · sbcl<2> (SLIME)"))))
    (with-temp-file (expand-file-name "notes.lisp" beta) (insert "(defun beta () 2)\n"))
    (unwind-protect
        (sly-agent-q-tui-with-run (:width 220 :height 30)
          (sly-agent-q-tui-wait alpha-label 10 "the first chat's header naming its project and SBCL")
          ;; A second SBCL.
          (sly-agent-q-tui-command "slime")
          (sly-agent-q-tui-wait "additional" 10 "SLIME asking about an additional Lisp")
          (sly-agent-q-tui-type "y")
          (sly-agent-q-tui-wait "sbcl<2>" 120 "the second SBCL connected")
          (sly-agent-q-test-sleep 1)
          ;; A file of the other project, and its chat.
          (sly-agent-q-tui-keys "C-x" "C-f")
          (sly-agent-q-tui-wait "Find file:" 5 "the file prompt")
          (sly-agent-q-tui-type (expand-file-name "notes.lisp" beta))
          (sly-agent-q-tui-keys "Enter")
          (sly-agent-q-tui-wait "notes\\.lisp" 10 "the file")
          (sly-agent-q-tui-command "sly-agent-q")
          (sly-agent-q-tui-wait beta-label 15 "the new chat naming its project and the second SBCL")
          ;; Both chats side by side.
          (sly-agent-q-tui-keys "C-x" "1")
          (sly-agent-q-tui-keys "C-x" "3")
          (sly-agent-q-tui-keys "C-x" "b")
          (sly-agent-q-tui-wait "Switch to buffer" 5 "the buffer prompt")
          (sly-agent-q-tui-type "*sly-agent-q*")
          (sly-agent-q-tui-keys "Enter")
          (sly-agent-q-tui-wait (concat alpha-label ".*" beta-label "\\|" beta-label ".*" alpha-label)
                                15 "both headers on one line")
          (sly-agent-q-tui-snapshot "two-chats")
          (let ((headers (cl-find-if (lambda (l) (and (string-match-p alpha-label l) (string-match-p beta-label l)))
                                     (sly-agent-q-tui-lines))))
            (should headers)
            ;; Each starts with its state.
            (should (= 2 (with-temp-buffer (insert headers) (count-matches "\\[ready\\]" (point-min) (point-max)))))))
      (delete-directory beta t))))

(provide 'sly-agent-q-chats-screen-test)
;;; sly-agent-q-chats-screen-test.el ends here
