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

(define-condition tool-error (error)
  ((message :initarg :message :reader tool-error-message))
  (:report (lambda (c stream) (write-string (tool-error-message c) stream)))
  (:documentation "A problem the model can fix: bad arguments, a name
that does not exist, code that does not read.  Its message is the
whole error result."))

(defun fail (control &rest args)
  "Signal a TOOL-ERROR whose message is CONTROL formatted with ARGS."
  (error 'tool-error :message (apply #'format nil control args)))

(define-condition tool-failure (error)
  ((message :initarg :message :reader tool-failure-message))
  (:report (lambda (c stream) (write-string (tool-failure-message c) stream)))
  (:documentation "Signalled by a tool whose work ran but failed (an
evaluation error, a timeout, a failed compilation): the result is an
error carrying MESSAGE."))


;;;; The tool table

(defstruct (tool (:constructor make-tool (name parameters function documentation)))
  (name "" :type string)
  ;; A list of (JSON-NAME TYPE REQUIRED-P), in the order FUNCTION takes them.
  (parameters '() :type list)
  (function nil :type (or null function))
  (documentation nil))

(defvar *tools* (make-hash-table :test 'equal)
  "Tool name (a string, as in the server's catalog) => TOOL.")

(defun tool-names ()
  "The names of the tools CALL-TOOL knows, sorted."
  (sort (loop for name being the hash-keys of *tools* collect name) #'string<))

(defmacro define-tool (name (&rest parameters) &body body)
  "Define the image tool NAME (a string, e.g. \"describe_symbol\").
Each parameter is (VARIABLE JSON-NAME TYPE &KEY REQUIRED), TYPE being
:STRING, :BOOLEAN or :INTEGER.  BODY runs with the converted values
bound (NIL when absent) and returns the content string; it reports
problems with FAIL."
  (let ((documentation (and (stringp (first body)) (rest body) (first body))))
    `(setf (gethash ,name *tools*)
           (make-tool ,name
                      ',(loop for (nil json-name type . options) in parameters
                              collect (list json-name type (getf options :required)))
                      (lambda ,(mapcar #'first parameters)
                        ,@body)
                      ,documentation))))


;;;; Arguments

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

(defun convert-argument (tool-name json-name type value)
  "VALUE, sent for parameter JSON-NAME, converted to TYPE, or a FAIL."
  (flet ((wrong (expected)
           (fail "Argument \"~A\" of ~A must be ~A, but got ~A."
                 json-name tool-name expected (print-value value :limit 200))))
    (ecase type
      (:string
       (cond ((json-false-p value) nil)
             ((stringp value) value)
             ((characterp value) (string value))
             (t (wrong "a string"))))
      (:boolean
       (cond ((json-false-p value) nil)
             ((eq value t) t)
             ((and (stringp value) (string-equal value "true")) t)
             ((and (stringp value) (string-equal value "false")) nil)
             ((eql value 1) t)
             ((eql value 0) nil)
             (t (wrong "true or false"))))
      (:integer
       (cond ((json-false-p value) nil)
             ((integerp value) value)
             ((and (floatp value) (= value (ffloor value))) (values (truncate value)))
             ((and (stringp value)
                   (let ((n (ignore-errors (parse-integer value))))
                     (and n (return-from convert-argument n)))))
             (t (wrong "an integer")))))))

(defun parse-arguments (tool args)
  "The values of TOOL's parameters, in order, taken from the alist ARGS."
  (let ((name (tool-name tool))
        (parameters (tool-parameters tool)))
    (unless (listp args)
      (fail "The arguments of ~A must be an object (an alist of (\"name\" . value)), ~
             but got ~A." name (print-value args :limit 200)))
    (unless (ignore-errors (list-length args))
      (fail "The arguments of ~A are not a proper list." name))
    (let ((entries
            (loop for tail on args
                  for entry = (car tail)
                  unless (listp (cdr tail))
                    do (fail "The arguments of ~A are not a proper list." name)
                  unless (and (consp entry) (argument-key (car entry)))
                    do (fail "The arguments of ~A must be (\"name\" . value) pairs, ~
                              but one is ~A." name (print-value entry :limit 200))
                  collect (cons (argument-key (car entry)) (cdr entry)))))
      ;; Unknown names are errors: the model should learn the real ones.
      (dolist (entry entries)
        (unless (find (car entry) parameters :key #'first :test #'same-parameter-name-p)
          (fail "Unknown argument \"~A\" for ~A. ~:[It takes no arguments.~;~:*Its arguments are: ~{~A~^, ~}.~]"
                (car entry) name (mapcar #'first parameters))))
      (loop for (json-name type required) in parameters
            for entry = (find json-name entries :key #'car :test #'same-parameter-name-p)
            for value = (and entry (convert-argument name json-name type (cdr entry)))
            when (and required (or (null value) (and (stringp value) (zerop (length value)))))
              do (fail "Missing required argument \"~A\" for ~A~@[ (~A)~]."
                       json-name name
                       (ecase type
                         (:string "a string")
                         (:boolean "true or false")
                         (:integer "an integer")))
            collect value))))


;;;; Calling a tool

(defvar *repl-package-name* nil
  "The PACKAGE argument of CALL-TOOL: the name of the REPL's package,
the default for tools whose \"package\" argument is absent.")

(defvar *call-timeout* nil
  "The TIMEOUT of the current CALL-TOOL, in seconds, or NIL.")

(defvar *call-id* nil
  "The :CALL-ID of the current CALL-TOOL, or NIL (see CANCEL-CALL).")

(defvar *in-agent-code* nil
  "True while code the agent asked for runs in this thread (see
WRAP-AGENT-THREAD-FUNCTION).")

(defvar *evaluation-serial* 0
  "Counts CALL-TOOL calls, so a thread's error can say which one started it.")

(defvar *current-evaluation* nil
  "The serial of the CALL-TOOL running in this thread.")

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

(defun call-with-debugger-trap (hook function)
  "Call FUNCTION with HOOK (taking a condition) as the debugger.
The backend binds *DEBUGGER-HOOK* and, where the implementation has
one, its own hook that even BREAK and INVOKE-DEBUGGER honour (e.g.
SB-EXT:*INVOKE-DEBUGGER-HOOK*); without a backend, *DEBUGGER-HOOK*
alone is bound.  HOOK must not return normally."
  (let ((debugger-hook (lambda (condition old-hook)
                         (declare (ignore old-hook))
                         (funcall hook condition))))
    (if (backend-implemented-p "CALL-WITH-DEBUGGER-HOOK")
        (bcall "CALL-WITH-DEBUGGER-HOOK" debugger-hook function)
        (let ((*debugger-hook* debugger-hook)
              ;; BREAK binds *DEBUGGER-HOOK* to NIL; SBCL's own hook
              ;; is consulted first by INVOKE-DEBUGGER.
              #+sbcl (sb-ext:*invoke-debugger-hook* debugger-hook))
          (funcall function)))))

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
      (let* ((arguments (parse-arguments tool args))
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
