;;;; eval.lisp --- running the model's code: eval_form, eval_in_package,
;;;; get_last_error, get_repl_history.
;;;
;;; The code runs under RUN-USER-CODE (guard.lisp); each evaluation is
;;; kept in a capped history, and the last error with its backtrace.

(in-package #:sly-agent-q)

(defvar *history-limit* 100
  "The most entries the REPL history of these tools keeps.")

(defvar *history* '()
  "Recent evaluations through these tools, newest first: plists with
:ID :TOOL :PACKAGE :FORM :RESULT :OK :TIME.")

(defvar *history-counter* 0
  "The id of the most recent history entry.")

(defvar *last-error* nil
  "The last error of eval_form, eval_in_package or compile_form: a plist
with :TOOL :PACKAGE :FORM :TYPE :MESSAGE :WHILE :BACKTRACE :OUTPUT :ID.")


;;;; History and the last error

(defun record-history (tool package form result ok)
  "Add an entry to the history; return its id."
  (when ok
    (note-agent-definitions tool form))
  (call-with-state-lock
   (lambda ()
     (let ((id (incf *history-counter*)))
       ;; Capped, so that a hundred big evaluations stay small.
       (push (list :id id :tool tool :package package :form (cap form 4000 "code")
                   :result (cap result 1000 "result") :ok ok :time (get-universal-time))
             *history*)
       (when (> (length *history*) *history-limit*)
         (setf *history* (subseq *history* 0 (max 0 *history-limit*))))
       id))))

(defun record-error (&rest plist &key form &allow-other-keys)
  "Make PLIST the last error."
  (let ((plist (list* :form (and form (cap form 4000 "code")) plist)))
    (call-with-state-lock
     (lambda () (setf *last-error* (list* :time (get-universal-time) plist))))))

(defun values-text (values package)
  "The printed VALUES, for a result."
  (let ((*package* package))
    (case (length values)
      (0 "No values.")
      (1 (format nil "Value: ~A" (print-value (first values))))
      (t (format nil "Values (~D):~%~{~A~^~%~}" (length values)
                 (mapcar (lambda (v) (indent (print-value v) "  ")) values))))))

(defun values-summary (values package)
  "A one-line summary of VALUES, for the history."
  (let ((*package* package))
    (if values
        (format nil "=> ~{~A~^, ~}"
                (mapcar (lambda (v) (first-line (print-value v :limit 300) 200)) values))
        "=> no values")))

;;;; Evaluating the model's code
;;;
;;; EVALUATE-TEXT checks the whole text reads, runs its forms one by
;;; one as user code (RUN-FORMS), and turns the OUTCOME into a result or
;;; a TOOL-FAILURE that says which form failed and in which phase.

(defstruct (evaluation (:constructor make-evaluation (tool text package form-count)))
  "One eval_form or eval_in_package call, and how far it got.  The
slots that track progress are set as the forms run, so that they still
say where it was when a condition or the timeout unwinds it."
  tool
  text
  package
  ;; The number of forms, or NIL when the scan stopped at a reader
  ;; error (which the evaluation will then meet).
  form-count
  (current 0)                           ; the form being read or run, from 1
  (current-start 0)                     ; where it starts in TEXT
  (phase :read)                         ; :read, :eval or :print
  (final-package nil)                   ; *PACKAGE* after the last form
  (values-text nil)
  (summary nil)                         ; for the history
  (outcome nil))

(defun count-evaluable-forms (text)
  "The number of forms of TEXT (NIL if a reader error stops the scan,
to be reported when evaluation gets there), or a FAIL when TEXT is
unbalanced or empty: then nothing runs."
  (multiple-value-bind (spans scan-error scan-start) (call-reading-code (lambda () (scan-forms text)))
    (when (typep scan-error 'end-of-file)
      (fail "~A Nothing was evaluated." (unbalanced-message text scan-start (1+ (length spans)))))
    (when (and (null spans) (null scan-error))
      (fail "The code is empty: give one or more Lisp forms."))
    (if scan-error nil (length spans))))

(defun run-forms (evaluation)
  "Read and evaluate the forms of EVALUATION's text one by one, then
print the values of the last, all as user code; return the OUTCOME."
  (let ((text (evaluation-text evaluation))
        (package (evaluation-package evaluation)))
    (run-user-code
     (lambda ()
       (let ((*package* package)
             (position 0)
             (values '()))
         (loop
           (setf position (skip-blank text position))
           (when (>= position (length text)) (return))
           (setf (evaluation-phase evaluation) :read
                 (evaluation-current evaluation) (1+ (evaluation-current evaluation))
                 (evaluation-current-start evaluation) position)
           (multiple-value-bind (form end) (read-from-string text nil text :start position)
             ;; Only a form the reader skips (#+(or) ...) was left.
             (when (eq form text)
               (decf (evaluation-current evaluation))
               (return))
             (setf position end
                   (evaluation-phase evaluation) :eval)
             (setf values (multiple-value-list (eval form)))))
         (let ((final-package *package*))
           (setf (evaluation-final-package evaluation) final-package)
           ;; Printing runs the user's PRINT-OBJECT methods: it is user
           ;; code too, under the same timeout.
           (setf (evaluation-phase evaluation) :print
                 (evaluation-values-text evaluation) (with-inspect-ids
                                                      (values-text values final-package) values)
                 (evaluation-summary evaluation) (values-summary values final-package))))))))

(defun evaluation-place (evaluation)
  "Which form EVALUATION was at, for messages."
  (let ((text (evaluation-text evaluation))
        (start (evaluation-current-start evaluation)))
    (format nil "form ~D~@[ of ~D~] (line ~D: ~A) in package ~A"
            (evaluation-current evaluation) (evaluation-form-count evaluation)
            (line-of text start) (form-excerpt text start (length text) 60)
            (package-name (evaluation-package evaluation)))))

(defun evaluation-doing (evaluation)
  "What EVALUATION was doing to its current form."
  (ecase (evaluation-phase evaluation)
    (:read "reading")
    (:eval "evaluating")
    (:print "printing the values of")))

(defun evaluation-output-part (evaluation title)
  "The output EVALUATION printed, under TITLE, or \"\"."
  (let ((output (outcome-output (evaluation-outcome evaluation))))
    (if (plusp (length output))
        (format nil "~%~A:~%~A" title output)
        "")))

(defun evaluation-completed-part (evaluation)
  "A sentence on the forms that completed before the current one failed."
  (let ((current (evaluation-current evaluation)))
    (if (and (> current 1) (not (eq (evaluation-phase evaluation) :print)))
        (format nil "~%Forms 1 to ~D completed before that." (1- current))
        "")))

(defun record-evaluation-error (evaluation history-result &rest details)
  "Record EVALUATION in the history (as HISTORY-RESULT, failed) and as
the last error, described by the plist DETAILS."
  (let* ((tool (evaluation-tool evaluation))
         (package-name (package-name (evaluation-package evaluation)))
         (text (evaluation-text evaluation))
         (id (record-history tool package-name text history-result nil)))
    (apply #'record-error :tool tool :package package-name :form text :id id
           :while (format nil "~A ~A" (evaluation-doing evaluation) (evaluation-place evaluation))
           :output (outcome-output (evaluation-outcome evaluation))
           details)))

(defun fail-timed-out-evaluation (evaluation)
  "Record EVALUATION, interrupted by the timeout, and signal a TOOL-FAILURE."
  (let* ((outcome (evaluation-outcome evaluation))
         (seconds (outcome-seconds outcome)))
    (record-evaluation-error evaluation (format nil "TIMEOUT after ~A s" seconds)
                             :type "TIMEOUT"
                             :message (format nil "timed out after ~A s" seconds)
                             :backtrace (outcome-backtrace outcome))
    (error 'tool-failure
           :message
           (with-output-to-string (out)
             (format out "Evaluation timed out after ~A s and was interrupted, ~A ~A.~A~%"
                     seconds (evaluation-doing evaluation) (evaluation-place evaluation)
                     (evaluation-completed-part evaluation))
             (format out "The image is still usable; side effects made before the ~
                          interruption remain.")
             (when (outcome-backtrace outcome)
               (format out "~%Where it was when interrupted (innermost first):~%~A"
                       (format-backtrace (outcome-backtrace outcome))))
             (write-string (evaluation-output-part evaluation "Output before the interruption")
                           out)))))

(defun fail-signalling-evaluation (evaluation)
  "Record EVALUATION, stopped by a condition, and signal a TOOL-FAILURE."
  (let* ((outcome (evaluation-outcome evaluation))
         (reading (eq (evaluation-phase evaluation) :read))
         ;; A reader error's backtrace shows only the reader.
         (backtrace (if reading nil (outcome-backtrace outcome))))
    (record-evaluation-error evaluation
                             (format nil "ERROR ~A: ~A" (outcome-type outcome)
                                     (first-line (outcome-message outcome) 200))
                             :type (outcome-type outcome)
                             :message (outcome-message outcome)
                             :backtrace backtrace)
    (error 'tool-failure
           :message
           (with-output-to-string (out)
             (format out "~:[Error~;Reader error~] while ~A ~A:~%~A: ~A~A"
                     reading (evaluation-doing evaluation) (evaluation-place evaluation)
                     (outcome-type outcome) (outcome-message outcome)
                     (evaluation-completed-part evaluation))
             (when backtrace
               (format out "~%Backtrace (innermost first):~%~A"
                       (string-right-trim '(#\Newline) (format-backtrace backtrace))))
             (write-string (evaluation-output-part evaluation "Output before the error") out)
             (format out "~%(get_last_error shows this again.)")))))

(defun evaluation-result (evaluation)
  "Record EVALUATION, which completed, in the history; return its result text."
  (let ((package (evaluation-package evaluation))
        (final-package (evaluation-final-package evaluation))
        (current (evaluation-current evaluation)))
    (record-history (evaluation-tool evaluation) (package-name package) (evaluation-text evaluation)
                    (evaluation-summary evaluation) t)
    (with-output-to-string (out)
      (when (> current 1)
        (format out "Evaluated ~D forms in package ~A; values of the last form:~%"
                current (package-name package)))
      (write-string (evaluation-values-text evaluation) out)
      (write-string (evaluation-output-part evaluation "Output") out)
      (unless (eq final-package package)
        (format out "~%Note: the code changed *PACKAGE* (to ~A) for this call only."
                (package-name final-package))))))

(defun evaluate-text (tool text package)
  "Read and evaluate every form of TEXT in PACKAGE; return the result text
or signal TOOL-FAILURE."
  (note-previous-sources text package)
  (let ((evaluation (make-evaluation tool text package (count-evaluable-forms text))))
    (setf (evaluation-outcome evaluation) (run-forms evaluation))
    (cond ((outcome-timed-out (evaluation-outcome evaluation))
           (fail-timed-out-evaluation evaluation))
          ((outcome-condition (evaluation-outcome evaluation))
           (fail-signalling-evaluation evaluation))
          (t (evaluation-result evaluation)))))

(define-tool "eval_form" (&key form package)
  "Evaluate every form of FORM in PACKAGE."
  (evaluate-text "eval_form" (nonblank form "form" "one or more Lisp forms")
                 (tool-package package)))

(define-tool "eval_in_package" (&key form package)
  "Evaluate every form of FORM with *PACKAGE* bound to PACKAGE."
  (evaluate-text "eval_in_package" (nonblank form "form" "one or more Lisp forms")
                 ;; Unlike eval_form's, this package has no default.
                 (tool-package (nonblank package "package" "the package to evaluate in"))))


;;;; get_last_error, get_repl_history

(define-tool "get_last_error" ()
  "The last error of eval_form, eval_in_package or compile_form."
  (let ((last (call-with-state-lock (lambda () *last-error*))))
    (if (null last)
        "No error recorded yet."
        (destructuring-bind (&key tool package form type message while backtrace output id time
                             &allow-other-keys)
            last
          (with-output-to-string (out)
            (format out "Last error, from ~A in package ~A~@[ (history entry ~D)~]~@[, ~A~]:~%"
                    tool package id (and time (time-ago time)))
            (format out "Condition: ~A~%Message: ~A~%" type message)
            (when while (format out "While: ~A~%" while))
            (format out "Code:~%~A~%" (indent (cap form 1500 "code") "  "))
            (when backtrace
              (format out "Backtrace (innermost first):~%~A"
                      (format-backtrace backtrace *backtrace-limit*)))
            (when (and output (plusp (length output)))
              (format out "Output before the error:~%~A~%" (cap output 1500 "output"))))))))

(defun time-ago (universal-time)
  (let ((seconds (max 0 (- (get-universal-time) universal-time))))
    (cond ((< seconds 2) "just now")
          ((< seconds 120) (format nil "~D seconds ago" seconds))
          ((< seconds 7200) (format nil "~D minutes ago" (round seconds 60)))
          (t (format nil "~D hours ago" (round seconds 3600))))))

(define-tool "get_repl_history" (&key limit)
  "The most recent LIMIT (default 10) evaluations made through these tools."
  (let* ((history (call-with-state-lock (lambda () (copy-list *history*))))
         (limit (or limit 10))
         (shown (reverse (subseq history 0 (min limit (length history))))))
    (if (null history)
        "No evaluations recorded yet (only eval_form, eval_in_package and compile_form calls are recorded)."
        (with-output-to-string (out)
          (format out "~:[The~;The last~] ~A of ~A (oldest first; ~D kept at most):~%"
                  (< (length shown) (length history))
                  (plural (length shown) "entry" "entries")
                  (plural *history-counter* "evaluation")
                  *history-limit*)
          (dolist (entry shown)
            (destructuring-bind (&key id tool package form result &allow-other-keys) entry
              (format out "[~D] ~A in ~A:~%~A~%~A~%"
                      id tool package
                      (indent (cap form 400 "code") "    ")
                      (indent (cap result 400 "result") "    "))))))))
