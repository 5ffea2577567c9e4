;;;; trace.lisp --- trace_eval, disassemble_function.
;;;
;;; trace_eval traces functions for one evaluation only: those it
;;; traced are untraced when the evaluation ends, however it ends
;;; (functions the user traced before stay traced), unless asked to
;;; KEEP them, until untrace_functions.  The calls are the
;;; trace output, captured with the evaluation's output and bounded as
;;; it is, printed with short *PRINT-LENGTH* and *PRINT-LEVEL*.

(in-package #:sly-agent-q)

(pushnew "trace_eval" *tools-guarding-themselves* :test #'string=)

(defun traced-functions ()
  "The names TRACE reports as traced now."
  (ignore-errors (eval '(trace))))

(defvar *kept-traces* '()
  "Functions trace_eval traced with KEEP and left traced, for untrace_functions.")

(define-tool "untrace_functions" ()
  "Untrace the functions trace_eval left traced (KEEP)."
  (let ((names (call-with-state-lock (lambda () (shiftf *kept-traces* '())))))
    (if (null names)
        "No function is left traced by trace_eval."
        (let ((*standard-output* (make-broadcast-stream))
              (*trace-output* (make-broadcast-stream)))
          (eval `(untrace ,@names))
          (format nil "Untraced ~{~A~^, ~}." (mapcar #'symbol-label names))))))

(define-tool "trace_eval" (&key functions form package keep)
  "Evaluate FORM with FUNCTIONS traced; untrace them after, unless KEEP."
  (let* ((package (tool-package package))
         (names (mapcar (lambda (text)
                          (resolve-symbol (nonblank text "functions" "function names") package
                                          :what "Function" :test #'fboundp
                                          :test-description "a function"))
                        (if (listp functions) functions (list functions))))
         (before (traced-functions))
         (ours (remove-if (lambda (name) (member name before :test #'equal)) names)))
    (when (null names)
      (fail "Give at least one function to trace."))
    (when (some #'macro-function names)
      (fail "~A names a macro; only functions can be traced."
            (symbol-label (find-if #'macro-function names) package)))
    (unwind-protect
         (progn
           (let ((*standard-output* (make-broadcast-stream))
                 (*trace-output* (make-broadcast-stream)))
             (eval `(trace ,@ours)))
           (let ((*print-length* 10)
                 (*print-level* 4))
             (format nil "Traced ~{~A~^, ~} during this evaluation; ~:[untraced now~;still traced ~
                          (their calls print in the user's REPL) until untrace_functions~].~%~A"
                     (mapcar (lambda (name) (symbol-label name package)) names)
                     keep
                     (evaluate-text "trace_eval" (nonblank form "form" "one or more Lisp forms") package))))
      (if keep
          (call-with-state-lock
           (lambda () (setf *kept-traces* (union *kept-traces* ours :test #'equal))))
          (ignore-errors
           (let ((*standard-output* (make-broadcast-stream))
                 (*trace-output* (make-broadcast-stream)))
             (eval `(untrace ,@ours))))))))

(define-tool "disassemble_function" (&key function package)
  "The disassembly of FUNCTION."
  (let* ((package (tool-package package))
         (name (resolve-function-name (nonblank function "function" "a function's name") package)))
    (when (and (symbolp name) (or (macro-function name) (special-operator-p name)))
      (fail "~A is a ~:[macro~;special operator~], not a function." (symbol-label name package)
            (special-operator-p name)))
    ;; Some Lisps say why they cannot disassemble on *ERROR-OUTPUT*
    ;; (ECL for natively compiled code): that is the answer then.
    (let ((text (with-output-to-string (out)
                  (let ((*standard-output* out)
                        (*error-output* out)
                        (*package* package))
                    (disassemble (fdefinition name))))))
      (when (zerop (length (string-trim '(#\Space #\Tab #\Newline #\Return) text)))
        (fail "~A printed no disassembly of ~A." (lisp-implementation-type) function))
      (cap text 6000 "disassembly"))))
