;;; sly-agent-q-diff-review-screen-test.el --- A diff review on a real terminal  -*- lexical-binding: t; -*-

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

;; The model proposes an edit of a file of the project; the review shows
;; its hunks in `make run', the user accepts them and finishes, and the
;; file on disk is the edited one.

;;; Code:

(require 'sly-agent-q-tui-helper
         (expand-file-name "sly-agent-q-tui-helper"
                           (file-name-directory (or load-file-name buffer-file-name))))

(defconst sly-agent-q-diff-review-screen-test--before
  ";;; notes\n(defvar *first* 1)\n;; a\n;; b\n;; c\n;; d\n;; e\n;; f\n(defvar *second* 2)\n;; g\n"
  "The file before the edit.")

(defconst sly-agent-q-diff-review-screen-test--after
  ";;; notes\n(defvar *first* 1)\n;; a\n;; b\n;; c\n;; d\n;; e\n;; f\n(defvar *second-renamed* 2)\n;; g\n"
  "The file as the model proposes it.")

(ert-deftest sly-agent-q-tui-diff-review ()
  "A proposed file edit is reviewed in diff-mode on the screen; accepted and finished, it is on disk."
  (let* ((project (file-name-as-directory (make-temp-file "agent-q-tui-project" t)))
         (file (expand-file-name "notes.lisp" project)))
    (unwind-protect
        (progn
          (with-temp-file file (insert sly-agent-q-diff-review-screen-test--before))
          (sly-agent-q-tui-with-run
              (:height 40
               :script `((steps . [,(sly-agent-q-tui-step
                                     (sly-agent-q-tui-text "I rename the second counter.")
                                     (sly-agent-q-tui-tool "propose_file_edit"
                                                           `((path . "notes.lisp")
                                                             (description . "Rename the second counter")
                                                             (new_content . ,sly-agent-q-diff-review-screen-test--after))))
                                   ,(sly-agent-q-tui-step (sly-agent-q-tui-text "Renamed. That is all."))])))
            ;; The project is a directory of its own, as a user's is.
            (sly-agent-q-tui-keys "M-:")
            (sly-agent-q-tui-wait "Eval:" 10 "the M-: prompt")
            (sly-agent-q-tui-type (format "(progn (setq sly-agent-q-project-root %S) 'set)" project))
            (sly-agent-q-tui-keys "Enter")
            (sly-agent-q-tui-wait "^set$" 10 "the option set")
            (sly-agent-q-tui-type "Rename the second counter")
            (sly-agent-q-tui-keys "Enter")
            (let ((screen (sly-agent-q-tui-wait "Agent-Q-Review" 60 "the review")))
              (sly-agent-q-tui-wait "second-renamed" 10 "the hunk")
              (setq screen (sly-agent-q-tui-snapshot "diff-review"))
              (let ((lines (sly-agent-q-tui-lines)))
                ;; The hunk as diff-mode shows it: the line removed and the line added.
                (should (member "-(defvar *second* 2)" lines))
                (should (member "+(defvar *second-renamed* 2)" lines))
                (should (string-match-p "Rename the second counter" screen))))
            (sly-agent-q-tui-keys "A")
            (sly-agent-q-tui-keys "C-c" "C-c")
            (sly-agent-q-tui-wait "That is all\\." 60 "the answer after the review")
            ;; Accepted: the file on disk is the edited one.
            (should (equal (with-temp-buffer (insert-file-contents file) (buffer-string))
                           sly-agent-q-diff-review-screen-test--after))))
      (delete-directory project t))))

(provide 'sly-agent-q-diff-review-screen-test)
;;; sly-agent-q-diff-review-screen-test.el ends here
