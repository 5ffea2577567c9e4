;;; sly-agent-q-debugger-test.el --- The debugger module without a Lisp  -*- lexical-binding: t; -*-

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

;; The Emacs side of the debugger tools with a stand-in debugger buffer
;; (sldb-mode's buffer-local variables, no Lisp): what the tools say
;; when no debugger is open, the approval's naming of the restart, the
;; chat command, and the tools' deferred answers.  The real thing, under
;; SLIME and SLY, is in test/e2e.

;;; Code:

(require 'ert)
(require 'cl-lib)
(require 'sly-agent-q)

(defvar sldb-level)
(defvar sldb-restarts)
(defvar sldb-condition)
(defvar slime-current-thread)

(defmacro sly-agent-q-debugger-test--with-debugger (&rest body)
  "Run BODY with a stand-in sldb buffer bound to `debugger'."
  (declare (indent 0) (debug t))
  `(let ((debugger (generate-new-buffer "*sldb test/1*")))
     (unwind-protect
         (progn
           (with-current-buffer debugger
             (setq major-mode 'sldb-mode)
             (set (make-local-variable 'sldb-level) 2)
             (set (make-local-variable 'slime-current-thread) 7)
             (set (make-local-variable 'sldb-condition)
                  '("no non-whitespace characters in string \"\"." "[Condition of type PARSE-ERROR]" nil))
             (set (make-local-variable 'sldb-restarts)
                  '(("RETRY-PARSE" "Parse the input again.") ("ABORT" "Return to top level.")))
             (insert "no non-whitespace characters\n\nRestarts:\n 0: [RETRY-PARSE] ...\n\nBacktrace:\n"
                     "  0: (PARSE-INTEGER \"\")\n  1: (MY-APP:PARSE-INPUT \"\")\n  2: (MY-APP::TOTAL-INPUT \"\")\n"))
           ,@body)
       (kill-buffer debugger))))

(defun sly-agent-q-debugger-test--call (capability args)
  "Run CAPABILITY with ARGS through the tools' dispatch; return (CONTENT ERROR)."
  (let (answer)
    (sly-agent-q-tool-call-run capability args (lambda (content error) (setq answer (list content error))))
    answer))

(ert-deftest sly-agent-q-debugger-capabilities-registered ()
  "Every debugger tool has its Emacs handler."
  (dolist (name '("debugger_state" "debugger_frame_locals" "debugger_eval_in_frame"
                  "debugger_inspect_local" "debugger_invoke_restart"))
    (should (member name (sly-agent-q-tool-call-capabilities)))))

(ert-deftest sly-agent-q-debugger-none-open ()
  "Without a debugger the tools say so; nothing waits."
  (cl-letf (((symbol-function 'sly-agent-q-debugger-buffers) (lambda () nil)))
    (should (string-match-p "No debugger is open"
                            (car (sly-agent-q-debugger-test--call "debugger_state" nil))))
    (let ((r (sly-agent-q-debugger-test--call "debugger_frame_locals" '(:frame 0))))
      (should-not (car r))
      (should (string-match-p "No debugger is open" (cadr r))))
    (let ((r (sly-agent-q-debugger-test--call "debugger_invoke_restart" '(:restart 0))))
      (should (string-match-p "No debugger is open" (cadr r))))))

(ert-deftest sly-agent-q-debugger-wrong-thread-level-or-restart ()
  "A thread, level or restart that is not the debugger's is refused, naming what is."
  (sly-agent-q-debugger-test--with-debugger
    (should (string-match-p "threads 7"
                            (cadr (sly-agent-q-debugger-test--call "debugger_frame_locals" '(:frame 0 :thread 3)))))
    (should (string-match-p "level 2 now, not 1"
                            (cadr (sly-agent-q-debugger-test--call "debugger_invoke_restart"
                                                                   '(:restart 0 :level 1)))))
    (let ((r (cadr (sly-agent-q-debugger-test--call "debugger_invoke_restart" '(:restart 5)))))
      (should (string-match-p "no restart 5" r))
      (should (string-match-p "0: \\[RETRY-PARSE\\] Parse the input again." r)))))

(ert-deftest sly-agent-q-debugger-approval-names-the-restart ()
  "The approval's first line names the restart, its description, thread, level and condition."
  (sly-agent-q-debugger-test--with-debugger
    (let* ((preview (sly-agent-q-tool-preview "debugger_invoke_restart" '(:restart 0)))
           (detail (plist-get preview :detail)))
      (should (string-match-p "restart 0 \\[RETRY-PARSE\\] Parse the input again" detail))
      (should (string-match-p "thread 7, level 2" detail))
      (should (string-match-p "no non-whitespace" detail)))
    ;; A restart the debugger lacks is refused before anyone is asked.
    (should-error (sly-agent-q-tool-preview "debugger_invoke_restart" '(:restart 9))
                  :type 'sly-agent-q-tool-error)))

(ert-deftest sly-agent-q-debugger-ask-fills-the-chat-input ()
  "The command puts condition, type, restarts and the image's frames in the chat's input, unsent."
  (sly-agent-q-debugger-test--with-debugger
    (let ((sent nil))
      (cl-letf (((symbol-function 'sly-agent-q-send) (lambda (&rest _) (setq sent t))))
        (with-current-buffer debugger (sly-agent-q-debugger-ask))
        (with-current-buffer (sly-agent-q-chat-buffer)
          (let ((text (buffer-substring-no-properties (point-min) (point-max))))
            (dolist (part '("no non-whitespace characters" "PARSE-ERROR" "0: \\[RETRY-PARSE\\]"
                            "1: \\[ABORT\\]" "thread 7, level 2"))
              (should (string-match-p part text)))
            ;; The frames are the image's, never the buffer's text; this stand-in has no image.
            (should-not (string-match-p "TOTAL-INPUT" text))
            (should (string-match-p "Top frames:\n  (not available: " text))))
        (should-not sent)
        (kill-buffer (sly-agent-q-chat-buffer))))
    (should-error (with-temp-buffer (sly-agent-q-debugger-ask)) :type 'user-error)))

(ert-deftest sly-agent-q-debugger-ask-condition-cannot-pass-for-the-frames ()
  "A condition whose message is the frames' placeholder: the frames go where the frames are, the
condition's text stays as the image gave it."
  (sly-agent-q-debugger-test--with-debugger
    (with-current-buffer debugger
      (setq sldb-condition '("boom\n  (asking the image for its frames…)\nend" "[Condition of type SIMPLE-ERROR]" nil)))
    (with-current-buffer debugger (sly-agent-q-debugger-ask))
    (unwind-protect
        (let ((input (sly-agent-q-chat-input-text)))
          (should (string-match-p "Condition: boom\n  (asking the image for its frames…)\nend\n" input))
          (should (string-match-p "Top frames:\n  (not available: " input)))
      (kill-buffer (sly-agent-q-chat-buffer)))))

(ert-deftest sly-agent-q-debugger-deferred-answers-once ()
  "A handler's deferred answer reaches the callback once; an error in it becomes the answer."
  (let ((sly-agent-q-tool-declarations (copy-hash-table sly-agent-q-tool-declarations))
        (later nil) (answers nil))
    (sly-agent-q-define-tool "test_later"
      :handler (cl-function (lambda (&key _x) (lambda (answer) (setq later answer))))
      :changes nil)
    (sly-agent-q-define-tool "test_broken"
      :handler (cl-function (lambda (&key _x) (lambda (_answer) (error "Boom"))))
      :changes nil)
    (sly-agent-q-tool-call-run "test_later" nil (lambda (c e) (push (list c e) answers)))
    (should-not answers)
    (funcall later "done" nil)
    (funcall later "again" nil)
    (should (equal answers '(("done" nil))))
    (setq answers nil)
    (sly-agent-q-tool-call-run "test_broken" nil (lambda (c e) (push (list c e) answers)))
    (should (= (length answers) 1))
    (should (string-match-p "Boom" (cadr (car answers))))))

(ert-deftest sly-agent-q-debugger-deferred-can-be-stopped ()
  "A deferred call returns a stop function: it stops the work and answers once."
  (let ((sly-agent-q-tool-declarations (copy-hash-table sly-agent-q-tool-declarations))
        (stopped 0) (later nil) (answers nil))
    (sly-agent-q-define-tool "test_stoppable"
      :handler (cl-function (lambda (&key _x)
                              (lambda (answer) (setq later answer) (lambda () (cl-incf stopped)))))
      :changes nil)
    (let ((stop (sly-agent-q-tool-call-run "test_stoppable" nil (lambda (c e) (push (list c e) answers)))))
      (should (functionp stop))
      (funcall stop)
      (funcall stop)
      (funcall later "too late" nil)
      (should (= stopped 1))
      (should (equal answers '((nil "The call was cancelled.")))))
    ;; A call answered at once returns nil.
    (should-not (sly-agent-q-tool-call-run "debugger_state" nil #'ignore))))

(ert-deftest sly-agent-q-debugger-approval-summary-shows-detail ()
  "The approval in the chat shows what the restart acts on as its target, drawn by the product."
  (let ((summary (sly-agent-q-approval--summary
                  '(:tool "debugger_invoke_restart" :arguments (:restart 0)
                    :detail "invokes restart 0 [RETRY-PARSE] Parse again"))))
    (should (string-match-p "^  ┃ target: invokes restart 0 \\[RETRY-PARSE\\] Parse again\n" summary))))

(defun sly-agent-q-debugger-test--stand-in (name thread level condition)
  "A stand-in sldb buffer NAME for THREAD at LEVEL stopped at CONDITION."
  (with-current-buffer (generate-new-buffer name)
    (setq major-mode 'sldb-mode)
    (set (make-local-variable 'sldb-level) level)
    (set (make-local-variable 'slime-current-thread) thread)
    (set (make-local-variable 'sldb-condition) (list condition "" nil))
    (set (make-local-variable 'sldb-restarts) '(("ABORT" "Return to top level.")))
    (current-buffer)))

(ert-deftest sly-agent-q-debugger-eval-in-frame-bound-to-the-approved-debugger ()
  "A frame call approved while one debugger was open never runs in another.
Another thread's debugger opens while the approval waits: the most
recent debugger is no longer the one shown, so the call is refused."
  (let* ((mine (sly-agent-q-debugger-test--stand-in "*sldb test/7*" 7 1 "my error"))
         (other (sly-agent-q-debugger-test--stand-in "*sldb test/9*" 9 1 "thread 9's error"))
         (open (list mine)))
    (unwind-protect
        (cl-letf (((symbol-function 'sly-agent-q-debugger-buffers) (lambda () open)))
          (dolist (call '(("debugger_eval_in_frame" :form "(delete-all-records)" :frame 0)
                          ("debugger_inspect_local" :frame 0 :local 0)))
            (setq open (list mine))
            (let* ((tool (car call)) (args (cdr call))
                   (approved (sly-agent-q-tool-preview-target tool args)))
              ;; The same debugger at the run: it runs.
              (sly-agent-q-tool-preview-check-approved (list :tool tool :arguments args :target approved))
              ;; Thread 9 stops in the debugger while the approval waits.
              (setq open (list other mine))
              (let ((err (should-error (sly-agent-q-tool-preview-check-approved
                                        (list :tool tool :arguments args :target approved))
                                       :type 'sly-agent-q-tool-error)))
                (should (string-match-p "changed while the approval waited" (cadr err)))))))
      (kill-buffer mine)
      (kill-buffer other))))

(provide 'sly-agent-q-debugger-test)
;;; sly-agent-q-debugger-test.el ends here
