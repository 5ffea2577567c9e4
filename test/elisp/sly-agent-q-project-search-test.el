;;; sly-agent-q-project-search-test.el --- search_project in a real Emacs: the root and the unsaved buffers  -*- lexical-binding: t; -*-

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

;; The real bundled server, this Emacs's real file tools and the mock
;; LLM: the model calls search_project.  The server asks Emacs for the
;; project root (the one the file tools confine to) and for the buffers
;; with unsaved changes; the answer holds the file's text on disk and
;; names the file whose buffer differs.

;;; Code:

(require 'sly-agent-q-test-helper
         (expand-file-name "sly-agent-q-test-helper"
                           (file-name-directory (or load-file-name buffer-file-name))))

(ert-deftest sly-agent-q-project-search-unsaved-buffer-named ()
  "search_project searches the file on disk and names the file whose buffer has unsaved changes."
  (let* ((root (file-name-as-directory (make-temp-file "agent-q-search" t)))
         (file (expand-file-name "src/app.lisp" root))
         (sly-agent-q-project-root root)
         (buffer nil))
    (make-directory (file-name-directory file))
    (write-region "(defun parse-input (line)\n  (needle-on-disk line))\n" nil file nil 'silent)
    (unwind-protect
        (progn
          (setq buffer (find-file-noselect file))
          (with-current-buffer buffer
            (goto-char (point-max))
            (insert "(defun only-in-the-buffer () 'needle-in-buffer)\n"))
          (sly-agent-q-test-with-server
              `((steps . [((content . [((type . "tool_use") (name . "search_project")
                                        (input . ((pattern . "needle"))))])
                           (stop_reason . "tool_use"))
                          ((content . [((type . "text") (text . "Found."))]))]))
            (should (eq (plist-get (sly-agent-q-test-send "search") :status) 'finished))
            (let ((result (car (sly-agent-q-test-tool-results))))
              (should-not (cdr result))
              (should (string-match-p (regexp-quote "src/app.lisp:2:4 in (defun parse-input (line 1)") (car result)))
              (should (string-match-p (regexp-quote "1 matching line in 1 file") (car result)))
              (should-not (string-match-p "needle-in-buffer" (car result)))
              (should (string-match-p (regexp-quote "the buffers visiting src/app.lisp have changes not saved; their files on disk were searched")
                                      (car result))))))
      (when (buffer-live-p buffer)
        (with-current-buffer buffer (set-buffer-modified-p nil))
        (kill-buffer buffer))
      (delete-directory root t))))

(provide 'sly-agent-q-project-search-test)
;;; sly-agent-q-project-search-test.el ends here
