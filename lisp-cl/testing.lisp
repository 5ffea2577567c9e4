;;;; testing.lisp --- run a system's tests, or one suite or test, and
;;;; report counts and each failure, never opening the debugger.
;;;
;;; FiveAM, Parachute, Rove and lisp-unit are found at run time with
;;; FIND-PACKAGE / FIND-SYMBOL.  FiveAM gives structured results (its
;;; EXPLAIN! is wrapped for the run to see what ASDF's test-op ran);
;;; the others are run through their own entry points with their
;;; debugging switches off, and their report text is returned.  Every
;;; framework's debug-on-failure switch is bound off for the run, and
;;; the run is under CALL-TOOL's condition trap besides.

(in-package #:sly-agent-q)

(defparameter *failures-shown* 20
  "The most failures run_tests describes.")

(defparameter *test-output-limit* 3000
  "The most report text run_tests returns for frameworks without structured results.")

(defun framework-symbol (package name)
  (let ((p (find-package package)))
    (and p (values (find-symbol name p)))))

(defun frameworks-present ()
  "The test frameworks loaded in the image, by name."
  (loop for (name package) in '(("FiveAM" "FIVEAM") ("Parachute" "PARACHUTE")
                                ("Rove" "ROVE") ("lisp-unit" "LISP-UNIT"))
        when (find-package package) collect name))

(defun call-with-debugging-off (function)
  "Call FUNCTION with every present framework's debug switches off."
  (let ((symbols '()) (values '()))
    (loop for (package name value) in '(("FIVEAM" "*ON-ERROR*" nil) ("FIVEAM" "*ON-FAILURE*" nil)
                                        ("FIVEAM" "*DEBUG-ON-ERROR*" nil)
                                        ("FIVEAM" "*DEBUG-ON-FAILURE*" nil)
                                        ("ROVE" "*DEBUG-ON-ERROR*" nil)
                                        ("LISP-UNIT" "*PRINT-FAILURES*" t)
                                        ("LISP-UNIT" "*PRINT-ERRORS*" t))
          for symbol = (framework-symbol package name)
          when (and symbol (boundp symbol))
            do (push symbol symbols) (push value values))
    (progv symbols values (funcall function))))

;;;; FiveAM

(defun fiveam-call (name &rest args)
  (apply (or (framework-symbol "FIVEAM" name) (fail "FiveAM has no ~A." name)) args))

