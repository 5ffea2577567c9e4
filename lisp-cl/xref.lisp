;;;; xref.lisp --- who_calls and who_references from the image's xref data.
;;;
;;; The backend's WHO-CALLS / WHO-REFERENCES read whatever
;;; cross-reference data the implementation keeps.  That data only
;;; exists for code compiled in certain ways, so an empty answer is
;;; never silent: it says what it means and what it does not.

(in-package #:sly-agent-q)

(defparameter *xref-limit* 50
  "The most entries one xref list shows.")

(defparameter *xref-caveat*
  "Note: cross-reference data exists only for code compiled with it (on SBCL: code
compiled by COMPILE-FILE or COMPILE, e.g. with C-c C-k, C-c C-c or compile_form,
in packages other than the implementation's own). Calls through FUNCALL or APPLY
of a computed name, inlined calls and code loaded from source without compiling
are not recorded; when in doubt, search the sources."
  "What every empty xref answer reminds the model of.")

(defun xref-entries (backend-function name)
  "The backend's (DSPEC LOCATION) list for NAME, or :NOT-IMPLEMENTED."
  (if (backend-implemented-p backend-function)
      (let ((result (bcall backend-function name)))
        (if (listp result) result :not-implemented))
      :not-implemented))

(defun write-xref-entries (out entries package)
  "Write ENTRIES, a (DSPEC LOCATION) list, one per line."
  (let ((entries (remove-duplicates entries :test #'equal :from-end t)))
    (loop for (dspec location) in entries
          for i below *xref-limit*
          do (format out "  ~A  ~A~%" (dspec-label dspec package) (format-location location)))
    (when (> (length entries) *xref-limit*)
      (format out "  ... and ~D more~%" (- (length entries) *xref-limit*)))))

(defun xref-unavailable (what)
  (fail "~A is not available here: this Lisp's ~A backend keeps no cross-reference ~
         data for it. Use apropos_search, describe_symbol or search the sources instead."
        what (or (backend-name) "SLYNK/SWANK")))

(define-tool "who_calls" (&key function package)
  "The functions that call FUNCTION, from the implementation's xref data."
  (let* ((package (tool-package package))
         (symbol (resolve-symbol (nonblank function "function" "a function's name") package
                                 :what "Function"))
         (callers (xref-entries "WHO-CALLS" symbol)))
    (when (eq callers :not-implemented)
      (xref-unavailable "who_calls"))
    (with-output-to-string (out)
      (unless (operator-p symbol)
        (format out "(~A is not currently defined as a function.)~%" (symbol-label symbol)))
      (cond (callers
             (format out "Callers of ~A (~D, from xref data):~%"
                     (symbol-label symbol) (length callers))
             (write-xref-entries out callers package))
            (t
             (format out "No callers of ~A are recorded.~%~A~%"
                     (symbol-label symbol) *xref-caveat*))))))

(define-tool "who_references" (&key variable package)
  "The code that reads VARIABLE (and, when recorded, binds or sets it)."
  (let* ((package (tool-package package))
         (symbol (resolve-symbol (nonblank variable "variable" "a variable's name") package
                                 :what "Variable"))
         (readers (xref-entries "WHO-REFERENCES" symbol)))
    (when (eq readers :not-implemented)
      (xref-unavailable "who_references"))
    (let ((binders (ignore-errors (xref-entries "WHO-BINDS" symbol)))
          (setters (ignore-errors (xref-entries "WHO-SETS" symbol))))
      (with-output-to-string (out)
        (unless (or (boundp symbol) (special-variable-p symbol) (constantp symbol))
          (format out "(~A is not currently a global or special variable.)~%"
                  (symbol-label symbol)))
        (cond (readers
               (format out "Code that reads ~A (~D, from xref data):~%"
                       (symbol-label symbol) (length readers))
               (write-xref-entries out readers package))
              (t
               (format out "No references to ~A are recorded.~%" (symbol-label symbol))))
        (when (and (listp binders) binders)
          (format out "Code that binds it:~%")
          (write-xref-entries out binders package))
        (when (and (listp setters) setters)
          (format out "Code that sets it:~%")
          (write-xref-entries out setters package))
        (unless readers
          (format out "~A~%" *xref-caveat*))))))
