;;; sly-agent-q-connection.el --- The connection object of sly-agent-q  -*- lexical-binding: t; -*-

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

;; The connection to one server process (`sly-agent-q-connection', a
;; `jsonrpc-process-connection' with the state sly-agent-q keeps), the
;; current one, its log, and calling handlers so that an error in one
;; never escapes into a process filter or timer.

;;; Code:

(require 'cl-lib)
(require 'eieio)
(require 'jsonrpc)
(require 'sly-agent-q-display)
(require 'sly-agent-q-options)

;; Obsolete names (issue 46): these were named sly-agent-q-server-* before
;; sly-agent-q-server.el was split; kept for users who call them.
(define-obsolete-function-alias 'sly-agent-q-server-call-safely
  #'sly-agent-q-connection-call-safely "0.2.0")
(define-obsolete-function-alias 'sly-agent-q-server-connection
  #'sly-agent-q-connection-current "0.2.0")
(define-obsolete-variable-alias 'sly-agent-q-server-died-functions
  'sly-agent-q-connection-died-functions "0.2.0")
(define-obsolete-variable-alias 'sly-agent-q-server-last-handler-error
  'sly-agent-q-connection-last-handler-error "0.2.0")
(define-obsolete-function-alias 'sly-agent-q-server-live-p
  #'sly-agent-q-connection-live-p "0.2.0")
(define-obsolete-function-alias 'sly-agent-q-server-log
  #'sly-agent-q-connection-log-current "0.2.0")
(define-obsolete-function-alias 'sly-agent-q-server-ready-p
  #'sly-agent-q-connection-ready-p "0.2.0")
(define-obsolete-function-alias 'sly-agent-q-server-run-safely
  #'sly-agent-q-connection-run-safely "0.2.0")
(define-obsolete-variable-alias 'sly-agent-q-server-started-functions
  'sly-agent-q-connection-started-functions "0.2.0")

(defclass sly-agent-q-connection (jsonrpc-process-connection)
  ((status :initform 'starting :accessor sly-agent-q-connection-status
           :documentation "starting, ready, failed or stopping.")
   (ready-callbacks :initform nil :accessor sly-agent-q-connection-ready-callbacks
                    :documentation "Functions of (CONNECTION ERROR) waiting for initialize's answer.")
   (init-result :initform nil :accessor sly-agent-q-connection-init-result
                :documentation "The server's answer to initialize.")
   (model-thinking :initform nil :accessor sly-agent-q-connection-model-thinking
                   :documentation "Whether the configured model can think, as the server last said:
a plist (:model NAME :thinks \"yes\", \"no\" or \"if-set\" :how TEXT), or nil.")
   (calls :initform (make-hash-table :test #'equal) :accessor sly-agent-q-connection-calls
          :documentation "Pending `emacs/call's by id.")
   (started :initform (float-time) :accessor sly-agent-q-connection-started
            :documentation "When the server was started, a `float-time'.")
   (found :initform nil :accessor sly-agent-q-connection-found
          :documentation "The server's (FILE . SOURCE), from `sly-agent-q-locate-find-server'.")
   (outbox :initform nil :accessor sly-agent-q-connection-outbox
           :documentation "What waits to be written, in order: (:message . PLIST) to
encode, strings, (STRING . FROM) for the rest of STRING from FROM, and
functions that send.
Non-nil while a large message goes out in pieces.")
   (outbox-timer :initform nil :accessor sly-agent-q-connection-outbox-timer
                 :documentation "The timer that writes the outbox's next item, or nil."))
  :documentation "The connection to one sly-agent-q server process.")

(defvar sly-agent-q-current-connection nil
  "The current `sly-agent-q-connection', or nil.")

(defvar sly-agent-q-connection-died-functions nil
  "Functions called with a message when the server died unexpectedly.")

(defvar sly-agent-q-connection-started-functions nil
  "Functions called with the connection once the server is initialized.")

(defvar sly-agent-q-connection-last-handler-error nil
  "The last error signalled by a notification or call handler (for debugging).")

(defun sly-agent-q-connection-log (conn format-string &rest args)
  "Write a line made of FORMAT-STRING and ARGS to CONN's events buffer."
  (when (and conn (not (equal sly-agent-q-events-buffer-size 0)))
    (with-current-buffer (jsonrpc-events-buffer conn)
      (let ((inhibit-read-only t))
        (goto-char (point-max))
        (insert "[sly-agent-q] " (apply #'format format-string args) "\n")))))

(defun sly-agent-q-connection-log-current (format-string &rest args)
  "Write FORMAT-STRING and ARGS to the events buffer of the current connection.
Without a connection, nothing is written."
  (apply #'sly-agent-q-connection-log sly-agent-q-current-connection format-string args))

(defun sly-agent-q-connection-live-p (&optional conn)
  "Non-nil if CONN (default: the current connection) has a running process."
  (let ((c (or conn sly-agent-q-current-connection)))
    (and c (jsonrpc-running-p c))))

(defun sly-agent-q-connection-ready-p ()
  "Non-nil if the server is running and initialized."
  (and (sly-agent-q-connection-live-p)
       (eq (sly-agent-q-connection-status sly-agent-q-current-connection) 'ready)))

(defun sly-agent-q-connection-current ()
  "The current connection, or nil."
  sly-agent-q-current-connection)

(defun sly-agent-q-connection-call-safely (fn &rest args)
  "Call FN with ARGS; log an error instead of letting it escape."
  (condition-case err
      (apply fn args)
    (error (setq sly-agent-q-connection-last-handler-error err)
           ;; The error may name what a peer sent: drawn as one line of data.
           (message "sly-agent-q: %s" (sly-agent-q-display-line (error-message-string err)))
           nil)))

(defun sly-agent-q-connection-run-safely (functions &rest args)
  "Call each of FUNCTIONS (a hook value) with ARGS, containing errors."
  (dolist (fn (if (functionp functions) (list functions) functions))
    (unless (eq fn t)
      (apply #'sly-agent-q-connection-call-safely fn args))))

(provide 'sly-agent-q-connection)
;;; sly-agent-q-connection.el ends here
