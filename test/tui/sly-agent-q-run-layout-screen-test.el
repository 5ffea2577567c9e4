;;; sly-agent-q-run-layout-screen-test.el --- make run's first screen at 80x24  -*- lexical-binding: t; -*-

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

;; `make run' in the smallest usual terminal (80x24), as a new user
;; meets it: while SBCL starts (a minute or more on a slow machine) the
;; chat is selected, so a first question typed then goes to the chat,
;; not to the Lisp's standard input; once connected, the REPL is above
;; the chat, whose lines keep the terminal's whole width.  Started in
;; a project of the user's own (SLY_AGENT_Q_PROJECT).

;;; Code:

(require 'sly-agent-q-tui-helper
         (expand-file-name "sly-agent-q-tui-helper"
                           (file-name-directory (or load-file-name buffer-file-name))))

(ert-deftest sly-agent-q-tui-run-80x24-chat-selected-and-whole-width ()
  "At 80x24: typing during the Lisp's start goes to the chat; then REPL above, chat below."
  (unless (executable-find "tmux") (ert-skip "tmux is not installed"))
  (let* ((sly-agent-q-tui-session (format "sly-agent-q-tui-layout-%d" (emacs-pid)))
         (home (make-temp-file "agent-q-tui-home" t))
         (project (file-name-as-directory (make-temp-file "agent-q-tui-project" t)))
         (conversations (make-temp-file "agent-q-tui-conversations" t)))
    (unwind-protect
        (progn
          (with-temp-file (expand-file-name "mine.lisp" project) (insert "(defun mine () 1)\n"))
          (sly-agent-q-tui--tmux
           "new-session" "-d" "-s" sly-agent-q-tui-session "-x" "80" "-y" "24"
           (mapconcat #'shell-quote-argument
                      (list "env" "-C" sly-agent-q-test-root
                            "-u" "OPENAI_API_KEY" "-u" "SLY_DIR" "-u" "SLY_AGENT_Q_BASE_URL"
                            "ANTHROPIC_API_KEY=test-key" (concat "HOME=" home)
                            (concat "SLY_AGENT_Q_PROJECT=" project)
                            (concat "SLY_AGENT_Q_CONVERSATION_DIRECTORY=" conversations)
                            "scripts/run.sh")
                      " "))
          (sly-agent-q-tui-wait "Starting SBCL with SLIME" 120 "the chat's first notice")
          (sly-agent-q-test-sleep 1)
          ;; SBCL is still starting (SWANK loads for several seconds at least).
          (should-not (string-match-p "CL-USER>" (sly-agent-q-tui-screen)))
          (sly-agent-q-tui-type "first question")
          (sly-agent-q-tui-wait "^> first question" 10 "the typed text in the chat's input")
          (sly-agent-q-tui-wait "CL-USER>" 240 "SBCL connected under SLIME")
          (sly-agent-q-tui-wait "connected with SLIME" 30 "the chat's notice")
          (sly-agent-q-test-sleep 1)
          (let* ((screen (sly-agent-q-tui-screen))
                 (lines (split-string screen "\n"))
                 (repl-mode-line (cl-position-if (lambda (l) (string-match-p "\\*slime-repl sbcl\\*" l)) lines))
                 (chat-mode-line (cl-position-if (lambda (l) (string-match-p "\\*sly-agent-q\\*" l)) lines))
                 (typed (cl-position-if (lambda (l) (string-match-p "^> first question" l)) lines)))
            ;; Stacked: the REPL's window above the chat's, each its own mode line.
            (should repl-mode-line)
            (should chat-mode-line)
            (should (< repl-mode-line chat-mode-line))
            ;; The chat's input still holds what was typed, at the start of a whole-width line.
            (should typed)
            (should (< repl-mode-line typed chat-mode-line))
            ;; The chat's window starts at the terminal's first column (not the right half).
            (should (string-prefix-p "-" (nth chat-mode-line lines)))
            ;; Nothing typed reached SBCL: the REPL's window shows no such input.
            (should-not (string-match-p "first question" (string-join (cl-subseq lines 0 repl-mode-line) "\n")))))
      (sly-agent-q-tui--quit)
      (dolist (dir (list home project conversations))
        (condition-case nil
            (delete-directory dir t)
          (error (sleep-for 2) (ignore-errors (delete-directory dir t))))))))

(provide 'sly-agent-q-run-layout-screen-test)
;;; sly-agent-q-run-layout-screen-test.el ends here
