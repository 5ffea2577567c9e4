;;; sly-agent-q-tool-rewind.el --- What an Emacs tool call changed, for rewinding  -*- lexical-binding: t; -*-

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

;; Before a call, the texts of the files and buffers its declaration
;; says it changes; after it, what changed, sent with the result so the
;; server keeps it in the saved conversation; and putting a change back
;; when the user rewinds, unless the user changed the text since.

;;; Code:

(require 'cl-lib)
(require 'subr-x)
(require 'sly-agent-q-files)
(require 'sly-agent-q-tool-declare)


;;;; What a call changed, for rewinding

(define-obsolete-variable-alias 'sly-agent-q-tools-rewind-max-chars
  'sly-agent-q-tool-rewind-max-chars "0.2.0")

(defcustom sly-agent-q-tool-rewind-max-chars 2000000
  "Largest file or buffer text kept to rewind a change the agent made.
Larger texts are changed without a way back through `sly-agent-q-rewind'."
  :type 'integer
  :group 'sly-agent-q-tools)

(defun sly-agent-q-tool-rewind--targets (capability args)
  "Return the files and buffers a call of CAPABILITY with ARGS would alter.
A list of (file . ABSOLUTE-NAME) and (buffer . BUFFER-NAME), as the
tool's declaration gives it; nil when the call will be refused
anyway (the tool reports why)."
  (let ((changes (plist-get (sly-agent-q-tool-declaration capability) :changes)))
    (and changes (ignore-errors (funcall changes args)))))

(defun sly-agent-q-tool-rewind-file-target (file)
  "Return the rewind target of FILE, for a tool's declaration."
  (list (cons 'file file)))

(defun sly-agent-q-tool-rewind-buffer-target (name)
  "Return the rewind target of the buffer the agent may write named NAME.
NAME nil is the user's last buffer, as the buffer tools take it."
  (list (cons 'buffer (buffer-name (sly-agent-q-files-agent-buffer name t)))))

(defun sly-agent-q-tool-rewind--text-of (target)
  "The text of TARGET now: a string, nil if it does not exist, or `too-large'."
  (pcase-let ((`(,kind . ,name) target))
    (let ((text (pcase kind
                  ('file (and (file-regular-p name)
                              (if (> (file-attribute-size (file-attributes name))
                                     sly-agent-q-tool-rewind-max-chars)
                                  'too-large
                                (ignore-errors (car (sly-agent-q-files-read-disk name))))))
                  ('buffer (let ((b (get-buffer name)))
                             (and b (if (> (buffer-size b) sly-agent-q-tool-rewind-max-chars)
                                        'too-large
                                      (sly-agent-q-files-buffer-text b))))))))
      (if (and (stringp text) (> (length text) sly-agent-q-tool-rewind-max-chars)) 'too-large text))))

(defun sly-agent-q-tool-rewind-snapshot (capability args)
  "Return the texts of what a call of CAPABILITY with ARGS would change.
A list of (TARGET . TEXT) (see `sly-agent-q-tool-rewind--text-of')."
  (mapcar (lambda (target) (cons target (sly-agent-q-tool-rewind--text-of target)))
          (sly-agent-q-tool-rewind--targets capability args)))

(defun sly-agent-q-tool-rewind-changes (before)
  "What changed since the snapshot BEFORE was taken, as a vector for JSON.
Each change is a plist (:kind \"file\" or \"buffer\" :name NAME :before
TEXT-OR-NIL :after TEXT-OR-NIL); a text too large to keep is replaced
by :tooLarge t."
  (vconcat
   (delq nil
         (mapcar
          (pcase-lambda (`(,target . ,old))
            (let ((new (sly-agent-q-tool-rewind--text-of target)))
              (unless (and (stringp old) (stringp new) (string= old new))
                (unless (and (null old) (null new))
                  (if (or (eq old 'too-large) (eq new 'too-large))
                      (list :kind (symbol-name (car target)) :name (cdr target) :tooLarge t)
                    (list :kind (symbol-name (car target)) :name (cdr target)
                          :before old :after new))))))
          before))))

(defun sly-agent-q-tool-rewind-change (kind name before expected)
  "Put back file or buffer NAME (KIND \"file\" or \"buffer\") to BEFORE.
BEFORE nil means it did not exist: the file is deleted, the buffer
killed.  EXPECTED is the text the agent left there (nil: none).  When
the text there now is not EXPECTED, the user changed it since:
nothing is done and the text now is returned (\"\" when there is
none).  Return nil when it was put back.  A file is put back only
inside the project root and under the write tools' other rules; a
tool error says why not."
  (pcase kind
    ("file"
     (let* ((file (sly-agent-q-files-resolve name t))
            (buffer (sly-agent-q-files-visiting-buffer file))
            (current (and (file-exists-p file) (car (sly-agent-q-files-read-disk file)))))
       (cond
        ((and buffer (buffer-modified-p buffer)) (sly-agent-q-files-buffer-text buffer))
        ((not (equal current expected)) (or current ""))
        (t (if before
               (progn (sly-agent-q-files-write-atomically file before)
                      (when buffer (sly-agent-q-files-revert-buffer buffer)))
             (when current (delete-file file))
             (when buffer (kill-buffer buffer)))
           nil))))
    ("buffer"
     (let* ((buffer (get-buffer name))
            (current (and buffer (sly-agent-q-files-buffer-text buffer))))
       (cond
        ((not (equal current expected)) (or current ""))
        ((null buffer) nil)
        (t (sly-agent-q-files-agent-buffer name t)
           (if before
               (with-current-buffer buffer
                 (save-excursion
                   (atomic-change-group
                     (erase-buffer)
                     (insert before))))
             (kill-buffer buffer))
           nil))))
    (_ (sly-agent-q-tool-fail "Unknown kind of change %S." kind))))

(provide 'sly-agent-q-tool-rewind)
;;; sly-agent-q-tool-rewind.el ends here