(defun call-capturing-fiveam-results (function)
  "Call FUNCTION with FIVEAM:RUN and FIVEAM:EXPLAIN! wrapped to keep the
results they see.  Return those results, in order, and the error FUNCTION
signalled, if any: a test-op commonly signals when the run failed
\(`(unless (run! ...) (error ...))'), and the results seen before are
what the model needs.  EXPLAIN!'s results are preferred; RUN's are used
when nothing was explained (a test-op that checks RUN's results itself)."
  (let ((explained '()) (ran '()) (failure nil) (wrapped '()))
    (flet ((wrap (name keep)
             (let* ((symbol (framework-symbol "FIVEAM" name))
                    (original (and symbol (fboundp symbol) (fdefinition symbol))))
               (when original
                 (push (cons symbol original) wrapped)
                 (set-fdefinition-unlocked
                  symbol (lambda (&rest args)
                           (let ((values (multiple-value-list (apply original args))))
                             (funcall keep args values)
                             (values-list values))))))))
      (unwind-protect
           (progn
             (wrap "EXPLAIN!" (lambda (args values)
                                (declare (ignore values))
                                (when (listp (first args))
                                  (setf explained (append explained (first args))))))
             (wrap "RUN" (lambda (args values)
                           (declare (ignore args))
                           (when (listp (first values))
                             (setf ran (append ran (first values))))))
             (handler-case (funcall function)
               (error (c) (setf failure c))))
        (loop for (symbol . original) in wrapped
              do (set-fdefinition-unlocked symbol original))))
    (values (or explained ran) failure)))

(defun set-fdefinition-unlocked (symbol function)
  "(SETF FDEFINITION) of SYMBOL, in a package that may be locked (SBCL)."
  #+sbcl (sb-ext:without-package-locks (setf (fdefinition symbol) function))
  #-sbcl (setf (fdefinition symbol) function))

(defun load-test-dependencies (system)
  "Load the systems SYSTEM's test-op depends on (its test system, and so
the framework), so that the framework is present before the run."
  (let ((operation (ignore-errors (asdf-call "MAKE-OPERATION" (find-symbol "TEST-OP" "ASDF")))))
    (when operation
      (dolist (entry (ignore-errors (asdf-call "COMPONENT-DEPENDS-ON" operation system)))
        (dolist (name (rest entry))
          (when (or (stringp name) (symbolp name))
            (let ((dependency (ignore-errors (asdf-call "FIND-SYSTEM" name nil))))
              (when dependency
                (asdf-call "LOAD-SYSTEM" dependency)))))))))

(defun fiveam-result-kind (result)
  (let ((class (class-name (class-of result))))
    (cond ((string= (symbol-name class) "TEST-PASSED") :passed)
          ((string= (symbol-name class) "TEST-SKIPPED") :skipped)
          ((string= (symbol-name class) "UNEXPECTED-TEST-FAILURE") :error)
          (t :failed))))

(defun fiveam-slot (result name)
  "The value of RESULT's slot NAME (a string), or NIL."
  (let ((slot (find name (ignore-errors (mop "CLASS-SLOTS" (class-of result)))
                    :key (lambda (s) (symbol-name (mop "SLOT-DEFINITION-NAME" s)))
                    :test #'string=)))
    (and slot
         (let ((slot-name (mop "SLOT-DEFINITION-NAME" slot)))
           (and (slot-boundp result slot-name) (slot-value result slot-name))))))

(defun fiveam-test-label (result package)
  (let* ((test (fiveam-slot result "TEST-CASE"))
         (name (and test (fiveam-slot test "NAME"))))
    (if (symbolp name) (symbol-label name package) (princ-value name :limit 100))))

(defun write-fiveam-report (out results package)
  "Write counts and failures of FiveAM RESULTS."
  (let* ((kinds (mapcar #'fiveam-result-kind results))
         (failures (remove-if-not (lambda (r) (member (fiveam-result-kind r) '(:failed :error))) results))
         (tests (remove-duplicates (mapcar (lambda (r) (fiveam-slot r "TEST-CASE")) results))))
    (format out "FiveAM: ~D test~:P, ~D check~:P: ~D passed, ~D failed, ~D error~:P, ~D skipped.~%"
            (length tests) (length results) (count :passed kinds) (count :failed kinds)
            (count :error kinds) (count :skipped kinds))
    (if (null failures)
        (format out "All checks passed.~%")
        (loop for result in failures
              for i below *failures-shown*
              do (let ((expr (fiveam-slot result "TEST-EXPR"))
                       (condition (fiveam-slot result "ACTUAL-CONDITION")))
                   (format out "~%FAIL ~A~%" (fiveam-test-label result package))
                   (when expr
                     (format out "  form: ~A~%" (let ((*package* package)) (print-value expr :limit 400 :pretty nil))))
                   (format out "  ~:[result~;error~]: ~A~%" condition
                           (one-line (princ-value (fiveam-slot result "REASON") :limit 600)))
                   (when condition
                     (format out "  condition: ~A: ~A~%" (condition-type-label condition)
                             (first-line (condition-message condition) 300))))
              finally (when (> (length failures) *failures-shown*)
                        (format out "~%... and ~D more failures~%" (- (length failures) *failures-shown*)))))))

;;;; Running

(defun one-line (text)
  "TEXT with every run of whitespace made one space."
  (with-output-to-string (out)
    (let ((blank nil))
      (loop for c across (string-trim '(#\Space #\Tab #\Newline #\Return) text)
            do (if (blank-char-p c)
                   (setf blank t)
                   (progn (when blank (write-char #\Space out) (setf blank nil))
                          (write-char c out)))))))

(defun run-named-test (name package framework-hint out)
  "Run the suite or test NAME with the framework that defines it."
  (let ((symbol (resolve-symbol name package :what "Suite or test")))
    (cond
      ((and (find-package "FIVEAM")
            (or (null framework-hint) (string-equal framework-hint "fiveam"))
            (ignore-errors (fiveam-call "GET-TEST" symbol)))
       (let ((results (fiveam-call "RUN" symbol)))
         (write-fiveam-report out results package)))
      ((and (find-package "PARACHUTE") (framework-symbol "PARACHUTE" "TEST"))
       (let ((report (funcall (framework-symbol "PARACHUTE" "TEST") symbol
                              :report (framework-symbol "PARACHUTE" "PLAIN")
                              :output out)))
         (format out "~&Parachute: ~A~%" (princ-value report :limit 200))))
      ((and (find-package "ROVE") (framework-symbol "ROVE" "RUN-TEST"))
       (format out "~&Rove: ~:[failed~;passed~]~%" (funcall (framework-symbol "ROVE" "RUN-TEST") symbol)))
      ((and (find-package "LISP-UNIT") (framework-symbol "LISP-UNIT" "RUN-TESTS"))
       (let ((*standard-output* out))
         (funcall (framework-symbol "LISP-UNIT" "RUN-TESTS") (list symbol) (symbol-package symbol))))
      (t (fail "No test framework in the image defines ~A (present: ~{~A~^, ~}~:*~:[none~;~])."
               (symbol-label symbol) (frameworks-present))))))

(defun bounded-tail (text limit)
  (if (> (length text) limit)
      (format nil "...~A" (subseq text (- (length text) limit)))
      text))

(define-tool "run_tests" (&key system suite test package)
  "Run a system's tests (asdf:test-system), or one suite or test, debugger off."
  (let ((package (tool-package package))
        (log (make-string-output-stream)))
    (with-output-to-string (out)
      (call-with-debugging-off
       (lambda ()
         (cond
           ((or suite test)
            (let ((*standard-output* log) (*error-output* log))
              (run-named-test (nonblank (or test suite) (if test "test" "suite") "a name")
                              package nil out)))
           (system
            (let* ((object (find-system-or-fail system))
                   (name (asdf-call "COMPONENT-NAME" object))
                   (failure nil)
                   (results
                     (let ((dribble (framework-symbol "FIVEAM" "*TEST-DRIBBLE*")))
                       (progv (and dribble (list dribble)) (and dribble (list log))
                         (let ((*standard-output* log) (*error-output* log))
                           (handler-case
                               (progn
                                 (load-test-dependencies object)
                                 (multiple-value-bind (results error)
                                     (call-capturing-fiveam-results
                                      (lambda () (asdf-call "TEST-SYSTEM" name)))
                                   (setf failure error)
                                   results))
                             (error (c) (setf failure c) nil)))))))
              (format out "Ran asdf:test-system ~A~@[ (frameworks: ~{~A~^, ~})~].~%" name (frameworks-present))
              (when failure
                (format out "The test run stopped with ~A: ~A~%"
                        (condition-type-label failure) (first-line (condition-message failure) 400)))
              (if results
                  (write-fiveam-report out results package)
                  (format out "No FiveAM results were seen; the run printed:~%~A~%"
                          (bounded-tail (get-output-stream-string log) *test-output-limit*)))))
           (t (fail "Give a system, a suite or a test to run."))))))))
