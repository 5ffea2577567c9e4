;;; sly-agent-q-run-command-test.el --- The README's `make run' command, as a user runs it  -*- lexical-binding: t; -*-

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

;; scripts/run.sh (what `make run' runs) is started in a real terminal
;; (tmux), exactly as a new user would start it.  The test reads the
;; screen: SBCL connected under SLIME, the chat open and selected; then it
;; types a question and reads the model's answer (the mock LLM) on screen.
;; Without any way to reach a model, the chat says how to give one.

;;; Code:

(require 'sly-agent-q-test-helper
         (expand-file-name "../elisp/sly-agent-q-test-helper"
                           (file-name-directory (or load-file-name buffer-file-name))))

(defun e2e-run--tmux (&rest args)
  "Run tmux with ARGS; return its output."
  (with-temp-buffer
    (let ((process-environment (cons "TERM=xterm-256color" process-environment)))
      (apply #'call-process "tmux" nil t nil args))
    (buffer-string)))

(defun e2e-run--screen (session)
  "The text on SESSION's screen."
  (e2e-run--tmux "capture-pane" "-p" "-t" session))

(defun e2e-run--quit (session)
  "Quit Emacs in SESSION as a user would (C-x C-c, yes), so it stops its Lisp and server."
  (e2e-run--tmux "send-keys" "-t" session "C-x" "C-c")
  (sly-agent-q-test-sleep 1)
  (when (string-match-p "yes or no" (e2e-run--screen session))
    (e2e-run--tmux "send-keys" "-t" session "yes" "Enter"))
  (let ((deadline (+ (float-time) 15)))
    (while (and (< (float-time) deadline)
                (zerop (call-process "tmux" nil nil nil "has-session" "-t" session)))
      (sly-agent-q-test-sleep 0.2)))
  (call-process "tmux" nil nil nil "kill-session" "-t" session))

(defmacro e2e-run--with-session (env &rest body)
  "Start scripts/run.sh with ENV (a list of VAR=VALUE) in tmux; run BODY with `session' bound."
  (declare (indent 1) (debug t))
  `(progn
     (unless (executable-find "tmux") (ert-skip "tmux is not installed"))
     (let ((session (format "sly-agent-q-run-%d" (emacs-pid)))
           ;; The conversations of the run go to a directory of the test's, not the tester's.
           (conversations (file-name-as-directory (make-temp-file "agent-q-conversations" t))))
       (unwind-protect
           (progn
             (e2e-run--tmux "new-session" "-d" "-s" session "-x" "180" "-y" "40"
                            (mapconcat #'identity
                                       (append (list "cd" (shell-quote-argument sly-agent-q-test-root) "&&" "env"
                                                     "-u" "ANTHROPIC_API_KEY" "-u" "OPENAI_API_KEY"
                                                     (shell-quote-argument
                                                      (concat "SLY_AGENT_Q_CONVERSATION_DIRECTORY=" conversations)))
                                               (mapcar #'shell-quote-argument ,env)
                                               (list "scripts/run.sh"))
                                       " "))
             (sly-agent-q-test-wait
              (lambda () (let ((screen (e2e-run--screen session)))
                           (and (string-match-p "CL-USER>" screen)
                                (string-match-p "sly-agent-q: ask about your Lisp image" screen))))
              180 "Emacs with SLIME and the chat on screen")
             ,@body)
         (e2e-run--quit session)
         (delete-directory conversations t)))))

(ert-deftest e2e-run-command-answers-on-screen ()
  "make run: type a question in the chat, read the model's answer on the screen."
  (unless (sly-agent-q-test-mock-available-p) (ert-skip "the mock LLM is missing"))
  (let ((url (sly-agent-q-test-start-mock
              '((steps . [((content . [((type . "text")
                                        (text . "Hello from the model; you said: {{last_user_text}}"))]))])))))
    (unwind-protect
        (e2e-run--with-session (list "ANTHROPIC_API_KEY=test-key" (concat "SLY_AGENT_Q_BASE_URL=" url))
          (should-not (string-match-p "No model is configured" (e2e-run--screen session)))
          (e2e-run--tmux "send-keys" "-t" session "what is car?" "Enter")
          (sly-agent-q-test-wait
           (lambda () (string-match-p "you said: what is car\\?" (e2e-run--screen session)))
           30 "the answer on screen")
          ;; The conversation was saved, into the run's directory.
          (should (directory-files conversations nil "\\.jsonl\\'")))
      (sly-agent-q-test-stop-mock))))

(ert-deftest e2e-run-command-without-a-model-says-how ()
  "make run with no key and no endpoint: the chat tells the user how to give one."
  (e2e-run--with-session (list "SLY_AGENT_Q_BASE_URL=")
    (let ((screen (e2e-run--screen session)))
      (should (string-match-p "No model is configured yet" screen))
      (should (string-match-p "ANTHROPIC_API_KEY" screen))
      (should (string-match-p "11434" screen))
      ;; Its lines are lines on screen, not one line with escaped newlines.
      (should-not (string-match-p "Either:\\\\n" screen))
      (should (string-match-p "^.*Then ask, for example" screen)))))

(ert-deftest e2e-run-command-exits-when-its-terminal-closes ()
  "Closing the terminal (SIGHUP) ends Emacs, its server and its Lisp promptly."
  (let (pid)
    (e2e-run--with-session (list "SLY_AGENT_Q_BASE_URL=")
      (setq pid (string-to-number (e2e-run--tmux "list-panes" "-t" session "-F" "#{pane_pid}")))
      (should (> pid 0))
      (should (process-attributes pid))
      (e2e-run--tmux "kill-session" "-t" session))
    (unwind-protect
        (sly-agent-q-test-wait
         (lambda () (let ((attrs (process-attributes pid)))
                      (or (null attrs) (equal (alist-get 'state attrs) "Z"))))
         15 "Emacs to exit after its terminal closed")
      ;; Never leave a hung Emacs behind, even when the test fails.
      (when (process-attributes pid) (signal-process pid 'kill)))))

(provide 'sly-agent-q-run-command-test)
;;; sly-agent-q-run-command-test.el ends here
