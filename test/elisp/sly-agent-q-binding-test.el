;;; sly-agent-q-binding-test.el --- An approval binds the target it was given for  -*- lexical-binding: t; -*-

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

;; The real bundled server and the scripted mock LLM: what an approved
;; call acts on changes while the approval waits, and the call then
;; fails with a clear error and changes nothing.

;;; Code:

(require 'sly-agent-q-test-helper
         (expand-file-name "sly-agent-q-test-helper"
                           (file-name-directory (or load-file-name buffer-file-name))))

(defun sly-agent-q-binding-test--script (tool input)
  "A script calling TOOL with INPUT, then reporting the result."
  `((steps . [((content . [((type . "tool_use") (name . ,tool) (input . ,input))])
               (stop_reason . "tool_use"))
              ((content . [((type . "text") (text . "Result: {{last_tool_result}}"))]))])))

(defun sly-agent-q-binding-test--file (file)
  "The text of FILE on disk."
  (with-temp-buffer (insert-file-contents file) (buffer-string)))

(defmacro sly-agent-q-binding-test--with-root (var &rest body)
  "Run BODY with VAR a fresh project root, `sly-agent-q-project-root' too."
  (declare (indent 1))
  `(let* ((,var (file-name-as-directory (make-temp-file "agent-q-root" t)))
          (sly-agent-q-project-root ,var))
     (unless (fboundp 'sly-agent-q-tool-call-run)
       (ert-skip "sly-agent-q-tools.el is not there"))
     ,@body))

(defun sly-agent-q-binding-test--changing-approval (change)
  "An approval function that runs CHANGE while the approval waits, then approves."
  (lambda (_request callback)
    (run-with-timer 0.1 nil (lambda ()
                              (funcall change)
                              (funcall callback '(:decision "approved"))))))

(ert-deftest sly-agent-q-binding-write-file-target-changed ()
  "write_file approved for the file as it was: the file changed meanwhile, nothing is written."
  (sly-agent-q-binding-test--with-root root
    (let ((file (expand-file-name "notes.txt" root)))
      (write-region "as the user had it\n" nil file nil 'silent)
      (sly-agent-q-test-with-server
          (sly-agent-q-binding-test--script "write_file" '((path . "notes.txt") (content . "the model's text\n")))
        (let* ((sly-agent-q-approval-function
                (sly-agent-q-binding-test--changing-approval
                 (lambda () (write-region "the user's new edit\n" nil file nil 'silent))))
               (outcome (sly-agent-q-test-send "write it")))
          (should (eq (plist-get outcome :status) 'finished))
          (let ((result (car (last (sly-agent-q-test-tool-results)))))
            (should (cdr result))
            (should (string-match-p "changed while the approval waited" (car result))))
          (should (equal (sly-agent-q-binding-test--file file) "the user's new edit\n")))))))

(ert-deftest sly-agent-q-binding-write-file-unchanged-runs ()
  "The same approval with nothing changed meanwhile: the file is written."
  (sly-agent-q-binding-test--with-root root
    (let ((file (expand-file-name "notes.txt" root)))
      (write-region "as the user had it\n" nil file nil 'silent)
      (sly-agent-q-test-with-server
          (sly-agent-q-binding-test--script "write_file" '((path . "notes.txt") (content . "the model's text\n")))
        (let* ((sly-agent-q-approval-function (sly-agent-q-binding-test--changing-approval #'ignore))
               (outcome (sly-agent-q-test-send "write it")))
          (should (eq (plist-get outcome :status) 'finished))
          (should-not (cdr (car (last (sly-agent-q-test-tool-results)))))
          (should (equal (sly-agent-q-binding-test--file file) "the model's text\n")))))))

(ert-deftest sly-agent-q-binding-buffer-save-target-changed ()
  "buffer_save approved for the buffer's text as shown: the text changed meanwhile, nothing is saved."
  (sly-agent-q-binding-test--with-root root
    (let* ((file (expand-file-name "notes.txt" root))
           (buffer (progn (write-region "on disk\n" nil file nil 'silent)
                          (find-file-noselect file))))
      (unwind-protect
          (progn
            (with-current-buffer buffer (erase-buffer) (insert "approved text\n"))
            (sly-agent-q-test-with-server
                (sly-agent-q-binding-test--script "buffer_save" `((buffer_name . ,(buffer-name buffer))))
              (let* ((sly-agent-q-approval-function
                      (sly-agent-q-binding-test--changing-approval
                       (lambda () (with-current-buffer buffer
                                    (goto-char (point-max))
                                    (insert "typed while the approval waited\n")))))
                     (outcome (sly-agent-q-test-send "save it")))
                (should (eq (plist-get outcome :status) 'finished))
                (let ((result (car (last (sly-agent-q-test-tool-results)))))
                  (should (cdr result))
                  (should (string-match-p "changed while the approval waited" (car result))))
                (should (equal (sly-agent-q-binding-test--file file) "on disk\n")))))
        (with-current-buffer buffer (set-buffer-modified-p nil))
        (kill-buffer buffer)))))

(provide 'sly-agent-q-binding-test)
;;; sly-agent-q-binding-test.el ends here
