;;; sly-agent-q-faces.el --- The faces the chat draws with, one meaning each  -*- lexical-binding: t; -*-

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

;; Each face of the chat means one thing, and inherits from the face of
;; Emacs that means it (`success', `error', `warning', `shadow',
;; `outline-1'...), so that every theme, light or dark, colours it as it
;; colours that meaning.  A success is never drawn in the colour of a
;; comment (which is firebrick in the default light theme), nor the
;; text the user decides on in the colour of meta text.
;;
;; M-x customize-group RET sly-agent-q-faces lists them.

;;; Code:

(require 'cl-lib)

(defgroup sly-agent-q-faces nil
  "The faces of the sly-agent-q chat."
  :group 'sly-agent-q
  :group 'faces)

(defface sly-agent-q-success-face '((t :inherit success))
  "Face of a mark of success: a tool call that ran (✓), an approval given."
  :group 'sly-agent-q-faces)

(defface sly-agent-q-error-face '((t :inherit error))
  "Face of a failure: a tool call that failed (✗), an error, a denial."
  :group 'sly-agent-q-faces)

(defface sly-agent-q-waiting-face '((t :inherit warning))
  "Face of what waits on the user: a call waiting for approval."
  :group 'sly-agent-q-faces)

(defface sly-agent-q-meta-face '((t :inherit shadow))
  "Face of meta text: notices, times, token usage, the model's reasoning.
It is text about the conversation, drawn back from the conversation's own."
  :group 'sly-agent-q-faces)

(define-obsolete-face-alias 'sly-agent-q-notice-face 'sly-agent-q-meta-face "0.1.0")

(defface sly-agent-q-user-face '((t :inherit font-lock-keyword-face :weight bold))
  "Face of the label \"You:\" before the user's message."
  :group 'sly-agent-q-faces)

(defface sly-agent-q-assistant-face '((t :inherit font-lock-function-name-face :weight bold))
  "Face of the label \"Agent:\" before the agent's answer."
  :group 'sly-agent-q-faces)

(defface sly-agent-q-tool-face '((t :inherit font-lock-constant-face))
  "Face of a tool call's entry line: its name and arguments in short."
  :group 'sly-agent-q-faces)

(defface sly-agent-q-toggle-face '((((type graphic)) :height 1.3) (t nil))
  "Face of the ▸/▾ that show and hide a section (a tool entry, the reasoning).
A graphic frame draws it larger: at the text's size it is hard to see."
  :group 'sly-agent-q-faces)

(defface sly-agent-q-approval-frame-face '((t :inherit warning))
  "Face of the frame (┏ ┃ ┗) around a call that needs the user's approval.
The text in the frame is drawn in the default face: it is what the
user decides on."
  :group 'sly-agent-q-faces)

(defface sly-agent-q-heading-1-face
  '((((type graphic)) :inherit outline-1 :weight bold :height 1.25)
    (t :inherit outline-1 :weight bold :underline t))
  "Face of a heading of level 1 in the model's text (# Heading).
Larger, or underlined on a terminal, so that it reads as a heading
and not as a label such as \"Agent:\"."
  :group 'sly-agent-q-faces)

(defface sly-agent-q-heading-2-face
  '((((type graphic)) :inherit outline-2 :weight bold :height 1.15)
    (t :inherit outline-2 :weight bold :underline t))
  "Face of a heading of level 2 in the model's text (## Heading)."
  :group 'sly-agent-q-faces)

(defface sly-agent-q-heading-3-face
  '((((type graphic)) :inherit outline-3 :weight bold :height 1.05)
    (t :inherit outline-3 :weight bold :underline t))
  "Face of a heading of level 3 or deeper in the model's text (### Heading)."
  :group 'sly-agent-q-faces)

(defface sly-agent-q-code-block-face
  '((((class color) (min-colors 88) (background light)) :background "#f0f0f0" :extend t)
    (((class color) (min-colors 88) (background dark)) :background "#262626" :extend t)
    (t :inherit fringe :extend t))
  "Face of a code block's band in the model's text, fences included.
It is put under the faces of the code's tokens, so the band has no gap."
  :group 'sly-agent-q-faces)

(defface sly-agent-q-code-fence-face '((t :inherit shadow))
  "Face of the ``` lines around a code block."
  :group 'sly-agent-q-faces)

(defface sly-agent-q-prompt-face '((t :inherit minibuffer-prompt))
  "Face of the input prompt."
  :group 'sly-agent-q-faces)

(defun sly-agent-q-faces-heading (level)
  "The face of a heading of LEVEL (1 for #, 2 for ##...)."
  (pcase level
    (1 'sly-agent-q-heading-1-face)
    (2 'sly-agent-q-heading-2-face)
    (_ 'sly-agent-q-heading-3-face)))

(defun sly-agent-q-faces-remove (start end faces &optional object)
  "Take FACES (a list of faces) out of the `face' property from START to END.
The other faces there stay.  OBJECT is a string, or nil for the
current buffer."
  (let ((pos start))
    (while (< pos end)
      (let* ((next (next-single-property-change pos 'face object end))
             (face (get-text-property pos 'face object)))
        (when face
          (let ((kept (if (and (listp face) (not (keywordp (car face))))
                          (cl-remove-if (lambda (f) (memq f faces)) face)
                        (unless (memq face faces) face))))
            (put-text-property pos next 'face (if (and (consp kept) (null (cdr kept))) (car kept) kept)
                               object)))
        (setq pos next)))))

(defcustom sly-agent-q-faces-lisp-max-chars 20000
  "Longest Lisp form (an approval's, a tool entry's) drawn in Lisp's faces.
A longer one is drawn plain: fontifying it would hold Emacs up."
  :type 'natnum
  :group 'sly-agent-q-faces)

(defun sly-agent-q-faces-lisp (text)
  "The faces `lisp-mode' gives TEXT, as a list of (FROM TO FACE).
FROM and TO are offsets in TEXT.  A mode that fails, or a TEXT longer
than `sly-agent-q-faces-lisp-max-chars', leaves TEXT plain (nil): its
faces are a help to read, never a condition to show it."
  (let ((buffer (and (stringp text) (<= (length text) sly-agent-q-faces-lisp-max-chars)
                     (get-buffer-create " *sly-agent-q-faces lisp*")))
        (runs nil))
    (when buffer
     (with-current-buffer buffer
      (unless (eq major-mode 'lisp-mode)
        (condition-case nil (delay-mode-hooks (lisp-mode)) (error nil)))
      (when (eq major-mode 'lisp-mode)
        (setq runs (sly-agent-q-faces-fontify text)))))
    runs))

(defun sly-agent-q-faces-fontify (text)
  "The faces the current buffer's font lock gives TEXT, as (FROM TO FACE).
The buffer, a hidden one set up in the mode wanted, gets TEXT as its
whole text.  FROM and TO are offsets in TEXT."
  (let ((inhibit-read-only t) (buffer-undo-list t) (runs nil))
    (erase-buffer)
    (insert text)
    ;; Else a buffer fontified once counts as fontified for good.
    (setq font-lock-fontified nil)
    (ignore-errors (font-lock-ensure))
    (let ((pos (point-min)))
      (while (< pos (point-max))
        (let ((next (next-single-property-change pos 'face nil (point-max)))
              (face (get-text-property pos 'face)))
          (when face (push (list (1- pos) (1- next) face) runs))
          (setq pos next))))
    (nreverse runs)))

(provide 'sly-agent-q-faces)
;;; sly-agent-q-faces.el ends here
