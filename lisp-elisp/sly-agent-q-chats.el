;;; sly-agent-q-chats.el --- Several chats, each with its project and its Lisp  -*- lexical-binding: t; -*-

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

;; The chats Emacs holds.  A chat buffer is one conversation, one project
;; root and one Lisp connection: the SLY or SLIME connection current when
;; it was made, which `sly-agent-q-chats-choose-lisp' (the menu) changes.
;; Its header line names both.  The first chat is *sly-agent-q*; each
;; further one *sly-agent-q: PROJECT*.
;;
;; Every command acts on the chat it is typed in; a command typed
;; elsewhere on the chat of the current project, else on the chat used
;; last (`sly-agent-q-chat-buffer').  What the server sends for a
;; conversation goes to the chat holding it, and an image call of a
;; chat's turn runs in that chat's Lisp (`sly-agent-q-bridge-lisp-function'),
;; never in whichever connection is current: when that connection is
;; closed, the call fails naming it.  A chat made while no Lisp was
;; connected, or whose Lisp closed, takes the next Lisp that connects.

;;; Code:

(require 'cl-lib)
(require 'subr-x)
(require 'sly-agent-q-server)
(require 'sly-agent-q-bridge)
(require 'sly-agent-q-files)
(require 'sly-agent-q-display)

(defvar sly-agent-q-chat-buffer-name)
(defvar sly-net-process-close-hooks)
(defvar slime-net-process-close-hooks)
(declare-function sly-agent-q-chat-mode "sly-agent-q-chat" ())
(declare-function sly-agent-q-chat-conversation-id "sly-agent-q-chat" (&optional buffer))
(declare-function sly-agent-q-transcript-notice "sly-agent-q-transcript" (text &optional face))

(defvar-local sly-agent-q-chats--root nil
  "The project root this chat works in, a directory name.")
(put 'sly-agent-q-chats--root 'permanent-local t)

(defvar-local sly-agent-q-chats--lisp nil
  "The Lisp this chat talks to, (ADAPTER . CONNECTION), or nil.
Nil: none was connected when the chat was made; the chat uses the
current Lisp and takes the next one that connects.")
(put 'sly-agent-q-chats--lisp 'permanent-local t)

(defvar sly-agent-q-chats-changed-hook nil
  "Run in a chat buffer when its project or its Lisp changed (or closed).")

;;;; The chats

(defun sly-agent-q-chats-p (&optional buffer)
  "Non-nil if BUFFER (default: the current buffer) is a chat."
  (eq (buffer-local-value 'major-mode (or buffer (current-buffer))) 'sly-agent-q-chat-mode))

(defun sly-agent-q-chats-list ()
  "The live chat buffers, the one used last first."
  (cl-remove-if-not #'sly-agent-q-chats-p (buffer-list)))

(defun sly-agent-q-chats--same-root-p (a b)
  "Non-nil if the directories A and B are the same."
  (equal (file-name-as-directory (file-truename a)) (file-name-as-directory (file-truename b))))

(defun sly-agent-q-chats-root-here ()
  "The project root of the current buffer, as a chat made here would work in.
In a chat, its own root.  Elsewhere the root the file tools would
find from this buffer (`sly-agent-q-files-project-root': the option
`sly-agent-q-project-root' when set, else the buffer's project)."
  (if (sly-agent-q-chats-p)
      (sly-agent-q-chats-root)
    (let* ((here (current-buffer))
           (sly-agent-q-files-default-buffer-function
            (if (sly-agent-q-protected-buffer-p here) sly-agent-q-files-default-buffer-function
              (lambda () here))))
      (sly-agent-q-files-project-root))))

(defun sly-agent-q-chats-root (&optional buffer)
  "The project root of the chat BUFFER (default: the current buffer).
The option `sly-agent-q-project-root', when set, is every chat's root:
the file tools confine every call to it."
  (with-current-buffer (or buffer (current-buffer))
    (if sly-agent-q-project-root
        (file-name-as-directory (expand-file-name sly-agent-q-project-root))
      (or sly-agent-q-chats--root (sly-agent-q-files-project-root)))))

