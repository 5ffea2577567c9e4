;;;; tests.lisp --- tests of lisp-cl/ (sly-agent-q's image helpers).
;;;
;;; Every tool of server/tools/catalog/image.ts, called the way the
;;; Emacs bridge calls it: (sly-agent-q:call-tool NAME ALIST ...), on
;;; the MY-APP fixture.  Loaded by run-tests.lisp, which has already
;;; loaded a backend (SWANK or SLYNK), lisp-cl/ and the fixture.

(defpackage #:sly-agent-q-tests
  (:use #:common-lisp #:fiveam)
  (:import-from #:sly-agent-q-test-portable #:make-thread #:join-thread #:thread-alive-p
                #:terminate-thread #:current-thread #:all-threads #:thread-name)
  (:export #:run-tests))

(in-package #:sly-agent-q-tests)

(def-suite sly-agent-q)
(in-suite sly-agent-q)

(defvar *test-order* '()
  "Test names in definition order (FiveAM keeps them in a hash table).")

(defvar *needs* (make-hash-table)
  "Test name -> the capabilities of the Lisp it needs (see REQUIREMENTS).")

(defparameter *requirements*
  '((:threads saq-portable:threads-p
     "the backend cannot spawn threads in this Lisp")
    (:timeouts saq-portable:timeouts-p
     "this Lisp has neither threads nor a signal to stop an evaluation")
    (:xref saq-portable:xref-p
     "the backend keeps no cross-reference data in this Lisp (xref tools refuse, tested in xref-refuses-clearly)")
    (:agent-thread-trap saq-portable:agent-threads-trapped-p
     "threads that agent code starts cannot be wrapped in this Lisp, so their errors reach the Lisp's debugger")
    (:stack-overflow-condition saq-portable:stack-overflow-condition-p
     "a stack overflow is no condition in this Lisp: it resets the Lisp to its top level")
    (:bounded-frame-printing saq-portable:bounded-frame-printing-p
     "NOT DONE on this Lisp: printing a hostile frame inside the debugger is not bounded yet (the test hangs)")
    (:deterministic-profiler saq-portable:deterministic-profiler-p
     "profile_eval cannot wrap functions in this Lisp (it refuses clearly, tested in profile-eval-refuses-the-lisps-own-packages)")
    (:statistical-profiler saq-portable:statistical-profiler-p
     "only SBCL has a statistical profiler (SB-SPROF); elsewhere profile_eval's profile is deterministic, tested in profile-eval-deterministic-of-named-packages")
    (:fasl-names-its-source saq-portable:fasl-names-its-source-p
     "this Lisp's fasls do not name their source: the source of one compiled away from it outside ASDF is unknown (ASDF's are mapped back, tested in definitions-of-asdf-loaded-code)")
    (:located-read-errors saq-portable:located-read-errors-p
     "this Lisp's compiler does not say where in the file a read error is (the error and that nothing was loaded are tested in compile-error-loads-nothing)")
    (:undefined-function-warnings saq-portable:undefined-function-warnings-p
     "this Lisp's compiler signals no condition for a call to an undefined function, so compile_form cannot report it")
    (:method-source-locations saq-portable:method-source-locations-p
     "this Lisp records no source location for methods (nor for a generic function or a class's accessors): the tools say the source is unknown")
    (:frame-arguments saq-portable:frame-arguments-p
     "the backend shows frames without their arguments in this Lisp (function names only)")
    (:watcher-process saq-portable:watcher-process-p
     "this Lisp keeps an evaluation's time limit with a thread, not a watcher process")
    (:debugger-hook saq-portable:debugger-hook-portable-p
     "this Lisp has no debugger hook that BREAK honours to stand in for SLIME's")
    (:quick-compiled-code saq-portable:quick-compiled-code-p
     "cl-ppcre's own test run takes minutes in this Lisp (CLISP's bytecode; ECL compiles cl-ppcre through gcc first): its runner is tested on SBCL")
    (:iterate-tests saq-portable:iterate-tests-p
     "NOT DONE on this Lisp: iterate's test-op fails in ECL 21's own ASDF, and run by run_tests the image crashed (segmentation violation)")
    (:definition-dates saq-portable:definition-dates-p
     "this Lisp records no file dates with its definitions: image_changes says whether a file changed after loading is not known here (tested in image-changes-lists-what-no-file-holds)")
    (:buffer-compiled-text saq-portable:buffer-compiled-text-p
     "this Lisp's backend records no text for a C-c C-c with its file (the definition reads as loaded from the file), so image_changes cannot compare it with the file's forms")
    (:posix-file-stat saq-portable:posix-file-stat-p
     "only CLISP has POSIX:FILE-STAT, whose garbage-collection defect the helpers work around"))
  "Capability, the function that says whether this Lisp has it, and
the reason a test needing it is skipped where it has not.")

(defmacro deftest (name &body body)
  "A test NAME.  When BODY starts with (:NEEDS CAPABILITY...), the test is
skipped, with the reason, on a Lisp without one of them."
  (let ((needs (and (consp (first body)) (eq :needs (first (first body)))
                    (rest (pop body)))))
    `(progn
       (setf *test-order* (append (remove ',name *test-order*) (list ',name)))
       (setf (gethash ',name *needs*) ',needs)
       (test ,name ,@body))))

(defun skip-reason (name)
  "Why test NAME cannot run in this Lisp, or NIL."
  (loop for need in (gethash name *needs*)
        for (nil predicate reason) = (or (assoc need *requirements*)
                                         (error "Unknown capability ~S" need))
        unless (funcall predicate) return reason))

(defvar *root* nil "The project's root directory.")
(defvar *backend* nil "\"swank\" or \"slynk\".")


;;;; Calling tools

(defun tool* (name args &key package timeout)
  "CALL-TOOL, checking that what comes back is a well-formed result."
  (let ((result (sly-agent-q:call-tool name args :package package :timeout timeout)))
    (unless (or (ok-p result) (error-p result))
      (error "call-tool returned a malformed result: ~S" result))
    result))

(defun tool (name &rest keys-and-values)
  "CALL-TOOL NAME with the arguments given as alternating names and values."
  (tool* name (loop for (key value) on keys-and-values by #'cddr
                    collect (cons key value))))

(defun ok-p (result)
  (and (consp result) (= (length result) 4)
       (eq (getf result :ok) t) (stringp (getf result :content))))

(defun error-p (result)
  (and (consp result) (= (length result) 4)
       (member :ok result) (null (getf result :ok)) (stringp (getf result :error))))

(defun text (result)
  (or (getf result :content) (getf result :error) ""))

(defun has (result &rest strings)
  "True if the text of RESULT contains every one of STRINGS.  With
SAQ_SHOW set, a text that lacks one is printed (to word a check for
another Lisp)."
  (or (every (lambda (string) (search string (text result))) strings)
      (progn (when (saq-portable:getenv "SAQ_SHOW")
               (format t "~&--- lacks ~S:~%~A~%---~%"
                       (find-if-not (lambda (string) (search string (text result))) strings)
                       (text result)))
             nil)))

(defun occurrences (string result)
  (loop with text = (text result)
        for start = (search string text) then (search string text :start2 (1+ start))
        while start count t))

(defun cl-user-symbol (name)
  (find-symbol name "COMMON-LISP-USER"))

(defun reload-fixture ()
  "Restore MY-APP to its original definitions."
  (let ((*standard-output* (make-broadcast-stream))
        (*error-output* (make-broadcast-stream)))
    (handler-bind ((warning #'muffle-warning))
      (load (merge-pathnames "test/fixtures/my-app/load.lisp" *root*)))))


;;;; Loading and the tool table

(deftest loaded-with-the-expected-backend
  (is (string-equal *backend* (sly-agent-q:backend-name)))
  ;; What loading defined, against the define-tool forms of the sources:
  ;; a file missing from load.lisp's list leaves its tools out.
  (is (equal (sly-agent-q:tool-names) (declared-tool-names))))

(defun declared-tool-names ()
  "The names of the (define-tool \"NAME\" ...) forms of lisp-cl/*.lisp, sorted."
  (let ((names '())
        (opening "(define-tool \""))
    (dolist (file (directory (merge-pathnames "lisp-cl/*.lisp" *root*)))
      (with-open-file (in file :external-format (sly-agent-q::utf-8-format))
        (loop for line = (read-line in nil)
              while line
              when (and (> (length line) (length opening))
                        (string= opening line :end2 (length opening)))
                do (push (subseq line (length opening)
                                 (position #\" line :start (length opening)))
                         names))))
    (sort names #'string<)))

(deftest list-packages
  (let ((r (tool "list_packages")))
    (is (ok-p r))
    ;; The user's packages first; the implementation's own after them.
    ;; Nicknames after CL are the Lisp's own (CLISP: LISP).
    (is (has r "MY-APP  -  14" "  COMMON-LISP  CL"))
    (is (< (search "MY-APP" (text r)) (search "  COMMON-LISP  CL" (text r)))))
  (let ((r (tool "list_packages" "pattern" "cl-us"))
        (matching (count-if (lambda (p)
                              (some (lambda (name) (search "CL-US" name))
                                    (cons (package-name p) (package-nicknames p))))
                            (list-all-packages))))
    ;; A nickname matches too: COMMON-LISP-USER is found by CL-USER (and
    ;; CLISP has CS-COMMON-LISP-USER, nicknamed CS-CL-USER).
    (is (has r (format nil "~D package~:P" matching) "COMMON-LISP-USER  CL-USER"))
    (is (not (has r "MY-APP"))))
  (let ((r (tool "list_packages" "pattern" "no-such-package-anywhere")))
    (is (ok-p r))
    (is (has r "No package's name or nickname contains"))))

(deftest list-packages-hostile-names
  ;; A package whose name holds a newline and a fake row, and one with a thousand long nicknames:
  ;; each package stays one line, and the listing stays small.
  (let ((evil (make-package (format nil "SAQRT-EVIL~%  FAKE-ROW  -  999~%~C[31m" (code-char 27))
                            :use '()))
        (many (make-package "SAQRT-MANY" :use '()
                                       :nicknames (loop for i below 1000
                                                        collect (format nil "SAQ-NICK-~4,'0D-~A" i
                                                                        (make-string 200 :initial-element #\X))))))
    (unwind-protect
         (let* ((r (tool "list_packages" "pattern" "saqrt-"))
                (text (text r)))
           (is (ok-p r))
           (is (has r "2 packages"))
           ;; No line the package's name made: the newline and the escape are shown escaped.
           (is (not (search (format nil "~%  FAKE-ROW") text)))
           (is (not (find (code-char 27) text)))
           (is (= 3 (count #\Newline text)))
           (is (< (length text) 5000)))
      (delete-package evil)
      (delete-package many))))

(deftest fasls-are-cached
  (let ((directory (symbol-value (find-symbol "*CACHE-DIRECTORY*" "SLY-AGENT-Q"))))
    (is-true directory)
    (is-true (and directory (probe-file (compile-file-pathname
                                         (merge-pathnames "eval.lisp" directory)))))
    ;; Under XDG_CACHE_HOME when it is set (test/cl/run.sh sets it).
    (let ((xdg (saq-portable:getenv "XDG_CACHE_HOME")))
      (when (and xdg (plusp (length xdg)))
        (is (eql 0 (search (concatenate 'string (string-right-trim "/" xdg) "/")
                           (namestring directory))))))))

(deftest get-last-error-when-none
  (let ((sly-agent-q::*last-error* nil))
    (let ((r (tool "get_last_error")))
      (is (ok-p r))
      (is (string= "No error recorded yet." (text r))))))


;;;; describe_symbol

(deftest describe-function
  (let ((r (tool "describe_symbol" "symbol" "process-data" "package" "MY-APP")))
    (is (ok-p r))
    (is (has r "MY-APP:PROCESS-DATA" "external in MY-APP"
             "Function: (PROCESS-DATA ITEMS &KEY (SCALE *SCALE*))"
             "Multiply every number in ITEMS"
             "(DEFUN PROCESS-DATA)"))))

(deftest describe-function-source-of-a-fasl-compiled-elsewhere
  (:needs :fasl-names-its-source)
  ;; The fixture is compiled into test/.work/, away from its source.
  (is (has (tool "describe_symbol" "symbol" "process-data" "package" "MY-APP")
           "(DEFUN PROCESS-DATA)" "my-app.lisp:")))

(deftest describe-variable-class-generic-macro
  (let ((r (tool "describe_symbol" "symbol" "my-app:*scale*")))
    (is (ok-p r))
    (is (has r "Special variable: global value 1" "Factor by which PROCESS-DATA")))
  (let ((r (tool "describe_symbol" "symbol" "my-app:my-class")))
    (is (ok-p r))
    ;; Names print as they would be read in the tool's package (here CL-USER).
    (is (has r "Class (STANDARD-CLASS)" "MY-APP:MY-SUBCLASS" "A named collection of numbers"
             "MY-APP::NAME, MY-APP::ITEMS, MY-APP::CREATED")))
  (let ((r (tool "describe_symbol" "symbol" "my-app:serialize")))
    (is (ok-p r))
    (is (has r "Generic function:" "3 methods" "(INTEGER T)" "(STRING T)" "(LIST T)")))
  (let ((r (tool "describe_symbol" "symbol" "with-scale" "package" "MY-APP")))
    (is (ok-p r))
    (is (has r "Macro: (WITH-SCALE (FACTOR) &BODY BODY)" "Run BODY with *SCALE* bound")))
  (let ((r (tool "describe_symbol" "symbol" "if")))
    (is (ok-p r))
    (is (has r "Special operator: (IF "))))

(deftest describe-odd-symbols
  (is (has (tool "describe_symbol" "symbol" ":test") "Keyword"))
  ;; CLISP's PI is a special variable (its long-float precision can change).
  (is (has (tool "describe_symbol" "symbol" "pi")
           (if (constantp 'pi) "Constant: 3.14" "Special variable: global value 3.14")))
  (let ((r (tool "describe_symbol" "symbol" "my-app::string")))
    ;; Inherited from COMMON-LISP: both a function and a class.
    (is (ok-p r))
    (is (has r "Function:" "Class")))
  (let ((r (tool "describe_symbol" "symbol" "my-app::field")))
    (is (ok-p r))
    (is (has r "It names no function"))))

(deftest qualified-names
  ;; pkg::sym for an internal symbol, pkg:sym accepted too.
  (is (has (tool "describe_symbol" "symbol" "my-app::split-on-commas")
           "MY-APP::SPLIT-ON-COMMAS" "internal in MY-APP"))
  (is (ok-p (tool "describe_symbol" "symbol" "MY-APP:split-on-commas")))
  ;; The default package is the REPL's, passed as :PACKAGE.
  (is (ok-p (tool* "describe_symbol" '(("symbol" . "split-on-commas")) :package "MY-APP")))
  (is (error-p (tool* "describe_symbol" '(("symbol" . "split-on-commas")) :package "CL-USER")))
  ;; Escapes work as in the reader.
  (is (ok-p (tool "describe_symbol" "symbol" "my-app::|PROCESS-DATA|")))
  (is (error-p (tool "describe_symbol" "symbol" "my-app::|process-data|")))
  (is (ok-p (tool "describe_symbol" "symbol" "my-app::process\\-data")))
  ;; #'name is accepted for functions.
  (is (ok-p (tool "function_arglist" "function" "#'my-app:process-data"))))

(deftest readtable-case-is-honoured
  (let ((*readtable* (copy-readtable nil)))
    (setf (readtable-case *readtable*) :preserve)
    (is (error-p (tool "describe_symbol" "symbol" "my-app:process-data")))
    (is (ok-p (tool "describe_symbol" "symbol" "MY-APP:PROCESS-DATA")))
    (setf (readtable-case *readtable*) :invert)
    (is (ok-p (tool "describe_symbol" "symbol" "my-app:process-data")))))

(deftest not-found-with-closest-matches
  (let ((r (tool "describe_symbol" "symbol" "procss-data" "package" "MY-APP")))
    (is (error-p r))
    (is (has r "not found in package MY-APP" "Closest matches in MY-APP: PROCESS-DATA")))
  ;; Right name, wrong package: say where it is.
  (let ((r (tool "describe_symbol" "symbol" "process-data" "package" "CL-USER")))
    (is (error-p r))
    (is (has r "not found in package COMMON-LISP-USER" "MY-APP:PROCESS-DATA")))
  ;; Unknown package: the closest package names.
  (let ((r (tool "describe_symbol" "symbol" "my-ap:process-data")))
    (is (error-p r))
    (is (has r "Package" "MY-AP" "not found" "MY-APP")))
  (let ((r (tool "describe_symbol" "symbol" "foo" "package" "MY-APPP")))
    (is (error-p r))
    (is (has r "MY-APP"))))

(deftest lookup-never-interns
  (dolist (call '(("describe_symbol" "symbol" "saq-never-interned-1")
                  ("function_arglist" "function" "saq-never-interned-1")
                  ("who_calls" "function" "saq-never-interned-1")
                  ("who_references" "variable" "saq-never-interned-1")
                  ("class_slots" "class" "saq-never-interned-1")
                  ("method_specializers" "generic_function" "saq-never-interned-1")))
    (let ((r (apply #'tool (append call '("package" "MY-APP")))))
      (is (error-p r))
      (is (has r "SAQ-NEVER-INTERNED-1" "not found"))))
  (is (null (find-symbol "SAQ-NEVER-INTERNED-1" "MY-APP"))))


;;;; apropos_search, function_arglist, list_package_symbols

(deftest apropos
  (let ((r (tool "apropos_search" "pattern" "process-")))
    (is (ok-p r))
    (is (has r "MY-APP:PROCESS-DATA  function" "MY-APP:PROCESS-STRING  function")))
  (let ((r (tool "apropos_search" "pattern" "SERIAL" "package" "my-app")))
    (is (ok-p r))
    (is (has r "2 symbols" "MY-APP:SERIALIZE  generic function" "MY-APP:SERIALIZE-TO-STRING")))
  (is (has (tool "apropos_search" "pattern" "saq-nothing-like-this") "No symbols contain"))
  ;; A pattern matching tens of thousands of symbols stays quick and bounded.
  (let* ((start (get-internal-real-time))
         (r (tool "apropos_search" "pattern" "e")))
    (is (ok-p r))
    (is (has r "more not shown"))
    (is (< (- (get-internal-real-time) start) (* 5 internal-time-units-per-second))))
  (is (error-p (tool "apropos_search" "pattern" "x" "package" "NO-SUCH-PACKAGE")))
  (is (error-p (tool "apropos_search" "pattern" ""))))

(deftest arglists
  (is (has (tool "function_arglist" "function" "my-app:process-data")
           "is a function" "Lambda list: (MY-APP::ITEMS &KEY (MY-APP::SCALE MY-APP:*SCALE*))"))
  (is (has (tool "function_arglist" "function" "with-scale" "package" "MY-APP")
           "is a macro" "(FACTOR) &BODY BODY"))
  (is (has (tool "function_arglist" "function" "my-app:serialize")
           "is a generic function" "(MY-APP::OBJECT STREAM)"))
  ;; The Lisp's own names for a built-in's parameters (CLISP has none: #:ARG0).
  (is (has (tool "function_arglist" "function" "mapcar") "is a function" "&REST"))
  (is (has (tool "function_arglist" "function" "(setf my-app:my-class-items)" "package" "MY-APP")
           "setf function"))
  (let ((r (tool "function_arglist" "function" "*scale*" "package" "MY-APP")))
    (is (error-p r))
    (is (has r "does not name a function" "special variable"))))

(deftest package-symbols
  (let ((r (tool "list_package_symbols" "package" "my-app")))
    (is (ok-p r))
    (is (has r "Package MY-APP" "External symbols (14)" "PROCESS-DATA  function"
             "MY-CLASS  class" "*SCALE*  special variable" "WITH-SCALE  macro"
             "internal symbols not listed"))
    (is (not (has r "SPLIT-ON-COMMAS"))))
  (let ((r (tool "list_package_symbols" "package" "MY-APP" "include_internal" t)))
    (is (has r "Internal symbols" "SPLIT-ON-COMMAS  function" "DESCRIBE-SCALE  function")))
  ;; JSON false may arrive as NIL or as a symbol such as :FALSE.
  (is (not (has (tool "list_package_symbols" "package" "MY-APP" "include_internal" :false)
                "SPLIT-ON-COMMAS")))
  (is (error-p (tool "list_package_symbols" "package" "NO-SUCH-PACKAGE")))
  ;; A big package is cut, and the result stays within the cap.
  (let ((r (tool "list_package_symbols" "package" "COMMON-LISP")))
    (is (ok-p r))
    (is (<= (length (text r)) sly-agent-q:*result-limit*))
    (is (has r "External symbols (978)" "listing cut at 300 symbols"))))


;;;; Cross references

(deftest xref
  (:needs :xref)
  (let ((r (tool "who_calls" "function" "process-data" "package" "MY-APP")))
    (is (ok-p r))
    (is (has r "Callers of MY-APP:PROCESS-DATA (2" "  PROCESS-STRING  " "  REPORT  "
             "my-app.lisp:")))
  (let ((r (tool "who_calls" "function" "my-app:report")))
    (is (ok-p r))
    (is (has r "No callers of MY-APP:REPORT are recorded" "cross-reference data exists only")))
  (let ((r (tool "who_references" "variable" "my-app:*scale*")))
    (is (ok-p r))
    (is (has r "Code that reads MY-APP:*SCALE*" "MY-APP:PROCESS-DATA" "MY-APP::DESCRIBE-SCALE")))
  (let ((r (tool "who_references" "variable" "my-app::split-on-commas")))
    (is (ok-p r))
    (is (has r "not currently a global or special variable" "No references"))))


;;;; CLOS

(deftest slots
  (let ((r (tool "class_slots" "class" "my-subclass" "package" "MY-APP")))
    (is (ok-p r))
    (is (has r "4 slots (1 defined here, 3 inherited)"
             "NAME  (inherited from MY-CLASS)"
             "initargs: :NAME; initform: \"unnamed\"; type: STRING"
             "readers: MY-CLASS-NAME"
             "writers: (SETF MY-CLASS-ITEMS)"
             "initform: (GET-UNIVERSAL-TIME); type: INTEGER"
             "PRIORITY  (defined here)" "type: FIXNUM"
             "documentation: A human-readable name.")))
  (is (has (tool "class_slots" "class" "integer") "no slots"))
  (let ((r (tool "class_slots" "class" "my-app:process-data")))
    (is (error-p r))
    (is (has r "does not name a class" "function"))))

(deftest hierarchy
  (let ((r (tool "class_hierarchy" "class" "my-app:my-subclass")))
    (is (ok-p r))
    (is (has r "Precedence list: MY-APP:MY-SUBCLASS, MY-APP:MY-CLASS, STANDARD-OBJECT"
             "Direct superclasses: MY-APP:MY-CLASS" "Direct subclasses: none")))
  (let ((r (tool "class_hierarchy" "class" "my-class" "package" "MY-APP")))
    (is (has r "Direct superclasses: STANDARD-OBJECT" "MY-SUBCLASS"))))

(deftest methods-with-their-source
  (:needs :method-source-locations)
  (is (has (tool "method_specializers" "generic_function" "serialize" "package" "MY-APP")
           "(INTEGER T)  ((OBJECT INTEGER) STREAM)" "my-app.lisp:")))

(deftest methods
  (let ((r (tool "method_specializers" "generic_function" "serialize" "package" "MY-APP")))
    (is (ok-p r))
    (is (has r "Lambda list: (OBJECT STREAM)" "3 methods"
             "(INTEGER T)  ((OBJECT INTEGER) STREAM)" "(STRING T)" "(LIST T)"))
    (is (not (has r "MY-CLASS"))))
  (let ((r (tool "method_specializers" "generic_function" "my-app:process-data")))
    (is (error-p r))
    (is (has r "does not name a generic function" "function"))))


;;;; CLISP's POSIX:FILE-STAT (lisp-cl/clisp-file-stat.lisp)
;;;
;;; A garbage collection that starts inside CLISP's own FILE-STAT makes it
;;; write through a stale pointer: the image dies of a SIGSEGV.  UIOP calls
;;; it for every file ASDF probes, about 500 times in one
;;; method_specializers on CLISP.  The first loop below killed the CLISP of
;;; this suite before FILE-STAT was wrapped.

(deftest file-stat-again-and-again-never-collects-inside
  (:needs :posix-file-stat)
  (let* ((file (namestring *root*))
         (mode (saq-portable:file-stat-mode file))
         (collections (saq-portable:gc-count))
         (real (symbol-value (find-symbol "*CLISP-FILE-STAT*" "SLY-AGENT-Q")))
         (inside 0))
    (is (= 0 (saq-portable:file-stat-modes-unlike mode file 100000)))
    (is (< 10 (- (saq-portable:gc-count) collections)))
    ;; CLISP's own function, called through POSIX:FILE-STAT as UIOP calls
    ;; it, never sees a collection start while it runs.
    (progv (list (find-symbol "*CLISP-FILE-STAT*" "SLY-AGENT-Q"))
        (list (lambda (file linkp)
                (let ((before (saq-portable:gc-count)))
                  (multiple-value-prog1 (funcall real file linkp)
                    (unless (= before (saq-portable:gc-count)) (incf inside))))))
      (setf collections (saq-portable:gc-count))
      (is (= 0 (saq-portable:file-stat-modes-unlike mode file 50000)))
      (is (< 5 (- (saq-portable:gc-count) collections))))
    (is (= 0 inside))))

(deftest method-specializers-again-and-again
  ;; On CLISP each call maps fasls back to their sources through ASDF's
  ;; components (locations.lisp), which probes every file of every
  ;; registered system: the path that killed CLISP in the end-to-end runs.
  (let ((first (tool "method_specializers" "generic_function" "serialize" "package" "MY-APP")))
    (is (has first "3 methods" "(INTEGER T)  ((OBJECT INTEGER) STREAM)"))
    (is (= 0 (loop repeat 15
                   count (not (equal first (tool "method_specializers" "generic_function" "serialize"
                                                 "package" "MY-APP"))))))))


;;;; macroexpand_form

(defvar cl-user::*saq-read-eval-ran* nil)

(deftest macroexpansion
  (let ((r (tool "macroexpand_form" "form" "(with-scale (2) (process-data '(1 2)))"
                 "package" "MY-APP")))
    (is (ok-p r))
    (is (has r "MACROEXPAND-1" "(LET ((*SCALE* 2))")))
  (let ((r (tool "macroexpand_form" "form" "(my-app:with-scale (2) 1)" "full" t)))
    (is (has r "MACROEXPAND:" "(LET ((MY-APP:*SCALE* 2))")))
  (is (has (tool "macroexpand_form" "form" "(my-app:process-data nil)") "Not a macro form"))
  ;; #. is refused, and not evaluated.
  (let ((r (tool "macroexpand_form" "form" "(list #.(setf cl-user::*saq-read-eval-ran* t))")))
    (is (error-p r))
    (is (has r "refuses #." "read-time evaluation")))
  (is (null cl-user::*saq-read-eval-ran*))
  (is (has (tool "macroexpand_form" "form" "(my-app:with-scale (2)") "unbalanced"))
  (is (has (tool "macroexpand_form" "form" "(a) (b)") "exactly one form"))
  ;; An error in the macro function comes back as a result.
  (let ((r (tool "macroexpand_form" "form" "(my-app:with-scale)")))
    (is (error-p r))
    (is (has r "Macroexpansion signalled"))))


;;;; eval_form and eval_in_package

(deftest eval-values-and-output
  (is (string= "Value: 6" (text (tool "eval_form" "form" "(+ 1 2 3)"))))
  (let ((r (tool "eval_form" "form" "(my-app:process-data '(1 2 3) :scale 2)")))
    (is (ok-p r))
    (is (has r "Values (2):" "(2 4 6)" "12")))
  (is (has (tool "eval_form" "form" "(values)") "No values."))
  (let ((r (tool "eval_form" "form" "(princ \"to-out\") (princ \"to-err\" *error-output*)
                                    (princ \"to-trace\" *trace-output*) :done")))
    (is (ok-p r))
    (is (has r "Evaluated 4 forms" "Value: :DONE" "Output:" "to-out" "to-err" "to-trace")))
  (let ((r (tool "eval_form" "form" "(warn \"careful now\") 1")))
    (is (ok-p r))
    (is (has r "careful now")))
  ;; Printed readably, with caps.
  (is (has (tool "eval_form" "form" "\"a \\\"quoted\\\" string\"") "\"a \\\"quoted\\\" string\""))
  (is (has (tool "eval_form" "form" "(make-list 200 :initial-element 1)") "..."))
  (is (has (tool "eval_form" "form" "(make-string 100000 :initial-element #\\a)")
           "a string of 100000 characters"))
  (is (ok-p (tool "eval_form" "form" "(let ((l (list 1 2))) (setf (cddr l) l) l)"))))

(deftest eval-packages
  (is (has (tool "eval_form" "form" "(split-on-commas \"a,b\")" "package" "MY-APP")
           "(\"a\" \"b\")"))
  (is (has (tool* "eval_form" '(("form" . "(split-on-commas \"a,b\")")) :package "MY-APP")
           "(\"a\" \"b\")"))
  (is (has (tool "eval_form" "form" "(package-name *package*)") "COMMON-LISP-USER"))
  (is (has (tool "eval_in_package" "form" "(package-name *package*)" "package" "my-app")
           "\"MY-APP\""))
  ;; A missing "package" is refused by the server (test/server/catalog-validation.test.ts);
  ;; an empty one, which the catalog cannot refuse, here.
  (let ((r (tool "eval_in_package" "form" "1" "package" "")))
    (is (error-p r))
    (is (has r "\"package\" argument of eval_in_package is empty")))
  (is (error-p (tool "eval_in_package" "form" "1")))
  (let ((r (tool "eval_in_package" "form" "1" "package" "MY-APPP")))
    (is (error-p r))
    (is (has r "not found" "MY-APP")))
  ;; IN-PACKAGE inside the code affects that call only.
  (let ((before *package*)
        (r (tool "eval_form" "form" "(in-package :my-app) (split-on-commas \"x\")")))
    (is (ok-p r))
    (is (has r "(\"x\")" "for this call only"))
    (is (eq before *package*))))

(deftest eval-error-and-last-error
  (let ((r (tool "eval_form" "form" "(my-app:parse-input \"\")")))
    (is (error-p r))
    (is (has r "Error while evaluating form 1 of 1" "PARSE-ERROR"
             "Backtrace" "MY-APP:PARSE-INPUT")))
  (let ((r (tool "get_last_error")))
    (is (ok-p r))
    (is (has r "Last error, from eval_form" "Condition:" "PARSE-ERROR" "Message:"
             "(my-app:parse-input \"\")" "Backtrace (innermost first):" "MY-APP:PARSE-INPUT"))))

(deftest error-backtraces-show-arguments
  (:needs :frame-arguments)
  (is (has (tool "eval_form" "form" "(my-app:parse-input \"\")") "(MY-APP:PARSE-INPUT \"\")"))
  (is (has (tool "get_last_error") "(MY-APP:PARSE-INPUT \"\")")))

(defvar cl-user::*saq-side-effect* nil)

(deftest a-last-form-read-out-by-a-feature-is-no-unbalanced-code
  ;; The reader skips "#+(or) (...)": the text is balanced, that form
  ;; is just not there (a per-Lisp form that ends the code, such as
  ;; "#+sbcl (sb-ext:exit) #+ecl (ext:quit)").
  (is (has (tool "eval_form" "form" "(+ 1 2) #+(or) (error \"never read\")") "Value: 3"))
  (is (has (tool "compile_form" "form" "(defun saq-before-feature () 1) #+(or) (defun saq-not-there ())")
           "Compiled and loaded 1 form"))
  (is (not (fboundp (cl-user-symbol "SAQ-NOT-THERE"))))
  ;; A form kept by its feature expression is a form (the scan reads
  ;; everything suppressed, which skipped it).
  (is (has (tool "eval_form" "form" "#+(or) (error \"no\") #-(or) (+ 40 2)") "Value: 42"))
  (is (has (tool "eval_form" "form" "#+(and) (+ 1 1)") "Value: 2")))

(deftest eval-reader-errors
  (let ((r (tool "eval_form" "form" "(nopkg::foo)")))
    (is (error-p r))
    (is (has r "Reader error while reading form 1" "NOPKG")))
  ;; Unbalanced: nothing at all runs.
  (let ((r (tool "eval_form" "form" "(setf cl-user::*saq-side-effect* :ran) (+ 1 2")))
    (is (error-p r))
    (is (has r "unbalanced" "Nothing was evaluated")))
  (is (null cl-user::*saq-side-effect*))
  (is (error-p (tool "eval_form" "form" "   ; only a comment")))
  ;; A later form that does not read: the earlier ones ran.
  (let ((r (tool "eval_form" "form" "(setf cl-user::*saq-side-effect* :ran) (nopkg:x)")))
    (is (has r "form 2 of 2" "Forms 1 to 1 completed")))
  (is (eq :ran cl-user::*saq-side-effect*)))

(defvar cl-user::*saq-cleanup-ran* nil)
(defvar cl-user::*saq-lock* (saq-portable:make-lock "saq test lock"))

(deftest eval-timeout
  (:needs :timeouts)
  (let* ((start (get-internal-real-time))
         (r (tool* "eval_form" '(("form" . "(loop)")) :timeout 1)))
    (is (error-p r))
    (is (has r "timed out after 1 s" "still usable"))
    (is (< (- (get-internal-real-time) start) (* 10 internal-time-units-per-second))))
  ;; The image answers afterwards.
  (is (string= "Value: 3" (text (tool "eval_form" "form" "(+ 1 2)"))))
  (is (has (tool "get_last_error") "TIMEOUT"))
  ;; Unwinding ran the cleanups and released the locks.
  (let ((r (tool* "eval_form"
                  '(("form" . "(saq-portable:with-lock (*saq-lock*)
                                 (unwind-protect (loop) (setf *saq-cleanup-ran* t)))"))
                  :timeout 1)))
    (is (has r "timed out")))
  (is (eq t cl-user::*saq-cleanup-ran*))
  (is (saq-portable:lock-free-p cl-user::*saq-lock*))
  ;; A fast evaluation is not disturbed by its (now finished) watcher.
  (is (ok-p (tool* "eval_form" '(("form" . "(sleep 0.2) :fine")) :timeout 1))))

(deftest reading-is-bounded-like-evaluation
  (:needs :timeouts)
  ;; A reader macro is user code: one that never returns stopped eval_form,
  ;; compile_form and the "safe" macroexpand_form while they read, outside
  ;; any time limit (the thread spun forever; on CLISP the image).
  (let ((*readtable* (copy-readtable nil)))
    (set-macro-character #\! (lambda (stream char) (declare (ignore stream char)) (loop)))
    (dolist (call '(("eval_form" "form" "(list !x)")
                    ("compile_form" "form" "(defun saq-read-forever () !x)")
                    ("macroexpand_form" "form" "(when !x 1)")))
      (let* ((start (get-internal-real-time))
             (r (tool* (first call) (list (cons (second call) (third call))) :timeout 1)))
        (is (error-p r) "~A: ~A" (first call) (text r))
        (is (has r "timed out after 1 s" "reader macro") "~A: ~A" (first call) (text r))
        (is (< (- (get-internal-real-time) start) (* 10 internal-time-units-per-second)) "~A" (first call)))))
  (is (string= "Value: 3" (text (tool "eval_form" "form" "(+ 1 2)")))))

(deftest endless-condition-report-is-stopped
  ;; A report that never ends filled the image's memory while the result
  ;; was written (ECL reached its heap limit); it is stopped and cut.
  (let* ((start (get-internal-real-time))
         (r (tool* "eval_form"
                   '(("form" . "(define-condition saq-endless (error) ()
                                  (:report (lambda (c s) (declare (ignore c)) (loop (write-string \"r\" s)))))
                                (error 'saq-endless)"))
                   :timeout 20)))
    (is (error-p r))
    (is (has r "SAQ-ENDLESS") "~A" (text r))
    ;; Cut where it was stopped (SBCL exhausted its heap first: a storage
    ;; condition); CLISP's backend has no output stream to stop it, and its
    ;; own string limit ends the report.
    (if (string= (saq-portable:lisp-name) "clisp")
        (is (has r "report failed" "string too long") "~A" (text r))
        ;; The message shown is cut again; its length says where printing stopped.
        (let* ((text (text r))
               (at (search " characters shown]" text))
               (of (and at (search " of " text :from-end t :end2 at)))
               (total (and of (parse-integer text :start (+ of 4) :end at :junk-allowed t))))
          (is (has r "rrrr") "~A" text)
          (is (and total (<= total (+ sly-agent-q::*printing-limit* 2000))) "~A" (subseq text (max 0 (- (length text) 300))))))
    (is (not (has r "timed out")) "~A" (text r))
    (is (< (- (get-internal-real-time) start) (* 15 internal-time-units-per-second))))
  ;; A printer that signals such a condition: the value is unprintable,
  ;; and why is said in a bounded line.
  (let* ((start (get-internal-real-time))
         (r (tool* "eval_form"
                   '(("form" . "(defstruct (saq-endless-printer
                                             (:print-function (lambda (o s d) (declare (ignore o s d)) (error 'saq-endless))))
                                  a)
                                (make-saq-endless-printer)"))
                   :timeout 20)))
    (is (has r "unprintable") "~A" (subseq (text r) 0 (min 2000 (length (text r)))))
    (is (< (length (text r)) 20000))
    (is (< (- (get-internal-real-time) start) (* 15 internal-time-units-per-second))))
  (is (string= "Value: 3" (text (tool "eval_form" "form" "(+ 1 2)")))))

(deftest eval-timeout-leaves-no-process-behind
  (:needs :watcher-process)
  ;; An unusual limit names the watcher's sleep; once the evaluation
  ;; returned, neither the watcher nor its sleep may still run.
  (is (ok-p (tool* "eval_form" '(("form" . ":quick")) :timeout 77)))
  (is (not (saq-portable:processes-matching-p "sleep 77[.]00"))))

(deftest eval-timeout-in-another-thread
  (:needs :threads)
  ;; As from a SLYNK/SWANK worker thread.
  (let* ((result nil)
         (thread (make-thread
                  (lambda ()
                    (setf result (tool* "eval_form" '(("form" . "(loop (sleep 0.01))")) :timeout 1)))
                  :name "saq test worker")))
    (join-thread thread :default nil :timeout 30)
    (is (error-p result))
    (is (has result "timed out"))))

(defclass cl-user::saq-unprintable () ())
(defmethod print-object ((object cl-user::saq-unprintable) stream)
  (error "this object refuses to print"))

(defclass cl-user::saq-slow-printer () ())
(defmethod print-object ((object cl-user::saq-slow-printer) stream)
  (loop (sleep 0.01)))

(defvar cl-user::*saq-slow-value* (make-instance 'cl-user::saq-slow-printer))

(deftest printing-values-is-under-the-timeout
  (:needs :timeouts)
  (let ((r (tool* "eval_form" '(("form" . "(make-instance 'saq-slow-printer)")) :timeout 1)))
    (is (error-p r))
    (is (has r "timed out" "printing the values of form 1")))
  ;; describe_symbol prints values too.
  (let ((r (tool* "describe_symbol" '(("symbol" . "*saq-slow-value*")) :timeout 1)))
    (is (error-p r))
    (is (has r "describe_symbol timed out"))))

(defmacro saq-slow-macro () cl-user::*saq-slow-value*)

(defun call-bounded (seconds function)
  "FUNCTION's value, called in a thread given SECONDS; :HUNG if it did
not return (the thread is then terminated, so a failing test does not
leave it burning)."
  (let* ((thread (make-thread function :name "saq bounded call"))
         (value (join-thread thread :default :hung :timeout seconds)))
    (when (eq value :hung)
      (ignore-errors (terminate-thread thread))
      (ignore-errors (join-thread thread :default nil :timeout 5)))
    value))

(defvar *main-thread* (ignore-errors (current-thread))
  "The thread that loaded the tests.")

(defun busy-threads ()
  "Threads other than the current one, the main thread and the backend's
own, that are still alive: what a tool must not leave behind."
  (remove-if (lambda (thread)
               (or (eq thread (current-thread))
                   (eq thread *main-thread*)
                   (not (thread-alive-p thread))
                   (let ((name (or (thread-name thread) "")))
                     (or (not (stringp name)) (search "finalizer" name) (search "auto-flush" name)))))
             (all-threads)))

(deftest printing-never-escapes-the-timeout
  (:needs :threads)
  ;; Every helper that prints a user object does so under the call's
  ;; timeout: a PRINT-OBJECT that never returns gives a bounded error.
  (eval `(defclass cl-user::saq-slow-slots ()
           ((cl-user::x :initform ',cl-user::*saq-slow-value*))))
  (let ((before (length (busy-threads))))
    (dolist (call `(("macroexpand_form" ("form" . "(saq-slow-macro)")
                                        ("package" . "SLY-AGENT-Q-TESTS"))
                    ("class_slots" ("class" . "saq-slow-slots"))
                    ("describe_symbol" ("symbol" . "*saq-slow-value*"))
                    ("eval_form" ("form" . "*saq-slow-value*"))))
      (let* ((start (get-internal-real-time))
             (r (call-bounded 20 (lambda () (tool* (first call) (rest call) :timeout 1)))))
        (is (not (eq r :hung)) "~A never answered" (first call))
        (unless (eq r :hung)
          (is (error-p r))
          (is (has r "timed out after 1 s") "~A: ~A" (first call) (text r)))
        (is (< (- (get-internal-real-time) start) (* 8 internal-time-units-per-second)))))
    ;; Nothing is left running the printer.
    (sleep 0.3)
    (is (<= (length (busy-threads)) before) "busy threads: ~S" (busy-threads)))
  (is (string= "Value: 3" (text (tool "eval_form" "form" "(+ 1 2)")))))

(defvar cl-user::*saq-probe* nil)

(deftest cancel-call-interrupts-the-evaluation
  (:needs :threads)
  (setf cl-user::*saq-probe* nil)
  (let* ((result nil)
         (thread (make-thread
                  (lambda ()
                    (setf result (sly-agent-q:call-tool
                                  "eval_form"
                                  '(("form" . "(progn (setf *saq-probe* :started) (sleep 2) (setf *saq-probe* :finished))"))
                                  :package "CL-USER" :timeout 30 :call-id "cancel-1")))
                  :name "saq cancelled worker")))
    (loop repeat 200 until (eq cl-user::*saq-probe* :started) do (sleep 0.01))
    (is (eq :started cl-user::*saq-probe*))
    (is (eq t (sly-agent-q:cancel-call "cancel-1")))
    (join-thread thread :default nil :timeout 10)
    (is (error-p result))
    (is (has result "cancelled"))
    (sleep 2.5)
    ;; The image, not a flag: the rest of the form never ran.
    (is (eq :started cl-user::*saq-probe*)))
  ;; A cancel that arrives before its call: the call never runs.
  (setf cl-user::*saq-probe* nil)
  (is (null (sly-agent-q:cancel-call "cancel-2")))
  (let ((r (sly-agent-q:call-tool "eval_form" '(("form" . "(setf *saq-probe* :ran)"))
                                  :package "CL-USER" :call-id "cancel-2")))
    (is (error-p r))
    (is (has r "cancelled"))
    (is (null cl-user::*saq-probe*)))
  ;; Unknown ids and other evaluations are left alone.
  (is (null (sly-agent-q:cancel-call "no-such-call")))
  (is (string= "Value: 3" (text (sly-agent-q:call-tool "eval_form" '(("form" . "(+ 1 2)"))
                                                      :call-id "cancel-3")))))

;;;; Several calls in one request

(deftest call-tools-answers-each-call-in-order
  (let ((results (sly-agent-q:call-tools
                  '(("describe_symbol" (("symbol" . "process-data")) :package "MY-APP")
                    ("eval_form" (("form" . "(/ 1 0)")) :package "CL-USER")
                    ("no_such_tool" ())
                    "not a call"
                    ("eval_form" (("form" . "(+ 1 2)")) :package "CL-USER" :call-id "batch-1")))))
    (is (= 5 (length results)))
    (is (and (ok-p (first results)) (has (first results) "PROCESS-DATA")))
    ;; One call failing is that call's result; the others still run.
    (is (and (error-p (second results)) (has (second results) "DIVISION-BY-ZERO")))
    (is (error-p (third results)))
    (is (and (error-p (fourth results)) (has (fourth results) "not a list")))
    (is (string= "Value: 3" (text (fifth results)))))
  (is (null (sly-agent-q:call-tools '())))
  (is (null (sly-agent-q:call-tools 'not-a-list))))

(deftest call-tools-runs-late-calls-beside-a-slow-one
  (:needs :threads)
  ;; Past the serial budget the calls left run in threads of their own:
  ;; a slow call holds up none of them, and the batch waits for all.
  (setf cl-user::*saq-probe* nil)
  (let* ((sly-agent-q::*batch-serial-seconds* 0)
         (start (get-internal-real-time))
         (results (sly-agent-q:call-tools
                   (list* '("eval_form" (("form" . "(progn (sleep 1) (setf *saq-probe* :slow-done) :slow)"))
                            :package "CL-USER")
                          (loop repeat 20
                                collect '("eval_form" (("form" . "(progn (sleep 0.5) (saq-portable:thread-name (saq-portable:current-thread)))"))
                                          :package "CL-USER")))))
         (seconds (/ (- (get-internal-real-time) start) internal-time-units-per-second)))
    (is (= 21 (length results)))
    (is (every #'ok-p results) "~S" (remove-if #'ok-p results))
    (is (has (first results) ":SLOW"))
    (is (eq :slow-done cl-user::*saq-probe*))
    ;; Twenty half-second calls one after another would take ten seconds.
    (is (< seconds 5) "the batch took ~,1F s" seconds)
    (is (every (lambda (r) (has r "sly-agent-q call")) (rest results)))))

(deftest call-tools-cancels-one-call-of-a-batch
  (:needs :threads)
  (setf cl-user::*saq-probe* nil)
  (let* ((results nil)
         (thread (make-thread
                  (lambda ()
                    (setf results
                          (sly-agent-q:call-tools
                           '(("eval_form" (("form" . "(progn (setf *saq-probe* :started) (sleep 3) (setf *saq-probe* :finished))"))
                              :package "CL-USER" :timeout 30 :call-id "batch-cancel-1")
                             ("eval_form" (("form" . "(+ 20 22)")) :package "CL-USER" :call-id "batch-cancel-2")))))
                  :name "saq batch worker")))
    (loop repeat 200 until (eq cl-user::*saq-probe* :started) do (sleep 0.01))
    (is (eq t (sly-agent-q:cancel-call "batch-cancel-1")))
    (join-thread thread :default nil :timeout 10)
    (is (and (error-p (first results)) (has (first results) "cancelled")))
    (is (string= "Value: 42" (text (second results))))
    (sleep 3.5)
    (is (eq :started cl-user::*saq-probe*))))

(defvar *debugger-entered* '())

(deftest agent-threads-never-enter-the-debugger
  (:needs :threads :debugger-hook :agent-thread-trap)
  ;; SLIME/SLY install their debugger hook globally, and new threads see
  ;; the global value: stand in for it with one that records entries.
  (let ((old-debugger-hook *debugger-hook*))
    (setf *debugger-entered* '())
    (unwind-protect
         (saq-portable:call-with-debugger-hook
          (lambda (condition hook)
            (declare (ignore hook))
            (push (princ-to-string condition) *debugger-entered*)
            (saq-portable:abort-thread))
          (lambda ()
           (setf *debugger-hook* nil)
           (let ((r (tool "eval_form" "form"
                          "(let ((th (saq-portable:make-thread (lambda () (error \"boom in a thread\")) :name \"saq-boomer\")))
                             (saq-portable:join-thread th :default :ended))")))
             (is (ok-p r))
             ;; The error of a thread that ended within the call is in its result.
             (is (has r "boom in a thread" "saq-boomer")))
           ;; A thread that outlives its call: the next call's notes.
           (is (ok-p (tool "eval_form" "form"
                           "(saq-portable:make-thread (lambda () (sleep 0.3) (error \"late boom\")) :name \"saq-late\") :started")))
           (sleep 1)
           (let ((r (tool "eval_form" "form" "(+ 1 2)")))
             (is (has r "Value: 3" "late boom" "saq-late" "earlier evaluation")))
           ;; Reported once.
           (is (not (has (tool "eval_form" "form" "(+ 1 2)") "late boom")))
           ;; BREAK in such a thread, and a thread of a thread.
           (tool "eval_form" "form"
                 "(saq-portable:join-thread (saq-portable:make-thread (lambda () (saq-portable:join-thread (saq-portable:make-thread (lambda () (break \"nested break\")))))))")
           (is (null *debugger-entered*) "the debugger was entered: ~S" *debugger-entered*)
           ;; A thread the user starts outside the agent still gets the debugger.
           (join-thread (make-thread (lambda () (error "user's own")))
                        :default nil :timeout 5)
           (is (equal '("user's own") *debugger-entered*))))
      (setf *debugger-hook* old-debugger-hook))))

(deftest eval-never-enters-the-debugger
  (is (has (tool "eval_form" "form" "(break \"stop here\")") "stop here"))
  (is (has (tool "eval_form" "form" "(invoke-debugger (make-condition 'simple-error :format-control \"direct\"))")
           "direct"))
  (is (error-p (tool "eval_form" "form" "(throw 'no-such-tag 1)")))
  (is (has (tool "eval_form" "form" "(abort)") "aborted"))
  (is (has (tool "eval_form" "form" "(read-line)") "END-OF-FILE"))
  (is (has (tool "eval_form" "form" "(error 'type-error :datum 1 :expected-type 'string)")
           "TYPE-ERROR"))
  ;; Printing the value fails: the result says so instead.
  (is (has (tool "eval_form" "form" "(make-instance 'saq-unprintable)") "unprintable"))
  (is (has (tool "eval_form" "form" "(+ 40 2)") "42")))

(deftest eval-survives-stack-exhaustion
  (:needs :stack-overflow-condition)
  ;; Twice: the image must survive a second exhaustion too.
  (dotimes (i 2)
    (let ((r (tool "eval_form" "form" "(labels ((f (n) (1+ (f n)))) (f 1))")))
      (is (error-p r))
      ;; SBCL: "Control stack exhausted"; ECL: "C-STACK overflow".
      (is (or (has r "exhausted") (has r "overflow")) "~A" (text r))))
  (is (has (tool "eval_form" "form" "(+ 40 2)") "42")))

(deftest eval-output-is-capped
  (let ((r (tool "eval_form" "form" "(dotimes (i 5000) (princ \"0123456789\")) :done")))
    (is (ok-p r))
    (is (has r "output truncated" "Value: :DONE"))
    (is (<= (length (text r)) sly-agent-q:*result-limit*))))


;;;; compile_form and get_compilation_notes

(deftest compile-and-load
  (let ((r (tool "compile_form" "form" "(defun saq-double (x) (* 2 x))
(defun saq-quadruple (x) (saq-double (saq-double x)))")))
    (is (ok-p r))
    (is (has r "Compiled and loaded 2 forms" "No warnings or notes")))
  (is (has (tool "eval_form" "form" "(saq-quadruple 3)") "Value: 12"))
  ;; Compiled with the file compiler: xref data exists for it.
  (when (saq-portable:xref-p)
    (is (has (tool "who_calls" "function" "saq-double") "SAQ-QUADRUPLE"))))

(deftest compile-warnings-are-captured
  (let ((r (tool "compile_form" "form" "(defun saq-ok (x) x)
(defun saq-warns (x) (+ x saq-undefined-variable))")))
    (is (ok-p r))
    ;; (The compiler's own words differ between Lisps: the variable is named.)
    (is (has r "with 1 warning" "WARNING in form 2 (line 2"
             "SAQ-UNDEFINED-VARIABLE" "loaded despite the warnings")))
  (let ((r (tool "get_compilation_notes")))
    (is (ok-p r))
    (is (has r "SAQ-UNDEFINED-VARIABLE" "saq-warns"))))

(deftest compile-warns-of-undefined-functions
  (:needs :undefined-function-warnings)
  (let ((r (tool "compile_form" "form" "(defun saq-calls-nothing () (saq-no-such-function 1))")))
    (is (has r "STYLE-WARNING" "undefined function"))))

(defun malformed-let-explained-p (result)
  "True if RESULT explains (in this Lisp's words) that (LET ((A 1 2)) A)
is malformed: SBCL says malformed, ECL that a binding takes at most two
arguments."
  (or (has result "malformed") (has result "LET" "at most two") (has result "(A 1 2)")))

(deftest compile-error-loads-nothing
  (is (ok-p (tool "compile_form" "form" "(defun saq-half () :old)")))
  (let ((r (tool "compile_form" "form" "(defun saq-half () (let ((a 1 2)) a))
(defun saq-fresh () :new)")))
    (is (error-p r))
    (is (has r "Compilation failed" "ERROR in form 1" "Nothing was loaded"))
    (is (malformed-let-explained-p r)))
  ;; The old definition is intact; the good form next to the bad one
  ;; was not loaded either.
  (is (eq :old (funcall (cl-user-symbol "SAQ-HALF"))))
  (is (not (fboundp (cl-user-symbol "SAQ-FRESH"))))
  (is (has (tool "get_last_error") "compile_form" "Compilation failed"))
  (is (malformed-let-explained-p (tool "get_compilation_notes")))
  ;; A read error: nothing loaded (SBCL's backend calls it a READ ERROR, ECL's an ERROR; where it is,
  ;; is tested in compile-read-error-names-its-form).
  (let ((r (tool "compile_form" "form" "(defun saq-read-1 () 1) (defun saq-read-2 () (nopkg::x))")))
    (is (error-p r))
    (is (has r "ERROR" "NOPKG" "Nothing was loaded"))
    ;; What the result says is what the image holds: ABCL's file compiler
    ;; defines each DEFUN as it compiles it, so form 1 is defined there.
    (if (fboundp (cl-user-symbol "SAQ-READ-1"))
        (is (has r "while compiling" "(defun saq-read-1 () 1)"))
        (is (not (search "while compiling" (text r))) "~A" (text r)))
    (is (not (fboundp (cl-user-symbol "SAQ-READ-2")))))
  (is (has (tool "compile_form" "form" "(defun saq-unbalanced (") "Nothing was compiled"))
  ;; What the file compiler evaluates while compiling is said to have run.
  (is (has (tool "compile_form" "form" "(defmacro saq-m () 1) (defun saq-f () (let ((a 1 2)) a))")
           "Nothing was loaded" "already evaluated (defmacro saq-m () 1)"))
  ;; An error at load time: reported with its backtrace.
  (let ((r (tool "compile_form" "form" "(defparameter *saq-load-fails* (error \"at load\"))")))
    (is (error-p r))
    (is (has r "loading failed" "at load"))))

(deftest compile-read-error-names-its-form
  (:needs :located-read-errors)
  (is (has (tool "compile_form" "form" "(defun saq-read-1 () 1) (defun saq-read-2 () (nopkg::x))")
           "ERROR in form 2" "NOPKG")))

(deftest compile-defines-packages-and-reads-unicode
  (let ((r (tool "compile_form" "form" "(defpackage #:saq-new (:use #:cl) (:export #:hello))
(in-package #:saq-new)
(defun hello () \"héllo wörld\")")))
    (is (ok-p r))
    (is (has r "Compiled and loaded 3 forms")))
  (is (has (tool "eval_form" "form" "(saq-new:hello)") "\"héllo wörld\""))
  ;; A warning after non-ASCII text is still attributed to its form.
  (let ((r (tool "compile_form" "form" "(defun saq-ünï () \"ä\")
(defun saq-after-unicode () saq-unknown-var)")))
    (is (has r "WARNING in form 2" "SAQ-UNKNOWN-VAR"))))

(deftest compile-timeout
  (let ((r (tool* "compile_form"
                  '(("form" . "(defmacro saq-forever () (loop)) (defun saq-never () (saq-forever))"))
                  :timeout 1)))
    (is (error-p r))
    (is (has r "timed out" "Nothing was loaded")))
  (is (ok-p (tool "compile_form" "form" "(defun saq-after-timeout () t)"))))


;;;; get_repl_history

(deftest history
  (dotimes (i 12) (tool "eval_form" "form" (format nil "(+ ~D 1000)" i)))
  (let ((r (tool "get_repl_history")))
    (is (ok-p r))
    (is (= 10 (occurrences "] eval_form in COMMON-LISP-USER" r)))
    (is (has r "(+ 11 1000)" "=> 1011" "(+ 2 1000)"))
    (is (not (has r "(+ 1 1000)"))))
  (let ((r (tool "get_repl_history" "limit" 2)))
    (is (= 2 (occurrences "] eval_form in" r)))
    (is (has r "(+ 10 1000)" "(+ 11 1000)")))
  (is (= 3 (occurrences "] eval_form in" (tool "get_repl_history" "limit" 3))))
  ;; "limit" as a string, or below 1, is refused by the server (catalog-validation.test.ts).
  (is (has (tool "eval_form" "form" "(/ 1 0)") "DIVISION-BY-ZERO"))
  (is (has (tool "get_repl_history" "limit" 1) "ERROR" "DIVISION-BY-ZERO")))

(deftest history-is-bounded
  (let ((sly-agent-q:*history-limit* 5))
    (dotimes (i 8) (tool "eval_form" "form" (format nil "(list ~D :bounded)" i)))
    (is (= 5 (length sly-agent-q::*history*)))
    (let ((r (tool "get_repl_history" "limit" 50)))
      (is (= 5 (occurrences "] eval_form in" r)))
      (is (has r "(list 7 :bounded)" "(list 3 :bounded)"))
      (is (not (has r "(list 2 :bounded)"))))))


;;;; call-tool never signals

(deftest garbage-in-error-results-out
  (dolist (call `(("no_such_tool" nil)
                  (nil nil)
                  (42 nil)
                  ("describe_symbol" nil)
                  ("describe_symbol" "not an alist")
                  ("describe_symbol" (("symbol" . 42)))
                  ("describe_symbol" ((42 . "car")))
                  ("describe_symbol" (("symbol" . "car") . "improper"))
                  ("describe_symbol" (("symbol" . "car") ("bogus" . 1)))
                  ("describe_symbol" (("symbol" . "a:b:c")))
                  ("describe_symbol" (("symbol" . "#:uninterned")))
                  ("describe_symbol" (("symbol" . "(car)")))
                  ("describe_symbol" (("symbol" . "")))
                  ("describe_symbol" (("symbol" . "car") ("package" . 7)))
                  ("get_repl_history" (("limit" . "many")))
                  ("get_repl_history" (("limit" . -3)))
                  ("eval_form" (("form" . "")))
                  ("eval_form" (("form" . ,(make-string 3 :initial-element #\())))
                  ("eval_form" (("form" . (1 2 3))))
                  ("macroexpand_form" (("form" . "(a) (b)")))
                  ("get_last_error" (("unexpected" . t)))))
    (let ((r (apply #'tool* call)))
      (is (error-p r) "~S should give an error result, got ~S" call r)))
  (let ((circular (list (cons "symbol" "car"))))
    (setf (cdr circular) circular)
    (is (error-p (tool* "describe_symbol" circular))))
  (is (has (tool "no_such_tool") "Unknown image tool" "describe_symbol"))
  (is (has (tool "describe_symbol" "symbol" "car" "bogus" 1) "Unknown argument \"bogus\"" "symbol, package"))
  ;; Types and required arguments are checked by the server, against the catalog, before
  ;; the image is asked (test/server/catalog-validation.test.ts); what the catalog cannot
  ;; say, that a name must not be blank, is checked here.
  (is (has (tool "describe_symbol" "symbol" "  ") "\"symbol\" argument of describe_symbol is empty"))
  (is (has (tool "apropos_search" "pattern" "") "\"pattern\" argument of apropos_search is empty"))
  (is (has (tool "method_specializers" "generic_function" "")
           "\"generic_function\" argument of method_specializers is empty"))
  (is (has (tool "get_last_error" "unexpected" t) "Unknown argument \"unexpected\"" "takes no arguments"))
  ;; JSON null reads as NIL: the default applies.
  (is (ok-p (tool "get_repl_history" "limit" :null)))
  (is (error-p (tool* "describe_symbol" '(("symbol" . "car")) :package 42)))
  (is (error-p (tool* "describe_symbol" '(("symbol" . "car")) :package "NO-SUCH-REPL-PACKAGE")))
  (is (error-p (tool* "eval_form" '(("form" . "1")) :timeout "soon")))
  (is (error-p (tool* "eval_form" '(("form" . "1")) :timeout -1)))
  ;; Lenient where it costs nothing: keyword keys, dashes for underscores.
  (is (ok-p (tool* "describe_symbol" '((:symbol . "car")))))
  (is (has (tool "list_package_symbols" "package" "MY-APP" "include-internal" t) "SPLIT-ON-COMMAS")))

(deftest concurrent-calls
  (:needs :threads)
  ;; SLYNK/SWANK run each request in its own worker thread.
  (let* ((before sly-agent-q::*history-counter*)
         (results (make-array 4 :initial-element nil))
         (threads (loop for i below 4
                        collect (let ((i i))
                                  (make-thread
                                   (lambda ()
                                     (setf (aref results i)
                                           (loop repeat 10
                                                 collect (tool "eval_form" "form"
                                                               (format nil "(* ~D 2)" i))
                                                 collect (tool "describe_symbol"
                                                               "symbol" "my-app:process-data"))))
                                   :name (format nil "saq worker ~D" i))))))
    (dolist (thread threads) (join-thread thread :default nil :timeout 60))
    (is (every (lambda (list) (and (= 20 (length list)) (every #'ok-p list)))
               (coerce results 'list)))
    (is (= (+ before 40) sly-agent-q::*history-counter*))))

(deftest loading-twice-is-harmless
  (let ((before (length sly-agent-q::*history*)))
    (let ((*standard-output* (make-broadcast-stream))
          (*error-output* (make-broadcast-stream)))
      (load (merge-pathnames "lisp-cl/load.lisp" *root*)))
    (is (= before (length sly-agent-q::*history*)))
    (is (string= "Value: 2" (text (tool "eval_form" "form" "(1+ 1)"))))))


;;;; The spec's end-to-end scenarios, at the tool level

(deftest scenario-1-describe-process-data
  (let ((r (tool "describe_symbol" "symbol" "PROCESS-DATA" "package" "MY-APP")))
    (is (ok-p r))
    (is (has r "Function:" "Documentation:" "Defined at:"))))

(deftest scenario-2-fix-parse-input
  (unwind-protect
       (progn
         (is (has (tool "describe_symbol" "symbol" "my-app:parse-input") "comma-separated"))
         (is (error-p (tool "eval_form" "form" "(parse-input \"\")" "package" "MY-APP")))
         (let ((r (tool "compile_form" "package" "MY-APP" "form"
                        "(defun parse-input (string)
  \"Parse STRING, comma-separated integers such as \\\"1, 2, 3\\\", into a list of integers.\"
  (if (string= \"\" (string-trim \" \" string))
      '()
      (mapcar (lambda (field) (parse-integer (string-trim \" \" field)))
              (split-on-commas string))))")))
           (is (ok-p r))
           (is (has r "Compiled and loaded 1 form")))
         (is (string= "Value: NIL" (text (tool "eval_form" "form" "(parse-input \"\")" "package" "MY-APP"))))
         (is (has (tool "eval_form" "form" "(parse-input \"1, 2,3\")" "package" "MY-APP") "(1 2 3)")))
    (reload-fixture)))

(deftest scenario-3-serialize-my-class
  (let ((gf (symbol-function (find-symbol "SERIALIZE" "MY-APP"))))
    (unwind-protect
         (progn
           (is (has (tool "class_slots" "class" "my-app:my-class") "NAME" "ITEMS"))
           (is (not (has (tool "method_specializers" "generic_function" "my-app:serialize")
                         "MY-CLASS")))
           (is (ok-p (tool "compile_form" "package" "MY-APP" "form"
                           "(defmethod serialize ((object my-class) stream)
  (format stream \"{~S: \" (my-class-name object))
  (serialize (my-class-items object) stream)
  (write-string \"}\" stream))")))
           (is (has (tool "eval_form" "package" "MY-APP" "form"
                          "(serialize-to-string (make-instance 'my-class :name \"n\" :items '(1 2)))")
                    "\"{\\\"n\\\": [1, 2]}\""))
           (is (has (tool "method_specializers" "generic_function" "serialize" "package" "MY-APP")
                    "4 methods" "(MY-APP:MY-CLASS T)")))
      (let ((method (find-method gf '() (list (find-class (find-symbol "MY-CLASS" "MY-APP"))
                                               (find-class t))
                                 nil)))
        (when method (remove-method gf method))))))


;;;; The programmer's loop: source, systems, tests

(defvar *project* nil "A temporary project root holding a copy of MY-APP.")

(defun project-file (name)
  (merge-pathnames name *project*))

(defun file-text (file)
  (with-open-file (in file :external-format (sly-agent-q::utf-8-format))
    (let* ((s (make-string (file-length in))) (n (read-sequence s in))) (subseq s 0 n))))

(defun write-text (file text)
  (with-open-file (out file :direction :output :if-exists :supersede
                                 :external-format (sly-agent-q::utf-8-format))
    (write-string text out)))

(defun replace-all (text old new)
  "TEXT with every OLD replaced by NEW."
  (with-output-to-string (out)
    (loop with start = 0
          for at = (search old text :start2 start)
          do (write-string text out :start start :end (or at (length text)))
             (if at (progn (write-string new out) (setf start (+ at (length old)))) (return)))))

(defun append-text (file text)
  (write-text file (concatenate 'string (file-text file) text)))

(defun call-with-project (function)
  "Call FUNCTION with MY-APP copied to a fresh project root, its .asd
loaded and the system loaded from there; MY-APP is restored after."
  (let ((*project* (pathname (format nil "/tmp/saq-cl-project-~36R/" (random (expt 36 8) (make-random-state t))))))
    (ensure-directories-exist *project*)
    (dolist (name '("my-app.asd" "package.lisp" "my-app.lisp" "tests.lisp"))
      (write-text (project-file name)
                  (file-text (merge-pathnames (concatenate 'string "test/fixtures/my-app/" name) *root*))))
    (unwind-protect
         (let ((*standard-output* (make-broadcast-stream)))
           (funcall (find-symbol "LOAD-ASD" "ASDF") (project-file "my-app.asd"))
           (funcall function))
      (dolist (name '("my-app" "my-app/tests"))
        (ignore-errors (funcall (find-symbol "CLEAR-SYSTEM" "ASDF") name)))
      (ignore-errors (funcall (find-symbol "DELETE-DIRECTORY-TREE" "UIOP") *project* :validate t))
      (reload-fixture))))

(defmacro with-project (() &body body)
  `(call-with-project (lambda () ,@body)))

(defparameter *fixed-parse-input*
  "(defun parse-input (string)
  \"Parse STRING into a list of integers; NIL when it is blank.\"
  (unless (string= \"\" (string-trim \" \" string))
    (mapcar (lambda (field) (parse-integer (string-trim \" \" field)))
            (split-on-commas string))))")

(deftest systems-list-load-info
  (with-project ()
    (let ((r (tool "list_systems" "directory" (namestring *project*))))
      (is (ok-p r))
      (is (has r "Systems under" "my-app, my-app/tests" "systems registered")))
    (let ((r (tool "load_system" "system" "my-app")))
      (is (ok-p r))
      (is (has r "Loaded my-app with asdf:load-system")))
    (let ((r (tool "system_info" "system" "MY-APP")))
      (is (has r "System my-app 0.1.0 (loaded)" "my-app.asd" "package.lisp" "my-app.lisp")))
    (is (has (tool "system_info" "system" "my-ap") "ASDF knows no system" "my-app"))))

;; system_info and list_systems are safe tools (run without approval,
;; even while the model's answer streams): they must never run the code
;; of an .asd file.
(defvar *planted-asd-runs* 0
  "How many times the first form of an .asd file planted by
safe-system-tools-never-read-a-system-definition ran.")

(defun plant-asd (directory name)
  "Write DIRECTORY/NAME.asd, whose first form counts in *PLANTED-ASD-RUNS*;
return its pathname."
  (let ((file (merge-pathnames (make-pathname :name name :type "asd") directory)))
    (ensure-directories-exist file)
    (write-text file (format nil "(incf sly-agent-q-tests::*planted-asd-runs*)~%~
                                  (asdf:defsystem ~S :version \"0.0.1\")~%" name))
    file))

(deftest safe-system-tools-never-read-a-system-definition
  (let* ((root (pathname (format nil "/tmp/saq-cl-asd-~36R/" (random (expt 36 8) (make-random-state t)))))
         (in-source (plant-asd (merge-pathnames "source/" root) "saq-planted-source"))
         (in-central (plant-asd (merge-pathnames "central/" root) "saq-planted-central"))
         (registered (plant-asd (merge-pathnames "registered/" root) "saq-planted-registered"))
         (parameter (find-symbol "*SOURCE-REGISTRY-PARAMETER*" "ASDF"))
         (saved (symbol-value parameter))
         (central (find-symbol "*CENTRAL-REGISTRY*" "ASDF"))
         (*planted-asd-runs* 0))
    (unwind-protect
         (progv (list central) (list (cons (merge-pathnames "central/" root) (symbol-value central)))
           (let ((*standard-output* (make-broadcast-stream)))
             (funcall (find-symbol "INITIALIZE-SOURCE-REGISTRY" "ASDF")
                      `(:source-registry (:directory ,(merge-pathnames "source/" root))
                                         :inherit-configuration))
             (funcall (find-symbol "LOAD-ASD" "ASDF") registered))
           (is (= 1 *planted-asd-runs*))
           (setf *planted-asd-runs* 0)
           ;; Not registered, found by ASDF's source registry or its central
           ;; registry: named, with its file, and not read.
           (dolist (asd (list in-source in-central))
             (let ((r (tool "system_info" "system" (pathname-name asd))))
               (is (= 0 *planted-asd-runs*))
               (is (ok-p r))
               (is (has r (format nil "System ~A is not loaded" (pathname-name asd))
                        (namestring (truename asd))
                        "not read" "reading a system definition runs its code"
                        "load_system (which asks for approval)"))))
           ;; Registered, its .asd then changed on disk: not read again.
           (sleep 1.1)
           (append-text registered (format nil "~%;; changed~%"))
           (is (has (tool "list_systems") "saq-planted-registered"))
           (is (has (tool "list_systems" "directory" (namestring root)) "Systems under" "saq-planted-registered"))
           (is (has (tool "system_info" "system" "saq-planted-registered")
                    "System saq-planted-registered 0.0.1" "saq-planted-registered.asd"))
           (is (= 0 *planted-asd-runs*))
           ;; load_system (cautious: asked for) still finds and reads one.
           (is (has (tool "load_system" "system" "saq-planted-source") "Loaded saq-planted-source"))
           (is (= 1 *planted-asd-runs*)))
      (dolist (name '("saq-planted-source" "saq-planted-central" "saq-planted-registered"))
        (ignore-errors (funcall (find-symbol "CLEAR-SYSTEM" "ASDF") name)))
      (setf (symbol-value parameter) saved)
      (funcall (find-symbol "CLEAR-SOURCE-REGISTRY" "ASDF"))
      (ignore-errors (funcall (find-symbol "DELETE-DIRECTORY-TREE" "UIOP") root :validate t)))))

(deftest compile-form-after-a-compiled-system
  ;; ECL crashed the image here (a signal queued while interrupts were
  ;; disabled): the system compiled with COMPILE-FILE, then compile_form
  ;; and trace_eval, and the image must still answer.
  (with-project ()
    (is (ok-p (tool "load_system" "system" "my-app")))
    (dotimes (i 3)
      (let ((r (tool "compile_form" "package" "MY-APP"
                     "form" (format nil "(defun saq-after-system-~D (x) (* ~D x))" i i))))
        (is (ok-p r))
        (is (has r "Compiled and loaded"))))
    (is (has (tool "eval_form" "package" "MY-APP" "form" "(saq-after-system-2 21)") "Value: 42"))
    (is (has (tool "trace_eval" "functions" '("my-app::split-on-commas") "package" "MY-APP"
                   "form" "(parse-input \"1, 2\")")
             "SPLIT-ON-COMMAS" "untraced now"))
    (is (has (tool "eval_form" "form" "(+ 1 2)") "Value: 3"))))

(deftest compile-form-again-and-again-after-compiled-systems
  ;; The same, harder: the system compiled with COMPILE-FILE and loaded
  ;; again each round (a changed file), then compile_form and eval_form
  ;; several times.  An image that crashes ends the run here.
  (with-project ()
    (dotimes (round 3)
      ;; File dates count seconds: a change within the second of the
      ;; last compilation would not be seen by ASDF.
      (sleep 1.1)
      (append-text (project-file "my-app.lisp")
                   (format nil "~%(defun saq-round-~D () ~D)~%" round round))
      (is (has (tool "load_system" "system" "my-app") "Loaded my-app"))
      (dotimes (i 6)
        (is (has (tool "compile_form" "package" "MY-APP"
                       "form" (format nil "(defun saq-again-~D (x) (+ x ~D ~D))" i i round))
                 "Compiled and loaded"))
        (is (has (tool "eval_form" "package" "MY-APP"
                       "form" (format nil "(list (saq-again-~D 100) (saq-round-~D))" i round))
                 (format nil "(~D ~D)" (+ 100 i round) round)))))
    (is (has (tool "eval_form" "form" "(+ 1 2)") "Value: 3"))))

(deftest load-system-reports-warnings-per-file-and-form
  (with-project ()
    (append-text (project-file "my-app.lisp")
                 (format nil "~%(defun uses-undefined (x)~%  (+ x *no-such-variable*))~%"))
    (let ((r (tool "load_system" "system" "my-app")))
      (is (ok-p r))
      (is (has r "my-app.lisp:" "WARNING" "(defun uses-undefined (x)" "*NO-SUCH-VARIABLE*")))))

(deftest load-system-reports-a-failure-without-the-debugger
  (with-project ()
    (append-text (project-file "my-app.lisp")
                 (format nil "~%(defun broken (x)~%  (let ((y)) (+ x y))~%"))
    (let ((r (tool "load_system" "system" "my-app")))
      (is (has r "FAILED")))))

(deftest run-tests-of-a-system-suite-and-test
  (with-project ()
    (let ((r (tool "run_tests" "system" "my-app")))
      (is (ok-p r))
      (is (has r "FiveAM: 4 tests, 4 checks: 3 passed, 0 failed, 1 error"
               "FAIL MY-APP-TESTS::PARSE-EMPTY" "condition:")))
    (let ((r (tool "run_tests" "test" "parse-empty" "package" "MY-APP-TESTS")))
      (is (has r "1 test, 1 check" "PARSE-EMPTY")))
    (let ((r (tool "run_tests" "suite" "my-app-tests::my-app")))
      (is (has r "4 tests")))
    ;; A failing check: its form and the values.
    (is (ok-p (tool "eval_form" "package" "MY-APP-TESTS"
                    "form" "(test wrong-sum (is (= 5 (+ 2 2))))")))
    (let ((r (tool "run_tests" "test" "my-app-tests::wrong-sum")))
      (is (has r "0 passed, 1 failed" "form: (= 5 (+ 2 2))" "evaluated to 4")))
    ;; The framework's debug switches are off for the run, whatever the user set.
    (let ((on-failure (find-symbol "*ON-FAILURE*" "FIVEAM")))
      ;; Checked outside: a failing check under :DEBUG would stop this run.
      (is (has (progv (list on-failure) (list :debug)
                 (tool "run_tests" "test" "my-app-tests::wrong-sum"))
               "1 failed")))
    (is (has (tool "run_tests") "Give a system"))))

(defun set-test-op (form)
  "Make the project's my-app/tests test-op run FORM (text, where RUN! is
FiveAM's run of the suite), and load the changed .asd."
  (let* ((file (project-file "my-app.asd"))
         (text (file-text file))
         (old "(uiop:symbol-call :fiveam :run! (uiop:find-symbol* :my-app :my-app-tests))")
         (start (search old text)))
    (assert start)
    (write-text file (concatenate 'string (subseq text 0 start) form (subseq text (+ start (length old)))))
    (let ((*standard-output* (make-broadcast-stream)))
      (funcall (find-symbol "LOAD-ASD" "ASDF") file))))

(deftest run-tests-reports-every-fiveam-idiom
  ;; Whatever the test-op does after the run (signals, returns NIL, prints
  ;; its own report), the counts and the failing test are what the model sees.
  (dolist (idiom '(("signals" "(unless (uiop:symbol-call :fiveam :run! (uiop:find-symbol* :my-app :my-app-tests)) (error \"tests failed\"))"
                    "SIMPLE-ERROR: tests failed")
                   ("returns nil" "(progn (uiop:symbol-call :fiveam :run! (uiop:find-symbol* :my-app :my-app-tests)) nil)" nil)
                   ("run without explain, then signals"
                    "(let ((results (uiop:symbol-call :fiveam :run (uiop:find-symbol* :my-app :my-app-tests)))) (unless (every (lambda (r) (typep r (uiop:find-symbol* :test-passed :fiveam))) results) (error \"~D failures\" 1)))"
                    "SIMPLE-ERROR: 1 failures")))
    (destructuring-bind (name form stopped) idiom
      (with-project ()
        (set-test-op form)
        (let ((r (tool "run_tests" "system" "my-app")))
          (is (has r "FiveAM: 4 tests, 4 checks: 3 passed, 0 failed, 1 error" "FAIL MY-APP-TESTS::PARSE-EMPTY")
              "idiom ~A" name)
          (is (not (search "No FiveAM results were seen" (text r))) "idiom ~A" name)
          (when stopped (is (has r stopped) "idiom ~A: ~A" name (text r))))))))

;;; run_tests on real libraries from Debian (scripts/ensure-deps.sh):
;;; each verdict is compared with the framework's own, run directly in
;;; this image.

(defun integer-after (key text &key (start 0))
  "The integer written right after the first KEY in TEXT from START, or NIL."
  (let ((at (search key text :start2 start)))
    (and at (values (parse-integer text :start (+ at (length key)) :junk-allowed t)))))

(defun printed-by (function)
  "What FUNCTION printed (standard output and FiveAM's dribble), and its first value."
  (let* ((out (make-string-output-stream))
         (value (let ((*standard-output* out) (*error-output* out) (*test-dribble* out))
                  (funcall function))))
    (values (get-output-stream-string out) value)))

(defun integers-after (key text)
  "The integers on the line of TEXT after the first KEY, in order."
  (let* ((at (search key text))
         (end (and at (or (position #\Newline text :start at) (length text)))))
    (when at
      (loop with i = (+ at (length key))
            while (< i end)
            if (digit-char-p (char text i))
              collect (multiple-value-bind (n next) (parse-integer text :start i :junk-allowed t)
                        (setf i next) n)
            else do (incf i)))))

(deftest run-tests-counts-fiveams-own-suite-as-fiveam-does
  ;; FiveAM's own tests run FiveAM inside tests: only the outermost run counts.
  ;; The time limits allow for ECL's first compilation of the library through gcc.
  (let* ((r (tool* "run_tests" '(("system" . "fiveam")) :timeout 600))
         (text (text r))
         (own (printed-by (lambda () (run! :it.bese.fiveam)))))
    (is (has r "Ran asdf:test-system fiveam: the tests ran with FiveAM." "FiveAM: "))
    (destructuring-bind (&optional tests checks passed failed errors skipped) (integers-after "FiveAM: " text)
      (is (and tests (integer-after "Did " own)) "~A / ~A" own text)
      (when (and tests (integer-after "Did " own))
        (is (eql (integer-after "Did " own) checks) "checks: ~A / ~A" own text)
        (is (eql (integer-after "Pass: " own) passed) "passed: ~A / ~A" own text)
        (is (eql (integer-after "Skip: " own) skipped) "skipped: ~A / ~A" own text)
        ;; FiveAM's Fail counts the checks that signalled too.
        (is (eql (integer-after "Fail: " own) (+ failed errors)) "failed: ~A / ~A" own text)))
    (is (not (search "Run 2 of" text)))))

(defun rt-failed-count (own)
  "How many tests RT's report OWN says failed."
  (if (search "No tests failed." own)
      0
      (let ((at (search " out of " own)))
        (and at (parse-integer own :start (1+ (or (position #\Newline own :end at :from-end t) -1))
                                   :end at)))))

(defun rt-unexpected-count (own)
  "How many of the failures RT's report OWN says were not expected."
  (let ((at (search " unexpected failures: " own)))
    (cond ((or (search "No tests failed." own) (search "No unexpected failures." own)) 0)
          (at (parse-integer own :start (1+ (or (position #\Newline own :end at :from-end t) -1)) :end at))
          (t (rt-failed-count own)))))

(deftest run-tests-counts-an-rt-suite-as-rt-does
  (:needs :iterate-tests)
  ;; iterate's tests run on SB-RT (on SBCL; RT elsewhere), some tests expected to fail.
  (let* ((framework #+sbcl "SB-RT" #-sbcl "RT")
         (r (tool* "run_tests" '(("system" . "iterate")) :timeout 600))
         (text (text r))
         (own (and (find-package "ITERATE.TEST")
                   (printed-by (lambda () (uiop:symbol-call '#:iterate.test '#:do-iterate-tests :on-failure nil))))))
    (is (has r (format nil "Ran asdf:test-system iterate: the tests ran with ~A." framework)) "~A" text)
    (unless own (setf own ""))
    (destructuring-bind (&optional tests passed failed expected skipped)
        (integers-after (format nil "~A: " framework) text)
      (is (and tests (integer-after "tests of " own) (rt-failed-count own)) "~A / ~A" own text)
      (when (and tests (integer-after "tests of " own) (rt-failed-count own))
        (is (eql (integer-after "tests of " own) tests) "tests: ~A / ~A" own text)
        (is (eql (rt-failed-count own) failed) "failed: ~A / ~A" own text)
        (unless (search "expected failures" text) (setf skipped expected expected 0))
        (is (eql (rt-unexpected-count own) (- failed expected)) "expected failures: ~A / ~A" own text)
        (is (eql tests (+ passed failed skipped)))
        ;; Each failure with what RT said of it.
        (when (plusp failed)
          (is (has r "FAIL " "Form: " "Expected value" "Actual value")))
        (when (plusp expected)
          (is (eql expected (occurrences "(expected to fail)" r))))))))

(deftest run-tests-of-a-system-with-its-own-runner
  (:needs :quick-compiled-code)
  ;; cl-ppcre's tests are its own loop: no framework named, its verdict line shown.
  ;; The time limit allows for ECL's first compilation of cl-ppcre through gcc.
  (let* ((r (tool* "run_tests" '(("system" . "cl-ppcre")) :timeout 600))
         (text (text r)))
    (is (has r "Ran asdf:test-system cl-ppcre: the tests ran with its own runner"
             "Compiling and loading the test system: ")
        "~A" text)
    (when (find-package "CL-PPCRE-TEST")
      (multiple-value-bind (own passed)
          (printed-by (lambda () (uiop:symbol-call '#:cl-ppcre-test '#:run-all-tests)))
        (is (eq passed t))
        (is (has r (format nil "its last line: ~S" (sly-agent-q::last-line own))) "~A / ~A" own text)
        (is (has r "All tests passed"))))
    ;; The compiler's log is not in the result unless asked for.
    (is (not (search "; compiling" text)))))

(deftest run-tests-says-which-system-the-tests-need
  (with-project ()
    (let* ((file (project-file "my-app.asd")))
      (write-text file (replace-all (file-text file) "(\"my-app\" \"fiveam\")"
                                    "(\"my-app\" \"fiveam\" \"saq-no-such-system\")"))
      (let ((*standard-output* (make-broadcast-stream)))
        (funcall (find-symbol "LOAD-ASD" "ASDF") file))
      (let ((r (tool "run_tests" "system" "my-app")))
        (is (has r "Did not run asdf:test-system my-app."
                 "The tests need saq-no-such-system, which ASDF cannot find")
            "~A" (text r))))))

(deftest run-tests-keeps-the-compilers-log-apart
  (dolist (show '(nil t))
    (with-project ()
      ;; A style warning every Lisp's compiler passes on (an undefined function is one only in some).
      (append-text (project-file "tests.lisp")
                   (format nil "~%(eval-when (:compile-toplevel)~%  (define-condition saq-compile-note (style-warning) ()~%    (:report \"SAQ-COMPILE-NOTE: a note while compiling the tests\"))~%  (warn 'saq-compile-note))~%"))
      (let* ((r (if show
                    (tool "run_tests" "system" "my-app" "compile_log" t)
                    (tool "run_tests" "system" "my-app")))
             (text (text r)))
        (is (has r "FiveAM: 4 tests, 4 checks: 3 passed, 0 failed, 1 error"))
        (is (not (search "Compiling and loading the test system: 0 warnings, 0 style warnings" text)) "~A" text)
        (is (eq show (and (search "SAQ-COMPILE-NOTE" text) t)) "compile_log ~A: ~A" show text)
        (is (eq show (and (search "The compiler's log" text) t)))))))

(deftest find-and-read-definitions-of-methods
  (:needs :method-source-locations)
  (with-project ()
    (tool "load_system" "system" "my-app")
    (let ((r (tool "find_definition" "symbol" "my-app:serialize")))
      (is (has r "DEFGENERIC" "(DEFMETHOD MY-APP:SERIALIZE INTEGER T)" "(defmethod serialize ((object list) stream)")))
    ;; Several methods: ambiguous until one is named.
    (is (has (tool "definition_edit" "symbol" "my-app:serialize") "4 definitions" "say which"))
    (is (has (tool "definition_edit" "symbol" "my-app:serialize" "definition" "(DEFMETHOD MY-APP:SERIALIZE STRING T)")
             "(defmethod serialize ((object string) stream)" "prin1"))
    ;; An accessor is defined by its class's form (a method of the
    ;; class): not edited as if it were its own.
    (is (has (tool "definition_edit" "symbol" "my-app:my-class-name")
             "inside another definition's form" "(defclass my-class ()"))))

(deftest find-and-read-definitions
  (with-project ()
    (tool "load_system" "system" "my-app")
    (let ((r (tool "find_definition" "symbol" "my-app:parse-input")))
      (is (has r "(DEFUN MY-APP:PARSE-INPUT)" (namestring (project-file "my-app.lisp"))
               "(defun parse-input (string)")))
    (let ((r (tool "definition_edit" "symbol" "my-app:parse-input")))
      (is (ok-p r))
      (is (has r "\"label\":\"(DEFUN MY-APP:PARSE-INPUT)\"" "(defun parse-input (string)"
               "(split-on-commas string)))\"}"))
      (is (not (has r "(defun process-data"))))
    ;; Only checking a text.
    (is (has (tool "definition_edit" "text" "(defun new-one () 1)") "{\"checked\":true,\"readEval\":[]}"))
    (is (has (tool "definition_edit" "text" "(defun new-one () (declare #.*x*) #.(y))")
             "{\"checked\":true,\"readEval\":[\"*x*\",\"(y)\"]}"))
    (is (has (tool "definition_edit" "text" "(defun new-one () 1") "refused"))
    ;; Defined at the REPL: no source.
    (tool "compile_form" "form" "(defun cl-user::saq-repl-only () 1)")
    (is (has (tool "find_definition" "symbol" "cl-user::saq-repl-only") "no source recorded"))
    (is (has (tool "definition_edit" "symbol" "cl-user::saq-repl-only") "no source location"))))

(deftest definitions-of-asdf-loaded-code
  ;; Compiled by ASDF into its output cache, away from the source.
  (with-project ()
    (tool "load_system" "system" "my-app")
    (let ((file (namestring (project-file "my-app.lisp"))))
      (is (has (tool "describe_symbol" "symbol" "my-app:process-data")
               "(DEFUN MY-APP:PROCESS-DATA)" (format nil "~A:42" file)))
      (is (has (tool "describe_symbol" "symbol" "my-app:with-scale")
               "(DEFMACRO MY-APP:WITH-SCALE)" (format nil "~A:22" file)))
      ;; (A Lisp that records no source location for methods says so:
      ;; find-and-read-definitions-of-methods is skipped there.)
      (when (saq-portable:method-source-locations-p)
        (is (has (tool "method_specializers" "generic_function" "serialize" "package" "MY-APP")
                 "(STRING T)  ((OBJECT STRING) STREAM)" (format nil "~A:93" file))))
      ;; (The class may still be recorded in the fixture's file, which
      ;; defined it the same way before.)
      (is (has (tool "find_definition" "symbol" "my-app:my-class")
               "(DEFCLASS MY-APP:MY-CLASS)" "my-app.lisp:63" "(defclass my-class ()")))))

(deftest definition-position-is-the-forms-start
  ;; ECL records where its reader started, before the comments and blank
  ;; lines ahead of the form (its backend marks such locations to be
  ;; aligned): the line a tool reports and the position are the form's.
  (with-project ()
    (append-text (project-file "my-app.lisp")
                 (format nil "~%;; A comment about COMMENTED-FN.~%;; Its second line.~%~%(defun commented-fn (x)~%  x)~%"))
    (is (has (tool "load_system" "system" "my-app") "Loaded my-app"))
    (let* ((file (project-file "my-app.lisp"))
           (text (file-text file))
           (start (search "(defun commented-fn" text))
           (line (1+ (count #\Newline text :end start))))
      (flet ((recorded-position ()
               (let ((definitions (sly-agent-q::definitions-of (find-symbol "COMMENTED-FN" "MY-APP"))))
                 (sly-agent-q::location-char-position (second (first definitions))))))
        (is (has (tool "find_definition" "symbol" "my-app::commented-fn")
                 (format nil "my-app.lisp:~D" line) "(defun commented-fn (x)"))
        (is (eql (1+ start) (recorded-position)))
        ;; Compiled again from the file, as replace_definition does.
        (is (has (tool "compile_file_form" "path" (namestring file)
                       "text" (format nil "(defun commented-fn (x)~%  x)"))
                 "Compiled"))
        (is (eql (1+ start) (recorded-position)))
        (is (has (tool "find_definition" "symbol" "my-app::commented-fn")
                 (format nil "my-app.lisp:~D" line)))))))

(deftest definition-edit-checks-the-text-and-the-file
  (with-project ()
    (tool "load_system" "system" "my-app")
    (let ((r (tool "definition_edit" "symbol" "my-app:parse-input" "text" *fixed-parse-input*)))
      (is (ok-p r))
      (is (has r "\"file\":" "my-app.lisp" "\"old\":\"(defun parse-input (string)\\n")))
    (is (has (tool "definition_edit" "symbol" "my-app:parse-input" "text" "(defun parse-input (s) (list s)")
             "refused" "unbalanced"))
    (is (has (tool "definition_edit" "symbol" "my-app:parse-input" "text" "(defun parse-input (s) \"open)")
             "refused" "unterminated string"))
    (is (has (tool "definition_edit" "symbol" "my-app:parse-input" "text" "(defun a ()) (defun b ())")
             "refused" "2 forms"))
    ;; A #. form is read, never evaluated: named as new (the old form has none), nothing interned.
    (let ((before (symbol-function (find-symbol "PARSE-INPUT" "MY-APP"))))
      (dolist (text '("(defun parse-input (s) #.(progn (setf cl-user::*saq-evaluated* t) s))"
                      "(defun parse-input (s) #+saq-no-such-feature #.(setf cl-user::*saq-evaluated* t) s)"
                      "(defun parse-input (s) #+#.(setf cl-user::*saq-evaluated* t) s s)"))
        (let ((r (tool "definition_edit" "symbol" "my-app:parse-input" "text" text)))
          (is (ok-p r))
          (is (has r "\"readEvalNew\":[\"" "(setf cl-user::*saq-evaluated* t"))))
      (is (null (find-symbol "*SAQ-EVALUATED*" "COMMON-LISP-USER")))
      (is (eq before (symbol-function (find-symbol "PARSE-INPUT" "MY-APP")))))
    (is (has (tool "definition_edit" "symbol" "my-app:parse-input" "text" *fixed-parse-input*)
             "\"readEval\":[],\"readEvalNew\":[]"))
    ;; The file changed since it was loaded, and the definition is no longer in it.
    (let ((text (file-text (project-file "my-app.lisp"))))
      (write-text (project-file "my-app.lisp")
                  (concatenate 'string (format nil "(defun inserted-first () 1)~%~%~%~%~%~%~%~%")
                               (replace-all text "(defun parse-input " "(defun parse-input-renamed ")))
      (is (has (tool "definition_edit" "symbol" "my-app:parse-input" "text" *fixed-parse-input*)
               "not the definition of MY-APP:PARSE-INPUT any more")))))

(deftest definition-edit-keeps-the-files-read-time-forms
  ;; A definition declaring #.*SETTINGS* (as cl-ppcre's do): an edit with the same #. forms, laid out
  ;; differently, has none new; one with another is named; compiled from the file, the #. is read
  ;; as loading the file reads it.
  (with-project ()
    (let ((file (project-file "my-app.lisp")))
      (append-text file (format nil "~%(eval-when (:compile-toplevel :load-toplevel :execute)~%  (defparameter *saq-settings* '(optimize (speed 1))))~%~%~
                                     (defun saq-declared (x)~%  (declare #.*saq-settings*)~%  (1+ x))~%"))
      (is (has (tool "load_system" "system" "my-app") "Loaded my-app"))
      (let* ((new (format nil "(defun saq-declared (x)~%  \"Two more than X.\"~%  (declare #.*saq-settings*   )~%  (+ x 2))"))
             (r (tool "definition_edit" "symbol" "my-app::saq-declared" "text" new)))
        (is (ok-p r))
        (is (has r "\"readEval\":[\"*saq-settings*\"],\"readEvalNew\":[]"))
        (is (has (tool "definition_edit" "symbol" "my-app::saq-declared"
                       "text" "(defun saq-declared (x) (declare #.*saq-other*) (declare #.*saq-settings*) x)")
                 "\"readEvalNew\":[\"*saq-other*\"]"))
        (let ((text (file-text file)))
          (write-text file (replace-all text (format nil "(defun saq-declared (x)~%  (declare #.*saq-settings*)~%  (1+ x))") new)))
        (let ((*read-eval* nil))
          (is (has (tool "compile_file_form" "path" (namestring file) "text" new) "Compiled")))
        (is (eql 5 (funcall (find-symbol "SAQ-DECLARED" "MY-APP") 3)))
        ;; A text whose reading stops cannot say which #. forms it has: refused, unless for the
        ;; form an edit replaces, whose forms found so far are kept (the others are then shown).
        (is (search "cannot be told apart"
                    (handler-case (progn (sly-agent-q::read-eval-forms "(a #.*x* (b #.(c)") "read")
                      (sly-agent-q::tool-error (e) (sly-agent-q::tool-error-message e)))))
        (is (equal '("*x*" "(c)") (sly-agent-q::read-eval-forms "(a #.*x* (b #.(c)" :partial t)))
        (is (equal "Two more than X." (documentation (find-symbol "SAQ-DECLARED" "MY-APP") 'function)))))))

(deftest read-eval-new-compares-the-forms-exactly
  ;; A #. the old form never evaluates, or one differing from the old in anything but where it
  ;; stands, is new: shown in the approval (red team rt61: each of these was counted as kept).
  (flet ((new (new old) (sly-agent-q::new-read-eval-forms new old)))
    ;; Dormant behind #+nil in the old form; the new one enables it.
    (is (equal '("(progn (evil) 1)")
               (new "(defun f () #.(progn (evil) 1))" "(defun f () #+nil #.(progn (evil) 1) 1)")))
    ;; The newline ending a ; comment moved: (evil) leaves the comment.
    (is (new (format nil "(defun f () #.(progn ;~% (evil) 1))")
             (format nil "(defun f () #.(progn ; (evil)~% 1))")))
    ;; An escaped \" and a string whose inner layout changed.
    (is (new (format nil "(defun f () #.(progn '\\\" (eval (read-from-string \"(progn ;~% (evil))\"))))")
             (format nil "(defun f () #.(progn '\\\" (eval (read-from-string \"(progn ; (evil)~%)\"))))")))
    ;; An escaped blank in a symbol: 'evil\  x is not 'evil\ x.
    (is (new "(defun f () #.(list 'evil\\  x))" "(defun f () #.(list 'evil\\ x))"))
    ;; The same text, kept, is not new; the same #. kept once of twice is new once.
    (is (null (new "(defun f () #.(progn (evil) 1))" "(defun f () #.(progn (evil) 1) 2)")))
    (is (equal '("*x*") (new "(f #.*x* #.*x*)" "(f #.*x*)")))))

(deftest compile-file-form-reads-in-the-files-own-package
  ;; The package is the last real (in-package ...) form before the form, never one in a comment,
  ;; a string or a #| |#; and a text the file holds twice is not compiled at a guessed place.
  (with-project ()
    (let ((file (project-file "saq-package.lisp"))
          (text "(defun saq-rt-h () #.(package-name *package*))"))
      (write-text file (format nil "(in-package :cl-user)~%;; formerly lived in (in-package :sb-impl)~%~
                                    #| (in-package :keyword) |#~%(defvar *saq-s* \"(in-package :cl)\")~%~A~%"
                               text))
      (is (has (tool "compile_file_form" "path" (namestring file) "text" text) "Compiled"))
      (is (equal "COMMON-LISP-USER" (funcall (find-symbol "SAQ-RT-H" "COMMON-LISP-USER"))))
      (is (null (find-symbol "SAQ-RT-H" "COMMON-LISP")))
      (let ((twice "(defun saq-rt-twice () 1)"))
        (write-text file (format nil "(in-package :cl-user)~%~A~%(in-package :my-app)~%~A~%" twice twice))
        (is (has (tool "compile_file_form" "path" (namestring file) "text" twice) "more than once"))
        (is (null (find-symbol "SAQ-RT-TWICE" "COMMON-LISP-USER")))))))

(defvar cl-user::*saq-constructed* 0)
(defstruct (cl-user::saq-trap) (x (incf cl-user::*saq-constructed*)))

(deftest model-text-never-constructs-a-structure-as-it-is-read
  ;; #S calls a structure's constructor (its initforms run) even with *READ-EVAL* NIL, and SBCL reads
  ;; a feature expression without suppression: the tools that must not run code refuse it.
  (setf cl-user::*saq-constructed* 0)
  (dolist (text '("(defun f () #+#S(cl-user::saq-trap) 1 2)"
                  "(defun f () #-(and #S(cl-user::saq-trap)) 1)"))
    (let ((result (tool "definition_edit" "text" text)))
      ;; ECL reads a feature expression skipped as the form it guards is: its #S builds
      ;; nothing, and the text is accepted (the count below says nothing was constructed).
      (is (or (has result "#S(...) calls a structure's constructor")
              #+ecl (ok-p result)))))
  ;; Read suppressed, as definition_edit checks a form, #S constructs nothing: the text is shown
  ;; for approval before it is compiled.
  (is (ok-p (tool "definition_edit" "text" "(defun f () (list #S(cl-user::saq-trap)))")))
  (is (has (tool "macroexpand_form" "form" "(list #S(cl-user::saq-trap))") "#S(...) calls"))
  (is (has (tool "macroexpand_form" "form" "(list #+#S(cl-user::saq-trap) 1)") "#S(...) calls"))
  (is (eql 0 cl-user::*saq-constructed*)))

(deftest definition-edit-finds-a-definition-moved-in-its-file
  ;; Text added above a definition after it was loaded (a checkout, another editor) moves it: the
  ;; recorded position is stale (ECL records a character position, SBCL a top-level form's number).
  ;; The only form of the file defining it the same way is the one to edit; two, or none, is refused.
  (with-project ()
    (tool "load_system" "system" "my-app")
    (let* ((file (project-file "my-app.lisp"))
           (text (file-text file)))
      (flet ((edit-with (new-text)
               (write-text file new-text)
               (tool "definition_edit" "symbol" "my-app:parse-input" "text" *fixed-parse-input*))
             (line-of-parse-input (new-text)
               (1+ (count #\Newline new-text :end (search "(defun parse-input " new-text))))
             (recorded-place-names-it-p ()
               ;; SBCL's backend finds a moved form by its text itself: the refusals below
               ;; are of a stale place (ECL's).
               (let* ((location (second (first (sly-agent-q::definitions-of
                                                 (find-symbol "PARSE-INPUT" "MY-APP")))))
                      (position (sly-agent-q::location-char-position location))
                      (now (file-text file)))
                 (and position (<= position (length now))
                      (search "parse-input" now :start2 (1- position)
                                                :end2 (min (length now) (+ position 40)))))))
        (dolist (above (list (format nil ";;; Changed outside Emacs.~%")
                             (format nil "(defun inserted-first () 1)~%~%~%~%~%~%~%~%")))
          (let* ((new-text (concatenate 'string above text))
                 (r (edit-with new-text)))
            (is (ok-p r))
            (is (has r (format nil "\"line\":~D," (line-of-parse-input new-text))
                     "\"old\":\"(defun parse-input (string)\\n"))))
        ;; Two forms defining it: which one is meant is not known.
        (let* ((new-text (format nil "(defun inserted-first () 1)~%~A~%(defun parse-input (s) s)~%" text))
               (r (edit-with new-text)))
          (unless (recorded-place-names-it-p)
            (is (has r "not the definition of MY-APP:PARSE-INPUT any more"))))
        ;; Defined another way now (a macro): not the function's form.
        (let* ((new-text (format nil "(defun inserted-first () 1)~%~A"
                                (replace-all text "(defun parse-input " "(defmacro parse-input ")))
               (r (edit-with new-text)))
          (unless (recorded-place-names-it-p)
            (is (has r "not the definition of MY-APP:PARSE-INPUT any more"))))))))

(deftest compile-file-form-records-the-file
  (with-project ()
    (tool "load_system" "system" "my-app")
    (let* ((file (project-file "my-app.lisp"))
           (text (file-text file))
           (start (search "(defun parse-input" text))
           (end (+ (search "(split-on-commas string)))" text) (length "(split-on-commas string)))"))))
      (write-text file (concatenate 'string (subseq text 0 start) *fixed-parse-input* (subseq text end)))
      (let ((r (tool "compile_file_form" "path" (namestring file) "text" *fixed-parse-input*)))
        (is (ok-p r))
        (is (has r "Compiled" "its source is now that file")))
      (is (equal '() (funcall (find-symbol "PARSE-INPUT" "MY-APP") "")))
      (is (has (tool "definition_edit" "symbol" "my-app:parse-input") "NIL when it is blank"))
      (is (has (tool "run_tests" "system" "my-app") "4 passed, 0 failed, 0 errors"))
      (is (has (tool "compile_file_form" "path" (namestring file) "text" "(defun not-in-the-file () 1)")
               "does not hold"))
      (is (has (tool "compile_file_form" "path" "/nonexistent/x.lisp" "text" "(defun x () 1)")
               "does not exist")))))

(deftest xref-refuses-clearly
  ;; Where the backend keeps no cross-reference data, the tools say so.
  (unless (saq-portable:xref-p)
    (let ((r (tool "who_calls" "function" "my-app:process-data")))
      (is (error-p r))
      (is (has r "not available here" "keeps no cross-reference data")))))

(deftest xref-kinds
  (:needs :xref)
  (with-project ()
    (tool "load_system" "system" "my-app")
    (is (has (tool "xref" "kind" "callees" "name" "my-app:process-string")
             "MY-APP:PROCESS-DATA" "MY-APP:PARSE-INPUT"))
    (is (has (tool "xref" "kind" "specializes" "name" "my-app:my-class") "MY-CLASS-NAME"))
    (is (ok-p (tool "xref" "kind" "sets" "name" "my-app:*scale*")))
    (is (has (tool "xref" "kind" "nonsense" "name" "my-app:*scale*") "Unknown xref kind"))))


;;;; image_changes

(defun image-changes (&optional (package "MY-APP"))
  (tool "image_changes" "package" package))

(defun listed-p (result label)
  "True if RESULT lists LABEL as a definition that differs from its file."
  (search (format nil "~%  ~A  " label) (text result)))

(defun stated-count (result)
  "The count image_changes' first line states."
  (let ((text (text result)))
    (if (search "No definition" text :end2 (min 20 (length text)))
        0
        (parse-integer text :junk-allowed t))))

(deftest image-changes-lists-what-no-file-holds
  ;; What the agent compiled or evaluated is listed, with the tool and its
  ;; time; definitions loaded from their files are not; once the text is
  ;; in the file and compiled from there (what replace_definition does),
  ;; the definition is not listed any more.
  (with-project ()
    (tool "load_system" "system" "my-app")
    (is (has (tool "compile_form" "form" "(defun saq-ic-compiled (x) (list :compiled x))" "package" "MY-APP")
             "Compiled"))
    ;; Evaluated as from the REPL, in a thread of its own as SLIME's and SLY's workers: this
    ;; thread is loading the tests' file, which SBCL would record as the source of what it evaluates.
    (flet ((evaluate () (tool "eval_form" "form" "(defun saq-ic-evaluated () :evaluated)" "package" "MY-APP")))
      (is (has (if (saq-portable:threads-p)
                   (saq-portable:join-thread (saq-portable:make-thread #'evaluate))
                   (evaluate))
               "SAQ-IC-EVALUATED")))
    (let ((r (image-changes)))
      (is (ok-p r))
      (is (listed-p r "(DEFUN MY-APP::SAQ-IC-COMPILED)"))
      (is (has r "compiled by compile_form" "its text was never written to a file"))
      (is (listed-p r "(DEFUN MY-APP::SAQ-IC-EVALUATED)"))
      (is (has r "eval_form by the agent at"))
      (is (not (listed-p r "(DEFUN MY-APP:PARSE-INPUT)")))
      (is (not (listed-p r "(DEFUN MY-APP::PARSE-INPUT)")))
      (is (not (search "PROCESS-DATA)" (text r))))
      (is (<= 2 (stated-count r)))
      (unless (saq-portable:definition-dates-p)
        (is (has r "Not known here"))))
    ;; Written to the file and compiled from it, as replace_definition does.
    (let ((file (project-file "my-app.lisp"))
          (form "(defun saq-ic-compiled (x) (list :in-the-file x))"))
      (append-text file (format nil "~%~A~%" form))
      (is (has (tool "compile_file_form" "path" (namestring file) "text" form) "Compiled"))
      (is (equal '(:in-the-file 1) (funcall (find-symbol "SAQ-IC-COMPILED" "MY-APP") 1)))
      (let ((r (image-changes)))
        (is (not (listed-p r "(DEFUN MY-APP::SAQ-IC-COMPILED)")))
        (is (listed-p r "(DEFUN MY-APP::SAQ-IC-EVALUATED)"))))
    ;; Everything else in the tool's answer is bounded, and a bad package is a clear error.
    (is (has (tool "image_changes" "package" "no-such-package-saq") "no-such-package-saq" "not found"))
    (is (ok-p (tool "image_changes")))))

(deftest image-changes-until-the-fix-is-written-where-it-was
  ;; A fixture function redefined by compile_form is listed; its previous
  ;; place is where definition_edit (replace_definition's first step)
  ;; locates it, though the image's own record now names no file; written
  ;; there and compiled from the file, it is listed no more.
  (with-project ()
    (tool "load_system" "system" "my-app")
    (let ((fix "(defun describe-scale ()
  \"Return a string describing the current *SCALE*.\"
  (format nil \"Scale is now ~A\" *scale*))"))
      (is (has (tool "compile_form" "form" fix "package" "MY-APP") "Compiled"))
      (is (listed-p (image-changes) "(DEFUN MY-APP::DESCRIBE-SCALE)"))
      (let* ((file (project-file "my-app.lisp"))
             (r (tool "definition_edit" "symbol" "my-app::describe-scale" "text" fix)))
        (is (has r "my-app.lisp" "\"old\":\"(defun describe-scale ()"))
        (let* ((text (file-text file))
               (start (search "(defun describe-scale ()" text))
               (end (second (sly-agent-q::form-span-at text (1+ start)))))
          (write-text file (concatenate 'string (subseq text 0 start) fix (subseq text end))))
        (is (has (tool "compile_file_form" "path" (namestring file) "text" fix) "Compiled"))
        (is (search "Scale is now" (funcall (find-symbol "DESCRIBE-SCALE" "MY-APP"))))
        (is (not (listed-p (image-changes) "(DEFUN MY-APP::DESCRIBE-SCALE)")))))))

(deftest image-changes-sees-a-file-changed-after-loading
  (:needs :definition-dates)
  ;; The file's form of a definition changed, or gone, after the file was
  ;; loaded: that definition is listed, and the file's other definitions,
  ;; whose forms did not change, are not (saving after C-c C-c).
  (with-project ()
    (tool "load_system" "system" "my-app")
    (is (not (listed-p (image-changes) "(DEFUN MY-APP:PARSE-INPUT)")))
    (let ((file (project-file "my-app.lisp")))
      ;; The write date has a one-second grain.
      (sleep 1.1)
      (write-text file (replace-all (replace-all (file-text file) "(* item scale)" "(* scale item 1)")
                                    "(defun describe-scale ()" "(defun describe-scale-renamed ()"))
      (let ((r (image-changes)))
        (is (listed-p r "(DEFUN MY-APP:PROCESS-DATA)"))
        (is (has r "changed in the file since it was loaded"))
        (is (listed-p r "(DEFUN MY-APP::DESCRIBE-SCALE)"))
        (is (has r "is no longer in the file"))
        (is (not (listed-p r "(DEFUN MY-APP:PARSE-INPUT)")))
        (is (not (listed-p r "(DEFMACRO MY-APP:WITH-SCALE)")))
        (is (not (search "From files changed on disk" (text r)))))
      ;; Compiled from the file as it is now: no longer listed.
      (let* ((text (file-text file))
             (start (search "(defun process-data" text))
             (end (second (sly-agent-q::form-span-at text (1+ start)))))
        (is (has (tool "compile_file_form" "path" (namestring file) "text" (subseq text start end))
                 "Compiled")))
      (let ((r (image-changes)))
        (is (not (listed-p r "(DEFUN MY-APP:PROCESS-DATA)")))
        (is (listed-p r "(DEFUN MY-APP::DESCRIBE-SCALE)"))))))

(deftest image-changes-of-a-buffer-that-visits-no-file
  ;; C-c C-c in a buffer never saved: the backend's compile-string
  ;; without a file.
  (with-project ()
    (let ((*package* (find-package "MY-APP")))
      (sly-agent-q::bcall (sly-agent-q::compile-string-function)
                          "(defun saq-ic-scratch () :scratch)" :buffer "*scratch-saq*" :position 1
                          :filename nil))
    (is (eq :scratch (funcall (find-symbol "SAQ-IC-SCRATCH" "MY-APP"))))
    (let ((r (image-changes)))
      (is (listed-p r "(DEFUN MY-APP::SAQ-IC-SCRATCH)"))
      (when (saq-portable:buffer-compilations-named-p)
        (is (has r "*scratch-saq*"))))))


;; Evaluated as from the REPL, in a thread of its own as SLIME's and SLY's workers.
(defun eval-as-at-repl (form &optional (package "CL-USER"))
  (flet ((evaluate () (tool "eval_form" "form" form "package" package)))
    (if (saq-portable:threads-p)
        (saq-portable:join-thread (saq-portable:make-thread #'evaluate))
        (evaluate))))

(defun listed-count (result)
  "How many definitions RESULT lists under \"Not as in any file\"."
  (let* ((text (text result))
         (start (search "Not as in any file" text)))
    (if start
        (loop for line-start = (1+ (position #\Newline text :start start)) then (1+ end)
              for end = (or (position #\Newline text :start line-start) (length text))
              while (and (< line-start (length text)) (> end line-start)
                         (string= "  (" (subseq text line-start (min end (+ 3 line-start)))))
              count t)
        0)))

(deftest image-changes-walks-packages-named-like-the-system
  ;; A user's package whose name only starts like one of the
  ;; implementation's (SI, EXT, MP) is the user's, and walked.
  ;; Counted by the packages the walk went through, which the answer's
  ;; first line states: the listing itself stops at 60 entries, and the
  ;; suite's earlier tests leave more than that in some Lisps (CLISP).
  (flet ((packages-walked ()
           (let* ((text (getf (tool "image_changes") :content))
                  (at (search " packages)" text))
                  (from (and at (position #\Space text :end at :from-end t))))
             (and from (parse-integer text :start (1+ from) :end at :junk-allowed t)))))
    (let ((before (packages-walked)))
      (dolist (name '("SIMPLE-SAQ-APP" "EXTRACTOR-SAQ" "MPEG-SAQ"))
        (eval-as-at-repl (format nil "(defpackage #:~A (:use #:cl))" name))
        (eval-as-at-repl "(defun saq-ic-named () :named)" name))
      (is (integerp before))
      (is (eql (packages-walked) (+ before 3))))))

(deftest image-changes-sees-methods-on-others-generic-functions
  (:needs :definition-dates)
  ;; (defmethod print-object ((o my-class) s) ...) at the REPL: a method of
  ;; CL's generic function on a class of the user's package.
  (with-project ()
    (tool "load_system" "system" "my-app")
    (eval-as-at-repl "(defmethod print-object ((o my-class) s) (format s \"#<saq>\"))" "MY-APP")
    (let ((r (image-changes)))
      (is (search "PRINT-OBJECT (MY-APP:MY-CLASS T))  evaluated without a source file" (text r))))))

(deftest image-changes-counts-only-what-is-known-to-differ
  (:needs :definition-dates)
  ;; compile-file + load, C-c C-c of a function with its file, the same
  ;; text saved: the image matches the file, nothing is counted.
  (with-project ()
    (tool "load_system" "system" "my-app")
    (let* ((file (project-file "my-app.lisp"))
           (text (file-text file))
           (start (search "(defun process-data" text))
           (form (subseq text start (second (sly-agent-q::form-span-at text (1+ start))))))
      (let ((*package* (find-package "MY-APP")))
        (sly-agent-q::bcall (sly-agent-q::compile-string-function) form
                            :buffer "my-app.lisp" :position (1+ start) :filename (namestring file)))
      (sleep 1.1)
      (write-text file text)
      (let ((r (image-changes)))
        ;; Earlier tests may have left definitions without a file: the count is
        ;; what the listing of differing ones holds, none of this file's.
        (is (= (listed-count r) (stated-count r)))
        (is (not (search (format nil "~A:" (namestring file)) (text r))))
        (is (not (listed-p r "(DEFUN MY-APP:PROCESS-DATA)")))
        (is (has r "not known"))))))

(deftest image-changes-compares-buffer-text-with-top-level-forms
  (:needs :buffer-compiled-text)
  ;; C-c C-c of text that the file holds only inside a comment.
  (with-project ()
    (tool "load_system" "system" "my-app")
    (let ((file (project-file "my-app.lisp"))
          (form "(defun saq-ic-commented () :commented)"))
      (append-text file (format nil "~%;; ~A~%" form))
      (let ((*package* (find-package "MY-APP")))
        (sly-agent-q::bcall (sly-agent-q::compile-string-function) form
                            :buffer "my-app.lisp" :position 1 :filename (namestring file)))
      (is (listed-p (image-changes) "(DEFUN MY-APP::SAQ-IC-COMMENTED)")))))

(deftest image-changes-bounds-the-whole-by-the-time-limit
  (with-project ()
    (tool "load_system" "system" "my-app")
    (let ((r (let ((sly-agent-q::*image-changes-seconds* 0)) (image-changes))))
      (is (ok-p r))
      (is (has r "stopped at the time limit")))))


;;;; Running

(defun run-tests (&key backend root (suite (format nil "cl-~A" backend)))
  "Run every test in definition order; print one line per test and the
details of failures, and a line \"SKIP: SUITE: TEST: REASON\" for each
test this Lisp cannot do.  Returns the numbers of passed and failed
checks and of skipped tests."
  (let ((*backend* backend)
        (*root* root)
        (passed 0)
        (failed 0)
        (skipped 0)
        (*test-dribble* (make-broadcast-stream)))
    (dolist (name (let ((only (saq-portable:getenv "SAQ_ONLY")))
                    ;; SAQ_ONLY="NAME ...": just those tests, to try one on a Lisp.
                    (if (and only (plusp (length only)))
                        (remove-if-not (lambda (name) (search (format nil " ~(~A~) " name)
                                                              (format nil " ~(~A~) " only)))
                                       *test-order*)
                        *test-order*)))
      (let ((reason (skip-reason name)))
        (if reason
            (progn (format t "~&SKIP: ~A: ~(~A~): ~A~%" suite name reason)
                   (incf skipped))
            (let* ((start (get-internal-real-time))
                   (results (run name))
                   (bad (remove-if (lambda (r) (typep r 'it.bese.fiveam::test-passed)) results))
                   (good (- (length results) (length bad))))
              (incf passed good)
              (incf failed (length bad))
              (format t "~&~:[FAIL~;ok  ~] ~(~A~) (~D check~:P, ~,1Fs)~%"
                      (null bad) name (length results)
                      (/ (- (get-internal-real-time) start) internal-time-units-per-second))
              (when bad
                (let ((*test-dribble* *standard-output*))
                  (explain! bad))))))
      (finish-output))
    (values passed failed skipped)))
