;;;; clos.lisp --- class_slots, class_hierarchy, method_specializers.
;;;
;;; Through SLYNK-MOP / SWANK-MOP, the MOP subset SLY and SLIME
;;; already make portable, instead of closer-mop.

(in-package #:sly-agent-q)

(defun resolve-class (text package)
  "The class TEXT names, read relative to PACKAGE."
  (find-class (resolve-symbol text package
                              :what "Class"
                              :test (lambda (symbol) (find-class symbol nil))
                              :test-description "a class")))

(defun finalize-quietly (class)
  "Finalize CLASS's inheritance if needed.  Returns NIL and the reason
when that is impossible (a superclass not yet defined, say)."
  (handler-case
      (progn
        (unless (mop "CLASS-FINALIZED-P" class)
          (mop "FINALIZE-INHERITANCE" class))
        t)
    (error (c) (values nil (condition-message c)))))

(defun class-label (class package)
  (let ((*package* package))
    (print-value (class-name class) :limit 200)))

(defun metaclass-label (class package)
  (class-label (class-of class) package))

(defun direct-slots-named (class name)
  "The direct slot definitions named NAME in CLASS and its superclasses,
most specific first."
  (loop for c in (or (ignore-errors (mop "CLASS-PRECEDENCE-LIST" class)) (list class))
        for slot = (find name (ignore-errors (mop "CLASS-DIRECT-SLOTS" c))
                         :key (lambda (s) (mop "SLOT-DEFINITION-NAME" s)))
        when slot collect (cons c slot)))

(defun slot-documentation (slot)
  (let ((doc (or (and (backend-symbol "SLOT-DEFINITION-DOCUMENTATION" :mop)
                      (ignore-errors (mop "SLOT-DEFINITION-DOCUMENTATION" slot)))
                 (ignore-errors (documentation slot t)))))
    (and (stringp doc) (plusp (length doc)) doc)))

(defun write-slot (out class slot package)
  "Describe the effective SLOT of CLASS on OUT."
  (let* ((*package* package)
         (name (mop "SLOT-DEFINITION-NAME" slot))
         (direct (direct-slots-named class name))
         (origin (car (first direct)))
         (readers (remove-duplicates
                   (loop for (nil . d) in direct
                         append (ignore-errors (mop "SLOT-DEFINITION-READERS" d)))
                   :test #'equal))
         (writers (remove-duplicates
                   (loop for (nil . d) in direct
                         append (ignore-errors (mop "SLOT-DEFINITION-WRITERS" d)))
                   :test #'equal))
         (initargs (ignore-errors (mop "SLOT-DEFINITION-INITARGS" slot)))
         (has-initform (ignore-errors (mop "SLOT-DEFINITION-INITFUNCTION" slot)))
         (type (let ((type (ignore-errors (mop "SLOT-DEFINITION-TYPE" slot))))
                 ;; An effective slot's type is the AND of the direct
                 ;; slots' types; CLISP writes (AND STRING) for one.
                 (if (and (consp type) (eq (first type) 'and) (consp (rest type)) (null (cddr type)))
                     (second type)
                     type)))
         (allocation (ignore-errors (mop "SLOT-DEFINITION-ALLOCATION" slot)))
         (doc (some (lambda (entry) (slot-documentation (cdr entry))) direct)))
    (format out "~A  (~:[defined here~;~:*inherited from ~A~])~%"
            (print-value name :limit 200)
            (and origin (not (eq origin class)) (class-label origin package)))
    (format out "    initargs: ~:[none~;~:*~{~A~^ ~}~]; initform: ~A; type: ~A~@[; allocation: ~A~]~%"
            (mapcar (lambda (i) (print-value i :limit 100)) initargs)
            (if has-initform
                (print-value (mop "SLOT-DEFINITION-INITFORM" slot) :limit 300)
                "none")
            (print-value type :limit 200)
            (and allocation (not (eq allocation :instance)) (print-value allocation)))
    (format out "    readers: ~:[none~;~:*~{~A~^ ~}~]; writers: ~:[none~;~:*~{~A~^ ~}~]~%"
            (mapcar (lambda (r) (print-value r :limit 100)) readers)
            (mapcar (lambda (w) (print-value w :limit 100)) writers))
    (when doc
      (format out "    documentation: ~A~%" (first-line doc 300)))))

(define-tool "class_slots" (&key class package)
  "The slots of CLASS (own and inherited) with initargs, initforms,
types, readers and writers."
  (let* ((package (tool-package package))
         (class (resolve-class (nonblank class "class" "a class name") package)))
    (multiple-value-bind (finalized why) (finalize-quietly class)
      (let ((slots (if finalized
                       (ignore-errors (mop "CLASS-SLOTS" class))
                       (ignore-errors (mop "CLASS-DIRECT-SLOTS" class)))))
        (with-output-to-string (out)
          (format out "Class ~A (metaclass ~A)"
                  (symbol-label (class-name class)) (metaclass-label class package))
          (cond ((not finalized)
                 (format out ": not finalized (~A); showing its direct slots only.~%" why))
                ((null slots)
                 (format out ": no slots.~%"))
                (t
                 (let ((own (count-if (lambda (slot)
                                        (eq (car (first (direct-slots-named
                                                         class (mop "SLOT-DEFINITION-NAME" slot))))
                                            class))
                                      slots)))
                   (format out ": ~A (~D defined here, ~D inherited)~%"
                           (plural (length slots) "slot") own (- (length slots) own)))))
          (dolist (slot slots)
            (write-slot out class slot package)))))))

(defparameter *subclass-tree-limit* 60
  "The most classes the subclass tree of class_hierarchy shows.")

(define-tool "class_hierarchy" (&key class package)
  "CLASS's precedence list and its subclasses."
  (let* ((package (tool-package package))
         (class (resolve-class (nonblank class "class" "a class name") package)))
    (multiple-value-bind (finalized why) (finalize-quietly class)
      (with-output-to-string (out)
        (format out "Class ~A (metaclass ~A)~%"
                (symbol-label (class-name class)) (metaclass-label class package))
        (if finalized
            (format out "Precedence list: ~A~%"
                    (class-names-text (mop "CLASS-PRECEDENCE-LIST" class) package))
            (format out "Precedence list: unknown, the class is not finalized (~A)~%" why))
        (format out "Direct superclasses: ~A~%"
                (class-names-text (ignore-errors (mop "CLASS-DIRECT-SUPERCLASSES" class)) package))
        (let ((subclasses (ignore-errors (mop "CLASS-DIRECT-SUBCLASSES" class)))
              (budget *subclass-tree-limit*))
          (if (null subclasses)
              (format out "Direct subclasses: none~%")
              (labels ((walk (classes depth)
                         (dolist (sub (sort (copy-list classes) #'string<
                                            :key (lambda (c) (class-label c package))))
                           (when (<= budget 0)
                             (format out "~vT...~%" (* 2 depth))
                             (return))
                           (decf budget)
                           (format out "~vT~A~%" (* 2 depth) (class-label sub package))
                           (when (< depth 6)
                             (walk (ignore-errors (mop "CLASS-DIRECT-SUBCLASSES" sub))
                                   (1+ depth))))))
                (format out "Subclasses (direct ones first level, indented by depth):~%")
                (walk subclasses 1))))))))


;;;; method_specializers

(defun method-lambda-list-text (method package)
  "METHOD's lambda list with its specializers, as in its DEFMETHOD."
  (let* ((*package* package)
         (lambda-list (ignore-errors (mop "METHOD-LAMBDA-LIST" method)))
         (specializers (ignore-errors (mop "METHOD-SPECIALIZERS" method))))
    (with-output-to-string (out)
      (write-char #\( out)
      (loop for (parameter . more) on lambda-list
            for required = (not (member parameter lambda-list-keywords))
              then (and required (not (member parameter lambda-list-keywords)))
            for specializer = (and required (pop specializers))
            do (if (and specializer
                        (not (and (typep specializer 'class)
                                  (eq (class-name specializer) t))))
                   (format out "(~A ~A)" (print-value parameter :limit 100)
                           (specializer-label specializer))
                   (write-string (print-value parameter :limit 200) out))
               (when more (write-char #\Space out)))
      (write-char #\) out))))

(define-tool "method_specializers" (&key generic-function package)
  "The lambda list of GENERIC-FUNCTION and its methods with qualifiers
and specializers."
  (let* ((package (tool-package package))
         (symbol (resolve-symbol (nonblank generic-function "generic_function"
                                           "a generic function's name")
                                 package
                                 :what "Generic function"
                                 :test #'generic-function-p
                                 :test-description "a generic function"))
         (gf (fdefinition symbol))
         (methods (ignore-errors (mop "GENERIC-FUNCTION-METHODS" gf)))
         (doc (documentation-text gf t)))
    (with-output-to-string (out)
      (format out "Generic function ~A~%Lambda list: ~A~%"
              (symbol-label symbol)
              (let ((*package* package))
                (print-value (ignore-errors (mop "GENERIC-FUNCTION-LAMBDA-LIST" gf)) :limit 500)))
      (when doc
        (format out "Documentation: ~A~%" (first-line doc 300)))
      (format out "~A~:[.~;, each as (qualifiers) (specializers), DEFMETHOD lambda list, source:~]~%"
              (plural (length methods) "method") methods)
      (loop for method in methods
            for i below 100
            do (let ((location (source-location-of method)))
                 (format out "  ~A  ~A~@[  ~A~]~%"
                         (method-signature method)
                         (method-lambda-list-text method package)
                         (and location (format-location location)))))
      (when (> (length methods) 100)
        (format out "  ... and ~D more methods~%" (- (length methods) 100))))))
