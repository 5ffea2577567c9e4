;;;; protocol.lisp --- CALL-TOOL, the one entry point Emacs uses.
;;;
;;; Emacs relays a tool call from the agent's server as
;;;
;;;   (sly-agent-q:call-tool "describe_symbol"
;;;                          '(("symbol" . "process-data") ("package" . "MY-APP"))
;;;                          :package "CL-USER" :timeout 30)
;;;
;;; and gets back (:OK T :CONTENT "text") or (:OK NIL :ERROR "text").
;;; It runs in a SLYNK/SWANK worker thread, so it must never signal,
;;; never enter the debugger and never return anything else: every
;;; condition, including ones raised while printing a result, becomes
;;; an error result that tells the model what to fix.

(in-package #:sly-agent-q)

;;;; The tool table
;;;
;;; A tool is declared once, in the server's catalog
;;; (server/tools/catalog/image.ts): its parameters, their types, which
;;; are required.  The server validates every call against it before
;;; the call reaches Emacs or the image, so a handler here restates
;;; none of that: it takes the arguments by name, as keywords.
;;; test/server/catalog-cl.test.ts fails when the two disagree.

(defstruct (tool (:constructor make-tool (name parameters keywords function documentation)))
  (name "" :type string)
  ;; The JSON names of its parameters, and the keywords FUNCTION takes
  ;; them as, in the order of its lambda list (see DEFINE-TOOL).
  (parameters '() :type list)
  (keywords '() :type list)
  (function nil :type (or null function))
  (documentation nil))

(defvar *tools* (make-hash-table :test 'equal)
  "Tool name (a string, as in the server's catalog) => TOOL.")

(defun tool-names ()
  "The names of the tools CALL-TOOL knows, sorted."
  (sort (loop for name being the hash-keys of *tools* collect name) #'string<))

(defun parameter-json-name (variable)
  "The catalog's name for the handler parameter VARIABLE:
GENERIC-FUNCTION is \"generic_function\"."
  (substitute #\_ #\- (string-downcase (symbol-name variable))))

(defun handler-variables (name lambda-list)
  "The variables of LAMBDA-LIST, the handler of tool NAME: () or
(&key VARIABLE...), a VARIABLE possibly (VARIABLE DEFAULT)."
  (flet ((bad (why)
           (error "define-tool ~S: the lambda list ~S ~A; write () or (&key name...)."
                  name lambda-list why)))
    (cond ((null lambda-list) '())
          ((not (and (consp lambda-list) (eq (first lambda-list) '&key)))
           (bad "does not start with &key"))
          (t
           (loop for parameter in (rest lambda-list)
                 for variable = (if (consp parameter) (first parameter) parameter)
                 unless (and variable (symbolp variable)
                             (not (member variable lambda-list-keywords)))
                   do (bad (format nil "has ~S, which is not a parameter" parameter))
                 collect variable)))))

(defmacro define-tool (name lambda-list &body body)
  "Define the handler of the image tool NAME (a string, e.g.
\"macroexpand_form\"), whose parameters the catalog declares:

  (define-tool \"macroexpand_form\" (&key form full package)
    \"Expand FORM once (or, with FULL, until its head is not a macro).\"
    ...)

LAMBDA-LIST is () or (&key VARIABLE...), one keyword per parameter of
the catalog, named as the JSON name with - for _ (generic_function is
GENERIC-FUNCTION).  The server has checked the arguments' types and
that the required ones are there; BODY gets them by name, NIL when
absent (JSON false and null are NIL too), checks only what the catalog
cannot say (e.g. with NONBLANK), and returns the content string; it
reports problems with FAIL."
  (let ((variables (handler-variables name lambda-list))
        (documentation (and (stringp (first body)) (rest body) (first body))))
    `(setf (gethash ,name *tools*)
           (make-tool ,name
                      ',(mapcar #'parameter-json-name variables)
                      ',(mapcar (lambda (variable) (intern (symbol-name variable) :keyword))
                                variables)
                      (lambda ,lambda-list
                        ,@body)
                      ,documentation))))


;;;; Arguments

(defvar *tool-name* nil
  "The name of the tool CALL-TOOL is running, for messages.")

(defun json-false-p (value)
  "True for the values JSON false or null may arrive as."
  (or (null value)
      (and (symbolp value)
           (member (symbol-name value) '("FALSE" "JSON-FALSE" "NULL" ":NULL" "NIL")
                   :test #'string-equal))))

(defun argument-key (key)
  "KEY of an ARGS entry as a string, or NIL if it cannot be one."
  (typecase key
    (string key)
    (symbol (string-downcase (symbol-name key)))))

(defun same-parameter-name-p (a b)
  "Parameter names compare without case and with - and _ alike."
  (string-equal (substitute #\_ #\- a) (substitute #\_ #\- b)))

(defun parse-arguments (tool args)
  "The keyword arguments for TOOL's handler, taken from the alist ARGS.
Only the shape of ARGS and the names are checked here: the server
validated the values against the catalog."
  (let ((name (tool-name tool))
        (parameters (tool-parameters tool)))
    (unless (listp args)
      (fail "The arguments of ~A must be an object (an alist of (\"name\" . value)), ~
             but got ~A." name (print-value args :limit 200)))
    (unless (ignore-errors (list-length args))
      (fail "The arguments of ~A are not a proper list." name))
    (loop for tail on args
          for entry = (car tail)
          for key = (and (consp entry) (argument-key (car entry)))
          for parameter = (and key (find key parameters :test #'same-parameter-name-p))
          unless (listp (cdr tail))
            do (fail "The arguments of ~A are not a proper list." name)
          unless key
            do (fail "The arguments of ~A must be (\"name\" . value) pairs, ~
                      but one is ~A." name (print-value entry :limit 200))
          ;; Unknown names are errors: the model should learn the real ones.
          unless parameter
            do (fail "Unknown argument \"~A\" for ~A. ~:[It takes no arguments.~;~:*Its arguments are: ~{~A~^, ~}.~]"
                     key name parameters)
          ;; The first of repeated names wins, as in a plist.
          append (list (nth (position parameter parameters) (tool-keywords tool))
                       (if (json-false-p (cdr entry)) nil (cdr entry))))))

(defun nonblank (value parameter what)
  "VALUE, the text of the current tool's PARAMETER (its JSON name),
unless it is absent or blank: then a FAIL asking for WHAT.  The catalog
can require a string but not that it says something, and an empty
symbol name, pattern or package name names nothing (or, as a pattern,
matches everything)."
  (if (and (stringp value) (notevery #'blank-char-p value))
      value
      (fail "The \"~A\" argument of ~A is empty: give ~A." parameter *tool-name* what)))


;;;; Calling a tool

(defvar *repl-package-name* nil
  "The PACKAGE argument of CALL-TOOL: the name of the REPL's package,
the default for tools whose \"package\" argument is absent.")

(defvar *evaluation-serial* 0
  "Counts CALL-TOOL calls, so a thread's error can say which one started it.")

(defparameter *tools-guarding-themselves*
  '("eval_form" "eval_in_package" "compile_form" "macroexpand_form")
  "Tools that run user code and print its results under RUN-USER-CODE
themselves, with messages of their own.  Every other tool runs whole
under CALL-GUARDING-USER-CODE: whatever it prints may call a user's
PRINT-OBJECT method.")

(defvar *eval-timeout* 30
  "Default seconds an eval_form, eval_in_package or compile_form call may
run before it is interrupted.  NIL means no limit.")

(defun error-result (message)
  "An error result carrying MESSAGE, capped."
  (list :ok nil :error (cap (if (stringp message) message (princ-value message))
                            *result-limit* "error message")))

(defun content-result (content)
  "A success result carrying CONTENT, capped."
  (list :ok t :content (cap (if (stringp content) content (princ-value content))
                            *result-limit* "result")))

(defun internal-error-message (tool-name condition)
  "The message for CONDITION escaping TOOL-NAME's own code (our bug, or
an unexpected state of the image)."
  (format nil "~A failed inside the image: ~A: ~A"
          tool-name (condition-type-label condition) (condition-message condition)))

(defun normalize-timeout (timeout)
  "TIMEOUT as CALL-TOOL accepts it, checked: a positive real or NIL."
  (cond ((null timeout) *eval-timeout*)
        ((and (realp timeout) (plusp timeout)) timeout)
        (t (fail "TIMEOUT must be a positive number of seconds, but got ~A."
                 (print-value timeout :limit 100)))))

(defun dispatch (name args package timeout)
  "Run the tool NAME; return its content string or signal."
  (let* ((name (typecase name
                 (string name)
                 (symbol (string-downcase (symbol-name name)))
                 (t (fail "The tool name must be a string, but got ~A."
                          (print-value name :limit 100)))))
         (tool (gethash name *tools*)))
    (unless tool
      (fail "Unknown image tool \"~A\". Known image tools: ~{~A~^, ~}."
            name (tool-names)))
    (let ((*repl-package-name*
            (typecase package
              (null nil)
              (string (if (zerop (length package)) nil package))
              (symbol (symbol-name package))
              (package (package-name package))
              (t (fail "The PACKAGE of the call must be a package name, but got ~A."
                       (print-value package :limit 100)))))
          (*call-timeout* (normalize-timeout timeout)))
      (let* ((*tool-name* name)
             (arguments (parse-arguments tool args))
             (content (if (member name *tools-guarding-themselves* :test #'string=)
                          (apply (tool-function tool) arguments)
                          ;; Defined in eval.lisp, loaded later.
                          (call-guarding-user-code
                           name (lambda () (apply (tool-function tool) arguments))))))
        (if (stringp content)
            content
            (princ-value content))))))

(defun call-tool (name args &key package timeout call-id)
  "Run the image tool NAME with ARGS, an alist of (\"parameter\" . value).
PACKAGE names the REPL's current package, the default for tools whose
\"package\" argument is absent (else CL-USER).  TIMEOUT is the seconds
eval_form, eval_in_package and compile_form may run (default
*EVAL-TIMEOUT*).  CALL-ID, a string, names the call for CANCEL-CALL.

Errors of threads that code run by these tools started, not reported
yet, are appended to the result as notes.

Returns (:OK T :CONTENT string) or (:OK NIL :ERROR string).  Never
signals and never enters the debugger."
  (send-promptly)
  (let ((result nil)
        (tool-name (if (stringp name) name (ignore-errors (princ-to-string name))))
        (*call-id* (and call-id (if (stringp call-id) call-id (princ-to-string call-id))))
        (*current-evaluation* (incf *evaluation-serial*))
        (*in-agent-code* nil))
    (catch 'call-tool-done
      (with-simple-restart (abort "Return an error result from sly-agent-q:call-tool.")
        (call-with-debugger-trap
         (lambda (condition)
           ;; Anything that would reach the debugger ends up here: a bug
           ;; of ours, or an error in user code that a tool let through.
           (throw 'call-tool-done
             (setf result
                   (error-result (typecase condition
                                   (tool-error (tool-error-message condition))
                                   (tool-failure (tool-failure-message condition))
                                   (t (internal-error-message tool-name condition)))))))
         (lambda ()
           (let ((*break-on-signals* nil)
                 (*print-readably* nil)
                 ;; Nothing a tool does may print into the user's REPL;
                 ;; evaluation tools capture output themselves.
                 (*standard-output* (make-broadcast-stream))
                 (*error-output* (make-broadcast-stream))
                 (*trace-output* (make-broadcast-stream)))
             (setf result
                   (handler-case (if (take-early-cancel *call-id*)
                                     (error-result "The call was cancelled before it started; nothing was run.")
                                     (content-result (dispatch name args package timeout)))
                     (tool-error (c) (error-result (tool-error-message c)))
                     (tool-failure (c) (error-result (tool-failure-message c)))
                     ;; User code never gets here: the evaluation tools
                     ;; trap its conditions closer to it (eval.lisp).
                     (serious-condition (c)
                       (error-result (internal-error-message tool-name c)))))))))
      ;; Reached only through ABORT (user code calling (abort), say).
      (unless result
        (setf result (error-result
                      (format nil "~A was aborted (ABORT was invoked) before it finished."
                              tool-name)))))
    (if (and (consp result) (member (getf result :ok) '(t nil)))
        (with-thread-notes result)
        (error-result "call-tool produced no result (this is a bug in sly-agent-q)."))))

(defun with-thread-notes (result)
  "RESULT with the notes of TAKE-THREAD-NOTES (eval.lisp) appended."
  (let ((notes (ignore-errors (take-thread-notes))))
    (if (null notes)
        result
        (let ((key (if (getf result :ok) :content :error)))
          (list :ok (getf result :ok)
                key (format nil "~A~2%~A" (getf result key) (string-right-trim '(#\Newline) notes)))))))


;;;; Several calls in one request
;;;
;;; A model often asks for many lookups at once.  Each request through
;;; SLYNK/SWANK costs a worker thread, which the connection's one
;;; control thread spawns in turn: a hundred calls sent as a hundred
;;; requests took ~100 ms of the image's time where running them took
;;; 12 ms.  Emacs sends the calls that arrive together as one request.

(defparameter *batch-serial-seconds* 0.1
  "How long CALL-TOOLS runs its calls one after another; the calls left
after that run in threads of their own, so that one slow call does not
hold the rest back.")

(defun call-tools (calls)
  "Run CALLS, each a list (NAME ARGS &key PACKAGE TIMEOUT CALL-ID) of
CALL-TOOL's arguments, and return the list of their results, in order.
Like CALL-TOOL, never signals and never enters the debugger."
  (let* ((calls (if (listp calls) calls '()))
         (results (make-array (length calls) :initial-element nil))
         (deadline (+ (get-internal-real-time)
                      (round (* *batch-serial-seconds* internal-time-units-per-second))))
         (spawned '()))
    (loop for call in calls
          for i from 0
          do (if (and (> (get-internal-real-time) deadline) (threads-available-p))
                 (push (spawn-call call i results) spawned)
                 (setf (aref results i) (call-one call))))
    (loop while (some (lambda (done) (not (car done))) spawned)
          do (sleep 0.005))
    (coerce results 'list)))

(defun call-one (call)
  "CALL-TOOL applied to CALL, a list of its arguments; an error result
when CALL is not such a list."
  (or (ignore-errors (apply #'call-tool call))
      (error-result "A call of the batch was not a list of CALL-TOOL's arguments.")))

(defun spawn-call (call index results)
  "Run CALL in a new thread, with this thread's connection, into
RESULTS at INDEX.  Returns a cell whose car becomes true when done."
  (let* ((done (list nil))
         (connection (frontend-symbol "*EMACS-CONNECTION*"))
         (value (emacs-connection)))
    (handler-case
        (bcall "SPAWN"
               (lambda ()
                 (unwind-protect
                      (progv (and connection (list connection)) (and connection (list value))
                        (setf (aref results index) (call-one call)))
                   (setf (car done) t)))
               :name "sly-agent-q call")
      ;; No thread to be had: the call runs here after all.
      (error ()
        (setf (aref results index) (call-one call)
              (car done) t)))
    done))
