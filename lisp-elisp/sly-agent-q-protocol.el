;;; sly-agent-q-protocol.el --- The JSON-RPC protocol between Emacs and the sly-agent-q server  -*- lexical-binding: t; -*-

;; Copyright (C) 2026  The sly-agent-q authors

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

;; Emacs's half of the protocol the server declares in server/protocol.ts:
;; every method with its direction and kind, the kinds of `emacs/call',
;; and the server's error codes, in sly-agent-q-protocol-table.el, which
;; `make generate' writes from the server's description.  test/elisp/sly-agent-q-protocol-test.el
;; checks these tables against the server's own description (the bundle's
;; --protocol) and checks that every method the server may send has a
;; handler here, and that no handler answers a method the server lacks.
;;
;; Handlers are methods, one per protocol method, as eglot's
;; `eglot-handle-notification' are, so that `C-h f' and xref list them:
;;
;;   (cl-defmethod sly-agent-q-handle-notification
;;       (_conn (_method (eql chat/textDelta)) params) ...)
;;   (cl-defmethod sly-agent-q-handle-call ((_kind (eql image)) call) ...)
;;
;; A notification handler must return quickly; a call handler starts the
;; work and answers later (`sly-agent-q-call-reply', `sly-agent-q-call-fail').

;;; Code:

(require 'cl-lib)
(require 'subr-x)

(require 'sly-agent-q-protocol-table)

;; The tables' names before they carried their file's prefix.
(define-obsolete-variable-alias 'sly-agent-q-protocol-call-kinds
  'sly-agent-q-protocol-table-call-kinds "0.2.0")
(define-obsolete-variable-alias 'sly-agent-q-protocol-error-codes
  'sly-agent-q-protocol-table-error-codes "0.2.0")
(define-obsolete-variable-alias 'sly-agent-q-protocol-methods
  'sly-agent-q-protocol-table-methods "0.2.0")
(define-obsolete-variable-alias 'sly-agent-q-protocol-shape-types
  'sly-agent-q-protocol-table-shape-types "0.2.0")
(define-obsolete-variable-alias 'sly-agent-q-protocol-shapes
  'sly-agent-q-protocol-table-shapes "0.2.0")
(define-obsolete-variable-alias 'sly-agent-q-protocol-tool-categories
  'sly-agent-q-protocol-table-tool-categories "0.2.0")
(define-obsolete-variable-alias 'sly-agent-q-protocol-version
  'sly-agent-q-protocol-table-version "0.2.0")

(defun sly-agent-q-protocol-error-code (name)
  "The JSON-RPC error code NAME.
NAME is a symbol of `sly-agent-q-protocol-table-error-codes'."
  (or (alist-get name sly-agent-q-protocol-table-error-codes)
      (error "No sly-agent-q protocol error code %s" name)))

(defun sly-agent-q-protocol-method-p (method direction kind)
  "Non-nil if METHOD is a KIND of message going in DIRECTION.
DIRECTION is `emacs->server' or `server->emacs', KIND `request' or
`notification'."
  (equal (cdr (assq method sly-agent-q-protocol-table-methods)) (list direction kind)))

(defun sly-agent-q-protocol-call-kind (name)
  "The symbol of the `emacs/call' kind NAME (a string), or nil if there is none."
  (cl-find name sly-agent-q-protocol-table-call-kinds :key #'symbol-name :test #'equal))

;;;; Messages in shape

(defun sly-agent-q-protocol--object-p (value)
  "Non-nil if VALUE is a JSON object in the form jsonrpc.el gives it."
  (or (null value) (hash-table-p value)
      (and (consp value) (keywordp (car value)) (cl-evenp (length value)))))

(defun sly-agent-q-protocol--type-p (type value)
  "Non-nil if VALUE, JSON in the form jsonrpc.el gives it, is of TYPE."
  (pcase type
    ("string" (stringp value))
    ("number" (numberp value))
    ("boolean" (memq value '(t :json-false)))
    ("array" (vectorp value))
    ("object" (sly-agent-q-protocol--object-p value))
    (_ t)))

(defun sly-agent-q-protocol--keys (value)
  "The keys of the JSON object VALUE, as strings."
  (if (hash-table-p value)
      (hash-table-keys value)
    (cl-loop for (key _) on value by #'cddr
             collect (substring (symbol-name key) 1))))

(defun sly-agent-q-protocol--get (value key)
  "The value of KEY (a string) in the JSON object VALUE."
  (if (hash-table-p value)
      (gethash key value)
    (plist-get value (intern (concat ":" key)))))

(defun sly-agent-q-protocol-check-shape (shape value where)
  "What is wrong with VALUE as SHAPE: a list of messages naming WHERE.
SHAPE is as in `sly-agent-q-protocol-table-shapes'; VALUE a JSON object as
jsonrpc.el reads or writes one (a plist with keyword keys)."
  (cond
   ((null shape) nil)
   ((not (sly-agent-q-protocol--object-p value))
    (list (format "%s: expected an object, got %S" where value)))
   (t
    (append
     (cl-loop for key in (sly-agent-q-protocol--keys value)
              unless (assoc key shape)
              collect (format "%s: unknown key %s" where key))
     (cl-loop for (key . field) in shape
              for optional = (string-suffix-p "?" field)
              for type = (string-remove-suffix "?" field)
              for named = (cdr (assoc type sly-agent-q-protocol-table-shape-types))
              for got = (sly-agent-q-protocol--get value key)
              ;; nil is JSON null (or an empty object, or an absent key): what optional keys may be.
              if (null got)
              append (unless (or optional (member type '("any" "object" "array")) named)
                       (list (format "%s: missing key %s" where key)))
              else if named
              append (sly-agent-q-protocol-check-shape named got (format "%s.%s" where key))
              else unless (sly-agent-q-protocol--type-p type got)
              collect (format "%s: %s should be %s, is %S" where key type got))))))

(defun sly-agent-q-protocol-check (name part value)
  "What is wrong with the PART (:params or :result) VALUE of message NAME.
NAME is a method, or \"emacs/call:KIND\" for a kind of `emacs/call'.
Return a list of messages, nil when VALUE has the shape server/protocol.ts
declares (see `sly-agent-q-protocol-table-shapes')."
  (let ((entry (cdr (assoc name sly-agent-q-protocol-table-shapes))))
    (if (null entry)
        (list (format "%s: not a message of the protocol" name))
      (append
       (sly-agent-q-protocol-check-shape (plist-get entry part) value (format "%s %s" name part))
       (when (and (equal name "emacs/call") (eq part :params))
         (sly-agent-q-protocol-check (format "emacs/call:%s" (sly-agent-q-protocol--get value "kind"))
                                     :params (sly-agent-q-protocol--get value "params")))))))

(cl-defgeneric sly-agent-q-handle-notification (conn method params)
  "Handle the server's notification METHOD with PARAMS, from CONN.
METHOD is a symbol such as `chat/textDelta', PARAMS a plist.  A
method must return quickly: it runs in the process filter.")

(cl-defgeneric sly-agent-q-handle-call (kind call)
  "Start the `emacs/call' CALL of KIND (a symbol such as `image').
A method starts the work and returns at once; the answer goes later
through `sly-agent-q-call-reply' or `sly-agent-q-call-fail'.")

(provide 'sly-agent-q-protocol)
;;; sly-agent-q-protocol.el ends here
