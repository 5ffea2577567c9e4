;;; sly-agent-q-dispatch.el --- Dispatching what the sly-agent-q server sends  -*- lexical-binding: t; -*-

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

;; Each notification of the protocol goes to its
;; `sly-agent-q-handle-notification' method; an `emacs/call' becomes a
;; `sly-agent-q-call' handed to the `sly-agent-q-handle-call' method of
;; its kind, which answers later with `sly-agent-q-call-reply' or
;; `sly-agent-q-call-fail'.  Nothing here waits.

;;; Code:

(require 'cl-lib)
(require 'jsonrpc)
(require 'sly-agent-q-protocol)
(require 'sly-agent-q-connection)
(require 'sly-agent-q-collections)
(require 'sly-agent-q-redact)
(require 'sly-agent-q-pieces)
(require 'sly-agent-q-configuration)


(defun sly-agent-q-dispatch-request (_conn method _params)
  "The server sends no requests; answer any with an error naming METHOD."
  (signal 'jsonrpc-error
          `((jsonrpc-error-code . -32601) ; JSON-RPC's MethodNotFound
            (jsonrpc-error-message . ,(format "Emacs does not answer %s requests" method)))))

(defun sly-agent-q-dispatch-notification (conn method params)
  "Hand notification METHOD with PARAMS from CONN to its method.  Never signals."
  (condition-case err
      (if (sly-agent-q-protocol-method-p method 'server->emacs 'notification)
          (progn
            (sly-agent-q-collections-hold)
            (sly-agent-q-handle-notification conn method params))
        (sly-agent-q-connection-log conn "ignored %s: not a notification of protocol %d"
                          method sly-agent-q-protocol-table-version))
    (error
     (setq sly-agent-q-connection-last-handler-error err)
     (sly-agent-q-connection-log conn "handler for %s failed: %s" method (error-message-string err)))))

(cl-defmethod sly-agent-q-handle-notification (conn method _params)
  "Log a declared notification METHOD from CONN that nothing here handles."
  (sly-agent-q-connection-log conn "no handler for %s" method))

(cl-defmethod sly-agent-q-handle-notification (conn (_method (eql emacs/call)) params)
  "Start the `emacs/call' PARAMS from CONN."
  (sly-agent-q-dispatch--handle-call conn params))

(cl-defmethod sly-agent-q-handle-notification (conn (_method (eql emacs/cancel)) params)
  "The server no longer wants an answer to the call in PARAMS from CONN."
  (cl-destructuring-bind (&key id reason &allow-other-keys) params
    (let ((call (gethash id (sly-agent-q-connection-calls conn))))
      (when call
        (sly-agent-q-call-drop call (or reason "cancelled"))))))

;;;; emacs/call objects

(cl-defstruct (sly-agent-q-call (:constructor sly-agent-q-dispatch--make-call))
  "One pending `emacs/call' from the server."
  id kind params conn done cancel-functions (start (float-time)))

(defvar sly-agent-q-dispatch-refusal-function nil
  "Function saying why a call must not run at all, or nil.
Called with the call's params (a plist: :conversationId...); returns
a message (the call fails with it, nothing of it runs) or nil.  The
chats set it: the late calls of a killed chat's conversation run
nowhere (see `sly-agent-q-dispatch-refusal').")

(defun sly-agent-q-dispatch-refusal (params)
  "Why the call of PARAMS must not run, or nil.
Asked as each call arrives, and again by what starts it later (an
approval is put to someone from a timer)."
  (and sly-agent-q-dispatch-refusal-function
       (funcall sly-agent-q-dispatch-refusal-function params)))

(defun sly-agent-q-dispatch--handle-call (conn params)
  "Start the `emacs/call' PARAMS from CONN through its kind's method."
  (cl-destructuring-bind (&key id kind ((:params call-params)) &allow-other-keys) params
    (let ((call (sly-agent-q-dispatch--make-call :id id :kind kind :conn conn :params call-params))
          (known (sly-agent-q-protocol-call-kind kind))
          (earlier (gethash id (sly-agent-q-connection-calls conn))))
      ;; A call sent again under its id takes the earlier one's place: the
      ;; earlier, no longer reachable by a cancel or the server's end, is
      ;; dropped (an approval not prepared yet is then put to no one).
      (when earlier
        (sly-agent-q-call-drop earlier "sent again under its id"))
      (puthash id call (sly-agent-q-connection-calls conn))
      (condition-case err
          (let ((refused (and known (sly-agent-q-dispatch-refusal call-params))))
            (cond
             ((not known)
              (sly-agent-q-call-fail call (format "Emacs cannot answer calls of kind %s." kind)))
             ;; One check for every kind (image, tool, approval), before any runs.
             (refused (sly-agent-q-call-fail call refused))
             (t (sly-agent-q-handle-call known call))))
        (error
         (setq sly-agent-q-connection-last-handler-error err)
         (sly-agent-q-call-fail call (format "Emacs failed to start the %s call: %s"
                                             kind (error-message-string err))))))))

(cl-defmethod sly-agent-q-handle-call (kind call)
  "Fail CALL, whose KIND nothing here answers (its module is not loaded)."
  (sly-agent-q-call-fail call (format "Emacs cannot answer calls of kind %s (not loaded)." kind)))

(defun sly-agent-q-call-drop (call reason)
  "Mark CALL done without answering; run its cancel functions with REASON."
  (unless (sly-agent-q-call-done call)
    (setf (sly-agent-q-call-done call) t)
    (when (sly-agent-q-call-conn call)
      (remhash (sly-agent-q-call-id call) (sly-agent-q-connection-calls (sly-agent-q-call-conn call))))
    (dolist (fn (sly-agent-q-call-cancel-functions call))
      (sly-agent-q-connection-call-safely fn reason))))

(defun sly-agent-q-call-on-cancel (call function)
  "Run FUNCTION with a reason if CALL is cancelled or its server dies."
  (push function (sly-agent-q-call-cancel-functions call)))

(defun sly-agent-q-dispatch--call-send (call reply)
  "Send REPLY (a plist) for CALL unless it was answered or dropped already.
Known secrets are redacted first: the reply goes to the events
buffer, the chat and the model."
  (unless (sly-agent-q-call-done call)
    (setf (sly-agent-q-call-done call) t)
    (let ((conn (sly-agent-q-call-conn call)))
      (when conn
        (remhash (sly-agent-q-call-id call) (sly-agent-q-connection-calls conn)))
      (when (and conn (jsonrpc-running-p conn))
        (sly-agent-q-collections-hold)
        (sly-agent-q-pieces-notify conn 'emacs/reply
                                   (append (list :id (sly-agent-q-call-id call))
                                           (sly-agent-q-pieces-wire-safe (sly-agent-q-redact reply))))
        t))))

(defun sly-agent-q-call-reply (call result)
  "Answer CALL with RESULT (a plist, sent as a JSON object).
Return non-nil if the answer was sent; a second answer is ignored."
  (sly-agent-q-dispatch--call-send call (list :result result)))

(defun sly-agent-q-call-fail (call message)
  "Answer CALL with an error MESSAGE (written for the model)."
  (sly-agent-q-dispatch--call-send call (list :error (list :message (format "%s" message)))))

(defun sly-agent-q-call-pending (&optional kind)
  "Return what the current connection waits for (of KIND if given)."
  (when sly-agent-q-current-connection
    (let (out)
      (maphash (lambda (_ c) (when (or (null kind) (equal kind (sly-agent-q-call-kind c)))
                               (push c out)))
               (sly-agent-q-connection-calls sly-agent-q-current-connection))
      out)))

;;;; Emacs-runtime tools (the buffer and file tools live in sly-agent-q-tools.el)

(declare-function sly-agent-q-tool-call-run "sly-agent-q-tool-call" (capability args callback &optional changes-callback))
(declare-function sly-agent-q-tool-preview-check-approved "sly-agent-q-tool-preview" (approved))
(declare-function sly-agent-q-files-call-root "sly-agent-q-files" (root))
(declare-function sly-agent-q-files-check-visit "sly-agent-q-files" (visit))
(defvar sly-agent-q-project-root)

(defvar sly-agent-q-call-conversation-id nil
  "The conversation whose turn made the Emacs tool call being run, or nil.
Bound while the call starts: a tool that talks to the Lisp (the
debugger's) finds that conversation's chat's Lisp through it.")

(cl-defmethod sly-agent-q-handle-call ((_kind (eql tool)) call)
  "Run the Emacs capability asked for by CALL through `sly-agent-q-tool-call-run'."
  (cl-destructuring-bind (&key tool arguments approved projectRoot visits conversationId &allow-other-keys)
      (sly-agent-q-call-params call)
    ;; The root the server judged the call against is the one it runs
    ;; against (a capability that answers later resolved its paths here).
    (let ((sly-agent-q-call-conversation-id conversationId)
          (sly-agent-q-project-root
           (condition-case err
               (if (fboundp 'sly-agent-q-files-call-root)
                   (sly-agent-q-files-call-root projectRoot)
                 sly-agent-q-project-root)
             (sly-agent-q-tool-error (list :refused (cadr err))))))
      (cond
       ((eq (car-safe sly-agent-q-project-root) :refused)
        (sly-agent-q-call-fail call (cadr sly-agent-q-project-root)))
       ((not (fboundp 'sly-agent-q-tool-call-run))
        (sly-agent-q-call-fail call "The Emacs buffer and file tools are not loaded (sly-agent-q-tools)."))
       ;; An approved call runs only on the target approved, checked here,
       ;; in the same command that runs it.
       ((and approved
             (condition-case err
                 (progn (sly-agent-q-tool-preview-check-approved approved) nil)
               (sly-agent-q-tool-error (sly-agent-q-call-fail call (cadr err)) t))))
       ;; A buffer's text is changed only while the buffer visits the file
       ;; the server judged the write by: checked here too, as it runs.
       ((and visits
             (condition-case err
                 (progn (sly-agent-q-files-check-visit visits) nil)
               (sly-agent-q-tool-error (sly-agent-q-call-fail call (cadr err)) t))))
       (t
        (let* (changes
               (cancel
                (sly-agent-q-tool-call-run
                 tool arguments
                 (lambda (content error)
                   (if error
                       (sly-agent-q-call-fail call error)
                     ;; The changes go with the result, so that the server keeps
                     ;; them in the saved conversation for a rewind.
                     (sly-agent-q-call-reply call (sly-agent-q-configuration-plist-compact
                                                   (list :content (format "%s" (or content ""))
                                                         :changes (and (> (length changes) 0) changes))))))
                 (lambda (c) (setq changes c)))))
          ;; A capability that answers later may be stopped: the server's
          ;; emacs/cancel (a cancelled turn or call, its timeout) stops it.
          (when (functionp cancel)
            (sly-agent-q-call-on-cancel call (lambda (_reason) (funcall cancel))))))))))

(provide 'sly-agent-q-dispatch)
;;; sly-agent-q-dispatch.el ends here
