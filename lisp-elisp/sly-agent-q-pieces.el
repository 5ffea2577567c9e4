;;; sly-agent-q-pieces.el --- Sending large messages to the server in pieces  -*- lexical-binding: t; -*-

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

;; A large message is encoded and written a piece at a time from
;; timers, so that keys are read between the pieces; what is sent
;; meanwhile waits its turn, and what JSON cannot carry is replaced.

;;; Code:

(require 'cl-lib)
(require 'jsonrpc)
(require 'sly-agent-q-connection)


;;;; Large messages, in pieces

(defconst sly-agent-q-pieces--piece-size 65536
  "Characters of a large message written to the server at a time.")

(defconst sly-agent-q-pieces--piece-pause 0.001
  "Seconds between two pieces of a large message: time to read a key.")

(cl-defmethod jsonrpc-connection-send :around ((conn sly-agent-q-connection) &rest _)
  "Send after what waits in CONN's outbox, if anything does: in order."
  (if (sly-agent-q-connection-outbox conn)
      (sly-agent-q-pieces--outbox-add conn (list (lambda () (cl-call-next-method))))
    (cl-call-next-method)))

(defconst sly-agent-q-pieces--unencodable
  (rx (any (#xD800 . #xDFFF) (#x3FFF80 . #x3FFFFF)))
  "Characters JSON cannot carry: surrogate codes and raw bytes.")

(defun sly-agent-q-pieces-wire-safe (value)
  "VALUE, or a copy of it where each character JSON cannot carry is U+FFFD.
Emacs's JSON encoder refuses a whole message for one such character (a
buffer holding raw bytes): the reply would be lost and its call wait
for its timeout.  VALUE is made of strings, plists, lists and vectors."
  (cond
   ((stringp value)
    (if (string-match-p sly-agent-q-pieces--unencodable value)
        (replace-regexp-in-string sly-agent-q-pieces--unencodable "\ufffd" value t t)
      value))
   ((consp value)
    (let ((head (sly-agent-q-pieces-wire-safe (car value)))
          (tail (sly-agent-q-pieces-wire-safe (cdr value))))
      (if (and (eq head (car value)) (eq tail (cdr value))) value (cons head tail))))
   ((vectorp value)
    (let ((copy (cl-map 'vector #'sly-agent-q-pieces-wire-safe value)))
      (if (cl-every #'eq copy value) value copy)))
   (t value)))

(defun sly-agent-q-pieces-notify (conn method params)
  "Send notification METHOD with PARAMS on CONN; a large one in pieces.
`process-send-string' of a whole message waits while the pipe is full,
20 ms each time, with no key read: a 3 MB tool result kept Emacs
deaf for half a second (benchmarks, figure 7).  A large message is
encoded, then written a piece at a time, each step from a timer, and
keys are read between them."
  (if (<= (sly-agent-q-pieces--text-size params) sly-agent-q-pieces--piece-size)
      (jsonrpc-notify conn method params)
    (sly-agent-q-pieces--outbox-add
     conn (list (cons :message (list :jsonrpc "2.0" :method (symbol-name method) :params params))))))

(defun sly-agent-q-pieces--text-size (value)
  "The characters of the strings in VALUE: about the size of its JSON.
VALUE is made of plists, lists and vectors."
  (cond ((stringp value) (length value))
        ((consp value) (cl-loop for tail on value
                                sum (sly-agent-q-pieces--text-size (car tail))
                                while (consp (cdr tail))))
        ((vectorp value) (cl-loop for v across value sum (sly-agent-q-pieces--text-size v)))
        (t 0)))

(defun sly-agent-q-pieces--outbox-add (conn items)
  "Queue ITEMS on CONN's outbox and see that they are written."
  (setf (sly-agent-q-connection-outbox conn) (append (sly-agent-q-connection-outbox conn) items))
  (unless (sly-agent-q-connection-outbox-timer conn)
    (setf (sly-agent-q-connection-outbox-timer conn)
          (run-at-time 0 nil #'sly-agent-q-pieces--outbox-write conn))))

(defun sly-agent-q-pieces--outbox-write (conn)
  "Write the next piece of CONN's outbox, or run the next send; then come back."
  (setf (sly-agent-q-connection-outbox-timer conn) nil)
  (let ((item (pop (sly-agent-q-connection-outbox conn))))
    (condition-case err
        (pcase item
          (`(:message . ,message)
           ;; Encoded on its own step: encoding megabytes takes tens of ms.
           (let ((json (json-serialize message :false-object :json-false :null-object nil)))
             (sly-agent-q-connection-log conn "%s: %d bytes, sent in pieces"
                                         (plist-get message :method) (string-bytes json))
             ;; Cut as they go: cutting megabytes at once took 20 ms more.
             (push (cons json 0) (sly-agent-q-connection-outbox conn))
             (push (format "Content-Length: %d\r\n\r\n" (string-bytes json))
                   (sly-agent-q-connection-outbox conn))))
          ((pred stringp) (process-send-string (jsonrpc--process conn) item))
          (`(,(and (pred stringp) string) . ,from)
           (let ((to (min (length string) (+ from sly-agent-q-pieces--piece-size))))
             (when (< to (length string))
               (push (cons string to) (sly-agent-q-connection-outbox conn)))
             (process-send-string (jsonrpc--process conn) (substring string from to))))
          ((pred functionp) (funcall item)))
      (error
       ;; The server is gone: what waited is dropped (its sentinel reports it).
       (setf (sly-agent-q-connection-outbox conn) nil)
       (sly-agent-q-connection-log conn "sending failed: %s" (error-message-string err)))))
  (when (sly-agent-q-connection-outbox conn)
    ;; Not 0: Emacs runs timers that are due one after another before it
    ;; reads a key or redraws, and a chain of them kept keys waiting.
    (setf (sly-agent-q-connection-outbox-timer conn)
          (run-at-time sly-agent-q-pieces--piece-pause nil #'sly-agent-q-pieces--outbox-write conn))))

(provide 'sly-agent-q-pieces)
;;; sly-agent-q-pieces.el ends here
