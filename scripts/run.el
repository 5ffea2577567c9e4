;;; run.el --- Start sly-agent-q from a source checkout: SBCL, SLIME, the chat  -*- lexical-binding: t; -*-

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

;; Loaded by scripts/run.sh (`make run') into `emacs -nw -Q -L lisp-elisp'.
;; Starts SBCL through SLIME (SLY instead when SLY_DIR names a SLY checkout),
;; turns on `sly-agent-q-lisp-mode' in Lisp buffers, and opens the chat
;; next to the REPL.  When no way to reach a model is configured, the chat
;; says how to give one.
;;
;; Environment: SLY_AGENT_Q_PROVIDER (anthropic or openai),
;; SLY_AGENT_Q_BASE_URL, SLY_AGENT_Q_MODEL, ANTHROPIC_API_KEY,
;; OPENAI_API_KEY, SLY_DIR, SLY_AGENT_Q_PROJECT (the project's directory:
;; the checkout itself when unset).

;;; Code:

(require 'cl-lib)
(require 'sly-agent-q)
(load (expand-file-name "lisp-modes" (file-name-directory load-file-name)) nil t)

;; The system's packages are compiled to native code on their first use,
;; in the background; what that compiler has to say is for their
;; maintainers, not a window in a new user's face.  It stays in the
;; *Warnings* buffer, which is not shown.
(defvar native-comp-async-report-warnings-errors)
(setq native-comp-async-report-warnings-errors 'silent)
;; markdown-mode (Debian's elpa-markdown-mode), when installed, renders the chat's Markdown.
;; Not beside SLY (SLY_DIR): the system's SLIME would join `lisp-mode-hook', and SLY
;; would stop at its question about it.
(unless (getenv "SLY_DIR")
  (sly-agent-q-dev-system-packages))

(defun sly-agent-q-run--load-lisp-mode ()
  "Load SLY from SLY_DIR, else SLIME; return the symbol `sly', `slime' or nil."
  (cond ((sly-agent-q-dev-require-sly) 'sly)
        ((sly-agent-q-dev-require-slime) 'slime)))

(defun sly-agent-q-run--model-configured-p ()
  "Non-nil when the agent has some way to reach a model."
  (or sly-agent-q-api-key
      sly-agent-q-base-url
      (getenv "ANTHROPIC_API_KEY")
      (getenv "OPENAI_API_KEY")
      (ignore-errors (sly-agent-q-configuration-api-key))))

(defconst sly-agent-q-run--no-key-help
  "No model is configured yet.  Either:
  - export ANTHROPIC_API_KEY=... before `make run', or put
    \"machine api.anthropic.com password KEY\" in ~/.authinfo.gpg;
  - or use a local OpenAI-compatible server such as Ollama:
    SLY_AGENT_Q_PROVIDER=openai SLY_AGENT_Q_BASE_URL=http://localhost:11434/v1 \\
    SLY_AGENT_Q_MODEL=qwen2.5-coder make run
Then ask, for example: \"Describe the function MAPCAR\"."
  "What the chat says when no model is configured.")

(defconst sly-agent-q-run--side-by-side-columns 100
  "The narrowest frame in which the Lisp's window and the chat stand side by side.
In a narrower one (an 80-column terminal) two halves would cut every
line of the chat: the Lisp's window goes above, a third of the height.")

(defun sly-agent-q-run--layout (chat &optional lisp-buffer)
  "Show LISP-BUFFER (by default the Lisp's REPL) with CHAT, and select CHAT.
Side by side (the Lisp on the left) in a frame of at least
`sly-agent-q-run--side-by-side-columns' columns, else the Lisp above."
  (let ((lisp (or lisp-buffer
                  (cl-find-if (lambda (b) (memq (buffer-local-value 'major-mode b)
                                                '(slime-repl-mode sly-mrepl-mode)))
                              (buffer-list)))))
    (delete-other-windows)
    (switch-to-buffer chat)
    (when (and lisp (not (eq lisp chat)))
      (set-window-buffer
       (if (>= (frame-width) sly-agent-q-run--side-by-side-columns)
           (split-window nil nil 'left)
         (split-window nil (- (max window-min-height (/ (window-total-height) 3))) 'above))
       lisp))))

(defun sly-agent-q-run ()
  "Start the Lisp, then open the chat next to the REPL."
  (let ((provider (getenv "SLY_AGENT_Q_PROVIDER"))
        (base-url (getenv "SLY_AGENT_Q_BASE_URL"))
        (model (getenv "SLY_AGENT_Q_MODEL"))
        (conversations (getenv "SLY_AGENT_Q_CONVERSATION_DIRECTORY"))
        (project (getenv "SLY_AGENT_Q_PROJECT")))
    ;; The project to work on (the checkout itself when not given): the
    ;; chat and the Lisp start there, so the agent's root is that project.
    (when (and project (not (string-empty-p project)))
      (setq default-directory (file-name-as-directory (expand-file-name project))))
    (when (and conversations (not (string-empty-p conversations)))
      (setq sly-agent-q-conversation-directory conversations))
    (when (and provider (not (string-empty-p provider))) (setq sly-agent-q-provider provider))
    (when (and base-url (not (string-empty-p base-url))) (setq sly-agent-q-base-url base-url))
    (when (and model (not (string-empty-p model))) (setq sly-agent-q-model model)))
  (add-hook 'lisp-mode-hook #'sly-agent-q-lisp-mode)
  ;; The binding the README suggests (the package itself binds no C-c letter).
  (define-key sly-agent-q-lisp-mode-map (kbd "C-c q") 'sly-agent-q-command-map)
  (let ((mode (sly-agent-q-run--load-lisp-mode))
        (chat (sly-agent-q)))
    (delete-other-windows (get-buffer-window chat))
    (with-current-buffer chat
      (sly-agent-q-transcript-notice
       (pcase mode
         ('sly "Starting SBCL with SLY...")
         ('slime "Starting SBCL with SLIME...")
         (_ "Neither SLY nor SLIME was found: image tools will not work until one is connected.")))
      (unless (sly-agent-q-run--model-configured-p)
        ;; A notice is one line of data (newlines shown escaped): one notice a line.
        (dolist (line (split-string sly-agent-q-run--no-key-help "\n"))
          (sly-agent-q-transcript-notice line))))
    (when mode
      (setq inferior-lisp-program "sbcl")
      ;; The Lisp mode shows its REPL when connected; then lay out REPL | chat, chat selected.
      (add-hook (if (eq mode 'sly) 'sly-connected-hook 'slime-connected-hook)
                (lambda ()
                  ;; The "Starting..." notice above is followed by what became of it.
                  (when (buffer-live-p chat)
                    (with-current-buffer chat
                      (sly-agent-q-transcript-notice
                       (if (eq mode 'sly) "SBCL is connected with SLY." "SBCL is connected with SLIME."))))
                  (run-at-time 0 nil #'sly-agent-q-run--layout chat))
                t)
      (if (eq mode 'sly) (funcall 'sly) (funcall 'slime))
      ;; Starting shows the Lisp's process buffer in the selected window:
      ;; the chat stays selected beside it, so what the user types while
      ;; the Lisp starts goes to the chat, not to the Lisp's input.
      (let ((shown (window-buffer (selected-window))))
        (unless (eq shown chat)
          (sly-agent-q-run--layout chat shown))))))

(sly-agent-q-run)

(provide 'run)
;;; run.el ends here
