;;;; errors.lisp --- the conditions a tool signals to answer with an error.
;;;
;;; A tool's handler signals TOOL-ERROR (through FAIL) for a problem the
;;; model can fix, TOOL-FAILURE for work that ran but failed; CALL-TOOL
;;; (protocol.lisp) turns either into an error result, and the guard
;;; against user code (guard.lisp) lets both through unchanged.

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
