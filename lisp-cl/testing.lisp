;;;; testing.lisp --- run a system's tests, or one suite or test, and
;;;; report counts and each failure, never opening the debugger.
;;;
;;; FiveAM, SB-RT/RT, Parachute, Rove and lisp-unit are found at run
;;; time with FIND-PACKAGE / FIND-SYMBOL.  For a system, its test system
;;; is loaded first (the compiler's log and warnings kept apart), then
;;; asdf:test-system runs with every present framework's entry point
;;; wrapped: the outermost calls are the runs, named by the framework
;;; that made them, counted from its own result objects (FiveAM's
;;; results, RT's test entries) or, for the others, from their text; a
;;; test-op that calls none ran its own runner.  Every framework's
;;; debug-on-failure switch is bound off for the run, and the run is
;;; under CALL-TOOL's condition trap besides.

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

;;;; Watching a system's test-op
;;;
;;; ASDF's test-op is a method anyone writes, so the run is watched from
;;; the frameworks' side: the entry point of every framework present is
;;; wrapped for the run, and only its outermost calls count.  A call
;;; made while one is running is part of a test (FiveAM's own tests run
;;; FiveAM inside tests), so it runs unobserved.

(defvar *observed-runs* :none
  "The runs a test-op made so far, newest first (a list of TEST-RUN), or
:NONE outside run_tests.")

(defvar *inside-observed-run* nil
  "True inside an outermost framework call: calls made there are part of a test.")

(defstruct test-run
  "One outermost call of a framework's entry point during a test-op."
  framework         ; its name, as the model sees it
  (results '())     ; FiveAM: its result objects
  (summary '())     ; RT: (:tests N :passed N :failed N :expected N :skipped N :failures (NAME...))
  (output "")       ; what it printed
  (finished nil))   ; NIL when it exited by a non-local transfer

(defparameter *framework-entry-points*
  '(("FiveAM" "FIVEAM" "RUN" fiveam-run-summary)
    ("SB-RT" "SB-RT" "DO-TESTS" rt-run-summary)
    ("RT" "REGRESSION-TEST" "DO-TESTS" rt-run-summary)
    ("Parachute" "PARACHUTE" "TEST" nil)
    ("Rove" "ROVE" "RUN" nil)
    ("Rove" "ROVE" "RUN-SUITE" nil)
    ("Rove" "ROVE" "RUN-TEST" nil)
    ("lisp-unit" "LISP-UNIT" "RUN-TESTS" nil)
    ("lisp-unit" "LISP-UNIT" "RUN-TAGS" nil))
  "Framework name, package, entry point, and the function that reads the
run's results from the framework's own objects (NIL: from its text).")

(defun fiveam-run-summary (run arguments values)
  (declare (ignore arguments))
  (when (listp (first values))
    (setf (test-run-results run) (first values))))

(defun rt-run-summary (run arguments values)
  "Counts of an RT (or SB-RT) run from its test entries, as DO-TESTS
counts them; the failures from PENDING-TESTS."
  (declare (ignore arguments values))
  (let* ((package (symbol-package (framework-symbol (if (string= (test-run-framework run) "SB-RT")
                                                         "SB-RT" "REGRESSION-TEST")
                                                     "DO-TESTS")))
         (entries (let ((symbol (find-symbol "*ENTRIES*" package)))
                    (and symbol (boundp symbol) (rest (symbol-value symbol)))))
         (pend (find-symbol "PEND" package))
         (pending (funcall (find-symbol "PENDING-TESTS" package)))
         (expected (let ((symbol (find-symbol "*EXPECTED-FAILURES*" package)))
                     (and symbol (boundp symbol) (symbol-value symbol))))
         (passed (if (and pend (fboundp pend))
                     (count-if-not (lambda (entry) (funcall pend entry)) entries)
                     (- (length entries) (length pending)))))
    (setf (test-run-summary run)
          (list :tests (length entries) :passed passed :failed (length pending)
                :expected (count-if (lambda (name) (member name expected :test #'equal)) pending)
                :skipped (- (length entries) passed (length pending))
                :failures pending
                :expected-names (remove-if-not (lambda (name) (member name expected :test #'equal)) pending)))))

(defun observing-entry-point (framework original reader)
  "A function to stand for ORIGINAL, FRAMEWORK's entry point, that records
its outermost calls in *OBSERVED-RUNS*."
  (lambda (&rest arguments)
    (if (or *inside-observed-run* (not (listp *observed-runs*)))
        (apply original arguments)
        (let* ((run (make-test-run :framework framework))
               (output (make-string-output-stream))
               (*inside-observed-run* t))
          (push run *observed-runs*)
          (unwind-protect
               (let ((values (let ((*standard-output* (make-broadcast-stream *standard-output* output)))
                               (multiple-value-list (apply original arguments)))))
                 (when reader (funcall reader run arguments values))
                 (setf (test-run-finished run) t)
                 (values-list values))
            (setf (test-run-output run) (get-output-stream-string output)))))))

(defun call-observing-test-runs (function)
  "Call FUNCTION with the entry point of every framework present wrapped;
return the outermost runs it made, in order, and the error it
signalled, if any: a test-op commonly signals when the run failed
\(`(unless (run! ...) (error ...))'), and the runs before are what the
model needs."
  (let ((wrapped '()) (failure nil) (*observed-runs* '()) (*inside-observed-run* nil))
    (unwind-protect
         (progn
           (loop for (framework package name reader) in *framework-entry-points*
                 for symbol = (framework-symbol package name)
                 when (and symbol (fboundp symbol) (not (macro-function symbol))
                           (not (assoc symbol wrapped)))
                   do (let ((original (fdefinition symbol)))
                        (push (cons symbol original) wrapped)
                        (set-fdefinition-unlocked
                         symbol (observing-entry-point framework original reader))))
           (handler-case (funcall function)
             (error (c) (setf failure c))))
      (loop for (symbol . original) in wrapped
            do (set-fdefinition-unlocked symbol original)))
    (values (reverse *observed-runs*) failure)))

(defun set-fdefinition-unlocked (symbol function)
  "(SETF FDEFINITION) of SYMBOL, in a package that may be locked (SBCL)."
  #+sbcl (sb-ext:without-package-locks (setf (fdefinition symbol) function))
  #-sbcl (setf (fdefinition symbol) function))

(defun missing-system-names (condition)
  "The systems CONDITION, an error of ASDF, says are not installed."
  (let ((type (and (find-package "ASDF") (find-symbol "MISSING-COMPONENT" "ASDF")))
        (reader (and (find-package "ASDF") (find-symbol "MISSING-REQUIRES" "ASDF"))))
    (when (and type (typep condition type) reader (fboundp reader))
      (let ((name (ignore-errors (funcall reader condition))))
        (and name (list (princ-to-string name)))))))

(defun load-test-dependencies (system)
  "Load the systems SYSTEM's test-op depends on (its test system, and so
the framework), so that the framework is present before the run and
its compilation is apart from the run's output.  Returns the names of
the systems it needs that ASDF cannot find."
  (let ((operation (ignore-errors (asdf-call "MAKE-OPERATION" (find-symbol "TEST-OP" "ASDF"))))
        (missing '()))
    (when operation
      (dolist (entry (ignore-errors (asdf-call "COMPONENT-DEPENDS-ON" operation system)))
        (dolist (name (rest entry))
          (when (or (stringp name) (symbolp name))
            (let ((dependency (handler-case (asdf-call "FIND-SYSTEM" name nil)
                                (error (c)
                                  (setf missing (append missing (missing-system-names c)))
                                  nil))))
              (if dependency
                  (asdf-call "LOAD-SYSTEM" dependency)
                  (pushnew (string-downcase (string name)) missing :test #'string=)))))))
    (reverse missing)))

(defstruct compilation
  "Loading what a test-op needs: the compiler's log, its warnings counted."
  (log "") (warnings 0) (style-warnings 0) (failure nil) (missing '()))

(defun compile-test-system (system)
  "Load what SYSTEM's test-op needs, the compiler's output and warnings
kept apart from the test run's."
  (let ((log (make-string-output-stream))
        (compilation (make-compilation)))
    (handler-bind ((warning (lambda (c)
                              (if (typep c 'style-warning)
                                  (incf (compilation-style-warnings compilation))
                                  (incf (compilation-warnings compilation))))))
      (let ((*standard-output* log) (*error-output* log))
        (handler-case (setf (compilation-missing compilation) (load-test-dependencies system))
          (error (c)
            (setf (compilation-failure compilation) c
                  (compilation-missing compilation) (missing-system-names c))))))
    (setf (compilation-log compilation) (get-output-stream-string log))
    compilation))

(defun fiveam-result-kind (result)
  "RESULT's kind, by FiveAM's classes (FOR-ALL's results are subclasses)."
  (flet ((is (name)
           (let ((class (framework-symbol "FIVEAM" name)))
             (and class (find-class class nil) (typep result class)))))
    (cond ((is "TEST-SKIPPED") :skipped)
          ((is "TEST-PASSED") :passed)
          ((is "UNEXPECTED-TEST-FAILURE") :error)
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

(defun last-line (text)
  "The last line of TEXT with something on it, trimmed, or NIL."
  (let* ((blank '(#\Space #\Tab #\Newline #\Return #\.))
         (end (position-if-not (lambda (c) (member c blank)) text :from-end t)))
    (when end
      (let ((start (let ((newline (position #\Newline text :end end :from-end t)))
                     (if newline (1+ newline) 0))))
        (string-trim '(#\Space #\Tab #\Return) (subseq text start (min (length text) (+ end 2))))))))

(defun rt-failure-text (output name)
  "What RT printed about the failure of test NAME in OUTPUT: its form,
the values expected and those it got; NIL when it is not there."
  (let* ((label (string-upcase (symbol-name-or-string name)))
         (start (loop for from = 0 then (1+ at)
                      for at = (search "Test " output :start2 from)
                      while at
                      when (let ((end (search " failed" output :start2 at)))
                             (and end (< (- end at) 400)
                                  (let ((header (subseq output (+ at 5) end)))
                                    (or (string= header label)
                                        (let ((colon (position #\: header :from-end t)))
                                          (and colon (string= (subseq header (1+ colon)) label)))))))
                        return at)))
    (when start
      (let* ((actual (search "Actual value" output :start2 start))
             (end (and actual
                       (loop with at = (or (position #\Newline output :start actual) (length output))
                             while (and (< (1+ at) (length output))
                                        (string= (make-string 15 :initial-element #\Space)
                                                 (subseq output (1+ at) (min (length output) (+ at 16)))))
                             do (setf at (or (position #\Newline output :start (1+ at)) (length output)))
                             finally (return at)))))
        (when (and end (< (- end start) 4000))
          (cap (string-right-trim '(#\Newline) (subseq output start end)) 800 "failure"))))))

(defun symbol-name-or-string (name)
  (if (symbolp name) (symbol-name name) (princ-to-string name)))

(defun write-rt-report (out run package)
  "Write counts and failures of an RT or SB-RT RUN, from its test entries."
  (destructuring-bind (&key tests passed failed expected skipped failures expected-names)
      (test-run-summary run)
    (format out "~A: ~D test~:P: ~D passed, ~D failed~:[~*~;, ~D of them expected failures~], ~D skipped~:[~; (the run did not finish)~].~%"
            (test-run-framework run) tests passed failed (plusp expected) expected skipped
            (not (test-run-finished run)))
    (when (zerop failed) (format out "Every test passed.~%"))
    (loop for name in failures
          for i below *failures-shown*
          do (format out "~%FAIL ~A~:[~; (expected to fail)~]~%~@[  ~A~%~]"
                     (if (symbolp name) (symbol-label name package) name)
                     (member name expected-names :test #'equal)
                     (let* ((text (rt-failure-text (test-run-output run) name))
                            ;; Its first line, "Test NAME failed", is the line above.
                            (newline (and text (position #\Newline text))))
                       (and newline (replace-all (subseq text (1+ newline))
                                                 (string #\Newline) (format nil "~%  ")))))
          finally (when (> (length failures) *failures-shown*)
                    (format out "~%... and ~D more failures~%" (- (length failures) *failures-shown*))))))

(defun replace-all (text old new)
  (with-output-to-string (out)
    (loop with start = 0
          for at = (search old text :start2 start)
          do (write-string text out :start start :end (or at (length text)))
          while at
          do (write-string new out) (setf start (+ at (length old))))))

(defun write-text-report (out framework output)
  "Write the verdict of a framework whose results are text only: its last
line and the end of what it printed."
  (let ((line (last-line output)))
    (format out "~A (counts from its own text):~@[ its last line: ~S~]~%~A~%"
            framework line
            (if (plusp (length output))
                (bounded-tail (string-right-trim '(#\Newline #\Space) output) *test-output-limit*)
                "It printed nothing."))))

(defun write-test-run (out run package)
  (cond ((test-run-results run) (write-fiveam-report out (test-run-results run) package))
        ((test-run-summary run) (write-rt-report out run package))
        (t (write-text-report out (test-run-framework run) (test-run-output run)))))

(defun write-compilation (out compilation show-log)
  "Say how compiling the test system went: its warnings counted, its log
when SHOW-LOG or when it failed."
  (let ((failure (compilation-failure compilation)))
    (when (compilation-missing compilation)
      (format out "The tests need ~{~A~^, ~}, which ASDF cannot find: not installed (or not in its source registry).~%"
              (compilation-missing compilation)))
    (if failure
        (format out "Compiling and loading the test system failed: ~A: ~A~%"
                (condition-type-label failure) (first-line (condition-message failure) 400))
        (format out "Compiling and loading the test system: ~D warning~:P, ~D style warning~:P~:[ (compile_log shows the compiler's log)~;~].~%"
                (compilation-warnings compilation) (compilation-style-warnings compilation) show-log))
    (when (or show-log failure)
      (let ((log (string-trim '(#\Newline #\Space) (compilation-log compilation))))
        (format out "The compiler's log~:[ (empty)~;~:*:~%~A~]~%"
                (and (plusp (length log)) (bounded-tail log *test-output-limit*)))))))

(defun run-system-tests (system package show-log out)
  "Run asdf:test-system of SYSTEM and write the verdict of each framework
run it made, the compilation of its test system apart."
  (let* ((object (find-system-or-fail system))
         (name (asdf-call "COMPONENT-NAME" object))
         (compilation (compile-test-system object))
         (log (make-string-output-stream))
         (runs '())
         (failure nil))
    (unless (or (compilation-failure compilation) (compilation-missing compilation))
      (let ((dribble (framework-symbol "FIVEAM" "*TEST-DRIBBLE*")))
        (progv (and dribble (list dribble)) (and dribble (list log))
          (let ((*standard-output* log) (*error-output* log))
            (multiple-value-setq (runs failure)
              (call-observing-test-runs (lambda () (asdf-call "TEST-SYSTEM" name))))))))
    (let ((output (get-output-stream-string log))
          (frameworks (remove-duplicates (mapcar #'test-run-framework runs) :test #'string= :from-end t)))
      (cond ((or (compilation-failure compilation) (compilation-missing compilation))
             (format out "Did not run asdf:test-system ~A.~%" name))
            (frameworks
             (format out "Ran asdf:test-system ~A: the tests ran with ~{~A~^ and ~}~[~;~:;, ~:*~D runs~].~%"
                     name frameworks (length runs)))
            (t (format out "Ran asdf:test-system ~A: the tests ran with its own runner (no test framework's entry point was called).~%"
                       name)))
      (write-compilation out compilation show-log)
      (when failure
        (format out "The test run stopped with ~A: ~A~%"
                (condition-type-label failure) (first-line (condition-message failure) 400))
        (let ((missing (missing-system-names failure)))
          (when missing
            (format out "The tests need ~{~A~^, ~}, which ASDF cannot find: not installed (or not in its source registry).~%"
                    missing))))
      (loop for run in runs
            for i from 1
            do (when (> (length runs) 1) (format out "~%Run ~D of ~D:~%" i (length runs)))
               (write-test-run out run package))
      (when (and (null runs) (not (compilation-failure compilation)) (null (compilation-missing compilation)))
        (write-text-report out "Its own runner" output)))))

(define-tool "run_tests" (&key system suite test package compile-log)
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
           (system (run-system-tests system package compile-log out))
           (t (fail "Give a system, a suite or a test to run."))))))))
