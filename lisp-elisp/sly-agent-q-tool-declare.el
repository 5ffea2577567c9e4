;;; sly-agent-q-tool-declare.el --- One declaration per Emacs tool of sly-agent-q  -*- lexical-binding: t; -*-

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

;; Each tool that runs in Emacs is declared once, with
;; `sly-agent-q-define-tool', beside its handler (as gptel's
;; `gptel-make-tool' and lisp-cl's `define-tool' declare theirs):
;;
;;   (sly-agent-q-define-tool "read_file"
;;     :handler #'my-read-file          ; called with the arguments as &key
;;     :changes nil                     ; or (lambda (ARGS) TARGETS): rewind
;;     :preview #'my-read-file-preview) ; (lambda (ARGS) PLIST): approval
;;
;; The server's catalog (server/tools/catalog/) declares the same tool's
;; parameters and how its approval is reviewed; Emacs's dispatch, rewind
;; and approval code read these declarations and name no tool.  The
;; server sends every call and every approval with the arguments under
;; the primary tool's names, so aliases are never restated here.

;;; Code:

(require 'cl-lib)

(defvar sly-agent-q-tool-declarations (make-hash-table :test #'equal)
  "Table from an Emacs tool's name to its declaration, a plist.
See `sly-agent-q-define-tool'.")

(defun sly-agent-q-tool-declare (name &rest declaration)
  "Declare the Emacs tool NAME with DECLARATION (see `sly-agent-q-define-tool')."
  (unless (and (stringp name) (string-match-p "\\`[a-z][a-z0-9_]*\\'" name))
    (error "An Emacs tool's name must be snake_case, not %S" name))
  (unless (functionp (plist-get declaration :handler))
    (error "Emacs tool %s declares no :handler function" name))
  ;; Forgetting what a tool changes would make rewind miss it silently: say it, nil included.
  (unless (plist-member declaration :changes)
    (error "Emacs tool %s must declare :changes (nil when it changes no file or buffer)" name))
  (dolist (key '(:changes :preview))
    (let ((f (plist-get declaration key)))
      (when (and f (not (functionp f)))
        (error "Emacs tool %s: %s must be a function or nil" name key))))
  (puthash name declaration sly-agent-q-tool-declarations)
  name)

(defmacro sly-agent-q-define-tool (name &rest declaration)
  "Declare the Emacs tool NAME: its handler, rewind targets and preview.
DECLARATION is a plist:
:handler  a function taking the call's arguments as `cl-defun'
          keywords (nil when absent); it returns the string for the
          model, or signals `sly-agent-q-tool-error', or returns a
          function of one argument that answers later (see
          `sly-agent-q-tool-call-run').
:changes  nil when the tool changes no file or buffer; else a function
          of the arguments (a plist) returning the list of
          \(file . ABSOLUTE-NAME) and (buffer . BUFFER-NAME) the call
          would change, kept before and after for rewinding.
:preview  nil, or a function of the arguments returning what the
          approval shows: a plist (:path :buffer :old :new :detail), or
          signalling the tool error the call would give.
The server's catalog declares the tool's parameters and its review kind."
  (declare (indent 1))
  `(sly-agent-q-tool-declare ,name ,@declaration))

(defun sly-agent-q-tool-declaration (name)
  "The declaration of the Emacs tool NAME, or nil."
  (and (stringp name) (gethash name sly-agent-q-tool-declarations)))

(defun sly-agent-q-tool-names ()
  "The names of the declared Emacs tools, sorted."
  (sort (cl-loop for name being the hash-keys of sly-agent-q-tool-declarations collect name)
        #'string<))

(provide 'sly-agent-q-tool-declare)
;;; sly-agent-q-tool-declare.el ends here
