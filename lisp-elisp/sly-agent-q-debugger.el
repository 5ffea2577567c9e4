;;; sly-agent-q-debugger.el --- The user's Lisp debugger, for the agent  -*- lexical-binding: t; -*-

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

;; When the user's program hits an error, SLY's sly-db or SLIME's sldb
;; buffer shows it: the image thread that signalled waits in
;; SLYNK/SWANK's debugger loop, at its own level, with its stack,
;; locals and restarts intact.  This file lets the agent see and act on
;; that state, and the user hand it to the chat:
;;
;; - `sly-agent-q-debugger-ask' (in a debugger buffer) puts the
;;   condition, its type, the restarts and the top frames in the chat's
;;   input, to edit and send.
;; - The tools debugger_state, debugger_frame_locals,
;;   debugger_eval_in_frame, debugger_inspect_local and
;;   debugger_invoke_restart (declared in
;;   server/tools/catalog/debugger.ts) are answered here.
;;
;; Why through Emacs: the backend's frame facilities work only in the
;; debugged thread (its debugging environment is dynamic state of that
;; thread), and only the debugger buffer knows which thread and level
;; it shows.  So, as the buffer's own commands do, the requests go to
;; that thread (an :emacs-rex with its thread), where lisp-cl's
;; DEBUGGER-CALL runs them under the helpers' guard: a timeout, every
;; value printed within two seconds, no nested debugger level.  A
;; restart is invoked by the debugger buffer's own command, in that
;; buffer, so the buffer closes or moves on exactly as when the user
;; chooses it.

;;; Code:

(require 'cl-lib)
(require 'subr-x)
(require 'sly-agent-q-bridge)
(require 'sly-agent-q-tools)
(require 'sly-agent-q-tool-declare)
(require 'sly-agent-q-chat)
(require 'sly-agent-q-chats)
(require 'sly-agent-q-display)

(declare-function sldb-invoke-restart "ext:slime" (&optional number))
(declare-function sly-db-invoke-restart "ext:sly" (restart-number))

(defcustom sly-agent-q-debugger-ask-frames 8
  "How many frames `sly-agent-q-debugger-ask' puts in the message."
  :type 'integer
  :group 'sly-agent-q)

(defvar sly-agent-q-debugger-restart-wait 10
  "Seconds debugger_invoke_restart waits to see the debugger move on.")

;;;; Debugger buffers, SLY's and SLIME's

(defconst sly-agent-q-debugger--kinds
  '((sly-db-mode :adapter "SLY" :level sly-db-level :restarts sly-db-restarts
                 :condition sly-db-condition :thread sly-current-thread
                 :connection sly-buffer-connection)
    (sldb-mode :adapter "SLIME" :level sldb-level :restarts sldb-restarts
               :condition sldb-condition :thread slime-current-thread
               :connection slime-buffer-connection))
  "Per debugger mode, its adapter and the buffer-local variables it keeps.")

