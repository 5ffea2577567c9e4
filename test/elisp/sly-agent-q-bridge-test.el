;;; sly-agent-q-bridge-test.el --- The bridge to the image, with real SBCL and SLIME  -*- lexical-binding: t; -*-

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

;; Unit tests of the form building, then a real SBCL started through
;; SLIME (found with package-initialize; skipped when SLIME or SBCL is
;; missing): evaluation, aborts, timeouts, loading lisp-cl/, a helper
;; call on the fixture system, a Lisp killed mid-call, and an image
;; tool called by the model through the real server.

;;; Code:

(require 'sly-agent-q-test-helper
         (expand-file-name "sly-agent-q-test-helper"
                           (file-name-directory (or load-file-name buffer-file-name))))

(declare-function slime-start "ext:slime")
(declare-function slime-connected-p "ext:slime")
(declare-function slime-communication-style "ext:slime" (&optional process))
(declare-function slime-inferior-process "ext:slime")
(declare-function slime-net-close "ext:slime")

;;;; Without a Lisp

(ert-deftest sly-agent-q-bridge-json-to-lisp ()
  "JSON values become the data lisp-cl expects."
  (should (equal (sly-agent-q-bridge-json-to-lisp
                  '(:symbol "process-data" :package "MY-APP" :full :json-false
                    :n 3 :ok t :none nil :list ["a" 1 (:k "v")]))
                 '(("symbol" . "process-data") ("package" . "MY-APP") ("full")
                   ("n" . 3) ("ok" . t) ("none") ("list" "a" 1 (("k" . "v"))))))
  (should (equal (sly-agent-q-bridge-json-to-lisp nil) nil)))

