;;; sly-agent-q-tui-helper.el --- Driving `make run' in a real terminal (tmux)  -*- lexical-binding: t; -*-

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

;; A test of the terminal suite is written as a user would use the
;; product: `sly-agent-q-tui-with-run' starts scripts/run.sh (what
;; `make run' runs) in a tmux session of a given size, with the mock LLM
;; answering from a script, and waits for SBCL and the chat; the test
;; then types (`sly-agent-q-tui-type', `sly-agent-q-tui-keys'), waits for
;; the screen (`sly-agent-q-tui-wait') and asserts on what it shows
;; (`sly-agent-q-tui-screen', `sly-agent-q-tui-lines').  A check is one
;; more `ert-deftest' using these.
;;
;; `sly-agent-q-tui-snapshot' keeps a named screen in SAQ_TUI_SNAPSHOTS
;; when that names a directory: the README's captures are taken so.

;;; Code:

(require 'sly-agent-q-test-helper
         (expand-file-name "../elisp/sly-agent-q-test-helper"
                           (file-name-directory (or load-file-name buffer-file-name))))

(defvar sly-agent-q-tui-session nil "The tmux session of the running test.")
(defvar sly-agent-q-tui-conversations nil "The conversation directory of the running test.")

(defun sly-agent-q-tui--tmux (&rest args)
  "Run tmux with ARGS; return its output."
  (with-temp-buffer
    (let ((process-environment (cons "TERM=xterm-256color" process-environment)))
      (apply #'call-process "tmux" nil t nil args))
    (buffer-string)))

(defun sly-agent-q-tui-screen ()
  "The text on the terminal's screen now."
  (sly-agent-q-tui--tmux "capture-pane" "-p" "-t" sly-agent-q-tui-session))

(defun sly-agent-q-tui-lines ()
  "The screen's lines, trailing blanks removed."
  (mapcar (lambda (l) (string-trim-right l)) (split-string (sly-agent-q-tui-screen) "\n")))

(defun sly-agent-q-tui-header ()
  "The header line of the window at the top (the line under the menu bar)."
  (cl-find-if-not (lambda (l) (string-prefix-p "File Edit Options" l)) (sly-agent-q-tui-lines)))

(defun sly-agent-q-tui-keys (&rest keys)
  "Press KEYS (tmux key names: \"C-x\", \"Enter\", \"M-x\"...)."
  (apply #'sly-agent-q-tui--tmux "send-keys" "-t" sly-agent-q-tui-session keys))

(defun sly-agent-q-tui-type (text)
  "Type TEXT literally."
  (sly-agent-q-tui--tmux "send-keys" "-t" sly-agent-q-tui-session "-l" text))

(defun sly-agent-q-tui-command (command)
  "Run COMMAND by name with M-x, as a user does."
  (sly-agent-q-tui-keys "M-x")
  (sly-agent-q-tui-wait "M-x" 5 "the M-x prompt")
  (sly-agent-q-tui-type command)
  (sly-agent-q-tui-keys "Enter"))

(defun sly-agent-q-tui-wait (regexp &optional timeout what)
  "Wait until the screen matches REGEXP; return the screen.
Fail after TIMEOUT seconds (default 30) showing the screen; WHAT names
what was awaited."
  (let ((deadline (+ (float-time) (or timeout 30)))
        screen)
    (while (and (not (string-match-p regexp (setq screen (sly-agent-q-tui-screen))))
                (< (float-time) deadline))
      (sly-agent-q-test-sleep 0.2))
    (unless (string-match-p regexp screen)
      (ert-fail (list (format "timed out waiting for %s" (or what regexp)) screen)))
    screen))

(defun sly-agent-q-tui-snapshot (name)
  "Keep the screen as NAME.txt in SAQ_TUI_SNAPSHOTS, when that is set; return the screen."
  (let ((screen (sly-agent-q-tui-screen))
        (dir (getenv "SAQ_TUI_SNAPSHOTS")))
    (when (and dir (not (string-empty-p dir)))
      (make-directory dir t)
      (with-temp-file (expand-file-name (concat name ".txt") dir)
        (insert (replace-regexp-in-string "[ \t]+$" "" screen))))
    screen))

(defun sly-agent-q-tui--quit ()
  "Quit Emacs as a user would (C-x C-c, yes), then end the session."
  (sly-agent-q-tui-keys "C-g" "C-x" "C-c")
  (sly-agent-q-test-sleep 1)
  (when (string-match-p "yes or no\\|(y or n)" (sly-agent-q-tui-screen))
    (sly-agent-q-tui-type "yes")
    (sly-agent-q-tui-keys "Enter"))
  (let ((deadline (+ (float-time) 15)))
    (while (and (< (float-time) deadline)
                (zerop (call-process "tmux" nil nil nil "has-session" "-t" sly-agent-q-tui-session)))
      (sly-agent-q-test-sleep 0.2)))
  (call-process "tmux" nil nil nil "kill-session" "-t" sly-agent-q-tui-session))

(defmacro sly-agent-q-tui-with-run (spec &rest body)
  "Run BODY with `make run' on screen, the chat alone in the frame.
SPEC is a plist: :script, the mock LLM's script (a Lisp value encoded
as JSON); :width and :height, the terminal's size (80 by 30 unless
given); :layout non-nil to keep the REPL beside the chat."
  (declare (indent 1) (debug t))
  `(sly-agent-q-tui--call-with-run (list ,@spec) (lambda () ,@body)))

(defun sly-agent-q-tui--call-with-run (spec body)
  "Run BODY (a function) with `make run' set up as SPEC says."
  (unless (executable-find "tmux") (ert-skip "tmux is not installed"))
  (unless (sly-agent-q-test-mock-available-p) (ert-skip "the mock LLM is missing"))
  (let* ((sly-agent-q-tui-session (format "sly-agent-q-tui-%d" (emacs-pid)))
         (sly-agent-q-tui-conversations
          (file-name-as-directory (make-temp-file "agent-q-tui-conversations" t)))
         ;; A home of its own: a first run, as a new user's (no native-compiled cache, no init).
         (home (make-temp-file "agent-q-tui-home" t))
         (url (sly-agent-q-test-start-mock (or (plist-get spec :script) '((steps . []))))))
    (unwind-protect
        (progn
          (sly-agent-q-tui--tmux
           "new-session" "-d" "-s" sly-agent-q-tui-session
           "-x" (number-to-string (or (plist-get spec :width) 80))
           "-y" (number-to-string (or (plist-get spec :height) 30))
           (mapconcat #'shell-quote-argument
                      (list "env" "-C" sly-agent-q-test-root
                            "-u" "OPENAI_API_KEY" "-u" "SLY_DIR" "ANTHROPIC_API_KEY=test-key" (concat "HOME=" home)
                            (concat "SLY_AGENT_Q_BASE_URL=" url)
                            (concat "SLY_AGENT_Q_CONVERSATION_DIRECTORY=" sly-agent-q-tui-conversations)
                            "scripts/run.sh")
                      " "))
          (sly-agent-q-tui-wait "CL-USER>" 180 "SBCL connected under SLIME")
          (sly-agent-q-tui-wait "ask about your Lisp image" 30 "the chat")
          ;; The layout (REPL | chat) comes on a timer after connecting: let it settle.
          (sly-agent-q-test-sleep 1)
          (unless (plist-get spec :layout)
            (sly-agent-q-tui-keys "C-x" "1")
            (sly-agent-q-tui-wait "(Agent-Q)" 10 "the chat")
            (sly-agent-q-test-sleep 0.5))
          (funcall body))
      (sly-agent-q-tui--quit)
      (sly-agent-q-test-stop-mock)
      ;; What the quit Emacs started (native compilation) may still write
      ;; there for a moment: try again once, and never fail the test on it.
      (dolist (dir (list sly-agent-q-tui-conversations home))
        (condition-case nil
            (delete-directory dir t)
          (error (sleep-for 2) (ignore-errors (delete-directory dir t))))))))

(defun sly-agent-q-tui-step (&rest blocks)
  "A mock LLM script step answering BLOCKS, streamed slowly enough to be seen."
  `((content . ,(vconcat blocks)) (chunk_delay_ms . 40) (text_delta_chars . 12)))

(defun sly-agent-q-tui-text (text)
  "A text block of TEXT."
  `((type . "text") (text . ,text)))

(defun sly-agent-q-tui-tool (name input)
  "A tool_use block calling NAME with INPUT (an alist)."
  `((type . "tool_use") (name . ,name) (input . ,input)))

(provide 'sly-agent-q-tui-helper)
;;; sly-agent-q-tui-helper.el ends here