(defun sly-agent-q-debugger--kind (buffer)
  "The entry of `sly-agent-q-debugger--kinds' for BUFFER, or nil."
  (and (buffer-live-p buffer)
       (cdr (assq (buffer-local-value 'major-mode buffer) sly-agent-q-debugger--kinds))))

(defun sly-agent-q-debugger--get (buffer key)
  "The value of KEY (:level, :restarts...) of debugger BUFFER."
  (let ((var (plist-get (sly-agent-q-debugger--kind buffer) key)))
    (and var (local-variable-p var buffer) (buffer-local-value var buffer))))

(defun sly-agent-q-debugger-buffers ()
  "Return the live debugger buffers (sly-db, sldb) of the agent's Lisp.
Most recently shown first.  A chat whose Lisp closed has none: its
tools fail naming that Lisp (a tool error), never reading another's."
  (let* ((lisp (sly-agent-q-bridge-current))
         (closed (sly-agent-q-bridge-closed-message lisp))
         (conn (cdr lisp)))
    (when closed (sly-agent-q-tool-fail "%s" closed))
    (cl-remove-if-not (lambda (b)
                        (and (sly-agent-q-debugger--kind b)
                             (sly-agent-q-debugger--get b :level)
                             (or (null conn) (eq (sly-agent-q-debugger--get b :connection) conn))))
                      (buffer-list))))

(defun sly-agent-q-debugger--find (thread &optional level)
  "The debugger buffer of THREAD (nil: the most recent), checked against LEVEL.
Signal a tool error the model can act on when there is none."
  (let* ((buffers (sly-agent-q-debugger-buffers))
         (buffer (if thread
                     (cl-find-if (lambda (b) (equal (sly-agent-q-debugger--get b :thread) thread))
                                 buffers)
                   (car buffers))))
    (cond
     ((null buffers)
      (sly-agent-q-tool-fail "No debugger is open in the Lisp image: nothing is stopped at an error."))
     ((null buffer)
      (sly-agent-q-tool-fail "No debugger is open for thread %s; debuggers are open for threads %s."
                             thread (mapconcat (lambda (b) (format "%s" (sly-agent-q-debugger--get b :thread)))
                                               buffers ", ")))
     ((and level (not (equal level (sly-agent-q-debugger--get buffer :level))))
      (sly-agent-q-tool-fail "The debugger of thread %s is at level %s now, not %s; debugger_state shows it."
                             (sly-agent-q-debugger--get buffer :thread)
                             (sly-agent-q-debugger--get buffer :level) level))
     (t buffer))))

(defun sly-agent-q-debugger--adapter (buffer)
  "The bridge adapter of debugger BUFFER."
  (let ((name (plist-get (sly-agent-q-debugger--kind buffer) :adapter)))
    (cl-find-if (lambda (a) (equal (sly-agent-q-bridge-adapter-name a) name))
                sly-agent-q-bridge-adapters)))

(defun sly-agent-q-debugger--condition-lines (buffer)
  "The condition of debugger BUFFER: its message and type, as lines."
  (let ((condition (sly-agent-q-debugger--get buffer :condition)))
    (format "Condition: %s\nType: %s"
            (string-trim (format "%s" (or (nth 0 condition) "")))
            (string-trim (format "%s" (or (nth 1 condition) ""))))))

(defun sly-agent-q-debugger--restart-lines (buffer)
  "The restarts of debugger BUFFER, one numbered line each."
  (let ((i -1))
    (mapconcat (lambda (r) (format "  %d: [%s] %s" (cl-incf i) (nth 0 r) (nth 1 r)))
               (sly-agent-q-debugger--get buffer :restarts) "\n")))

(defun sly-agent-q-debugger--header (buffer)
  "The thread, level, condition and restarts of debugger BUFFER, as text."
  (format "Debugger of thread %s, level %s:\n%s\nRestarts:\n%s\n"
          (sly-agent-q-debugger--get buffer :thread)
          (sly-agent-q-debugger--get buffer :level)
          (sly-agent-q-debugger--condition-lines buffer)
          (sly-agent-q-debugger--restart-lines buffer)))

;;;; Operations in the debugged thread

(defvar sly-agent-q-debugger--counter 0
  "Numbers the debugger operations, for their ids in the image.")

(defun sly-agent-q-debugger--form (operation args timeout call-id)
  "The form running lisp-cl's DEBUGGER-CALL of OPERATION with ARGS.
TIMEOUT bounds it; CALL-ID names it for CANCEL-CALL."
  (sly-agent-q-bridge-helper-form
   "DEBUGGER-CALL" `(,operation (quote ,args) :timeout ,timeout :call-id ,call-id)))

(defun sly-agent-q-debugger--run (buffer operation args callback)
  "Run the debugger OPERATION with ARGS (an alist) in the thread of BUFFER.
CALLBACK gets (CONTENT nil) or (nil MESSAGE).  Return a function of
no arguments that interrupts the operation in the image."
  (let* ((adapter (sly-agent-q-debugger--adapter buffer))
         (conn (sly-agent-q-debugger--get buffer :connection))
         (thread (sly-agent-q-debugger--get buffer :thread))
         (timeout sly-agent-q-image-timeout)
         (call-id (format "saq-dbg-%d-%d" (emacs-pid) (cl-incf sly-agent-q-debugger--counter)))
         (sent nil))
    (if (not (and adapter (process-live-p conn)))
        (funcall callback nil "The connection of that debugger is closed.")
      (sly-agent-q-bridge-ensure-helpers
       adapter conn
       (lambda (load-error)
         (if load-error
             (funcall callback nil load-error)
           (setq sent t)
           (sly-agent-q-bridge-eval
            adapter conn (sly-agent-q-debugger--form operation args timeout call-id) "CL-USER" (+ timeout 5)
            (lambda (value error)
              (cond (error (funcall callback nil error))
                    ((plist-get value :ok) (funcall callback (format "%s" (plist-get value :content)) nil))
                    (t (funcall callback nil (format "%s" (or (plist-get value :error) "The operation failed."))))))
            nil thread)))))
    (lambda ()
      ;; In a worker thread of its own: the debugged thread is busy.
      (when (and sent adapter)
        (sly-agent-q-bridge-send-cancel adapter conn call-id)))))

;;;; The tools

(cl-defun sly-agent-q-debugger-state (&key thread frames)
  "Describe the open debugger of THREAD (default: each), with FRAMES frames."
  (let ((buffers (if thread (list (sly-agent-q-debugger--find thread))
                   (sly-agent-q-debugger-buffers))))
    (if (null buffers)
        "No debugger is open in the Lisp image: nothing is stopped at an error."
      (lambda (answer)
        (let ((parts nil))
          (cl-labels ((next (rest)
                        (if (null rest)
                            (funcall answer (string-join (nreverse parts) "\n") nil)
                          (let ((b (car rest)))
                            (sly-agent-q-debugger--run
                             b "backtrace" `(("count" . ,(or frames 15)))
                             (lambda (content error)
                               (push (concat (sly-agent-q-debugger--header b) "Frames:\n"
                                             (or content (format "  (not available: %s)\n" error)))
                                     parts)
                               (next (cdr rest))))))))
            (next buffers)))))))

