;;; sly-agent-q-helpers-load-test.el --- The helpers' load: at connect, said in the chat  -*- lexical-binding: t; -*-

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

;; A real Lisp (SBCL, or SLY_AGENT_Q_TEST_PROGRAM) started under SLIME
;; (or SLY: SLY_AGENT_Q_E2E_LISP=sly) while the chat is open, the real
;; server and the mock LLM: the helpers start loading when the Lisp
;; connects, before any tool call (checked in the image); the chat says
;; so with its estimate, then its time; the model's call that comes
;; meanwhile waits for that same load (one load, counted in the image)
;; and its entry says so.  A broken helpers file: the chat says why,
;; no debugger opens, and the next call loads them.
;;
;; The helpers are loaded through a load.lisp of the test's own that
;; counts its loads in the image, sleeps a few seconds (the time a
;; first compile takes, so that a call can come during it), then loads
;; the real lisp-cl/load.lisp.

;;; Code:

(require 'sly-agent-q-test-helper
         (expand-file-name "../elisp/sly-agent-q-test-helper"
                           (file-name-directory (or load-file-name buffer-file-name))))

(declare-function slime-inferior-process "ext:slime")
(declare-function sly-inferior-process "ext:sly")

(defconst helpers-load-test-real
  (expand-file-name "lisp-cl/load.lisp" sly-agent-q-test-root)
  "The real helpers' loader.")

(defun helpers-load-test-dir (body)
  "A fresh directory whose load.lisp is BODY (a string); return it."
  (let ((dir (make-temp-file "saq-helpers-load-" t)))
    (with-temp-file (expand-file-name "load.lisp" dir) (insert body))
    dir))

