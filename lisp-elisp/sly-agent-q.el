;;; sly-agent-q.el --- An AI agent that works inside your running Lisp image  -*- lexical-binding: t; -*-

;; Copyright (C) 2026 The sly-agent-q authors

;; Author: The sly-agent-q authors
;; Version: 0.1.0
;; Package-Requires: ((emacs "28.1"))
;; Keywords: lisp, tools, convenience
;; URL: https://github.com/sly-agent-q/sly-agent-q

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

;; sly-agent-q is an agent for Common Lisp programmers.  Through your SLY
;; or SLIME connection it looks inside the running image (describes
;; symbols, finds callers, inspects classes, expands macros), evaluates
;; and compiles code there, edits buffers and files with your approval,
;; and iterates until the task is done.
;;
;; M-x sly-agent-q opens the chat of the current project (C-u M-x
;; sly-agent-q a new one); each chat has its project and its Lisp
;; connection, named in its header line.  The agent's commands for
;; Lisp buffers are in `sly-agent-q-command-map', bound to no key by
;; default (C-c and a letter are yours); for example, under C-c q:
;;
;;   (global-set-key (kbd "C-c q") 'sly-agent-q-command-map)
;;
;;   C-c q q   open the chat          C-c q r   attach the region
;;   C-c q d   attach the defun       C-c q b   attach a buffer
;;   C-c q f   attach a file          C-c q k   cancel the running turn
;;
;; `sly-agent-q-lisp-mode' (a minor mode with the lighter AgentQ) can
;; carry the map instead: set `sly-agent-q-lisp-mode-prefix' and
;;
;;   (add-hook 'lisp-mode-hook #'sly-agent-q-lisp-mode)
;;
;; Setup: Node.js 20 or newer; the server, which a package built from
;; the git tree (MELPA) does not carry: M-x sly-agent-q-install-server
;; installs it with npm (M-x sly-agent-q offers to); and an API key in
;; ANTHROPIC_API_KEY (or OPENAI_API_KEY with `sly-agent-q-provider'
;; "openai") or in auth-source ("machine api.anthropic.com password
;; KEY").
;;
;; In the chat buffer: RET or C-c C-c sends, C-j a newline, C-c C-k
;; cancels the running turn, M-p / M-n walk the input history, TAB or
;; RET on a tool call shows its arguments and result.  When a dangerous
;; tool needs approval: y approve, n deny (with a reason for the model),
;; e edit the arguments as JSON, a allow the tool for the session (on the
;; approval), or C-c C-a / C-c C-d from anywhere in the buffer.
;;
;; In a Lisp debugger buffer (sly-db, sldb), M-x sly-agent-q-debugger-ask
;; puts the condition, the restarts and the top frames in the chat's
;; input; the agent's debugger tools see the frames and locals, and
;; invoke a restart only with your approval.
;;
;; Options (M-x customize-group RET sly-agent-q): `sly-agent-q-provider',
;; `sly-agent-q-model', `sly-agent-q-base-url', `sly-agent-q-max-steps',
;; `sly-agent-q-trust-levels' (per tool: safe, cautious or dangerous),
;; `sly-agent-q-max-safety-level', `sly-agent-q-project-root',
;; `sly-agent-q-node-program', `sly-agent-q-server-file',
;; `sly-agent-q-install-directory'.
;;
;; Scripting: (sly-agent-q-send "..." CALLBACK) sends a message;
;; `sly-agent-q-turn-finished-hook' runs when a turn ends;
;; `sly-agent-q-approval-function' replaces the approval UI.
;;
;; Debugging: M-x sly-agent-q-toggle-events-log, then M-x
;; sly-agent-q-events-buffer (every JSON-RPC message),
;; M-x sly-agent-q-stderr-buffer (the server's log), M-x
;; sly-agent-q-list-tools, M-x sly-agent-q-restart-server.
;;
;; The parts: sly-agent-q-protocol.el (the JSON-RPC methods, their
;; handlers' generic functions), sly-agent-q-server.el (the Node server), -bridge.el (the
;; Lisp image through SLY or SLIME), -chat.el (the chat buffer),
;; -approval.el (approvals), -tools.el, -files.el, -diff.el (buffer and
;; file tools, the reviewed file edit), -mcp.el (the tools served over
;; MCP to Claude Code or Codex, and MCP servers used by the agent),
;; -debugger.el (the user's debugger, for the agent).

;;; Code:

(require 'sly-agent-q-server)
(require 'sly-agent-q-bridge)
(require 'sly-agent-q-chat)
(require 'sly-agent-q-chats)
(require 'sly-agent-q-helpers-load)
(require 'sly-agent-q-approval)
(require 'sly-agent-q-tools)
(require 'sly-agent-q-mcp)
(require 'sly-agent-q-sessions)
(require 'sly-agent-q-debugger)
(require 'sly-agent-q-menu)

(defconst sly-agent-q-version "0.1.0"
  "The version of sly-agent-q.")

;;;###autoload (autoload 'sly-agent-q-send "sly-agent-q")
;;;###autoload (autoload 'sly-agent-q-cancel "sly-agent-q" nil t)
;;;###autoload (autoload 'sly-agent-q-attach-region "sly-agent-q" nil t)
;;;###autoload (autoload 'sly-agent-q-attach-defun "sly-agent-q" nil t)
;;;###autoload (autoload 'sly-agent-q-attach-buffer "sly-agent-q" nil t)
;;;###autoload (autoload 'sly-agent-q-attach-file "sly-agent-q" nil t)

;;;###autoload
(defun sly-agent-q (&optional new)
  "Open the chat of the current project, starting the server if needed.
In a chat, that chat.  With a prefix argument NEW, or when no chat
works in this project, a new chat: for this project and the Lisp
connection current now (see `sly-agent-q-chats-create').  When no
server is found, offer to install it with npm first."
  (interactive "P")
  (let* ((buf (cond (new (sly-agent-q-chats-create))
                    ((sly-agent-q-chats-p) (current-buffer))
                    ((sly-agent-q-chats-of-root (sly-agent-q-chats-root-here)))
                    (t (sly-agent-q-chats-create))))
         (report (lambda (_conn err)
                   (when (and err (buffer-live-p buf))
                     (with-current-buffer buf
                       (sly-agent-q-transcript-error-notice err)))))
         (missing (condition-case nil (null (sly-agent-q-locate-find-server)) (user-error nil))))
    (if (and missing
             (called-interactively-p 'interactive)
             (y-or-n-p (format "The sly-agent-q server is not installed.  Install version %s with npm now? "
                               sly-agent-q-install-server-version)))
        (progn
          (with-current-buffer buf
            (sly-agent-q-transcript-notice (format "Installing the server with npm (progress in %s)..."
                                             sly-agent-q-install-buffer-name)))
          (sly-agent-q-install-server
           nil (lambda (err)
                 (if err (funcall report nil err)
                   (sly-agent-q-server-ensure report)))))
      (sly-agent-q-server-ensure report))
    (pop-to-buffer buf)
    (with-current-buffer buf (goto-char (point-max)))
    buf))

(defcustom sly-agent-q-lisp-mode-prefix nil
  "A key prefix for the agent's commands in `sly-agent-q-lisp-mode'.
A string for `kbd', or nil for none.  None by default: keys made of
the user prefix and a letter belong to the user, so the package binds
no key of its own; bind `sly-agent-q-command-map' yourself, or set
this.  Changes take effect when the package is loaded again."
  :type '(choice (const :tag "None" nil) (string :tag "Key"))
  :group 'sly-agent-q)

;;;###autoload (autoload 'sly-agent-q-command-map "sly-agent-q" nil t 'keymap)
(defvar sly-agent-q-command-map
  (let ((map (make-sparse-keymap)))
    (define-key map "q" #'sly-agent-q)
    (define-key map "r" #'sly-agent-q-attach-region)
    (define-key map "d" #'sly-agent-q-attach-defun)
    (define-key map "b" #'sly-agent-q-attach-buffer)
    (define-key map "f" #'sly-agent-q-attach-file)
    (define-key map "c" #'sly-agent-q-clear-attachments)
    (define-key map "k" #'sly-agent-q-cancel)
    (define-key map "n" #'sly-agent-q-new-conversation)
    map)
  "The agent's commands, for a prefix key of your choice.
Bind it with `global-set-key' or in `sly-agent-q-lisp-mode-map', or
set `sly-agent-q-lisp-mode-prefix'.")
(fset 'sly-agent-q-command-map sly-agent-q-command-map)

(defvar sly-agent-q-lisp-mode-map
  (let ((map (make-sparse-keymap)))
    (when sly-agent-q-lisp-mode-prefix
      (define-key map (kbd sly-agent-q-lisp-mode-prefix) 'sly-agent-q-command-map))
    map)
  "Keymap of `sly-agent-q-lisp-mode'.")

;;;###autoload
(define-minor-mode sly-agent-q-lisp-mode
  "The sly-agent-q commands in Lisp buffers.
The mode binds no key by default (the user prefix followed by a
letter is yours): put `sly-agent-q-command-map' under a prefix key
of your choice in `sly-agent-q-lisp-mode-map' or globally (the
README suggests one), or set `sly-agent-q-lisp-mode-prefix'.
The commands:

\\{sly-agent-q-command-map}"
  :lighter " AgentQ"
  :keymap sly-agent-q-lisp-mode-map)

(provide 'sly-agent-q)
;;; sly-agent-q.el ends here