(cl-defun sly-agent-q-debugger-frame-locals (&key frame thread)
  "The local variables of FRAME in the debugger of THREAD."
  (let ((buffer (sly-agent-q-debugger--find thread)))
    (lambda (answer)
      (sly-agent-q-debugger--run buffer "frame_locals" `(("frame" . ,frame)) answer))))

(cl-defun sly-agent-q-debugger-eval-in-frame (&key form frame thread)
  "Evaluate FORM in FRAME of the debugger of THREAD."
  (let ((buffer (sly-agent-q-debugger--find thread)))
    (lambda (answer)
      (sly-agent-q-debugger--run buffer "eval_in_frame" `(("frame" . ,frame) ("form" . ,form)) answer))))

(cl-defun sly-agent-q-debugger-inspect-local (&key frame local thread)
  "Inspect the local LOCAL of FRAME in the debugger of THREAD."
  (let ((buffer (sly-agent-q-debugger--find thread)))
    (lambda (answer)
      (sly-agent-q-debugger--run buffer "inspect_local" `(("frame" . ,frame) ("local" . ,local)) answer))))

(defun sly-agent-q-debugger--restart (buffer restart)
  "The restart numbered RESTART of debugger BUFFER: (NAME DESCRIPTION).
Signal a tool error when there is none."
  (let ((restarts (sly-agent-q-debugger--get buffer :restarts)))
    (unless (and (integerp restart) (<= 0 restart) (< restart (length restarts)))
      (sly-agent-q-tool-fail "The debugger has no restart %s; its restarts are:\n%s"
                             restart (sly-agent-q-debugger--restart-lines buffer)))
    (nth restart restarts)))

(defun sly-agent-q-debugger--preview-restart (args)
  "Return what the approval of debugger_invoke_restart with ARGS names first."
  (let* ((buffer (sly-agent-q-debugger--find (plist-get args :thread) (plist-get args :level)))
         (r (sly-agent-q-debugger--restart buffer (plist-get args :restart))))
    ;; Each part from the image drawn as data and bounded on its own: a
    ;; long or many-line description cannot push the thread out of sight.
    (list :detail (format "invokes restart %s [%s] %s, in the debugger of thread %s, level %s (%s)"
                          (plist-get args :restart)
                          (sly-agent-q-display-line (nth 0 r) 60)
                          (sly-agent-q-display-line (nth 1 r) 100)
                          (sly-agent-q-display-line (sly-agent-q-debugger--get buffer :thread) 40)
                          (sly-agent-q-display-line (sly-agent-q-debugger--get buffer :level) 10)
                          (sly-agent-q-display-line
                           (string-trim (format "%s" (nth 0 (sly-agent-q-debugger--get buffer :condition))))
                           80)))))

(cl-defun sly-agent-q-debugger-invoke-restart (&key restart thread level)
  "Invoke RESTART in the debugger of THREAD (at LEVEL), as the user would."
  (let* ((buffer (sly-agent-q-debugger--find thread level))
         (r (sly-agent-q-debugger--restart buffer restart))
         (level (sly-agent-q-debugger--get buffer :level))
         (thread (sly-agent-q-debugger--get buffer :thread))
         (adapter (sly-agent-q-debugger--adapter buffer))
         (conn (sly-agent-q-debugger--get buffer :connection)))
    (lambda (answer)
      ;; The debugger buffer's own command, in that buffer.
      (with-current-buffer buffer
        (if (eq major-mode 'sly-db-mode)
            (sly-db-invoke-restart restart)
          (sldb-invoke-restart restart)))
      (let* ((tries (* 10 sly-agent-q-debugger-restart-wait))
             (grace 5)
             (timer nil)
             ;; Once the debugger closed: a request to the debugged thread, which
             ;; that thread answers only when it is back at its REPL or in a new
             ;; debugger (whose buffer opens first), so that code the restart
             ;; runs before stopping again is not taken for the program going on.
             (returned nil)
             (stop-asking nil)
             (done (lambda (how)
                     (cancel-timer timer)
                     (when stop-asking (funcall stop-asking "The restart's outcome was reported."))
                     (funcall answer (format "Invoked restart %s [%s] %s in the debugger of thread %s, level %s: %s"
                                             restart (nth 0 r) (nth 1 r) thread level how)
                              nil))))
        (setq timer
              (run-with-timer
               0.1 0.1
               (lambda ()
                 (let* ((now (and (buffer-live-p buffer) (sly-agent-q-debugger--get buffer :level)))
                        (again (and (null now)
                                    (cl-find-if (lambda (b) (equal (sly-agent-q-debugger--get b :thread) thread))
                                                (sly-agent-q-debugger-buffers)))))
                   (when (and (null now) (not stop-asking) adapter (process-live-p conn))
                     (setq stop-asking
                           (sly-agent-q-bridge-eval adapter conn t "CL-USER" sly-agent-q-debugger-restart-wait
                                                    (lambda (_value _error) (setq returned t))
                                                    nil thread)))
                   (cond (again
                          (funcall done (format "the debugger closed, and the thread stopped again at level %s: %s"
                                                (sly-agent-q-debugger--get again :level)
                                                (sly-agent-q-debugger--condition-lines again))))
                         ((and (null now) (not returned) (> (cl-decf tries) 0)) nil)
                         ((and (null now) (not returned))
                          (funcall done (format "the debugger closed; the thread is still running after %s s."
                                                sly-agent-q-debugger-restart-wait)))
                         ;; A moment for a new error of the same thread to show.
                         ((and (null now) (> (cl-decf grace) 0)) nil)
                         ((null now) (funcall done "the debugger closed; the program went on."))
                         ((not (equal now level))
                          (funcall done (format "the debugger is now at level %s (debugger_state shows it)." now)))
                         ((<= (cl-decf tries) 0)
                          (funcall done (format "the debugger is still at level %s after %s s (the restart may be running)."
                                                level sly-agent-q-debugger-restart-wait))))))))))))

(defun sly-agent-q-debugger--preview-frame-call (args)
  "Return what the approval of a frame call with ARGS names first.
The debugger is found as the call finds it (the most recent one when
ARGS name no thread); its thread, level and condition bind the
approval, so the call never runs in a debugger opened meanwhile."
  (let ((buffer (sly-agent-q-debugger--find (plist-get args :thread))))
    (list :detail (format "in frame %s of the debugger of thread %s, level %s (%s)"
                          (sly-agent-q-display-line (plist-get args :frame) 10)
                          (sly-agent-q-display-line (sly-agent-q-debugger--get buffer :thread) 40)
                          (sly-agent-q-display-line (sly-agent-q-debugger--get buffer :level) 10)
                          (sly-agent-q-display-line
                           (string-trim (format "%s" (nth 0 (sly-agent-q-debugger--get buffer :condition))))
                           80))
          :buffer (buffer-name buffer))))

;; The debugger's tools, declared once each: they change no file or
;; buffer, and those that act in a frame or restart are approved for
;; the debugger they were shown.
(sly-agent-q-define-tool "debugger_state"
  :handler #'sly-agent-q-debugger-state
  :changes nil)

(sly-agent-q-define-tool "debugger_frame_locals"
  :handler #'sly-agent-q-debugger-frame-locals
  :changes nil)

(sly-agent-q-define-tool "debugger_eval_in_frame"
  :handler #'sly-agent-q-debugger-eval-in-frame
  :changes nil
  :preview #'sly-agent-q-debugger--preview-frame-call)

(sly-agent-q-define-tool "debugger_inspect_local"
  :handler #'sly-agent-q-debugger-inspect-local
  :changes nil
  :preview #'sly-agent-q-debugger--preview-frame-call)

(sly-agent-q-define-tool "debugger_invoke_restart"
  :handler #'sly-agent-q-debugger-invoke-restart
  :changes nil
  :preview #'sly-agent-q-debugger--preview-restart)

;;;; From the debugger to the chat

(defconst sly-agent-q-debugger--asking "  (asking the image for its frames…)"
  "What stands for the frames in the chat's input until the image gives them.")

(defun sly-agent-q-debugger--ask-text (buffer frames)
  "The message asking about debugger BUFFER, with FRAMES, the image's frame text."
  ;; The condition, restarts and frames are the image's text: drawn as data.
  (format "My program stopped in the debugger. Why, and how do I fix it?\n\n%sTop frames:\n%s\n"
          (sly-agent-q-display-text (sly-agent-q-debugger--header buffer) 20000)
          (sly-agent-q-display-text (string-trim-right frames) 20000)))

(defun sly-agent-q-debugger--chat (buffer)
  "The chat to ask about debugger BUFFER: the chat talking to its Lisp.
Else the chat a command would act on (`sly-agent-q-chat-buffer')."
  (let ((conn (sly-agent-q-debugger--get buffer :connection)))
    (or (and conn (sly-agent-q-chats-of-connection conn))
        (sly-agent-q-chat-buffer))))

(defun sly-agent-q-debugger--show-chat (chat)
  "Show CHAT in a window other than the selected one, and select it.
The debugger's window keeps showing the debugger: the user may want
to read it again or choose a restart there."
  (pop-to-buffer chat
                 '((display-buffer-reuse-window display-buffer-use-some-window
                                                display-buffer-at-bottom)
                   (inhibit-same-window . t))))

;;;###autoload
(defun sly-agent-q-debugger-ask (&optional buffer)
  "Ask the agent about the error in the debugger BUFFER (default: this one).
The condition, its type, the restarts and the top frames go to the
input of the chat talking to the debugger's Lisp, to edit and send;
the agent's debugger tools can dig further.  The frames are the
image's own (as debugger_state gives
them), asked of the debugged thread, not the debugger buffer's text
with its folds; they arrive in the input a moment later.  The chat
opens in another window: the debugger stays where it was."
  (interactive)
  (let ((buffer (or buffer (current-buffer))))
    (unless (and (sly-agent-q-debugger--kind buffer) (sly-agent-q-debugger--get buffer :level))
      (user-error "Not in a Lisp debugger buffer (sly-db or sldb)"))
    (let ((chat (sly-agent-q-debugger--chat buffer)))
      ;; Every chat function below acts on the chat current: this one.
      (with-current-buffer chat
        (sly-agent-q-chat-set-input (sly-agent-q-debugger--ask-text buffer sly-agent-q-debugger--asking)))
      (sly-agent-q-debugger--show-chat chat)
      (with-current-buffer chat (goto-char (point-max)))
      (sly-agent-q-debugger--ask-frames buffer chat))))

