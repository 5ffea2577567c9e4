;;;; compile.lisp --- compile_form and get_compilation_notes.
;;;
;;; compile_form gives the model what C-c C-c gives a programmer: the
;;; file compiler's checks.  The forms are written to a temporary file,
;;; compiled with COMPILE-FILE inside the backend's compilation hooks
;;; (which turn every warning and note into a compiler condition with a
;;; source position, so each note can name the form it belongs to), and
;;; the fasl is loaded.
;;;
;;; Unlike C-c C-c, nothing is loaded when compilation reports an error
;;; (SBCL would otherwise load a function whose body signals "compiled
;;; program error"): the model is told plainly that the previous
;;; definitions are unchanged.  Warnings alone do not prevent loading.

(in-package #:sly-agent-q)

(defvar *cache-directory* nil
  "The directory load.lisp keeps our fasls in, or NIL.  Temporary files
of compile_form go to its tmp/ subdirectory when it is writable.")

(defvar *compilation-notes* nil
  "What the most recent compile_form reported: a plist with :PACKAGE
:FORM :SUMMARY :NOTES (a list of note lines) :TIME.")

(defparameter *notes-limit* 50
  "The most notes one compile result lists.")


;;;; Temporary files

(defvar *temporary-directory* nil
  "Cached result of TEMPORARY-DIRECTORY.")

(defun writable-directory-p (directory)
  (ignore-errors
   (ensure-directories-exist directory)
   (let ((probe (merge-pathnames (format nil "probe-~D.tmp" (random 1000000)) directory)))
     (with-open-file (out probe :direction :output :if-exists :supersede)
       (write-line "probe" out))
     (delete-file probe)
     t)))

(defun temporary-directory ()
  "A writable directory for compile_form's temporary files."
  (or *temporary-directory*
      (setf *temporary-directory*
            (or (let ((dir (and *cache-directory*
                                (merge-pathnames (make-pathname :directory '(:relative "tmp"))
                                                 *cache-directory*))))
                  (and dir (writable-directory-p dir) dir))
                #+sbcl
                (let ((tmp (sb-ext:posix-getenv "TMPDIR")))
                  (and tmp (plusp (length tmp))
                       (let ((dir (pathname (concatenate 'string (string-right-trim "/" tmp) "/"))))
                         (and (writable-directory-p dir) dir))))
                #p"/tmp/"))))

(defvar *temporary-random-state* (make-random-state t))

(defun temporary-source-file (text)
  "Write TEXT to a fresh temporary .lisp file; return its pathname."
  (loop repeat 20
        do (let* ((path (merge-pathnames
                         (make-pathname :name (format nil "sly-agent-q-compile-~36R-~36R"
                                                      (get-universal-time)
                                                      (random (expt 36 6) *temporary-random-state*))
                                        :type "lisp")
                         (temporary-directory)))
                  ;; Leave WITH-OPEN-FILE normally: a non-local exit
                  ;; would close the stream with :ABORT T, deleting it.
                  (created (with-open-file (out path :direction :output :if-exists nil
                                                     :if-does-not-exist :create
                                                     :external-format (utf-8-format))
                             (when out
                               (write-string text out)
                               t))))
             (when created
               (return-from temporary-source-file path))))
  (fail "compile_form could not create a temporary file in ~A." (temporary-directory)))


;;;; Notes

(defstruct (note (:constructor make-note (severity message position phase)))
  severity   ; :error :read-error :warning :style-warning :note ...
  message
  position   ; 0-based character index in the text, or NIL
  phase)     ; :compile or :load

(defun error-severity-p (severity)
  (member severity '(:error :read-error :fatal)))

(defun severity-label (severity)
  (case severity
    (:read-error "READ ERROR")
    (:error "ERROR")
    (:warning "WARNING")
    (:style-warning "STYLE-WARNING")
    (:note "NOTE")
    (:redefinition "REDEFINITION")
    (t (substitute #\Space #\- (string-upcase (princ-to-string severity))))))

(defun redefinition-p (condition)
  "True for the warnings an implementation gives for redefining a
function or method: expected when fixing code, noise to the model."
  #+sbcl (typep condition 'sb-kernel:redefinition-warning)
  #-sbcl (search "redefin" (string-downcase (ignore-errors (princ-to-string condition)))))

(defun location-text-index (location)
  "The 0-based index in the compiled text of a backend LOCATION in our
temporary file.  The SBCL backends of SLYNK and SWANK count characters
(they re-read the file to find the form), so no octet conversion."
  (let ((position (location-char-position location)))
    (and position (max 0 (1- position)))))

(defun form-index-at (spans index)
  "The 0-based index of the span (of SPANS) containing the character
INDEX; for an INDEX between two forms, of the next one (ECL locates a
form where its reader starts, after the previous form); else of the
last one starting before it."
  (when (and index spans)
    (or (position-if (lambda (span) (and (<= (car span) index) (< index (cdr span)))) spans)
        (position-if (lambda (span) (< index (car span))) spans)
        (position-if (lambda (span) (<= (car span) index)) spans :from-end t))))

(defun note-line (note spans text)
  "A line describing NOTE for the model."
  ;; CLISP's pretty printer breaks a long ~A onto a line of its own.
  (let ((form (form-index-at spans (note-position note)))
        (*print-pretty* nil))
    (format nil "~A~:[~; while loading~]~@[ in form ~A~]: ~A"
            (severity-label (note-severity note))
            (eq (note-phase note) :load)
            (and form
                 (let ((span (nth form spans)))
                   (format nil "~D (line ~D: ~A)" (1+ form)
                           ;; A position before the form (ECL's) is its start.
                           (line-of text (max (or (note-position note) 0) (car span)))
                           (form-excerpt text (car span) (cdr span) 50))))
            (let ((message (note-message note)))
              (if (find #\Newline message)
                  (format nil "~%~A" (indent message "    "))
                  message)))))


;;;; Compiling and loading

(defun compiler-condition-p (condition)
  (let ((type (backend-type "COMPILER-CONDITION")))
    (and type (typep condition type))))

(defun compiler-condition-message (condition)
  "The message of the backend's compiler CONDITION, cleaned.  ECL's
reports start with a header (\"Style warning:\", then lines naming the
file, position and form) and put the message after \"! \": the note
already gives file, line and form, and the first line is what a report
shows, so only the message is kept."
  (let* ((text (clean-message (or (ignore-errors (bcall "MESSAGE" condition))
                                  (condition-message condition))))
         (lines (split-lines text))
         (bang (position-if (lambda (line)
                              (let ((trimmed (string-left-trim '(#\Space #\Tab) line)))
                                (and (> (length trimmed) 2) (string= "! " trimmed :end2 2))))
                            lines)))
    (if (and bang (plusp bang)
             (let ((head (string-right-trim '(#\Space) (first lines))))
               (and (plusp (length head)) (char= #\: (char head (1- (length head)))))))
        (format nil "~{~A~^~%~}"
                (cons (subseq (string-left-trim '(#\Space #\Tab) (nth bang lines)) 2)
                      (mapcar (lambda (line) (string-left-trim '(#\Space #\Tab) line))
                              (nthcdr (1+ bang) lines))))
        text)))

(defun call-resignalling-compiler-warnings (function)
  "Call FUNCTION (which compiles) so that the compiler's warnings reach
our handlers: ABCL's file compiler catches and prints them unless told
to signal them again (as SWANK's ABCL backend tells it)."
  #+abcl (let ((jvm::*resignal-compiler-warnings* t)) (funcall function))
  #-abcl (funcall function))

(defun compiled-form-position ()
  "The 0-based position in the file being compiled of the top-level
form the compiler is at, where the Lisp says (ABCL), else NIL."
  #+abcl (let ((position sys::*source-position*)) (and (integerp position) position))
  #-abcl nil)

(defun compile-collecting (source fasl notes)
  "COMPILE-FILE SOURCE into FASL, pushing a NOTE for every compiler
condition onto the list in the car of NOTES (whose cdr is the text).
Returns COMPILE-FILE's three values and the compiler's printed output."
  (let ((located '())                   ; originals of compiler conditions
        (pending '())                   ; warnings not (yet) seen as one
        (hooks (backend-implemented-p "CALL-WITH-COMPILATION-HOOKS"))
        (log (make-string-output-stream)))
    (flet ((record (severity message location)
             (push (make-note severity (clean-message message)
                              (and location (location-text-index location))
                              :compile)
                   (car notes))))
      (multiple-value-bind (output warnings-p failure-p)
          (handler-bind
              ((condition
                 (lambda (c)
                   (cond
                     ((compiler-condition-p c)
                      (let ((original (ignore-errors (bcall "ORIGINAL-CONDITION" c)))
                            (severity (ignore-errors (bcall "SEVERITY" c))))
                        (push original located)
                        (unless (or (eq severity :redefinition)
                                    (and original (redefinition-p original)))
                          (record (or severity :warning)
                                  (compiler-condition-message c)
                                  (ignore-errors (bcall "LOCATION" c))))))
                     ((typep c 'warning)
                      ;; The backend's hook resignals a warning before
                      ;; it signals the compiler condition that locates
                      ;; it: muffling it then would lose the location.
                      ;; So muffle only once it has been located, or
                      ;; when there is no hook to locate it.
                      (cond ((member c located)
                             (muffle-warning c))
                            ((not hooks)
                             (unless (redefinition-p c)
                               (record (if (typep c 'style-warning) :style-warning :warning)
                                       (condition-message c) nil))
                             (muffle-warning c))
                            (t (unless (assoc c pending)
                                 (push (cons c (compiled-form-position)) pending)))))
                     ;; Compiler notes (SBCL's are not warnings) are
                     ;; recorded through the backend; don't print them.
                     ((find-restart 'muffle-warning c)
                      (invoke-restart (find-restart 'muffle-warning c)))))))
            (flet ((compile-it ()
                     ;; The compiler's own report duplicates the notes;
                     ;; it is kept for diagnosis only.
                     (let ((*standard-output* log)
                           (*error-output* log)
                           (*compile-verbose* nil)
                           (*compile-print* nil))
                       ;; A unit of its own, so that warnings deferred to
                       ;; its end (undefined functions and variables)
                       ;; are reported here even if the caller is
                       ;; inside a unit.
                       (with-compilation-unit (:override t)
                         (call-resignalling-compiler-warnings
                          (lambda ()
                            (compile-file source :output-file fasl
                                                 :external-format (utf-8-format))))))))
              (if hooks
                  (call-with-compilation-hooks #'compile-it)
                  (compile-it))))
        ;; Warnings the backend never located.
        (loop for (c . position) in (reverse pending)
              unless (or (member c located) (redefinition-p c))
                do (push (make-note (if (typep c 'style-warning) :style-warning :warning)
                                    (clean-message (condition-message c)) position :compile)
                         (car notes)))
        (values output warnings-p failure-p (get-output-stream-string log))))))

(defun load-collecting (fasl notes)
  "LOAD FASL, recording load-time warnings as NOTEs."
  (handler-bind ((warning (lambda (w)
                            (unless (redefinition-p w)
                              (push (make-note (if (typep w 'style-warning) :style-warning :warning)
                                               (condition-message w) nil :load)
                                    (car notes)))
                            (muffle-warning w))))
    (let ((*load-verbose* nil) (*load-print* nil))
      (load fasl))))

(defun compile-text (text package)
  "Compile and load TEXT in PACKAGE; return the result text or signal."
  (multiple-value-bind (spans scan-error scan-start) (call-reading-code (lambda () (scan-forms text)))
    (when (typep scan-error 'end-of-file)
      (let ((message (unbalanced-message text scan-start (1+ (length spans)))))
        (note-compile-failure text package "READ ERROR" message (list message))
        (fail "~A Nothing was compiled or loaded." message)))
    (when (and (null spans) (null scan-error))
      (fail "The code is empty: give one or more top-level forms."))
    (note-previous-sources text package)
    (let* ((source (temporary-source-file text))
           (fasl (compile-file-pathname source))
           (notes (cons '() text))
           (phase :compile)
           (fasl-written nil)
           (failure-p nil)
           (loaded nil)
           (compiler-log "")
           (outcome nil)
           (definitions (ignore-errors (defun-definitions text spans package))))
      (unwind-protect
           (setf outcome
                 (run-user-code
                  (lambda ()
                    (let ((*package* package))
                      (multiple-value-bind (output warnings failure log)
                          (compile-collecting source fasl notes)
                        (declare (ignore warnings))
                        (setf fasl-written output
                              failure-p failure
                              compiler-log log))
                      (when (and fasl-written
                                 (notany (lambda (n) (error-severity-p (note-severity n)))
                                         (car notes))
                                 ;; A failure with nothing to show for it
                                 ;; is an error we could not see.
                                 (not (and failure-p (null (car notes)))))
                        (setf phase :load)
                        (load-collecting fasl notes)
                        (setf loaded t))))))
        (ignore-errors (delete-file source))
        (ignore-errors (when (probe-file fasl) (delete-file fasl))))
      (report-compilation
       (make-compile-attempt :text text :package package :spans spans
                             :notes (reverse (car notes)) :outcome outcome :phase phase
                             :fasl-written fasl-written :failure-p failure-p :loaded loaded
                             :compiler-log compiler-log
                             :defined (and (not loaded)
                                           (ignore-errors (defined-while-compiling definitions))))))))

(defparameter *compile-time-operators*
  '("DEFMACRO" "DEFINE-COMPILER-MACRO" "DEFPACKAGE" "EVAL-WHEN" "DEFCONSTANT"
    "DEFINE-SYMBOL-MACRO" "DEFTYPE" "DEFSTRUCT")
  "Operators whose top-level forms COMPILE-FILE (partly) evaluates while
compiling, so they take effect even when the file is not loaded.")

(defun form-tokens (text start end count)
  "The first COUNT tokens of the list form between START and END of TEXT
(its operator, then what follows it) as strings, fewer where a
parenthesis or the form's end comes first; NIL when it is not a list."
  (flet ((delimiterp (c) (or (blank-char-p c) (member c '(#\( #\))))))
    (when (char= (char text start) #\()
      (loop with at = (1+ start)
            for i below count
            for from = (position-if-not #'blank-char-p text :start at :end end)
            for to = (and from (or (position-if #'delimiterp text :start from :end end) end))
            while (and from (< from to))
            collect (subseq text from to)
            do (setf at to)))))

(defun compile-time-forms (text spans)
  "Short descriptions of the forms of TEXT headed by *COMPILE-TIME-OPERATORS*."
  (loop for (start . end) in spans
        for head = (first (form-tokens text start end 1))
        when (and head (member (string-upcase head) *compile-time-operators* :test #'string=))
          collect (form-excerpt text start end 40)))

;;; ABCL's file compiler defines each DEFUN's function as it compiles it,
;;; so a failure later in the file (a read error in form 2) leaves form 1
;;; defined although nothing was loaded.  Rather than say what a Lisp
;;; does, the functions the code defines are looked at before and after.

(defun defun-definitions (text spans package)
  "For each DEFUN form of TEXT (its SPANS) whose name can be looked up:
(EXCERPT FUNCTION-NOW . WHERE), WHERE what DEFUN-FUNCTION takes.  The
name is looked up, never read: reading would intern it."
  (loop for (start . end) in spans
        for where = (ignore-errors (defun-name-parts text start end package))
        when where
          collect (list* (form-excerpt text start end 40) (apply #'defun-function where) where)))

(defun defun-name-parts (text start end package)
  "(PACKAGE-OR-NAME SYMBOL-NAME) of the name of a \"(defun NAME\" form
between START and END of TEXT, read in PACKAGE, or NIL (not a DEFUN,
or a name with escapes)."
  (destructuring-bind (&optional head name) (form-tokens text start end 2)
    (when (and name
               (string-equal head "defun")
               (notany (lambda (c) (member c '(#\| #\\ #\' #\` #\, #\# #\"))) name)
               (eq (readtable-case *readtable*) :upcase))
      (let ((colon (position #\: name)))
        (list (cond ((null colon) package)
                    ((zerop colon) "KEYWORD")
                    (t (string-upcase (subseq name 0 colon))))
              (string-upcase (subseq name (if colon (1+ (position #\: name :from-end t)) 0))))))))

(defun defun-function (package symbol-name)
  "The function of the symbol SYMBOL-NAME of PACKAGE (a package or its
name) if it exists and is fbound, else NIL."
  (let* ((package (find-package package))
         (symbol (and package (find-symbol symbol-name package))))
    (and symbol (fboundp symbol) (fdefinition symbol))))

(defun defined-while-compiling (definitions)
  "The excerpts of DEFINITIONS (see DEFUN-DEFINITIONS) whose function changed."
  (loop for (excerpt before . where) in definitions
        unless (eq before (apply #'defun-function where))
          collect excerpt))

(defun note-compile-failure (text package type message note-lines &key backtrace output id)
  "Record a failed compile_form as the last error and as the notes."
  (let ((id (or id (record-history "compile_form" (package-name package) text
                                   (format nil "FAILED: ~A" (first-line message 200)) nil))))
    (record-error :tool "compile_form" :package (package-name package) :form text :id id
                  :type type :message message :while "compiling and loading"
                  :backtrace backtrace :output output)
    (setf *compilation-notes*
          (list :package (package-name package) :form text :summary message
                :notes note-lines :time (get-universal-time)))))

;;;; Reporting
;;;
;;; REPORT-COMPILATION decides whether the attempt failed and why
;;; (COMPILATION-PROBLEM), then records it and either signals the
;;; failure or returns the summary; both list the forms and the notes.

(defstruct (compile-attempt (:conc-name attempt-))
  "What one compile_form did."
  text
  package
  spans                                 ; (START . END) of each top-level form
  notes                                 ; NOTEs, in the order reported
  outcome                               ; of RUN-USER-CODE
  phase                                 ; :compile, or :load once loading began
  fasl-written
  failure-p                             ; COMPILE-FILE's third value
  loaded
  compiler-log                          ; what the compiler printed
  defined)                              ; excerpts of DEFUNs the compiler defined

(defun note-counts (notes)
  "The numbers of errors, of warnings (style warnings included) and of
other notes among NOTES."
  (let ((errors 0) (warnings 0) (others 0))
    (dolist (note notes (values errors warnings others))
      (cond ((error-severity-p (note-severity note)) (incf errors))
            ((member (note-severity note) '(:warning :style-warning)) (incf warnings))
            (t (incf others))))))

(defun attempt-note-lines (attempt)
  (mapcar (lambda (note) (note-line note (attempt-spans attempt) (attempt-text attempt)))
          (attempt-notes attempt)))

(defun forms-listing (attempt)
  "One numbered line per top-level form of ATTEMPT."
  (with-output-to-string (out)
    (loop for (start . end) in (attempt-spans attempt)
          for i from 1
          do (format out "  ~D. ~A~%" i (form-excerpt (attempt-text attempt) start end 70)))))

(defun notes-listing (note-lines)
  "NOTE-LINES, one per line, at most *NOTES-LIMIT* of them."
  (with-output-to-string (out)
    (loop with *print-pretty* = nil
          for line in note-lines
          for i below *notes-limit*
          do (format out "  ~A~%" line))
    (when (> (length note-lines) *notes-limit*)
      (format out "  ... and ~D more~%" (- (length note-lines) *notes-limit*)))))

(defun attempt-output (attempt)
  (let ((outcome (attempt-outcome attempt)))
    (and outcome (outcome-output outcome))))

(defun attempt-where (attempt)
  (format nil "in package ~A" (package-name (attempt-package attempt))))

(defun compilation-problem (attempt)
  "NIL if ATTEMPT compiled and loaded; else the failure's type label,
its summary and the backtrace to show (or NIL)."
  (let ((outcome (attempt-outcome attempt))
        (phase (attempt-phase attempt))
        (where (attempt-where attempt)))
    (multiple-value-bind (errors warnings) (note-counts (attempt-notes attempt))
      (cond
        ((outcome-timed-out outcome)
         (values "TIMEOUT"
                 (format nil "compile_form timed out after ~A s while ~:[compiling~;loading~] ~A ~
                              and was interrupted. ~:[Nothing was loaded.~;Loading stopped part ~
                              way: top-level forms before the one running were loaded, later ~
                              ones were not.~]"
                         (outcome-seconds outcome) (eq phase :load) where (eq phase :load))
                 (outcome-backtrace outcome)))
        ((and (outcome-condition outcome) (eq phase :compile)
              ;; Unless it was the read error the compiler reported.
              (notany (lambda (note) (eq (note-severity note) :read-error))
                      (attempt-notes attempt)))
         (values (outcome-type outcome)
                 (format nil "Compilation ~A was aborted by ~A: ~A~%Nothing was loaded; ~
                              previous definitions (if any) are unchanged.~@[ Exception: ~
                              the file compiler already defined ~{~A~^, ~} while compiling.~]"
                         where (outcome-type outcome) (outcome-message outcome)
                         (attempt-defined attempt))
                 (outcome-backtrace outcome)))
        ((and (outcome-condition outcome) (eq phase :load))
         (values (outcome-type outcome)
                 (format nil "Compiled ~A, but loading failed with ~A: ~A~%Top-level forms ~
                              before the failing one were loaded; it and later ones were not."
                         where (outcome-type outcome) (outcome-message outcome))
                 (outcome-backtrace outcome)))
        ((or (plusp errors)
             (not (attempt-fasl-written attempt))
             (and (attempt-failure-p attempt) (not (attempt-loaded attempt))))
         (values "COMPILE-ERROR"
                 (format nil "Compilation failed ~A~:[~;~:* with ~A~]~@[ and ~A~]. Nothing was ~
                              loaded: the definitions in this code were not changed in the image ~
                              (previous definitions, if any, remain in effect).~@[ Exception: ~
                              the file compiler already evaluated ~{~A~^, ~} while compiling.~] ~
                              Fix the errors and compile again."
                         where
                         (and (plusp errors) (plural errors "error"))
                         (and (plusp warnings) (plural warnings "warning"))
                         (append (compile-time-forms (attempt-text attempt) (attempt-spans attempt))
                                 (attempt-defined attempt)))
                 nil))
        (t nil)))))

(defun fail-compilation (attempt type summary backtrace)
  "Record the failed ATTEMPT and signal a TOOL-FAILURE describing it."
  (let* ((note-lines (attempt-note-lines attempt))
         (compiler-log (attempt-compiler-log attempt))
         (output (attempt-output attempt))
         (message
           (with-output-to-string (out)
             (format out "~A~%Forms:~%~A" summary (forms-listing attempt))
             (when note-lines
               (format out "Errors, warnings and notes:~%~A" (notes-listing note-lines)))
             (when backtrace
               (format out "Backtrace (innermost first):~%~A" (format-backtrace backtrace)))
             (when (and (null note-lines) (plusp (length compiler-log)))
               ;; Nothing explains the failure: show what the compiler
               ;; printed.
               (format out "Compiler output:~%~A~%" (cap compiler-log 2000 "output")))
             (when (and output (plusp (length output)))
               (format out "Output:~%~A~%" output)))))
    (note-compile-failure (attempt-text attempt) (attempt-package attempt) type summary note-lines
                          :backtrace backtrace :output output)
    (error 'tool-failure :message (string-right-trim '(#\Newline) message))))

(defun compilation-result (attempt)
  "Record the successful ATTEMPT; return its result text."
  (multiple-value-bind (errors warnings others) (note-counts (attempt-notes attempt))
    (declare (ignore errors))
    (let* ((text (attempt-text attempt))
           (package-name (package-name (attempt-package attempt)))
           (note-lines (attempt-note-lines attempt))
           (output (attempt-output attempt))
           (summary (format nil "Compiled and loaded ~A ~A~:[~;~:*, with ~{~A~^ and ~}~]."
                            (plural (length (attempt-spans attempt)) "form") (attempt-where attempt)
                            (remove nil (list (and (plusp warnings) (plural warnings "warning"))
                                              (and (plusp others) (plural others "note")))))))
      (record-history "compile_form" package-name text summary t)
      (setf *compilation-notes*
            (list :package package-name :form text :summary summary
                  :notes note-lines :time (get-universal-time)))
      (with-output-to-string (out)
        (format out "~A~%Forms:~%~A" summary (forms-listing attempt))
        (if note-lines
            (format out "Warnings and notes:~%~A~:[~;(The code was loaded despite the ~
                         warnings; fix them and compile again if they matter.)~%~]"
                    (notes-listing note-lines) (plusp warnings))
            (format out "No warnings or notes.~%"))
        (when (and output (plusp (length output)))
          (format out "Output while loading:~%~A~%" output))))))

(defun report-compilation (attempt)
  "The result text of compile_form's ATTEMPT, or a TOOL-FAILURE."
  (multiple-value-bind (type summary backtrace) (compilation-problem attempt)
    (if type
        (fail-compilation attempt type summary backtrace)
        (compilation-result attempt))))

(define-tool "compile_form" (&key form package)
  "Compile FORM's top-level forms with the file compiler and load them."
  (compile-text (nonblank form "form" "one or more top-level forms") (tool-package package)))

(define-tool "get_compilation_notes" ()
  "The warnings and notes of the most recent compile_form."
  (let ((notes *compilation-notes*))
    (if (null notes)
        "No compile_form has run yet."
        (destructuring-bind (&key package form summary notes time &allow-other-keys) notes
          (with-output-to-string (out)
            (format out "Most recent compile_form (in package ~A, ~A):~%~A~%Code:~%~A~%"
                    package (time-ago time) summary (indent (cap form 800 "code") "  "))
            (if notes
                (let ((*print-pretty* nil))
                  (format out "Errors, warnings and notes:~%~{  ~A~%~}" notes))
                (format out "It produced no warnings or notes.~%")))))))
