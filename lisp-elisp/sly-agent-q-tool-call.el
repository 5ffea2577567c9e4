;;; sly-agent-q-tool-call.el --- Running the Emacs tools of sly-agent-q  -*- lexical-binding: t; -*-

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

;; `sly-agent-q-tool-call-run' runs a tool declared with
;; `sly-agent-q-define-tool': it snapshots what the call will change (for
;; a rewind), calls the handler, and answers its callback exactly once,
;; at once or, for a handler that must wait, later.  It never signals.

;;; Code:

(require 'cl-lib)
(require 'subr-x)
(require 'sly-agent-q-display)
(require 'sly-agent-q-files)
(require 'sly-agent-q-tool-declare)
(require 'sly-agent-q-tool-rewind)


;;;; Dispatch

(defun sly-agent-q-tool-call--keywords (args)
  "Return ARGS (a JSON object as jsonrpc.el gives it) with JSON false as nil."
  (cl-loop for (key value) on args by #'cddr
           nconc (list key (if (eq value :json-false) nil value))))

(defun sly-agent-q-tool-call-capabilities ()
  "Return the names of the capabilities Emacs answers."
  (sly-agent-q-tool-names))

(defun sly-agent-q-tool-call-run (capability args callback &optional changes-callback)
  "Run the tool CAPABILITY with ARGS and call CALLBACK with the result.
CAPABILITY is a tool declared with `sly-agent-q-define-tool',
ARGS a plist with keyword keys as jsonrpc.el parses JSON objects.
CALLBACK is called exactly once, as (CALLBACK CONTENT nil) on success
or (CALLBACK nil ERROR-MESSAGE): before this function returns, unless
the handler returned a function to answer later (see
`sly-agent-q-tool-call--deferred').  Return nil, or for a call
answered later a function of no arguments that stops it.
CHANGES-CALLBACK, if non-nil, is called first with what the call
changed in files and buffers, for rewinding (see
`sly-agent-q-tool-rewind-changes'), when it answers.  Never signals."
  (let ((content nil) (message nil) (before nil) (deferred nil))
    (condition-case err
        (let ((handler (plist-get (sly-agent-q-tool-declaration capability) :handler)))
          (unless handler
            (sly-agent-q-tool-fail "Emacs has no tool capability %S (it knows: %s)."
                                   capability
                                   (string-join (sly-agent-q-tool-call-capabilities) ", ")))
          (unless (and (listp args) (cl-evenp (length args)))
            (sly-agent-q-tool-fail "The arguments of %s must be a JSON object." capability))
          (setq before (sly-agent-q-tool-rewind-snapshot capability args))
          (let ((result (apply handler (sly-agent-q-tool-call--keywords args))))
            (if (and (functionp result) (not (symbolp result)))
                (setq deferred result)
              (setq content (if (stringp result) result (format "%s" result))))))
      (sly-agent-q-tool-error (setq message (cadr err)))
      (t (setq message (format "%s failed in Emacs: %s" capability
                               (error-message-string err)))))
    (let ((answer (lambda (content message)
                    (condition-case err
                        (progn
                          (when changes-callback
                            (funcall changes-callback (sly-agent-q-tool-rewind-changes before)))
                          (if message
                              (funcall callback nil message)
                            (funcall callback content nil)))
                      (t (message "sly-agent-q: the callback of %s failed: %s" capability
                                  (sly-agent-q-display-line (error-message-string err))))))))
      (if (and deferred (not message))
          (sly-agent-q-tool-call--deferred capability deferred answer)
        (funcall answer content message)
        nil))))

(defun sly-agent-q-tool-call--deferred (capability deferred callback)
  "Let DEFERRED, what the handler of CAPABILITY returned, answer CALLBACK later.
A handler that must wait (for the Lisp image, for the server's hunks)
returns a function of one argument, a function of (CONTENT ERROR); it
calls that once.  CALLBACK, a function of (CONTENT ERROR), is called
exactly once, whatever DEFERRED does.  Return what
DEFERRED returns when it is a function (one that stops the work: it is
called when the server no longer wants the answer), else nil."
  (let* ((answered nil)
         (answer (lambda (content error)
                   (unless answered
                     (setq answered t)
                     (if error
                         (funcall callback nil (format "%s" error))
                       (funcall callback (if (stringp content) content (format "%s" content)) nil))))))
    (condition-case err
        (let ((stop (funcall deferred answer)))
          (and (functionp stop)
               (lambda ()
                 (unless answered
                   (funcall stop)
                   (funcall answer nil "The call was cancelled.")))))
      (sly-agent-q-tool-error (funcall answer nil (cadr err)) nil)
      (t (funcall answer nil (format "%s failed in Emacs: %s" capability
                                     (error-message-string err)))
         nil))))

(provide 'sly-agent-q-tool-call)
;;; sly-agent-q-tool-call.el ends here
