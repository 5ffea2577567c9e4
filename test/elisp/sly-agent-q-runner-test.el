;;; sly-agent-q-runner-test.el --- The suites' runner: a crashed Lisp implementation runs its group again  -*- lexical-binding: t; -*-

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

;; test/ert-run.sh's `ert_run' runs a group once more when the Lisp
;; implementation it drives crashed (its process ended by SIGSEGV and the
;; like, said by the test helper's watch); a second crash fails the run,
;; and a failure of ours is never run again.  Each test runs the real
;; runner on test/fixtures/runner/lisp-crash-test.el, whose "Lisp" is a
;; real process ended by a real signal, and counts the runs it made.

;;; Code:

(require 'ert)
(require 'sly-agent-q-test-helper)

(defun sly-agent-q-runner-test--run (crashes fail &optional command)
  "Run the fixture group through `ert_run'; its first CRASHES runs crash.
FAIL non-nil fails its test.  COMMAND is the shell command that runs
it, the ERT group's by default.  Return (OUTPUT . RUNS), RUNS the
number of times the group ran."
  (let* ((dir (make-temp-file "saq-runner-" t))
         (process-environment
          (append (list (concat "SAQ_RUNNER_DIR=" dir)
                        (format "SAQ_RUNNER_CRASHES=%d" crashes)
                        (concat "SAQ_RUNNER_FAIL=" (if fail "1" "0"))
                        (concat "EMACS=" (expand-file-name invocation-name invocation-directory)))
                  process-environment)))
    (unwind-protect
        (with-temp-buffer
          (let ((default-directory sly-agent-q-test-root))
            (call-process "bash" nil t nil "-c"
                          (or command
                              ". test/ert-run.sh; ert_run group test/fixtures/runner/lisp-crash-test.el; ert_summary runner")))
          (cons (buffer-string)
                (let ((counter (expand-file-name "runs" dir)))
                  (if (file-exists-p counter)
                      (string-to-number (with-temp-buffer (insert-file-contents counter) (buffer-string)))
                    0))))
      (delete-directory dir t))))

(ert-deftest sly-agent-q-runner-a-crashed-lisp-runs-its-group-once-more ()
  "One crash is said in one line naming the Lisp and the signal; the group's second run counts."
  (pcase-let ((`(,out . ,runs) (sly-agent-q-runner-test--run 1 nil)))
    (should (= runs 2))
    (should (string-match-p
             "^group: the Lisp implementation crashed (sleep ended by signal 11 (SIGSEGV)), not a test: running the group once more$"
             out))
    (should (string-match-p "^runner: 1 passed, 0 failed, 0 skipped$" out))))

(ert-deftest sly-agent-q-runner-a-second-crash-fails-the-run ()
  "Two crashes in a row fail the run, after two runs and no third."
  (pcase-let ((`(,out . ,runs) (sly-agent-q-runner-test--run 2 nil)))
    (should (= runs 2))
    (should (string-match-p "^group: the Lisp implementation crashed again (sleep ended by signal 11 (SIGSEGV)): the run fails$" out))
    (should (string-match-p "^runner: 0 passed, [1-9][0-9]* failed" out))))

(ert-deftest sly-agent-q-runner-a-failure-of-ours-is-never-retried ()
  "A test that fails without a crash runs once and fails."
  (pcase-let ((`(,out . ,runs) (sly-agent-q-runner-test--run 0 t)))
    (should (= runs 1))
    (should-not (string-match-p "once more" out))
    (should (string-match-p "^runner: 0 passed, 1 failed" out))))

(defun sly-agent-q-runner-test--run-cl (crashes fail)
  "Run test/cl/run.sh with the fixture Lisp; its first CRASHES runs crash.
FAIL non-nil makes it report a failed test.  Return (OUTPUT . RUNS)."
  (sly-agent-q-runner-test--run
   crashes fail
   ;; Its logs in the run's own directory: the CL suite may be running beside (make check).
   (concat "unset SLY_DIR; SAQ_CL_WORK=\"$SAQ_RUNNER_DIR\" SBCL=test/fixtures/runner/crashing-lisp.sh"
           " SWANK_LOADER=test/fixtures/runner/crashing-lisp.sh test/cl/run.sh sbcl")))

(ert-deftest sly-agent-q-runner-a-crashed-lisp-runs-the-cl-suite-once-more ()
  "A batch Lisp ended by SIGSEGV: said in one line, its output shown apart, run once more."
  (pcase-let ((`(,out . ,runs) (sly-agent-q-runner-test--run-cl 1 nil)))
    (should (= runs 2))
    (should (string-match-p
             "^cl-swank: the Lisp implementation crashed (sbcl ended by signal 11 (SIGSEGV)), not a test: running it once more$"
             out))
    (should (string-match-p "^  | ok   a-test$" out))
    (should (string-match-p "^cl-swank: 1 passed, 0 failed$" out))
    (should-not (string-match-p "failed, [0-9]" (replace-regexp-in-string "^cl-slynk.*\n" "" out)))))

(ert-deftest sly-agent-q-runner-a-second-crash-fails-the-cl-suite ()
  "Two crashes in a row fail the CL suite after two runs."
  (pcase-let ((`(,out . ,runs) (sly-agent-q-runner-test--run-cl 2 nil)))
    (should (= runs 2))
    (should (string-match-p "^cl-swank: the Lisp implementation crashed again (sbcl ended by signal 11 (SIGSEGV)): the run fails$" out))
    (should (string-match-p "^cl-swank: 0 passed, 1 failed$" out))))

(ert-deftest sly-agent-q-runner-a-cl-failure-of-ours-is-never-retried ()
  "A CL run that reports a failed test runs once."
  (pcase-let ((`(,out . ,runs) (sly-agent-q-runner-test--run-cl 0 t)))
    (should (= runs 1))
    (should-not (string-match-p "once more" out))
    (should (string-match-p "^FAIL another-test$" out))
    (should (string-match-p "^cl-swank: 1 passed, 1 failed$" out))))

(provide 'sly-agent-q-runner-test)
;;; sly-agent-q-runner-test.el ends here
