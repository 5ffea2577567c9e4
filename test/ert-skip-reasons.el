;;; ert-skip-reasons.el --- Name every skipped ERT test with its reason  -*- lexical-binding: t; -*-

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

;; Loaded by test/ert-run.sh before a test file.  ERT's batch output
;; counts skipped tests and names them, but never says why; this prints
;; one line "SKIP: TEST: REASON" per skipped test, so that the suite's
;; summary can name every skip it counts.

;;; Code:

(require 'ert)

(defun ert-skip-reasons--report (test &rest _)
  "Print a SKIP line for TEST when its latest result is a skip."
  (let ((result (ert-test-most-recent-result test)))
    (when (ert-test-skipped-p result)
      (let* ((condition (ert-test-result-with-condition-condition result))
             (data (cdr condition))
             ;; `ert-skip' gives (MESSAGE); `skip-unless' gives (((skip-unless FORM) :form ...)).
             (reason (cond ((and (consp data) (stringp (car data))) (car data))
                           ((and (consp data) (consp (car data)))
                            (format "%S is false" (caar data)))
                           (t (format "%S" data)))))
        (princ (format "SKIP: %s: %s\n" (ert-test-name test)
                       (replace-regexp-in-string "\n" " " reason)))))))

(advice-add 'ert-run-test :after #'ert-skip-reasons--report)

(provide 'ert-skip-reasons)
;;; ert-skip-reasons.el ends here
