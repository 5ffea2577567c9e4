;;; sly-agent-q-tool-preview.el --- What an approval of an Emacs tool call is about  -*- lexical-binding: t; -*-

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

;; The preview of a call put to the user for approval (from the tool's
;; declaration, or the server's form edit), its digest, and the check,
;; when an approved call runs, that its target is still the one the
;; user approved.

;;; Code:

(require 'cl-lib)
(require 'subr-x)
(require 'lisp-mode)
(require 'sly-agent-q-files)
(require 'sly-agent-q-diff)
(require 'sly-agent-q-tool-declare)


;;;; What an approval is about

(defun sly-agent-q-tool-preview-disk-text (file)
  "Return the text of FILE on disk, \"\" when it does not exist.
A file that cannot be read as text gives a note instead."
  (cond ((not (file-exists-p file)) "")
        (t (condition-case err
               (car (sly-agent-q-files-read-disk file))
             (sly-agent-q-tool-error
              (format "[%s  It would be replaced whole.]\n" (cadr err)))))))

(defun sly-agent-q-tool-preview--plain (value)
  "VALUE with its strings stripped of text properties, for a digest."
  (cond ((stringp value) (substring-no-properties value))
        ((consp value) (cons (sly-agent-q-tool-preview--plain (car value))
                             (sly-agent-q-tool-preview--plain (cdr value))))
        ((vectorp value) (vconcat (mapcar #'sly-agent-q-tool-preview--plain value)))
        (t value)))

(defun sly-agent-q-tool-preview-target (tool args &optional review)
  "The identity of what TOOL with ARGS acts on now: a digest of its preview.
REVIEW is the review kind the server sent (see `sly-agent-q-tool-preview').
The preview names the resolved target and, for what writes, the text
there and the text to be written, or the debugger, thread, level and
restart; an approval is bound to this digest, and the call runs only
if it is still the same.  Signal the tool's error when it would refuse."
  (sly-agent-q-tool-preview-digest (sly-agent-q-tool-preview tool args review)))

(defun sly-agent-q-tool-preview-digest (preview)
  "The digest of PREVIEW, as `sly-agent-q-tool-preview-target' gives it."
  (secure-hash 'sha256 (prin1-to-string (sly-agent-q-tool-preview--plain preview))))

(defun sly-agent-q-tool-preview-check-approved (approved)
  "Signal a tool error unless the target of APPROVED is what it was.
APPROVED is the plist (:tool :arguments :target) the server sends with
an approved call: the call runs only on the target the user approved."
  (let ((tool (plist-get approved :tool))
        (now (condition-case err
                 (sly-agent-q-tool-preview-target (plist-get approved :tool)
                                                  (plist-get approved :arguments))
               (sly-agent-q-tool-error (cadr err)))))
    (unless (equal now (plist-get approved :target))
      (sly-agent-q-tool-fail "%s was not run: what it acts on changed while the approval waited, so it is no longer what the user approved.  Look again and ask again." tool))))

(defun sly-agent-q-tool-preview (tool args &optional review)
  "Prepare the call of TOOL with ARGS for approval, without running it.
TOOL is the primary tool's name and ARGS are under its parameter
names, as the server sends them.  REVIEW is the call's review kind
\(server/protocol.ts, ReviewKind): for \"form\", the edit the server
computed (:edit) of the form :form; otherwise what the declaration of
TOOL (`sly-agent-q-define-tool') previews, nil when it declares none.
A preview is a plist: :path, the resolved path relative to the
project root (or :buffer, a buffer name), for what writes :old (the
text there now, \"\" for a new file) and :new (the text after the
call), and :detail, a line the approval shows first.  Signal the
`sly-agent-q-tool-error' the tool itself would give, so that a call
that would be refused is never put to the user."
  (unless (and (listp args) (cl-evenp (length args)))
    (sly-agent-q-tool-fail "The arguments of %s must be a JSON object." tool))
  (if (equal review "form")
      (sly-agent-q-tool-preview--form tool args)
    (let ((preview (plist-get (sly-agent-q-tool-declaration tool) :preview)))
      (and preview (funcall preview args)))))

(defun sly-agent-q-tool-preview--form (tool args)
  "The preview of TOOL's edit of one Lisp form, from ARGS :form and :edit.
The server located the form and computed the edit; the new text is
checked here too, with Emacs's own scanner."
  (sly-agent-q-tool-preview-check-one-form (plist-get args :form))
  (let ((edit (plist-get args :edit)))
    (unless (and (listp edit) (plist-get edit :path))
      (sly-agent-q-tool-fail "%s came without the edit it would make." tool))
    (sly-agent-q-tool-preview-proposal edit)))

(defun sly-agent-q-tool-preview-proposal (args)
  "The preview of the file edit ARGS (a propose_file_edit's arguments)."
  (let ((proposal (sly-agent-q-diff-proposal args t)))
    (list :path (plist-get proposal :rel)
          :old (plist-get proposal :old) :new (plist-get proposal :new))))


(defun sly-agent-q-tool-preview-check-one-form (text)
  "Signal `sly-agent-q-tool-error' unless TEXT is exactly one balanced form.
TEXT is scanned with Emacs's sexp scanner in `lisp-mode' syntax:
parentheses must balance, strings and comments must end."
  (unless (stringp text)
    (sly-agent-q-tool-fail "The new form's text is missing."))
  (with-temp-buffer
    (set-syntax-table lisp-mode-syntax-table)
    (insert text)
    (let ((state (parse-partial-sexp (point-min) (point-max))))
      (cond ((nth 3 state)
             (sly-agent-q-tool-fail
              "The new text is refused: it ends inside a string (an unterminated \" or |)."))
            ((nth 4 state)
             (sly-agent-q-tool-fail "The new text is refused: it ends inside a comment."))
            ((> (car state) 0)
             (sly-agent-q-tool-fail
              "The new text is refused: unbalanced parentheses, %d ( not closed." (car state)))
            ((< (car state) 0)
             (sly-agent-q-tool-fail
              "The new text is refused: unbalanced parentheses, %d ) too many." (- (car state))))))
    (goto-char (point-min))
    (forward-comment (buffer-size))
    (when (eobp)
      (sly-agent-q-tool-fail "The new text is refused: it holds no form."))
    (unless (eq (char-after) ?\()
      (sly-agent-q-tool-fail "The new text is refused: it is not a parenthesized form."))
    (condition-case err
        (forward-sexp 1)
      (scan-error
       (sly-agent-q-tool-fail "The new text is refused: %s." (cadr err))))
    (forward-comment (buffer-size))
    (unless (eobp)
      (sly-agent-q-tool-fail
       "The new text is refused: there is more than one form (the second at line %d); give exactly one."
       (line-number-at-pos)))))

(provide 'sly-agent-q-tool-preview)
;;; sly-agent-q-tool-preview.el ends here
