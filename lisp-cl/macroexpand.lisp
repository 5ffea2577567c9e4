;;;; macroexpand.lisp --- macroexpand_form.
;;;
;;; The form is read with *READ-EVAL* NIL ("#." refused), but expanding
;;; it runs the macro's own code, which is user code: it runs under
;;; RUN-USER-CODE, so an error or endless loop in a macro function comes
;;; back as a result, not as a debugger or a hung tool.

(in-package #:sly-agent-q)

(defun expansion-text (form package)
  "FORM, an expansion, printed as code relative to PACKAGE."
  (handler-case
      (let ((*package* package)
            (*print-pretty* t)
            (*print-right-margin* 100)
            (*print-circle* nil)
            ;; Code is printed whole; these only stop runaway structure.
            (*print-length* 500)
            (*print-level* 60)
            (*print-readably* nil)
            (*print-escape* t))
        (prin1-to-string form))
    (trappable-condition (c) (unprintable form c))))

(define-tool "macroexpand_form" (&key form full package)
  "Expand FORM once (or, with FULL, until its head is not a macro)."
  (let* ((package (tool-package package))
         (form (read-form-for-inspection (nonblank form "form" "one Lisp form") package
                                         :tool "macroexpand_form"))
         (expansion nil)
         (expanded-p nil)
         (text nil)
         (phase :expand)
         ;; Printing the expansion runs user code too (PRINT-OBJECT
         ;; methods of literal objects in it): same guard.
         (outcome (run-user-code
                   (lambda ()
                     (multiple-value-setq (expansion expanded-p)
                       (if full (macroexpand form) (macroexpand-1 form)))
                     (setf phase :print
                           text (expansion-text (if expanded-p expansion form) package))))))
    (cond
      ((outcome-timed-out outcome)
       (fail "Macroexpansion timed out after ~A s and was interrupted: ~:[the macro function ~
              does not terminate~;printing the expansion does not terminate (a PRINT-OBJECT method ~
              of an object in it)~].~@[~%Where it was (innermost first):~%~A~]"
             (outcome-seconds outcome) (eq phase :print)
             (and (outcome-backtrace outcome) (format-backtrace (outcome-backtrace outcome)))))
      ((outcome-condition outcome)
       (fail "Macroexpansion signalled ~A: ~A~@[~%Backtrace (innermost first):~%~A~]"
             (outcome-type outcome) (outcome-message outcome)
             (and (outcome-backtrace outcome) (format-backtrace (outcome-backtrace outcome) 8))))
      ((not expanded-p)
       (format nil "Not a macro form: nothing to expand~:[~;~:* (~A is ~A)~]. The form is unchanged:~%~A"
               (and (consp form) (symbolp (first form)) (symbol-label (first form) package))
               (and (consp form) (symbolp (first form))
                    (cond ((special-operator-p (first form)) "a special operator")
                          ((fboundp (first form)) "a function")
                          (t "not defined as an operator")))
               text))
      (t
       (format nil "Expansion (~:[MACROEXPAND-1: one step~;MACROEXPAND: until the head is not a ~
                    macro; subforms are not expanded~]) in package ~A:~%~A"
               full (package-name package) text)))))
