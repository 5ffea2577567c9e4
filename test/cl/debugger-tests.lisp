;;;; debugger-tests.lisp --- tests of the debugger, thread, trace,
;;;; profile and disassembly helpers (the tools a Lisp programmer uses at a failure).
;;;
;;; Loaded after tests.lisp, whose helpers (TOOL, HAS, ...) it uses.
;;; The debugger operations run where the user's debugger runs them: in
;;; the thread that hit the error, inside the backend's debugging
;;; environment (CALL-WITH-DEBUGGING-ENVIRONMENT, as SLYNK/SWANK's
;;; debugger loop has it).

(in-package #:sly-agent-q-tests)

(defclass hostile () ()
  (:documentation "An object whose printer never returns."))

(defmethod print-object ((object hostile) stream)
  (loop (sleep 0.05)))

(defvar *in-debugger* nil)

(defun debugger-snapshot (function &optional (signaller (lambda () (debuggee (make-instance 'hostile) 41))))
  "Call FUNCTION (of no arguments) inside the debugging environment of
the error that SIGNALLER (of no arguments; default: DEBUGGEE's)
signals, and return its value."
  (block snapshot
    (handler-bind ((error (lambda (c)
                            (declare (ignore c))
                            (return-from snapshot
                              (funcall (find-symbol "CALL-WITH-DEBUGGING-ENVIRONMENT"
                                                    (if (find-package "SLYNK-BACKEND") "SLYNK-BACKEND"
                                                        (if (find-package "SWANK/BACKEND") "SWANK/BACKEND" "SWANK-BACKEND")))
                                       function)))))
      (funcall signaller))))

(defun debuggee (monster number)
  (declare (optimize (debug 3)))
  (let ((answer (1+ number)))
    (error "debuggee stops with ~A and ~A" answer (type-of monster))))

(defun op (name &rest keys-and-values)
  (sly-agent-q:debugger-call name (loop for (key value) on keys-and-values by #'cddr
                                        collect (cons key value))
                             :timeout 10))

(defun frame-of (backtrace-text function-name)
  "The number of the first frame of BACKTRACE-TEXT calling FUNCTION-NAME."
  (with-input-from-string (in backtrace-text)
    (loop for line = (read-line in nil)
          while line
          ;; "N: (NAME ARGS...)", or "N: NAME" where frames have no arguments.
          for pos = (or (search (concatenate 'string "(" function-name) line)
                        (let ((start (- (length (string-right-trim " " line)) (length function-name))))
                          (and (> start 0)
                               (string= function-name line :start2 start
                                                           :end2 (+ start (length function-name)))
                               (member (char line (1- start)) '(#\Space #\:))
                               start)))
          when pos
            return (parse-integer line :junk-allowed t))))

(deftest debugger-backtrace-locals-and-eval-in-frame
  (:needs :bounded-frame-printing)
  (let ((results
          (debugger-snapshot
           (lambda ()
             (let* ((bt (op "backtrace" "count" 30))
                    (frame (frame-of (text bt) "DEBUGGEE"))
                    (start (get-internal-real-time))
                    (locals (op "frame_locals" "frame" frame))
                    (seconds (/ (- (get-internal-real-time) start) internal-time-units-per-second))
                    (eval (op "eval_in_frame" "frame" frame "form" "(* number 2)"))
                    ;; ANSWER is the frame's package's own symbol (NUMBER is CL's):
                    ;; the form is read in the package of the frame's function.
                    (own (op "eval_in_frame" "frame" frame "form" "(* answer 2)"))
                    (bad (op "eval_in_frame" "frame" frame "form" "(error \"inner ~A\" number)"))
                    (missing (op "frame_locals" "frame" 9999)))
               (list bt frame locals seconds eval own bad missing))))))
    (destructuring-bind (bt frame locals seconds eval own bad missing) results
      (is (ok-p bt))
      (is (integerp frame))
      (is (has bt "DEBUGGEE"))
      (is (ok-p locals))
      ;; The hostile local is printed bounded, the others whole.
      (is (has locals "NUMBER = 41" "not printable within"))
      (is (< seconds 8))
      (is (has eval "82"))
      (is (has own "84"))
      (is (error-p bad))
      (is (has bad "inner 41"))
      (is (error-p missing))
      (is (has missing "no frame 9999")))))

(deftest debugger-eval-in-frame-reads-within-its-limit
  ;; (CLISP: its SIGINT does not stop code inside the backend's debugging environment.)
  (:needs :timeouts :bounded-frame-printing)
  ;; The form is read with the image's readtable: a reader macro that never
  ;; returns was read outside any time limit (the debugged thread spun
  ;; forever; on CLISP, the image).
  (let* ((*readtable* (copy-readtable nil))
         (start (get-internal-real-time))
         (r (progn
              (set-macro-character #\! (lambda (stream char) (declare (ignore stream char)) (loop)))
              (debugger-snapshot
               (lambda ()
                 (sly-agent-q:debugger-call "eval_in_frame" '(("frame" . 0) ("form" . "(list !x)"))
                                            :timeout 1))))))
    (is (error-p r) "~A" (text r))
    (is (has r "timed out" "reader macro") "~A" (text r))
    (is (< (- (get-internal-real-time) start) (* 10 internal-time-units-per-second)))))

(deftest image-healthy-after-hostile-local
  (:needs :bounded-frame-printing)
  (is (has (tool "eval_form" "form" "(+ 1 2)") "3")))

(deftest threads-listed-and-interrupt-checks
  (if (saq-portable:threads-p)
      (let ((list (tool "list_threads")))
        (is (ok-p list))
        (is (has list "this tool's own thread"))
        (is (has (tool "interrupt_thread" "thread" 987654) "No thread has id 987654")))
      ;; Without threads both tools say so, rather than list nothing.
      (dolist (r (list (tool "list_threads") (tool "interrupt_thread" "thread" 1)))
        (is (error-p r))
        (is (has r "runs without threads" "no other to list or interrupt")))))

(deftest trace-eval-traces-then-untraces
  (let ((result (tool "trace_eval" "functions" '("my-app::split-on-commas") "package" "MY-APP"
                      "form" "(parse-input \"1, 2\")")))
    (is (ok-p result))
    (is (has result "SPLIT-ON-COMMAS" "(1 2)" "untraced now")))
  (is (null (eval '(trace))))
  (let ((failed (tool "trace_eval" "functions" '("my-app::split-on-commas") "package" "MY-APP"
                      "form" "(parse-input \"\")")))
    (is (error-p failed))
    (is (has failed "SPLIT-ON-COMMAS")))
  (is (null (eval '(trace))))
  (is (has (tool "trace_eval" "functions" '("no-such-fn") "package" "MY-APP" "form" "1")
           "NO-SUCH-FN")))

(deftest profile-eval
  (:needs :statistical-profiler)
  (let ((result (tool "profile_eval" "package" "MY-APP"
                      "form" "(let ((s 0)) (dotimes (i 3000000 s) (incf s (mod i 7))))")))
    (is (ok-p result))
    (is (has result "Statistical profile"))))

(defun parse-input-definition ()
  (fdefinition (find-symbol "PARSE-INPUT" "MY-APP")))

(defun profiler-wrapped ()
  "The functions the backend's profiler or its metering has wrapped now."
  (append (let* ((package (find-package (format nil "~A-MONITOR" (string-upcase *backend*))))
                 (monitor (and package (find-symbol "*MONITORED-FUNCTIONS*" package))))
            ;; But the metering's own stub, left wrapped on ABCL.
            (and monitor (boundp monitor)
                 (remove package (symbol-value monitor) :key #'symbol-package)))
          (ignore-errors (saq-portable::bcall "PROFILED-FUNCTIONS"))))

(deftest profile-eval-deterministic-of-named-packages
  (:needs :deterministic-profiler)
  ;; Wherever functions can be wrapped: those of MY-APP, for the evaluation,
  ;; counted, and unwrapped after.
  (let* ((before (parse-input-definition))
         (result (tool "profile_eval" "packages" '("my-app")
                       "form" "(dotimes (i 300 (my-app::parse-input \"1, 2, 3\")) (my-app::parse-input \"4, 5\"))")))
    (is (ok-p result))
    (is (has result "(1 2 3)" "Deterministic profile" "MY-APP" "PARSE-INPUT" "301"))
    (is (eq before (parse-input-definition)))
    (is (null (profiler-wrapped)))))

(defun call-with-metering-overhead-zero (thunk)
  "Call THUNK with the metering's estimated overhead per call at 0, as it
is in an image where the estimate measured no time: a form quicker than
the clock then measures exactly 0."
  (let* ((package (find-package (format nil "~A-MONITOR" (string-upcase *backend*))))
         (overhead (and package (find-symbol "*MONITOR-TIME-OVERHEAD*" package))))
    (if (and overhead (boundp overhead))
        (progv (list overhead) (list 0) (funcall thunk))
        (funcall thunk))))

(deftest profile-eval-counts-calls-too-quick-to-time
  (:needs :deterministic-profiler)
  ;; Three calls take less than the clock's resolution (ECL's run time):
  ;; the profile still says which functions were called, and how often.
  ;; The first profile loads the metering where it is used.
  (tool "profile_eval" "packages" '("MY-APP") "package" "MY-APP" "form" "(parse-input \"0\")")
  (let ((result (call-with-metering-overhead-zero
                 (lambda ()
                   (tool "profile_eval" "packages" '("MY-APP") "package" "MY-APP"
                         "form" "(parse-input \"1\") (parse-input \"2\") (parse-input \"3\")")))))
    (is (ok-p result))
    (is (has result "Deterministic profile" "PARSE-INPUT" "SPLIT-ON-COMMAS"))
    (is (not (has result "Not enough execution time")))
    (is (null (profiler-wrapped)))))

(deftest profile-eval-of-the-forms-package
  (:needs :deterministic-profiler)
  ;; Without packages: SBCL samples everything; elsewhere the form's
  ;; package is the one profiled.
  (let ((result (tool "profile_eval" "package" "MY-APP"
                      "form" "(dotimes (i 50 (parse-input \"7, 8\")) (parse-input \"1\"))")))
    (is (ok-p result))
    (is (has result "(7 8)"))
    (if (saq-portable:statistical-profiler-p)
        (is (has result "Statistical profile"))
        (is (has result "Deterministic profile" "functions of MY-APP" "PARSE-INPUT"))))
  (is (null (profiler-wrapped))))

(deftest profile-eval-unwraps-after-an-error
  (:needs :deterministic-profiler)
  (let* ((before (parse-input-definition))
         (result (tool "profile_eval" "packages" '("MY-APP") "package" "MY-APP"
                       "form" "(parse-input \"1, 2\") (error \"profiled boom\")")))
    (is (error-p result))
    (is (has result "profiled boom"))
    (is (eq before (parse-input-definition)))
    (is (null (profiler-wrapped)))
    ;; The image profiles again afterwards.
    (is (has (tool "profile_eval" "packages" '("MY-APP") "package" "MY-APP"
                   "form" "(parse-input \"3\")")
             "Deterministic profile" "PARSE-INPUT"))))

(deftest profile-eval-unwraps-after-a-timeout
  (:needs :timeouts :deterministic-profiler)
  (let* ((before (parse-input-definition))
         (result (tool* "profile_eval" '(("packages" "MY-APP") ("package" . "MY-APP")
                                         ("form" . "(loop (parse-input \"1, 2\"))"))
                        :timeout 1)))
    (is (error-p result))
    (is (has result "timed out"))
    (is (eq before (parse-input-definition)))
    (is (null (profiler-wrapped))))
  (is (string= "Value: 3" (text (tool "eval_form" "form" "(+ 1 2)")))))

(deftest profile-eval-refuses-the-lisps-own-packages
  (dolist (package '("COMMON-LISP" "SLY-AGENT-Q"))
    (let ((result (tool "profile_eval" "packages" (list package) "form" "(car '(1))")))
      (is (error-p result))
      (is (has result "does not wrap the functions of" package))))
  (is (has (tool "profile_eval" "packages" '("no-such-package-here") "form" "1")
           "no-such-package-here" "not found"))
  (unless (saq-portable:deterministic-profiler-p)
    (let ((result (tool "profile_eval" "packages" '("MY-APP") "form" "(my-app::parse-input \"1\")")))
      (is (error-p result))
      (is (has result "Profiling is not available" "fails in this Lisp"))))
  (is (null (profiler-wrapped))))

(deftest disassemble-function-answers
  ;; SBCL disassembles; ECL says why it cannot (natively compiled code):
  ;; either way the answer names the function, never an empty text.
  (let ((result (tool "disassemble_function" "function" "my-app::split-on-commas")))
    (is (ok-p result))
    (is (has result "SPLIT-ON-COMMAS")))
  ;; WHEN is a macro in SBCL, a special operator in ECL.
  (is (has (tool "disassemble_function" "function" "cl:when") "WHEN is a" ", not a function")))

(defun inspect-id (result &optional (value 1))
  "The inspect id RESULT gives for its VALUEth value."
  (let* ((text (text result))
         (marker (format nil "value ~D is id " value))
         (start (search marker text)))
    (and start (parse-integer text :start (+ start (length marker)) :junk-allowed t))))

(deftest inspect-values-from-eval-and-frame-locals
  (:needs :bounded-frame-printing)
  ;; Immediate values get no id: the result reads as before.
  (is (not (has (tool "eval_form" "form" "(+ 1 2)") "inspect_value")))
  (let* ((result (tool "eval_form" "package" "MY-APP"
                       "form" "(values (make-instance 'my-class :name \"n\" :items '(1 2)) (list 1 2 3) 4)"))
         (object (inspect-id result 1))
         (list (inspect-id result 2)))
    (is (integerp object))
    (is (integerp list))
    (is (null (inspect-id result 3)))
    (let ((inspection (tool "inspect_value" "id" object)))
      (is (has inspection "MY-CLASS" "NAME" "\"n\"" "ITEMS")))
    (is (has (tool "inspect_value" "id" list "offset" 1 "limit" 1)
             "a list of 3 elements" "[1] 1: 2" "More: offset 2"))
    ;; A part becomes a value of its own.
    (is (has (tool "inspect_value" "id" object "part" 1) "a list of 2 elements"))
    (is (has (tool "inspect_value" "id" 999999) "No value has inspect id 999999")))
  ;; A hash table whose value never prints: bounded.
  (let* ((result (tool "eval_form"
                       "form" "(let ((h (make-hash-table))) (setf (gethash :k h) (make-instance 'sly-agent-q-tests::hostile)) h)"))
         (id (inspect-id result)))
    (is (integerp id))
    (let ((start (get-internal-real-time))
          (inspection (tool "inspect_value" "id" id)))
      (is (has inspection "1 entry" ":K" "not printable within"))
      (is (< (/ (- (get-internal-real-time) start) internal-time-units-per-second) 8))))
  ;; A frame's local, from the debugger.
  (let ((result (debugger-snapshot
                 (lambda ()
                   (let* ((frame (frame-of (text (op "backtrace" "count" 30)) "DEBUGGEE"))
                          (locals (text (op "frame_locals" "frame" frame)))
                          (monster (search "MONSTER = " locals))
                          (local (and monster (parse-integer locals :start (max 0 (- monster 3))
                                                                    :junk-allowed t))))
                     (op "inspect_local" "frame" frame "local" (or local 0)))))))
    (is (ok-p result))
    (is (has result "HOSTILE"))))

(deftest interrupt-thread-breaks-into-the-debugger
  (:needs :threads :debugger-hook)
  ;; A thread whose debugger hook records what entered it (the user's
  ;; debugger would open there under SLY or SLIME).
  (let* ((entered nil)
         (ready nil)
         (thread (make-thread
                  (lambda ()
                    (saq-portable:with-thread-debugger-hook
                        ((lambda (condition hook)
                           (declare (ignore hook))
                           (setf entered (princ-to-string condition))
                           (saq-portable:abort-thread)))
                      (setf ready t)
                      (loop (sleep 0.05))))
                  :name "saq-interrupt-me"))
         (waited (loop repeat 100 until ready do (sleep 0.02)))
         (id (loop for line in (sly-agent-q::split-lines (text (tool "list_threads")))
                   when (search "saq-interrupt-me" line)
                     return (parse-integer line :junk-allowed t))))
    (declare (ignore waited))
    (unwind-protect
         (progn
           (is (integerp id))
           (let ((result (tool "interrupt_thread" "thread" id)))
             (is (ok-p result))
             (is (has result "saq-interrupt-me")))
           (loop repeat 100 until entered do (sleep 0.05))
           (is (and entered (search "Interrupted by sly-agent-q" entered)))
           ;; The hook ends the thread; wait for that rather than kill it.
           (loop repeat 200 while (thread-alive-p thread) do (sleep 0.05))
           (is (not (thread-alive-p thread))))
      ;; Killed only if the interrupt never reached it, so never as it ends
      ;; itself: on ECL 21 killing a thread during its own exit crashes the
      ;; image (segmentation violations, the next threads' calls lost).
      (when (and (not entered) (thread-alive-p thread))
        (terminate-thread thread)))))

(deftest trace-kept-until-untraced
  (is (has (tool "untrace_functions") "No function is left traced"))
  (let ((result (tool "trace_eval" "functions" '("my-app::split-on-commas") "package" "MY-APP"
                      "form" "(parse-input \"1\")" "keep" t)))
    (is (has result "still traced" "SPLIT-ON-COMMAS")))
  (is (member (find-symbol "SPLIT-ON-COMMAS" "MY-APP") (eval '(trace))))
  (is (has (tool "untrace_functions") "Untraced" "SPLIT-ON-COMMAS"))
  (is (null (eval '(trace)))))

(defun hostile-recursion (monster n)
  (declare (optimize (debug 3)) (notinline hostile-recursion))
  (if (zerop n)
      (error "deep enough")
      (list (hostile-recursion monster (1- n)) monster)))

(defun hostile-backtrace ()
  "The backtrace tool's result in a debugger whose frames hold hostile
objects, with short print limits, and the seconds it took."
  (let* ((start (get-internal-real-time))
         (result (debugger-snapshot (lambda ()
                                      (let ((sly-agent-q::*print-seconds* 0.3)
                                            (sly-agent-q::*frames-seconds* 1))
                                        (op "backtrace" "count" 10)))
                                    (lambda () (hostile-recursion (make-instance 'hostile) 8)))))
    (values result (/ (- (get-internal-real-time) start) internal-time-units-per-second))))

(deftest backtrace-of-hostile-frames-is-bounded-in-all
  (:needs :bounded-frame-printing)
  (multiple-value-bind (result seconds) (hostile-backtrace)
    (is (ok-p result))
    (is (has result "HOSTILE-RECURSION"))
    (is (< seconds 5))))

(deftest backtrace-of-hostile-frames-names-what-was-not-printed
  ;; Where frames carry no arguments the hostile objects are never printed.
  (:needs :bounded-frame-printing :frame-arguments)
  (let ((result (hostile-backtrace)))
    (is (has result "HOSTILE-RECURSION ...) [arguments not printable in time"
             "HOSTILE-RECURSION ...) [not printed: the frames took 1 s already]"))))

;;; inspect_value pages big values at the cost of the page: only the
;;; parts shown are visited past the offset and printed.

(defvar *keys-printed* 0 "How many COUNTED-KEYs were printed.")

(defclass counted-key ()
  ((n :initarg :n :reader counted-key-n))
  (:documentation "A hash key that counts its printings."))

(defmethod print-object ((key counted-key) stream)
  (incf *keys-printed*)
  (format stream "#<key ~D>" (counted-key-n key)))

(defun inspect-page (object &rest arguments)
  "inspect_value of OBJECT, ARGUMENTS (\"offset\" 5 ...) added."
  (apply #'tool "inspect_value" "id" (sly-agent-q::inspectable-id object) arguments))

(deftest inspect-pages-cost-the-page
  (let ((table (make-hash-table))
        (keys '()))
    (dotimes (i 10000) (setf (gethash (make-instance 'counted-key :n i) table) i))
    (maphash (lambda (key value) (declare (ignore value)) (push (counted-key-n key) keys)) table)
    (setf keys (nreverse keys))
    (flet ((label (i) (format nil "[~D] #<key ~D>: " i (nth i keys))))
      ;; The table's own printed form (its Value line) shows its first entries in some Lisps
      ;; (CLISP), as many as *PRINT-LENGTH* allows.
      (let ((value-line (let ((*keys-printed* 0))
                          (sly-agent-q::print-bounded table :limit 300)
                          *keys-printed*)))
        (setf *keys-printed* 0)
        (let ((r (inspect-page table "offset" 5000 "limit" 3)))
          (is (has r "a hash table, test " "10000 entries" "Parts 5000 to 5003 of 10000"
                   (label 5000) (label 5002) "More: offset 5003"))
          (is (not (has r (label 5003))))
          ;; Only the page's keys were printed, not the 9,997 others (each at most twice:
          ;; *PRINT-CIRCLE*'s first pass prints into nothing to find shared structure).
          (is (<= 3 (- *keys-printed* value-line) 6) "~D keys printed for a page of 3 (~D for the Value line)"
              *keys-printed* value-line)))
      (is (has (inspect-page table "limit" 2) "Parts 0 to 2 of 10000" (label 0) (label 1)))
      (let ((r (inspect-page table "offset" 9998)))
        (is (has r "Parts 9998 to 10000 of 10000" (label 9999)))
        (is (not (has r "More:"))))
      ;; The part numbered N is the N-th shown.
      (is (has (tool "inspect_value" "id" (sly-agent-q::inspectable-id table) "part" 7777)
               (format nil "Value: ~D" (gethash (find 7777 (loop for k being the hash-keys of table collect k)
                                                     :key (lambda (key) (position (counted-key-n key) keys)))
                                                table))))))
  (let ((list (loop for i below 1000 collect i))
        (vector (let ((v (make-array 1000))) (dotimes (i 1000 v) (setf (aref v i) (* 2 i))))))
    ;; Small pages: each part is printed under a time limit, which costs a watcher process a
    ;; part in CLISP.
    (is (has (inspect-page list "limit" 2) "a list of 1000 elements" "Parts 0 to 2 of 1000" "[0] 0: 0" "[1] 1: 1"))
    (is (has (inspect-page list "offset" 500 "limit" 2) "Parts 500 to 502" "[501] 501: 501" "More: offset 502"))
    (let ((r (inspect-page list "offset" 995)))
      (is (has r "Parts 995 to 1000 of 1000" "[999] 999: 999"))
      (is (not (has r "More:"))))
    (is (has (inspect-page list "offset" 1000) "No parts from offset 1000: the value has 1000 parts (0 to 999)"))
    (is (has (inspect-page vector "offset" 998 "limit" 5) "Parts 998 to 1000 of 1000" "[999] 999: 1998"))
    (is (has (inspect-page vector "offset" 5000) "No parts from offset 5000"))
    ;; A huge limit is capped, and says so (the cap made 4 here, to print few parts).
    (let* ((cap sly-agent-q::*inspect-page-limit*)
           (r (unwind-protect
                   (progn (setf sly-agent-q::*inspect-page-limit* 4)
                          (inspect-page list "limit" 100000))
                (setf sly-agent-q::*inspect-page-limit* cap))))
      (is (<= 20 cap 200))
      (is (has r "A page shows at most 4 parts: 4 shown of the 100000 asked for."
               "Parts 0 to 4 of 1000" "[3] 3: 3" "More: offset 4"))
      (is (not (has r "[4] "))))
    ;; Paging through one value (each page registers it) keeps its id and keeps the others:
    ;; the list's id outlives the vector registered 60 times (the image keeps 50 values).
    (let ((list-id (sly-agent-q::inspectable-id list))
          (vector-id (sly-agent-q::inspectable-id vector)))
      (dotimes (i 60)
        (sly-agent-q::inspectable-id vector))
      (is (has (tool "inspect_value" "id" vector-id) (format nil "id ~D: an array" vector-id)))
      (is (has (tool "inspect_value" "id" list-id) "a list of 1000 elements")))
    ;; Dotted and circular lists: car and cdr.
    (is (has (inspect-page (list* 1 2 3)) "a dotted list" "[1] cdr: (2 . 3)"))
    (is (has (inspect-page (let ((l (list 1 2))) (setf (cddr l) l) l)) "a circular list" "[0] car: 1")))
  ;; An instance: its slots, paged.
  (let ((r (inspect-page (make-instance 'counted-key :n 4) "offset" 0 "limit" 5)))
    (is (has r "an instance of" "with 1 slot" "Parts 0 to 1 of 1" ": 4"))))