(defun sly-agent-q-debugger--ask-frames (buffer chat)
  "Put the frames of debugger BUFFER into the input of CHAT, when they come."
  (with-current-buffer chat
    ;; The message without its frames is not the message: RET waits for them
    ;; (the image answers within its timeout, or the call fails and says so).
    (let ((hold (sly-agent-q-chat-hold-input
                 "The debugger's frames are still coming from the image; RET sends once they are in the input"
                 (+ sly-agent-q-image-timeout 10)
                 ;; A user who replaced the placeholder sends their own message.
                 sly-agent-q-debugger--asking)))
      (sly-agent-q-debugger--run
       buffer "backtrace" `(("count" . ,sly-agent-q-debugger-ask-frames))
       (lambda (content error)
         (when (buffer-live-p chat)
           (with-current-buffer chat
             (sly-agent-q-chat-release-input hold)
             ;; Only the placeholder changes: what the user typed around it is theirs.
             (sly-agent-q-chat-replace-in-input
              sly-agent-q-debugger--asking
              (if content
                  (sly-agent-q-display-text (string-trim-right content) 20000)
                (format "  (not available: %s)" (sly-agent-q-display-line error)))))))))))

(provide 'sly-agent-q-debugger)
;;; sly-agent-q-debugger.el ends here
