;;; sly-agent-q-approval-debugger-screen-test.el --- Approvals and the debugger on a real terminal  -*- lexical-binding: t; -*-

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

;; An eval_form approval and a debugger sent to the chat, as a person
;; sees them in `make run' (SBCL under SLIME, the mock LLM answering).

;;; Code:

(require 'sly-agent-q-tui-helper
         (expand-file-name "sly-agent-q-tui-helper"
                           (file-name-directory (or load-file-name buffer-file-name))))

(defconst sly-agent-q-approval-debugger-screen-test--form
  "(format nil \"~a and ~a\" \"mapcar\" 'mapc)"
  "A Lisp form with strings in it: as JSON its quotes would show escaped.")

(ert-deftest sly-agent-q-tui-approval-shows-lisp-form-as-lisp ()
  "An eval_form approval shows the form as Lisp, not as a JSON string; edited, it is Lisp in lisp-mode."
  (sly-agent-q-tui-with-run
      (:script `((steps . [,(sly-agent-q-tui-step
                             (sly-agent-q-tui-tool "eval_form" `((form . ,sly-agent-q-approval-debugger-screen-test--form))))
                           ,(sly-agent-q-tui-step (sly-agent-q-tui-text "It gave the string. Done."))]))
       :height 40)
    ;; eval_form is cautious: the user has it ask first, as a careful user does.
    (sly-agent-q-tui-keys "M-:")
    (sly-agent-q-tui-wait "Eval:" 5 "the M-: prompt")
    (sly-agent-q-tui-type "(progn (setq sly-agent-q-ask-before-evaluating t) (sly-agent-q-server-reconfigure t))")
    (sly-agent-q-tui-keys "Enter")
    (sly-agent-q-tui-wait "configuration sent\\|gets the configuration when it starts" 15 "the configuration sent")
    (sly-agent-q-tui-type "Evaluate a format")
    (sly-agent-q-tui-keys "Enter")
    (let ((screen (sly-agent-q-tui-wait "this call needs your approval" 60 "the approval")))
      (sly-agent-q-tui-snapshot "approval-lisp-form")
      ;; The form on a line of its own, as written.
      (should (cl-some (lambda (l) (string-suffix-p (concat "╎ " sly-agent-q-approval-debugger-screen-test--form) l))
                       (sly-agent-q-tui-lines)))
      ;; Not as a JSON string in the approval: no escaped quotes, no quoted form.
      (let ((approval (mapconcat #'identity
                                 (cl-remove-if-not (lambda (l) (string-prefix-p "  ┃" l)) (sly-agent-q-tui-lines))
                                 "\n")))
        (should (string-match-p "form:" approval))
        (should-not (string-match-p "\\\\\"" approval))
        (should-not (string-match-p "form: \"(" approval))))
    ;; Edited, it is Lisp: the edit buffer's mode line says so and shows the form unquoted.
    (sly-agent-q-tui-keys "C-c" "C-r")
    (sly-agent-q-tui-wait "needs your approval" 10 "the approval prompt")
    (sly-agent-q-tui-type "e")
    (let ((screen (sly-agent-q-tui-wait "C-c C-c run with" 10 "the edit buffer")))
      (sly-agent-q-tui-snapshot "approval-edit-lisp")
      (should (string-match-p "(Lisp" screen))
      (should (member sly-agent-q-approval-debugger-screen-test--form (sly-agent-q-tui-lines))))
    (sly-agent-q-tui-keys "C-c" "C-c")
    (let ((screen (sly-agent-q-tui-wait "It gave the string\\. Done\\." 30 "the answer after the call")))
      ;; C-c C-c ran the tool (not SLIME's compile of the form): the approval answered.
      (should (string-match-p "✓ approved eval_form" screen)))))

(defun sly-agent-q-approval-debugger-screen-test--window-text (screen anchor)
  "The part of SCREEN in the window whose text holds ANCHOR, for side-by-side windows."
  (let* ((line (cl-find-if (lambda (l) (string-search anchor l)) (split-string screen "\n")))
         (col (and line (string-search anchor line))))
    (mapconcat (lambda (l)
                 (if (> col 0)
                     (if (> (length l) col) (substring l col) "")
                   (car (split-string l "[│|]"))))
               (split-string screen "\n") "\n")))

(ert-deftest sly-agent-q-tui-debugger-to-the-chat ()
  "The debugger sent to the chat: the image's frames in the chat, no --more--, the debugger still shown."
  (sly-agent-q-tui-with-run
      (:script `((steps . [,(sly-agent-q-tui-step (sly-agent-q-tui-text "The error was signalled on purpose."))]))
       :layout t :width 160 :height 44)
    ;; From the chat to the REPL beside it; an error there opens the debugger.
    (sly-agent-q-tui-keys "C-x" "o")
    (sly-agent-q-tui-type "(error \"tui boom\")")
    (sly-agent-q-tui-keys "Enter")
    (let ((screen (sly-agent-q-tui-wait "Backtrace:" 30 "the debugger")))
      (should (string-match-p "tui boom" screen)))
    (sly-agent-q-test-sleep 1)
    (sly-agent-q-tui-command "sly-agent-q-debugger-ask")
    (sly-agent-q-tui-wait "Top frames:\\(.*\n\\)+.* 7: " 30 "the image's frames in the chat's input")
    (sly-agent-q-tui-keys "Enter")
    (let* ((screen (sly-agent-q-tui-wait "signalled on purpose\\." 60 "the answer"))
           (chat (sly-agent-q-approval-debugger-screen-test--window-text screen "You: My program")))
      (sly-agent-q-tui-snapshot "debugger-in-chat")
      ;; The frames in the chat, as the image gives them: numbered, none folded.
      (should (string-match-p "^ *0: " chat))
      (should (string-match-p "^ *7: " chat))
      (should-not (string-match-p "--more--" chat))
      ;; The debugger's window is still on screen, showing the debugger.
      (should (string-match-p "Backtrace:" screen))
      (should (string-match-p "\\[Condition of type SIMPLE-ERROR\\]" screen)))))

(provide 'sly-agent-q-approval-debugger-screen-test)
;;; sly-agent-q-approval-debugger-screen-test.el ends here