(ert-deftest sly-agent-q-bridge-form-is-data ()
  "User text stays a string in the form: nothing is pasted into source."
  (let* ((evil "x\") (cl:delete-file \"/tmp/x\") (\"")
         (form (sly-agent-q-bridge-call-form "describe_symbol" (list :symbol evil) "CL-USER" 30))
         (printed (prin1-to-string form))
         (back (car (read-from-string printed))))
    (should (equal back form))
    (should (equal (cdr (assoc "symbol" (cadr (nth 3 (nth 2 back))))) evil))
    (should (eq (car form) 'cl:if)))
  ;; The same for calls sent together: every string stays a string.
  (let* ((evil "x\") (cl:delete-file \"/tmp/x\") (\"")
         (jobs (list (sly-agent-q-bridge--make-job :tool evil :arguments (list :symbol evil)
                                                   :package evil :timeout 30 :call-id evil)
                     (sly-agent-q-bridge--make-job :tool "describe_symbol" :arguments (list :symbol "car")
                                                   :package "CL-USER" :timeout 30 :call-id "c2")))
         (form (sly-agent-q-bridge-calls-form jobs))
         (back (car (read-from-string (prin1-to-string form))))
         (calls (cdr (nth 2 (nth 2 back)))))
    (should (equal back form))
    (should (= 2 (length calls)))
    (should (equal (cdr (car calls)) `(,evil (quote (("symbol" . ,evil))) :package ,evil :timeout 30 :call-id ,evil)))))

(ert-deftest sly-agent-q-bridge-no-lisp ()
  "With no Lisp connected an image call fails with the clear message."
  (cl-letf (((symbol-function 'sly-agent-q-bridge-current) #'ignore))
    (let (result)
      (sly-agent-q-bridge-call-tool "describe_symbol" '(:symbol "car") nil
                                    (lambda (c e) (setq result (list c e))))
      (should (equal result (list nil "No Lisp is connected; start one with M-x sly (or M-x slime)."))))))

(ert-deftest sly-agent-q-bridge-one-timer-for-all-pending-calls ()
  "100 pending evaluations arm one timer between them; answered or stopped, none is left."
  (let* ((sent nil)
         (adapter (sly-agent-q-bridge--make-adapter
                   :name "FAKE" :connection #'ignore :repl-package #'ignore :inferior #'ignore
                   :dispatch (lambda (_conn event) (push (nth 4 event) sent))
                   :close-hook 'sly-agent-q-test--fake-close-hook))
         (before (length timer-list))
         (results nil) stops)
    (dotimes (i 100)
      (push (sly-agent-q-bridge-eval adapter 'fake-conn `(cl:+ ,i 1) "CL-USER" 60
                                     (lambda (v e) (push (list v e) results)))
            stops))
    (should (= (length sent) 100))
    (should (= (length timer-list) (1+ before)))
    ;; Half answer, half are stopped: each callback runs once; the timer goes with the last.
    (dolist (k (cl-subseq sent 0 50)) (funcall k '(:ok 7)))
    (dolist (stop (cl-subseq stops 50)) (funcall stop "stopped"))
    (dolist (stop stops) (funcall stop "again"))
    (should (= (length results) 100))
    (should (= (cl-count '(7 nil) results :test #'equal) 50))
    (should (= (cl-count '(nil "stopped") results :test #'equal) 50))
    (should (= (length timer-list) before))))

(ert-deftest sly-agent-q-bridge-deadline-expires-in-order ()
  "Due deadlines run when the one timer fires; later ones re-arm it."
  (let* ((ran nil)
         (a (sly-agent-q-bridge--add-deadline 100 (lambda () (push 'a ran))))
         (b (sly-agent-q-bridge--add-deadline 200 (lambda () (push 'b ran)))))
    (unwind-protect
        (progn
          ;; Make A due, as if 100 seconds had passed, and fire the timer by hand.
          (setcar a (- (float-time) 1))
          (sly-agent-q-bridge--expire)
          (should (equal ran '(a)))
          (should sly-agent-q-bridge--deadline-timer)
          (should (= sly-agent-q-bridge--deadline-at (car b))))
      (sly-agent-q-bridge--drop-deadline b))
    (should-not sly-agent-q-bridge--deadline-timer)))

;;;; With SBCL and SLIME

(defvar sly-agent-q-test--slime-ready nil)

(defun sly-agent-q-test--slime ()
  "Make sure SLIME is connected to the Lisp under test (SBCL unless
SLY_AGENT_Q_TEST_PROGRAM says another); return (ADAPTER . CONNECTION)."
  (let ((program (sly-agent-q-test--lisp-program)))
    (unless (executable-find (car program)) (ert-skip (format "%s is not installed" (car program))))
    (unless (sly-agent-q-dev-require-slime) (ert-skip "SLIME cannot be found"))
    (unless (slime-connected-p)
      (slime-start :program (car program) :program-args (cdr program))
      (sly-agent-q-test-wait #'slime-connected-p 120 (format "SLIME to connect to %s" (car program)))))
  (let ((cur (sly-agent-q-bridge-current)))
    (should cur)
    (should (equal (sly-agent-q-bridge-adapter-name (car cur)) "SLIME"))
    cur))

(defun sly-agent-q-test--eval (form &optional timeout)
  "Evaluate FORM through the bridge; return (VALUE ERROR)."
  (let* ((cur (sly-agent-q-test--slime)) result)
    (sly-agent-q-bridge-eval (car cur) (cdr cur) form "CL-USER" (or timeout 10)
                             (lambda (v e) (setq result (list v e))))
    (sly-agent-q-test-wait (lambda () result) (+ 5 (or timeout 10)) "the evaluation")
    result))

(defun sly-agent-q-test--call (tool args &optional package)
  "Call helper TOOL with ARGS through the bridge; return (CONTENT ERROR)."
  (sly-agent-q-test--slime)
  (let (result)
    (sly-agent-q-bridge-call-tool tool args package (lambda (c e) (setq result (list c e))))
    (sly-agent-q-test-wait (lambda () result) 120 (format "the %s call" tool))
    result))

(ert-deftest sly-agent-q-bridge-slime-eval ()
  "An asynchronous evaluation answers; an abort becomes an error, not a debugger."
  (should (equal (sly-agent-q-test--eval '(cl:+ 1 2)) '(3 nil)))
  (let ((r (sly-agent-q-test--eval '(cl:abort))))
    (should-not (car r))
    (should (string-match-p "aborted" (cadr r))))
  (should-not (get-buffer "*sldb sbcl/1*"))
  (should (equal (sly-agent-q-bridge-current-package) "COMMON-LISP-USER"))
  (should (equal (plist-get (sly-agent-q-turn--context) :currentPackage) "COMMON-LISP-USER")))

(ert-deftest sly-agent-q-bridge-slime-requests-left-out-of-its-event-log ()
  "The bridge's requests are not pretty-printed into *slime-events* unless asked."
  (sly-agent-q-test--slime)
  (let ((slime-log-events t)
        (logged (lambda (text)
                  (with-current-buffer (slime-events-buffer)
                    (save-excursion (goto-char (point-min)) (search-forward text nil t))))))
    (let ((sly-agent-q-bridge-log-events nil))
      (should (equal (sly-agent-q-test--eval '(cl:+ 40 1)) '(41 nil))))
    (should-not (funcall logged "(cl:+ 40 1)"))
    (let ((sly-agent-q-bridge-log-events t))
      (should (equal (sly-agent-q-test--eval '(cl:+ 40 2)) '(42 nil))))
    (should (funcall logged "(cl:+ 40 2)"))))

(ert-deftest sly-agent-q-bridge-slime-timeout ()
  "A call that takes too long gets an error; the late answer is ignored."
  (let* ((cur (sly-agent-q-test--slime)) (calls 0) result)
    (sly-agent-q-bridge-eval (car cur) (cdr cur) '(cl:progn (cl:sleep 1.5) 42) "CL-USER" 0.3
                             (lambda (v e) (cl-incf calls) (setq result (list v e))))
    (sly-agent-q-test-wait (lambda () result) 5 "the timeout")
    (should (string-match-p "did not answer within 0.3 seconds" (cadr result)))
    (sly-agent-q-test-sleep 2)
    (should (= calls 1))
    (should (equal (sly-agent-q-test--eval '(cl:+ 2 2)) '(4 nil)))))

(ert-deftest sly-agent-q-bridge-slime-helpers ()
  "lisp-cl is loaded on first use; describe_symbol works on the fixture system."
  (unless (sly-agent-q-bridge-helpers-file) (ert-skip "lisp-cl/load.lisp is not there yet"))
  (let ((fixture (expand-file-name "test/fixtures/my-app/load.lisp" sly-agent-q-test-root)))
    (should (equal (car (sly-agent-q-test--eval `(cl:progn (cl:load ,fixture) t) 120)) t))
    (let ((r (sly-agent-q-test--call "describe_symbol" '(:symbol "process-data" :package "MY-APP"))))
      (should-not (cadr r))
      (should (string-match-p "PROCESS-DATA" (car r))))
    (should (eq (process-get (cdr (sly-agent-q-bridge-current)) 'sly-agent-q-helpers) 'loaded))
    ;; An unknown symbol: an error for the model, no debugger.
    (let ((r (sly-agent-q-test--call "describe_symbol" '(:symbol "no-such-symbol-xyz" :package "MY-APP"))))
      (should (or (cadr r) (string-match-p "no-such-symbol-xyz\\|NO-SUCH-SYMBOL-XYZ" (car r)))))))

(ert-deftest sly-agent-q-bridge-slime-cancel-interrupts-the-image ()
  "Cancelling an image call stops its evaluation in the image; another evaluation goes on."
  (unless (sly-agent-q-bridge-helpers-file) (ert-skip "lisp-cl/load.lisp is not there yet"))
  (sly-agent-q-test--slime)
  (unless (sly-agent-q-test--threads-p)
    (ert-skip "this Lisp has no threads: a cancel cannot interrupt it (sly-agent-q-bridge-slime-cancel-without-threads-says-so)"))
  (should (equal (sly-agent-q-test--eval
                  '(cl:progn (cl:defvar cl-user::*saq-bridge-probe* nil)
                             (cl:setf cl-user::*saq-bridge-probe* nil) t))
                 '(t nil)))
  (let* ((cur (sly-agent-q-bridge-current))
         result other
         (cancel (sly-agent-q-bridge-call-tool
                  "eval_form"
                  '(:form "(progn (setf *saq-bridge-probe* :started) (sleep 3) (setf *saq-bridge-probe* :finished))"
                    :package "CL-USER")
                  nil (lambda (c e) (setq result (list c e))))))
    ;; An evaluation of the user's, running alongside.
    (sly-agent-q-bridge-eval (car cur) (cdr cur) '(cl:progn (cl:sleep 1.5) 42) "CL-USER" 30
                             (lambda (v e) (setq other (list v e))))
    (sly-agent-q-test-wait (lambda () (eq (car (sly-agent-q-test--eval 'cl-user::*saq-bridge-probe*)) :started))
                           60 "the evaluation to start")
    (funcall cancel)
    (should (string-match-p "cancelled" (cadr result)))
    (sly-agent-q-test-sleep 3.5)
    (should (eq (car (sly-agent-q-test--eval 'cl-user::*saq-bridge-probe*)) :started))
    (should (equal other '(42 nil)))
    (should-not (get-buffer "*sldb sbcl/1*"))))

(defun sly-agent-q-test--threads-p ()
  "Non-nil when the connected Lisp's backend runs with threads (style :spawn)."
  (eq (slime-communication-style (cdr (sly-agent-q-bridge-current))) :spawn))

(ert-deftest sly-agent-q-bridge-slime-cancel-without-threads-says-so ()
  "On a Lisp without threads (CLISP) a cancel cannot interrupt the image: the answer says so,
and the evaluation indeed goes on to its end; the image answers afterwards."
  (unless (sly-agent-q-bridge-helpers-file) (ert-skip "lisp-cl/load.lisp is not there yet"))
  (sly-agent-q-test--slime)
  (when (sly-agent-q-test--threads-p)
    (ert-skip "this Lisp has threads: sly-agent-q-bridge-slime-cancel-interrupts-the-image tests its cancel"))
  (should (equal (sly-agent-q-test--eval
                  '(cl:progn (cl:defvar cl-user::*saq-bridge-probe* nil)
                             (cl:setf cl-user::*saq-bridge-probe* nil) t))
                 '(t nil)))
  (let* (result
         (cancel (sly-agent-q-bridge-call-tool
                  "eval_form"
                  '(:form "(progn (setf *saq-bridge-probe* :started) (sleep 3) (setf *saq-bridge-probe* :finished))"
                    :package "CL-USER")
                  nil (lambda (c e) (setq result (list c e))))))
    (sly-agent-q-test-sleep 1)
    (funcall cancel)
    (should (string-match-p "cancelled, but this Lisp runs without threads" (cadr result)))
    (should (string-match-p "could not be interrupted: it goes on until it ends or reaches the image timeout"
                            (cadr result)))
    ;; The image, once the evaluation is over: it ran to its end, and answers.
    (sly-agent-q-test-sleep 4)
    (should (eq (car (sly-agent-q-test--eval 'cl-user::*saq-bridge-probe*)) :finished))
    (should (equal (sly-agent-q-test--eval '(cl:+ 1 2)) '(3 nil)))))

(defun sly-agent-q-test--calls-together (calls)
  "Make CALLS, each (TOOL ARGS), at once through the bridge.
Return their (CONTENT ERROR) answers, in order, and the cancel functions."
  (sly-agent-q-test--slime)
  (let* ((answers (make-vector (length calls) nil))
         (cancels (cl-loop for (tool args) in calls
                           for i from 0
                           collect (let ((i i))
                                     (sly-agent-q-bridge-call-tool
                                      tool args "CL-USER" (lambda (c e) (aset answers i (list c e))))))))
    (list answers cancels)))

(defun sly-agent-q-test--await-all (answers)
  "Wait until every slot of ANSWERS is filled; return them as a list."
  (sly-agent-q-test-wait (lambda () (cl-every #'identity answers)) 60 "every answer")
  (append answers nil))

(ert-deftest sly-agent-q-bridge-slime-calls-made-together-go-as-one-request ()
  "Calls made together run in one request of the image (one worker thread), and each
gets its own answer; a failing one fails alone.  Calls made apart go apart."
  (unless (sly-agent-q-bridge-helpers-file) (ert-skip "lisp-cl/load.lisp is not there yet"))
  (sly-agent-q-test--call "describe_symbol" '(:symbol "car"))
  (let* ((thread '(:form "(princ-to-string sb-thread:*current-thread*)"))
         (answers (sly-agent-q-test--await-all
                   (car (sly-agent-q-test--calls-together
                         `(("eval_form" ,thread)
                           ("eval_form" (:form "(/ 1 0)"))
                           ("describe_symbol" (:symbol "car"))
                           ("eval_form" ,thread)))))))
    (should (string-match-p "worker" (car (nth 0 answers))))
    ;; The image's world: one thread ran the calls of the request.
    (should (equal (car (nth 0 answers)) (car (nth 3 answers))))
    (should (string-match-p "DIVISION-BY-ZERO" (or (car (nth 1 answers)) (cadr (nth 1 answers)))))
    (should (string-match-p "CAR" (car (nth 2 answers))))
    (let ((apart (list (car (sly-agent-q-test--call "eval_form" thread))
                       (car (sly-agent-q-test--call "eval_form" thread)))))
      (should-not (equal (nth 0 apart) (nth 1 apart))))))

(ert-deftest sly-agent-q-bridge-slime-helpers-gone-answers-every-call ()
  "If the helpers' package is gone from the image, each call says so: alone, and
each call of a request of several."
  (unless (sly-agent-q-bridge-helpers-file) (ert-skip "lisp-cl/load.lisp is not there yet"))
  (sly-agent-q-test--call "describe_symbol" '(:symbol "car"))
  (should (equal (sly-agent-q-test--eval '(cl:progn (cl:rename-package "SLY-AGENT-Q" "SAQ-HIDDEN") t))
                 '(t nil)))
  (unwind-protect
      (let ((together (sly-agent-q-test--await-all
                       (car (sly-agent-q-test--calls-together
                             '(("describe_symbol" (:symbol "car"))
                               ("describe_symbol" (:symbol "cdr")))))))
            (alone (sly-agent-q-test--call "describe_symbol" '(:symbol "car"))))
        (dolist (answer (cons alone together))
          (should-not (car answer))
          (should (string-match-p "helpers are not loaded" (cadr answer)))))
    (sly-agent-q-test--eval '(cl:progn (cl:rename-package "SAQ-HIDDEN" "SLY-AGENT-Q") t))))

(ert-deftest sly-agent-q-bridge-slime-cancel-one-call-of-a-request ()
  "Cancelling one call sent with others stops it in the image; the others answer.
A call cancelled before it was sent never runs."
  (unless (sly-agent-q-bridge-helpers-file) (ert-skip "lisp-cl/load.lisp is not there yet"))
  (sly-agent-q-test--call "describe_symbol" '(:symbol "car"))
  (unless (sly-agent-q-test--threads-p)
    (ert-skip "this Lisp has no threads: a cancel cannot interrupt it (sly-agent-q-bridge-slime-cancel-without-threads-says-so)"))
  (should (equal (sly-agent-q-test--eval
                  '(cl:progn (cl:defvar cl-user::*saq-bridge-probe* nil)
                             (cl:defvar cl-user::*saq-bridge-never* nil)
                             (cl:setf cl-user::*saq-bridge-probe* nil cl-user::*saq-bridge-never* nil) t))
                 '(t nil)))
  (pcase-let* ((`(,answers ,cancels)
                (sly-agent-q-test--calls-together
                 '(("eval_form" (:form "(progn (setf *saq-bridge-probe* :started) (sleep 3) (setf *saq-bridge-probe* :finished))"))
                   ("eval_form" (:form "(setf *saq-bridge-never* :ran)"))
                   ("eval_form" (:form "(+ 40 2)"))))))
    ;; Not sent yet: dropped from the request.
    (funcall (nth 1 cancels))
    (should (string-match-p "before it was sent" (cadr (aref answers 1))))
    (sly-agent-q-test-wait (lambda () (eq (car (sly-agent-q-test--eval 'cl-user::*saq-bridge-probe*)) :started))
                           60 "the first call to start")
    (funcall (nth 0 cancels))
    (should (string-match-p "cancelled" (cadr (aref answers 0))))
    (sly-agent-q-test-wait (lambda () (aref answers 2)) 10 "the third call")
    (should (equal (aref answers 2) '("Value: 42" nil)))
    (sly-agent-q-test-sleep 3.5)
    (should (eq (car (sly-agent-q-test--eval 'cl-user::*saq-bridge-probe*)) :started))
    (should-not (car (sly-agent-q-test--eval 'cl-user::*saq-bridge-never*)))
    (should-not (get-buffer "*sldb sbcl/1*"))))

(ert-deftest sly-agent-q-bridge-slime-connection-sends-promptly ()
  "After a call, the image's end of the connection has TCP_NODELAY set (SBCL)."
  (unless (sly-agent-q-bridge-helpers-file) (ert-skip "lisp-cl/load.lisp is not there yet"))
  (sly-agent-q-test--call "describe_symbol" '(:symbol "car"))
  ;; Read by the Lisp from text: the alien types are not Emacs Lisp data.
  (let ((r (sly-agent-q-test--eval
            '(cl:handler-case
                 (cl:eval (cl:read-from-string "
(sb-alien:with-alien ((v sb-alien:int 0) (len sb-alien:unsigned 4))
  (sb-alien:alien-funcall
   (sb-alien:extern-alien \"getsockopt\"
     (function sb-alien:int sb-alien:int sb-alien:int sb-alien:int (* sb-alien:int) (* sb-alien:unsigned)))
   (sb-sys:fd-stream-fd (swank::current-socket-io)) 6 1 (sb-alien:addr v) (sb-alien:addr len))
  v)"))
               (cl:error (c) (cl:princ-to-string c))))))
    (should-not (cadr r))
    (should (/= 0 (car r)))))

(ert-deftest sly-agent-q-bridge-slime-helpers-fail-to-load ()
  "When the helpers fail to load, the call says so with the reason."
  (let* ((cur (sly-agent-q-test--slime))
         (dir (make-temp-file "agent-q-lisp-cl" t))
         (sly-agent-q-lisp-cl-directory dir))
    (with-temp-file (expand-file-name "load.lisp" dir)
      (insert "(error \"broken on purpose\")\n"))
    (process-put (cdr cur) 'sly-agent-q-helpers nil)
    (unwind-protect
        (let ((r (sly-agent-q-test--call "describe_symbol" '(:symbol "car"))))
          (should-not (car r))
          (should (string-match-p "Loading the sly-agent-q helpers into the image failed" (cadr r)))
          (should (string-match-p "broken on purpose" (cadr r))))
      (process-put (cdr cur) 'sly-agent-q-helpers nil))))

(ert-deftest sly-agent-q-bridge-slime-zz-lisp-killed-mid-call ()
  "Killing the Lisp during a call answers it with an error at once."
  (let* ((cur (sly-agent-q-test--slime))
         (conn (cdr cur))
         result)
    (sly-agent-q-bridge-eval (car cur) conn '(cl:sleep 60) "CL-USER" 90
                             (lambda (v e) (setq result (list v e))))
    (sly-agent-q-test-sleep 0.3)
    (should-not result)
    (delete-process (slime-inferior-process conn))
    (sly-agent-q-test-wait (lambda () result) 10 "the error after the kill")
    (should (string-match-p "connection to the Lisp image closed" (cadr result)))
    (sly-agent-q-test-wait (lambda () (not (slime-connected-p))) 10 "SLIME to notice")))

(ert-deftest sly-agent-q-bridge-slime-through-server ()
  "The model calls an image tool; the server asks Emacs; SLIME answers."
  (unless (sly-agent-q-bridge-helpers-file) (ert-skip "lisp-cl/load.lisp is not there yet"))
  (let ((fixture (expand-file-name "test/fixtures/my-app/load.lisp" sly-agent-q-test-root)))
    (should (equal (car (sly-agent-q-test--eval `(cl:progn (cl:load ,fixture) t) 120)) t))
    (sly-agent-q-test-with-server
        `((steps . [((content . [((type . "tool_use") (name . "describe_symbol")
                                  (input . ((symbol . "process-data") (package . "MY-APP"))))]))
                    ((content . [((type . "text") (text . "Found: {{last_tool_result}}"))]))]))
      (let ((outcome (sly-agent-q-test-send "What is process-data?" 120)))
        (should (eq (plist-get outcome :status) 'finished))
        (should (string-match-p "PROCESS-DATA" (plist-get outcome :text)))
        (should (string-match-p "describe_symbol (safe).*✓" (sly-agent-q-test-chat-text)))))))

(ert-deftest sly-agent-q-bridge-slime-zz-lisp-killed-while-helpers-load ()
  "The Lisp dies while the helpers load: the call waiting for them gets an error."
  (let* ((conn (cdr (sly-agent-q-test--slime)))
         (dir (make-temp-file "saq-slow-helpers-" t))
         (sly-agent-q-lisp-cl-directory dir)
         result)
    (unwind-protect
        (progn
          ;; A helpers file that takes its time, as a first compile does on a loaded machine.
          (with-temp-file (expand-file-name "load.lisp" dir) (insert "(sleep 60)\n"))
          (process-put conn 'sly-agent-q-helpers nil)
          (sly-agent-q-bridge-call-tool "describe_symbol" '(:symbol "car") nil
                                        (lambda (c e) (setq result (list c e))))
          (sly-agent-q-test-sleep 1)
          (should-not result)
          (delete-process (slime-inferior-process conn))
          (sly-agent-q-test-wait (lambda () result) 20 "the call waiting for the helpers")
          (should-not (car result))
          (should (string-match-p "connection to the Lisp image closed" (cadr result))))
      (delete-directory dir t))))

(ert-deftest sly-agent-q-bridge-slime-zz-server-lisp-killed ()
  "The Lisp dies while the model's eval_form runs: the model gets an error result."
  (unless (sly-agent-q-bridge-helpers-file) (ert-skip "lisp-cl/load.lisp is not there yet"))
  (let ((conn (cdr (sly-agent-q-test--slime))))
    (sly-agent-q-test-with-server
        `((steps . [((content . [((type . "tool_use") (name . "eval_form")
                                  (input . ((form . "(sleep 30)"))))]))
                    ((content . [((type . "text") (text . "Tool said: {{last_tool_result}}"))]))]))
      (let (outcome)
        (sly-agent-q-send "sleep" (lambda (p) (setq outcome p)))
        (sly-agent-q-test-wait (lambda () (string-match-p "eval_form (cautious).*running"
                                                          (sly-agent-q-test-chat-text)))
                               60 "the eval_form call")
        (sly-agent-q-test-sleep 0.5)
        (delete-process (slime-inferior-process conn))
        (sly-agent-q-test-wait (lambda () outcome) 60
                               (lambda () (format "the turn; chat:\n%s\nevents:\n%s" (sly-agent-q-test-chat-text)
                                       (with-current-buffer (jsonrpc-events-buffer (sly-agent-q-connection-current))
                                         (buffer-substring-no-properties (max (point-min) (- (point-max) 3000)) (point-max))))))
        (should (eq (plist-get outcome :status) 'finished))
        (should (string-match-p "connection to the Lisp image closed" (plist-get outcome :text)))
        ;; The Lisp may die while the helpers are still loading (a restarted
        ;; Lisp on a loaded machine): the same error, said of the load.
        (should (string-match-p "eval_form (cautious).*✗ \\(Loading the sly-agent-q helpers into the image failed: \\)?The connection to the Lis"
                                (sly-agent-q-test-chat-text)))))))

;; After M-x slime-connect, Emacs knows no Lisp process: a connection closed
;; after an abort was reported as an exit, and the user told to start a new
;; Lisp, though a CLISP that reset still held their state.
(ert-deftest sly-agent-q-bridge-closed-without-a-known-process-says-either ()
  "A connection closed after an abort, its Lisp not Emacs's: exit or reset, both said."
  (let (message)
    (sly-agent-q-bridge--exited-or-reset nil (lambda (_value m) (setq message m)))
    (should (string-match-p "may have exited the Lisp, or the Lisp reset itself" message))
    (should-not (string-match-p "process exited" message))))

(provide 'sly-agent-q-bridge-test)
;;; sly-agent-q-bridge-test.el ends here
