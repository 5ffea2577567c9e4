;;; sly-agent-q-keys-test.el --- Keys the package binds in Lisp buffers  -*- lexical-binding: t; -*-

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

;; C-c followed by a letter is reserved for the user (Elisp manual, Key
;; Binding Conventions): `sly-agent-q-lisp-mode' must bind none, and
;; its commands stay reachable through `sly-agent-q-command-map' for the
;; user to put under a key of their choice.

;;; Code:

(require 'ert)
(require 'sly-agent-q)

(ert-deftest sly-agent-q-lisp-mode-binds-no-user-key ()
  "With the mode on in a Lisp buffer, no C-c LETTER is the mode's."
  (with-temp-buffer
    (lisp-mode)
    (let ((before (cl-loop for c in (append (number-sequence ?a ?z) (number-sequence ?A ?Z))
                           collect (cons c (key-binding (vector ?\C-c c))))))
      (sly-agent-q-lisp-mode 1)
      (should sly-agent-q-lisp-mode)
      (dolist (c (append (number-sequence ?a ?z) (number-sequence ?A ?Z)))
        ;; Nothing of the mode's own map under C-c LETTER...
        (let ((own (lookup-key sly-agent-q-lisp-mode-map (vector ?\C-c c))))
          ;; A number means C-c itself is not a prefix there: nothing bound.
          (should-not (and own (not (numberp own)) (list (string c) own))))
        ;; ...and what the buffer had there before is still what it has.
        (should (equal (cons c (key-binding (vector ?\C-c c))) (assq c before)))))))

(ert-deftest sly-agent-q-command-map-is-there-to-bind ()
  "The command map carries the commands, ready for a user's key."
  (should (keymapp sly-agent-q-command-map))
  (should (eq (lookup-key sly-agent-q-command-map "q") #'sly-agent-q))
  (should (eq (lookup-key sly-agent-q-command-map "r") #'sly-agent-q-attach-region))
  (should (eq (lookup-key sly-agent-q-command-map "k") #'sly-agent-q-cancel))
  ;; What the README suggests works: the prefix command under a user's key.
  (let ((map (make-sparse-keymap)))
    (define-key map (kbd "C-c q") 'sly-agent-q-command-map)
    (should (eq (lookup-key map (kbd "C-c q d")) #'sly-agent-q-attach-defun))))

(provide 'sly-agent-q-keys-test)
;;; sly-agent-q-keys-test.el ends here
