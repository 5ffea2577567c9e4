;;; sly-agent-q-redact.el --- Keeping secrets out of what Emacs sends  -*- lexical-binding: t; -*-

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

;; The known secrets (the API key handed to the server, the values of
;; the environment's key, token, secret and password variables) and
;; their replacement by a marker in every reply Emacs sends.

;;; Code:

(require 'cl-lib)
(require 'subr-x)

;; Obsolete names (issue 46): these were named sly-agent-q-server-* before
;; sly-agent-q-server.el was split; kept for users who call them.
(define-obsolete-function-alias 'sly-agent-q-server-redact
  #'sly-agent-q-redact "0.2.0")
(define-obsolete-function-alias 'sly-agent-q-server-secrets
  #'sly-agent-q-redact-secrets "0.2.0")


(defvar sly-agent-q-redact-server-key nil
  "(VARIABLE . KEY): the API key handed to the running server, or nil.
Remembered so that replies can be redacted without asking
auth-source again.")


(defvar sly-agent-q-redact--secrets-cache nil
  "(KEY ENVIRONMENT SECRETS): the last answer of `sly-agent-q-redact-secrets'.
KEY and ENVIRONMENT are copies of what it was computed from.")

(defun sly-agent-q-redact-secrets ()
  "Return the known secrets as an alist of (NAME . VALUE), longest first.
They are the API key handed to the server, and the values (of 8
characters or more) of the environment variables whose names end in
_KEY, _TOKEN or _SECRET or contain PASSWORD; a Lisp image started
from this Emacs inherits them.  Every reply is redacted with them, so
the answer is kept until the key or the environment changes."
  (if (and sly-agent-q-redact--secrets-cache
           (equal (nth 0 sly-agent-q-redact--secrets-cache) sly-agent-q-redact-server-key)
           (equal (nth 1 sly-agent-q-redact--secrets-cache) process-environment))
      (nth 2 sly-agent-q-redact--secrets-cache)
    (let ((found (and sly-agent-q-redact-server-key (list sly-agent-q-redact-server-key)))
          (case-fold-search t))
      (dolist (entry process-environment)
        (when (string-match "\\`\\([^=]+\\)=\\(.\\{8,\\}\\)" entry)
          (let ((name (match-string 1 entry)))
            (when (string-match-p "\\(?:_KEY\\|_TOKEN\\|_SECRET\\)\\'\\|PASSWORD" name)
              (push (cons name (match-string 2 entry)) found)))))
      (let ((secrets (sort (delete-dups found) (lambda (a b) (> (length (cdr a)) (length (cdr b)))))))
        (setq sly-agent-q-redact--secrets-cache
              (list (copy-tree sly-agent-q-redact-server-key) (copy-sequence process-environment) secrets))
        secrets))))

(defun sly-agent-q-redact--secret-in-p (value secrets)
  "Look for SECRETS in the strings of VALUE; return non-nil if one is there.
VALUE is as for `sly-agent-q-redact'."
  (cond ((stringp value)
         (let (hit)
           (dolist (s secrets hit)
             (unless hit (setq hit (string-search (cdr s) value))))))
        ((consp value) (or (sly-agent-q-redact--secret-in-p (car value) secrets)
                           (sly-agent-q-redact--secret-in-p (cdr value) secrets)))
        ((vectorp value)
         (cl-loop for v across value thereis (sly-agent-q-redact--secret-in-p v secrets)))
        ((hash-table-p value)
         (catch 'found
           (maphash (lambda (_k v) (when (sly-agent-q-redact--secret-in-p v secrets) (throw 'found t))) value)
           nil))))

(defun sly-agent-q-redact (value &optional secrets)
  "Return VALUE with every known secret replaced by a marker.
VALUE is a string, or a plist, list, vector or hash table of them
\(as sent in JSON).  SECRETS defaults to `sly-agent-q-redact-secrets'.
A secret becomes [secret NAME redacted].  VALUE itself is returned,
not a copy, when it holds no secret (every reply is redacted)."
  (let ((secrets (or secrets (sly-agent-q-redact-secrets))))
    (if (and secrets (sly-agent-q-redact--secret-in-p value secrets))
        (sly-agent-q-redact--redact value secrets)
      value)))

(defun sly-agent-q-redact--redact (value secrets)
  "A copy of VALUE with each of SECRETS replaced by a marker."
  (cond
   ((stringp value)
    (dolist (s secrets value)
      (when (string-search (cdr s) value)
        (setq value (string-replace (cdr s) (format "[secret %s redacted]" (car s))
                                    value)))))
   ((consp value)
    (cons (sly-agent-q-redact--redact (car value) secrets)
          (sly-agent-q-redact--redact (cdr value) secrets)))
   ((vectorp value)
    (vconcat (mapcar (lambda (v) (sly-agent-q-redact--redact v secrets)) value)))
   ((hash-table-p value)
    (let ((copy (make-hash-table :test (hash-table-test value))))
      (maphash (lambda (k v) (puthash k (sly-agent-q-redact--redact v secrets) copy)) value)
      copy))
   (t value)))

(provide 'sly-agent-q-redact)
;;; sly-agent-q-redact.el ends here