(defun sly-agent-q-chats-lisp (&optional buffer)
  "The Lisp of the chat BUFFER (default: the current one), (ADAPTER . CONNECTION).
A chat without a Lisp of its own uses the current one; nil when none is
connected.  The connection returned may be closed."
  (or (buffer-local-value 'sly-agent-q-chats--lisp (or buffer (current-buffer)))
      (sly-agent-q-bridge-current)))

(defun sly-agent-q-chats-project-name (root)
  "The name of the project at ROOT, for buffer names and header lines."
  (file-name-nondirectory (directory-file-name root)))

(defun sly-agent-q-chats-label (&optional buffer)
  "\"PROJECT · LISP\": what the header line of the chat BUFFER names."
  (let ((lisp (sly-agent-q-chats-lisp buffer)))
    (format "%s · %s"
            (sly-agent-q-chats-project-name (sly-agent-q-chats-root buffer))
            (cond ((null lisp) "no Lisp")
                  ((process-live-p (cdr lisp)) (sly-agent-q-bridge-lisp-name lisp))
                  (t (concat (sly-agent-q-bridge-lisp-name lisp) " closed"))))))

(defun sly-agent-q-chats-of-root (root)
  "The chat working in ROOT used last, or nil."
  (cl-find-if (lambda (b) (ignore-errors (sly-agent-q-chats--same-root-p (sly-agent-q-chats-root b) root)))
              (sly-agent-q-chats-list)))

(defun sly-agent-q-chats-of-connection (connection)
  "The chat talking to the Lisp CONNECTION used last, or nil."
  (cl-find-if (lambda (b) (eq (cdr (sly-agent-q-chats-lisp b)) connection))
              (sly-agent-q-chats-list)))

(defun sly-agent-q-chats-of-conversation (id)
  "The chat holding the conversation ID, or nil."
  (and id (cl-find-if (lambda (b) (equal (sly-agent-q-chat-conversation-id b) id))
                      (sly-agent-q-chats-list))))

(defun sly-agent-q-chats--buffer-name (root)
  "The name of a new chat for ROOT."
  (if (get-buffer sly-agent-q-chat-buffer-name)
      (generate-new-buffer-name (format "*sly-agent-q: %s*" (sly-agent-q-chats-project-name root)))
    sly-agent-q-chat-buffer-name))

(defun sly-agent-q-chats-create (&optional root lisp)
  "Make a new chat working in ROOT and talking to LISP; return its buffer.
ROOT defaults to `sly-agent-q-chats-root-here', LISP (ADAPTER . CONNECTION)
to the current Lisp."
  (let* ((root (file-name-as-directory (expand-file-name (or root (sly-agent-q-chats-root-here)))))
         (lisp (or lisp (sly-agent-q-bridge-current))))
    (with-current-buffer (get-buffer-create (sly-agent-q-chats--buffer-name root))
      (setq sly-agent-q-chats--root root
            sly-agent-q-chats--lisp lisp
            default-directory root)
      (sly-agent-q-chat-mode)
      (current-buffer))))

;;;; The Lisp of a chat

(defun sly-agent-q-chats--changed (buffer)
  "Run `sly-agent-q-chats-changed-hook' in BUFFER."
  (when (buffer-live-p buffer)
    (with-current-buffer buffer
      (run-hooks 'sly-agent-q-chats-changed-hook))))

(defun sly-agent-q-chats-set-lisp (lisp &optional buffer)
  "Make the chat BUFFER (default: the current buffer) talk to LISP.
LISP is (ADAPTER . CONNECTION).  The next image call of its turns runs there."
  (with-current-buffer (or buffer (current-buffer))
    (unless (sly-agent-q-chats-p) (user-error "Not in a chat buffer"))
    (setq sly-agent-q-chats--lisp lisp)
    (sly-agent-q-chats--changed (current-buffer))))

(defun sly-agent-q-chats-choose-lisp (name)
  "Make this chat talk to the open Lisp connection NAME.
Interactively, read NAME among the open SLY and SLIME connections."
  (interactive
   (let ((names (mapcar #'sly-agent-q-bridge-lisp-name (sly-agent-q-bridge-lisps))))
     (unless names (user-error "No Lisp is connected; start one with M-x sly (or M-x slime)"))
     (list (completing-read "Lisp for this chat: " names nil t nil nil
                            (let ((own (sly-agent-q-chats-lisp)))
                              (and own (sly-agent-q-bridge-lisp-name own)))))))
  (let ((lisp (cl-find name (sly-agent-q-bridge-lisps) :key #'sly-agent-q-bridge-lisp-name
                       :test #'equal)))
    (unless lisp (user-error "No open Lisp connection is named %s" name))
    (sly-agent-q-chats-set-lisp lisp)
    (sly-agent-q-transcript-notice (format "[This chat now talks to the Lisp %s.]" name))))

(defun sly-agent-q-chats--lisp-for-call (params)
  "Return the Lisp to run an image call of PARAMS in.
For `sly-agent-q-bridge-lisp-function': the Lisp of the chat holding
the call's conversation; nil when no chat holds it (an MCP client's
call: the current Lisp)."
  (let ((chat (sly-agent-q-chats-of-conversation (plist-get params :conversationId))))
    (and chat (buffer-local-value 'sly-agent-q-chats--lisp chat))))

(setq sly-agent-q-bridge-lisp-function #'sly-agent-q-chats--lisp-for-call)

;;;; The conversations of killed chats

(defvar sly-agent-q-chats--killed (make-hash-table :test #'equal)
  "The conversations chats killed or left: conversation id to (NAME . HOW).
NAME is the chat's name, HOW `killed' or `left' (a new conversation
began there).  A call the server sent before it saw the chat's cancel
finds no chat: without this, it would run in whichever Lisp is current.")

(defun sly-agent-q-chats-note-killed (conversation-id name)
  "Remember CONVERSATION-ID as the conversation of the chat NAME, killed."
  (puthash conversation-id (cons name 'killed) sly-agent-q-chats--killed))

(defun sly-agent-q-chats-note-left (conversation-id name)
  "Remember CONVERSATION-ID as a conversation the chat NAME left.
A kill noted first stays what it says."
  (unless (gethash conversation-id sly-agent-q-chats--killed)
    (puthash conversation-id (cons name 'left) sly-agent-q-chats--killed)))

(defun sly-agent-q-chats--note-killed ()
  "The chat being killed: remember its conversation as a killed chat's."
  (let ((id (sly-agent-q-chat-conversation-id)))
    (when id (sly-agent-q-chats-note-killed id (buffer-name)))))

(defun sly-agent-q-chats--watch-kill ()
  "Note this chat's conversation when the chat is killed.
Before the chat's own kill hook, which forgets the conversation."
  (add-hook 'kill-buffer-hook #'sly-agent-q-chats--note-killed -90 t))

(add-hook 'sly-agent-q-chat-mode-hook #'sly-agent-q-chats--watch-kill)

(defun sly-agent-q-chats-killed-message (conversation-id)
  "Why a call of CONVERSATION-ID must not run: its chat killed or left; or nil.
Nil too when a live chat holds the conversation again (resumed), and for
a conversation no chat ever held (an MCP client's): those run as before."
  (let ((noted (and conversation-id (gethash conversation-id sly-agent-q-chats--killed))))
    (and noted (not (sly-agent-q-chats-of-conversation conversation-id))
         (format (if (eq (cdr noted) 'killed)
                     "The chat %s of this conversation was killed: its calls are refused, and this one did not run."
                   "The chat %s has left this conversation for a new one: its calls are refused, and this one did not run.")
                 (sly-agent-q-display-line (car noted))))))

(defun sly-agent-q-chats--refusal (params)
  "Refuse the call of PARAMS if its chat was killed.
For `sly-agent-q-dispatch-refusal-function'."
  (sly-agent-q-chats-killed-message (plist-get params :conversationId)))

(setq sly-agent-q-dispatch-refusal-function #'sly-agent-q-chats--refusal)

(defun sly-agent-q-chats--lisp-connected (&rest _)
  "A Lisp connected: chats without a Lisp, or whose Lisp closed, take it."
  (let ((new (sly-agent-q-bridge-current)))
    (when new
      (dolist (chat (sly-agent-q-chats-list))
        (let ((own (buffer-local-value 'sly-agent-q-chats--lisp chat)))
          (unless (and own (process-live-p (cdr own)))
            (with-current-buffer chat
              (setq sly-agent-q-chats--lisp new)
              (when own
                (sly-agent-q-transcript-notice
                 (format "[Its Lisp had closed: this chat now talks to %s.]"
                         (sly-agent-q-bridge-lisp-name new))))
              (sly-agent-q-chats--changed chat))))))))

(defun sly-agent-q-chats--lisp-closed (connection &rest _)
  "The Lisp CONNECTION closed: the chats talking to it say so in their header."
  (dolist (chat (sly-agent-q-chats-list))
    (when (eq (cdr (buffer-local-value 'sly-agent-q-chats--lisp chat)) connection)
      (sly-agent-q-chats--changed chat))))

(add-hook 'sly-connected-hook #'sly-agent-q-chats--lisp-connected)
(add-hook 'slime-connected-hook #'sly-agent-q-chats--lisp-connected)
(add-hook 'sly-net-process-close-hooks #'sly-agent-q-chats--lisp-closed)
(add-hook 'slime-net-process-close-hooks #'sly-agent-q-chats--lisp-closed)

(provide 'sly-agent-q-chats)
;;; sly-agent-q-chats.el ends here