(defun helpers-load-test-slow-dir (seconds)
  "A helpers directory whose load.lisp counts its loads, sleeps SECONDS, loads the real one."
  (helpers-load-test-dir
   (format "(defvar cl-user::*saq-helpers-loads* 0)
(incf cl-user::*saq-helpers-loads*)
(sleep %s)
(load %S)
" seconds helpers-load-test-real)))

(defun helpers-load-test-eval (form)
  "Evaluate FORM in the image through the bridge (not a tool call); return its value."
  (let* ((cur (sly-agent-q-bridge-current)) result)
    (should cur)
    (sly-agent-q-bridge-eval (car cur) (cdr cur) form "CL-USER" 60
                             (lambda (v e) (setq result (list v e))))
    (sly-agent-q-test-wait (lambda () result) 65 "the evaluation")
    (should-not (cadr result))
    (car result)))

(defun helpers-load-test-debugger-buffers ()
  "The buffers of SLY's or SLIME's debugger."
  (cl-remove-if-not (lambda (b) (string-match-p "\\`\\*\\(sldb\\|sly-db\\)" (buffer-name b)))
                    (buffer-list)))

(defmacro helpers-load-test-with-times (&rest body)
  "Run BODY with a fresh file of load times."
  (declare (indent 0) (debug t))
  `(let* ((times-dir (make-temp-file "saq-load-times-" t))
          (sly-agent-q-helpers-load-times-file (expand-file-name "sly-agent-q/helpers-load-times.eld" times-dir)))
     (unwind-protect (progn ,@body)
       (delete-directory times-dir t))))

;;;; Without a Lisp

(ert-deftest helpers-load-estimate-from-the-last-load ()
  "The estimate is the last load's time on that Lisp, else a first compile's usual time;
the file of times survives a bad file and keeps the newest."
  (helpers-load-test-with-times
    (should (equal (sly-agent-q-helpers-load-estimate "ECL 24.5.10")
                   "first time: about 40 s; compiled once, then cached"))
    (should (equal (sly-agent-q-helpers-load-estimate "Foo Lisp 1.0")
                   "first time: about 20 s; compiled once, then cached"))
    (sly-agent-q-helpers-load-record "ECL 24.5.10" 1.25)
    (sly-agent-q-helpers-load-record "SBCL 2.2.9" 0.5)
    (should (equal (sly-agent-q-helpers-load-estimate "ECL 24.5.10") "about 1.2 s, as last time"))
    (should (equal (mapcar #'car (sly-agent-q-helpers-load-times)) '("SBCL 2.2.9" "ECL 24.5.10")))
    ;; Another ECL version is another record.
    (should (string-prefix-p "first time" (sly-agent-q-helpers-load-estimate "ECL 21.2.1")))
    ;; A file that is not a record: no estimate from it, and the next load writes a good one.
    (with-temp-file sly-agent-q-helpers-load-times-file (insert "(unbalanced"))
    (should-not (sly-agent-q-helpers-load-times))
    (sly-agent-q-helpers-load-record "SBCL 2.2.9" 30.4)
    (should (equal (sly-agent-q-helpers-load-estimate "SBCL 2.2.9") "about 30 s, as last time"))
    ;; No temporary file is left beside it.
    (should (equal (directory-files (file-name-directory sly-agent-q-helpers-load-times-file) nil "\\`[^.]\\|\\`\\.[^.]")
                   '("helpers-load-times.eld")))))

;;;; With a Lisp

(ert-deftest helpers-load-a-starts-at-connect-and-a-call-waits-for-it ()
  "The chat is open when the Lisp connects: the helpers load at once, before any tool
call (the image has their package), the chat says so with the estimate and then the time;
the model's call made during the load waits for it (one load) and its entry says so."
  (when (and (featurep sly-agent-q-test-lisp) (sly-agent-q-test-lisp-connected-p))
    (ert-skip "a Lisp is connected already: this test needs to see it connect"))
  (helpers-load-test-with-times
    (let ((sly-agent-q-lisp-cl-directory (helpers-load-test-slow-dir 6))
          (seen-waiting nil) outcome)
      (unwind-protect
          (sly-agent-q-test-with-server
              `((steps . [((content . [((type . "tool_use") (name . "describe_symbol")
                                        (input . ((symbol . "car") (package . "CL-USER"))))]))
                          ((content . [((type . "text") (text . "Found: {{last_tool_result}}"))]))]))
            (sly-agent-q-chat-buffer)
            (sly-agent-q-test-connect-lisp)
            (sly-agent-q-test-wait (lambda () (string-match-p "Loading the agent's helpers into "
                                                              (sly-agent-q-test-chat-text)))
                                   30 "the chat to say the helpers load")
            (let ((text (sly-agent-q-test-chat-text)))
              (should (string-match-p
                       "\\[Loading the agent's helpers into [A-Za-z ]+[0-9][^ ]* (first time: about [0-9]+ s; compiled once, then cached)…\\]"
                       text))
              (should-not (string-match-p "helpers are loaded" text)))
            ;; The image: the load runs, started by the connection, no tool call made.
            (sly-agent-q-test-wait (lambda () (eql 1 (helpers-load-test-eval
                                                      '(cl:and (cl:boundp 'cl-user::*saq-helpers-loads*)
                                                               (cl:symbol-value 'cl-user::*saq-helpers-loads*)))))
                                   30 "the load to start in the image")
            ;; A model's image call during the load.
            (sly-agent-q-send "What is car?" (lambda (plist) (setq outcome plist)))
            (sly-agent-q-test-wait
             (lambda ()
               (when (string-match-p "describe_symbol .*… \\(running\\|queued\\) · waiting for the agent's helpers to load into the image"
                                     (sly-agent-q-test-chat-text))
                 (setq seen-waiting t))
               (or outcome seen-waiting))
             60 "the entry to say it waits for the helpers")
            (unless seen-waiting (message "The chat:\n%s" (sly-agent-q-test-chat-text)))
            (should seen-waiting)
            (sly-agent-q-test-wait (lambda () outcome) 600 "the turn's answer")
            (should (eq (plist-get outcome :status) 'finished))
            (should (string-match-p "CAR" (plist-get outcome :text)))
            (let ((text (sly-agent-q-test-chat-text)))
              (should (string-match-p "\\[The agent's helpers are loaded into [^(]+ ([0-9.]+ s)\\.\\]" text))
              (should (string-match-p "describe_symbol (safe).*✓" text))
              (should-not (string-match-p "waiting for the agent's helpers" text))
              ;; The load's line is rewritten in place: its end, which came
              ;; while the answer was being written, never splits the answer.
              (should-not (string-match-p "Loading the agent's helpers" text))
              (should (< (string-match "helpers are loaded" text) (string-match "You:" text))))
            ;; One load, the connection's: the call waited for it.
            (should (eql 1 (helpers-load-test-eval 'cl-user::*saq-helpers-loads*)))
            (should (helpers-load-test-eval '(cl:and (cl:find-package "SLY-AGENT-Q") t)))
            ;; Its time is kept for the next estimate, at least the sleep's.
            (let ((times (sly-agent-q-helpers-load-times)))
              (should (= 1 (length times)))
              (should (>= (cdar times) 6)))
            (should-not (helpers-load-test-debugger-buffers)))
        (delete-directory sly-agent-q-lisp-cl-directory t)))))

(ert-deftest helpers-load-b-error-said-and-next-call-retries ()
  "A chat opens while a Lisp is connected and the helpers fail to load: the chat says
why, no debugger opens; the next image call loads them."
  (sly-agent-q-test-connect-lisp)
  (helpers-load-test-with-times
    (let* ((cur (sly-agent-q-bridge-current))
           (conn (cdr cur))
           (broken (helpers-load-test-dir "(error \"broken on purpose\")\n"))
           (good (helpers-load-test-slow-dir 0))
           (sly-agent-q-lisp-cl-directory broken))
      (unwind-protect
          (progn
            (helpers-load-test-eval '(cl:progn (cl:defvar cl-user::*saq-helpers-loads* 0)
                                               (cl:setf cl-user::*saq-helpers-loads* 0) t))
            (sly-agent-q-test-wait (lambda () (not (sly-agent-q-bridge-helpers-loading-p conn)))
                                   60 "an earlier load to end")
            (process-put conn 'sly-agent-q-helpers nil)
            (when (get-buffer sly-agent-q-chat-buffer-name)
              (let ((kill-buffer-query-functions nil)) (kill-buffer sly-agent-q-chat-buffer-name)))
            ;; Opening the chat starts the load.
            (sly-agent-q-chat-buffer)
            (sly-agent-q-test-wait (lambda () (string-match-p "broken on purpose" (sly-agent-q-test-chat-text)))
                                   60 "the chat to say the load failed")
            (should (string-match-p
                     "Error: Loading the sly-agent-q helpers into the image failed: .*broken on purpose.* (after [0-9.]+ s)\\.  The next image call tries again\\."
                     (sly-agent-q-test-chat-text)))
            (should-not (process-get conn 'sly-agent-q-helpers))
            (should-not (helpers-load-test-debugger-buffers))
            ;; No time is kept for a load that failed.
            (should-not (sly-agent-q-helpers-load-times))
            ;; The next call loads them (the good loader counts it) and answers.
            (setq sly-agent-q-lisp-cl-directory good)
            (let (result)
              (sly-agent-q-bridge-call-tool "describe_symbol" '(:symbol "car" :package "CL-USER") nil
                                            (lambda (c e) (setq result (list c e))))
              (sly-agent-q-test-wait (lambda () result) 300 "the call after the failed load")
              (should-not (cadr result))
              (should (string-match-p "CAR" (car result))))
            (should (eql 1 (helpers-load-test-eval 'cl-user::*saq-helpers-loads*)))
            (should (eq (process-get conn 'sly-agent-q-helpers) 'loaded))
            (should (string-match-p "\\[The agent's helpers are loaded into " (sly-agent-q-test-chat-text))))
        (let ((kill-buffer-query-functions nil))
          (when (get-buffer sly-agent-q-chat-buffer-name) (kill-buffer sly-agent-q-chat-buffer-name)))
        (delete-directory broken t)
        (delete-directory good t)))))

(ert-deftest helpers-load-c-not-without-a-chat ()
  "A Lisp that connects while no chat is open gets no helpers until the agent is used."
  (sly-agent-q-test-connect-lisp)
  (let ((conn (cdr (sly-agent-q-bridge-current))))
    (sly-agent-q-test-wait (lambda () (not (sly-agent-q-bridge-helpers-loading-p conn))) 60 "an earlier load to end")
    (when (get-buffer sly-agent-q-chat-buffer-name)
      (let ((kill-buffer-query-functions nil)) (kill-buffer sly-agent-q-chat-buffer-name)))
    (process-put conn 'sly-agent-q-helpers nil)
    ;; What the connected hook runs when a Lisp connects.
    (should (memq #'sly-agent-q-helpers-load--lisp-connected
                  (symbol-value (if (eq sly-agent-q-test-lisp 'sly) 'sly-connected-hook 'slime-connected-hook))))
    (sly-agent-q-helpers-load--lisp-connected)
    (sly-agent-q-test-sleep 0.5)
    (should-not (process-get conn 'sly-agent-q-helpers))))

;;;; Found by a red team

(defun helpers-load-test--counting-dir (seconds)
  "A loader that counts loads and the most loads running at once."
  (helpers-load-test-dir
   (format "(defvar cl-user::*saq-helpers-loads* 0)
(defvar cl-user::*helpers-load-test--active* 0)
(defvar cl-user::*helpers-load-test--max-active* 0)
(incf cl-user::*saq-helpers-loads*)
(incf cl-user::*helpers-load-test--active*)
(setf cl-user::*helpers-load-test--max-active* (max cl-user::*helpers-load-test--max-active* cl-user::*helpers-load-test--active*))
(unwind-protect (progn (sleep %s) (load %S)) (decf cl-user::*helpers-load-test--active*))
" seconds helpers-load-test-real)))

(defun helpers-load-test--reset-and-open-chat (dir)
  "Lisp connected, helpers state forgotten, chat reopened with helpers DIR (starts a load)."
  (sly-agent-q-test-connect-lisp)
  (let ((conn (cdr (sly-agent-q-bridge-current))))
    (sly-agent-q-test-wait (lambda () (not (sly-agent-q-bridge-helpers-loading-p conn))) 120 "earlier load")
    (helpers-load-test-eval '(cl:progn (cl:defvar cl-user::*saq-helpers-loads* 0) (cl:setf cl-user::*saq-helpers-loads* 0)
                                       (cl:defvar cl-user::*helpers-load-test--max-active* 0) (cl:setf cl-user::*helpers-load-test--max-active* 0)
                                       (cl:defvar cl-user::*helpers-load-test--active* 0) (cl:setf cl-user::*helpers-load-test--active* 0) t))
    (process-put conn 'sly-agent-q-helpers nil)
    (when (get-buffer sly-agent-q-chat-buffer-name)
      (let ((kill-buffer-query-functions nil)) (kill-buffer sly-agent-q-chat-buffer-name)))
    (setq sly-agent-q-lisp-cl-directory dir)
    (sly-agent-q-chat-buffer)
    conn))

(ert-deftest helpers-load-d-a-timed-out-load-never-runs-twice ()
  "The load outlives `sly-agent-q-helpers-load-timeout' (ECL cold cache through gcc on a loaded
machine): the chat says it failed, the next call must not start a second load while the first
still runs in the image."
  (helpers-load-test-with-times
    (let* ((sly-agent-q-helpers-load-timeout 3)
           (conn (helpers-load-test--reset-and-open-chat (helpers-load-test--counting-dir 8))))
      (sly-agent-q-test-wait (lambda () (string-match-p "did not answer" (sly-agent-q-test-chat-text))) 30 "timeout said")
      (let ((sly-agent-q-helpers-load-timeout 60) result)
        (sly-agent-q-bridge-call-tool "describe_symbol" '(:symbol "car" :package "CL-USER") nil
                                      (lambda (c e) (setq result (list c e))))
        (sly-agent-q-test-wait (lambda () result) 120 "the call")
        (message "RESULT %S" result)
        (message "loads=%S max-active=%S state=%S"
                 (helpers-load-test-eval 'cl-user::*saq-helpers-loads*)
                 (helpers-load-test-eval 'cl-user::*helpers-load-test--max-active*)
                 (process-get conn 'sly-agent-q-helpers))
        (should (eql 1 (helpers-load-test-eval 'cl-user::*helpers-load-test--max-active*)))))))

(ert-deftest helpers-load-e-a-chat-on-another-lisp-loads-that-lisp ()
  "Two Lisps, no chat open; A is current.  A chat made on B (its Lisp) opens: the helpers should
load into B, the chat's Lisp, and a chat on A should not hear about B's load."
  (skip-unless (eq sly-agent-q-test-lisp 'slime))
  (helpers-load-test-with-times
    (when (get-buffer sly-agent-q-chat-buffer-name)
      (let ((kill-buffer-query-functions nil)) (kill-buffer sly-agent-q-chat-buffer-name)))
    (sly-agent-q-test-connect-lisp)
    (let* ((lisp-a (sly-agent-q-bridge-current))
           (before (copy-sequence slime-net-processes)))
      (slime-start :program "sbcl" :program-args '("--noinform") :buffer "*inferior-lisp-helpers-load-b*")
      (sly-agent-q-test-wait (lambda () (cl-set-difference slime-net-processes before)) 120 "B")
      (sly-agent-q-test-sleep 3)
      (let* ((conn-b (car (cl-set-difference slime-net-processes before)))
             (lisp-b (cons (car lisp-a) conn-b))
             (alpha (file-name-as-directory (make-temp-file "alpha" t)))
             (beta (file-name-as-directory (make-temp-file "beta" t))))
        (process-put (cdr lisp-a) 'sly-agent-q-helpers nil)
        (process-put conn-b 'sly-agent-q-helpers nil)
        (setq slime-default-connection (cdr lisp-a))
        (sly-agent-q-test-with-server '((steps . []))
          (let ((chat-b (sly-agent-q-chats-create beta lisp-b)))
            (sly-agent-q-test-wait (lambda () (and (process-get conn-b 'sly-agent-q-helpers)
                                                   (not (sly-agent-q-bridge-helpers-loading-p conn-b))))
                                   120 "B's load")
            ;; Its line is in B's chat, naming the load there.
            (should (string-match-p "helpers are loaded"
                                    (with-current-buffer chat-b (buffer-string))))
            (let ((b-state (process-get conn-b 'sly-agent-q-helpers))
                  (a-state (process-get (cdr lisp-a) 'sly-agent-q-helpers)))
              (should (equal (list 'b b-state 'a a-state) (list 'b 'loaded 'a nil))))))))))

(provide 'sly-agent-q-helpers-load-test)
;;; sly-agent-q-helpers-load-test.el ends here
