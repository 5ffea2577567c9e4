;;;; describe.lisp --- describe_symbol, function_arglist, apropos_search,
;;;; list_package_symbols.
;;;
;;; CL:DESCRIBE's output is unbounded and differs between
;;; implementations; these tools print a compact, structured summary
;;; instead, with the pieces the model needs next (lambda lists,
;;; documentation, values, definition sites).

(in-package #:sly-agent-q)

(defparameter *documentation-limit* 1500
  "The most characters of one docstring we show.")

(defun arglist-of (name)
  "The lambda list of the function or macro NAME, or :NOT-AVAILABLE."
  (let ((arglist (if (backend-implemented-p "ARGLIST")
                     (handler-case (bcall "ARGLIST" (if (symbolp name) name (fdefinition name)))
                       (error () :not-available))
                     :not-available)))
    (if (listp arglist) arglist :not-available)))

(defparameter *special-operator-syntax*
  '((block "(NAME &BODY FORMS)") (catch "(TAG &BODY FORMS)")
    (eval-when "((&REST SITUATIONS) &BODY FORMS)") (flet "((&REST DEFINITIONS) &BODY BODY)")
    (function "(NAME)") (go "(TAG)") (if "(TEST-FORM THEN-FORM &OPTIONAL ELSE-FORM)")
    (labels "((&REST DEFINITIONS) &BODY BODY)") (let "((&REST BINDINGS) &BODY BODY)")
    (let* "((&REST BINDINGS) &BODY BODY)") (load-time-value "(FORM &OPTIONAL READ-ONLY-P)")
    (locally "(&BODY BODY)") (macrolet "((&REST DEFINITIONS) &BODY BODY)")
    (multiple-value-call "(FUNCTION-FORM &REST FORMS)")
    (multiple-value-prog1 "(FIRST-FORM &BODY FORMS)") (progn "(&BODY FORMS)")
    (progv "(SYMBOLS VALUES &BODY FORMS)") (quote "(OBJECT)")
    (return-from "(NAME &OPTIONAL RESULT)") (setq "(&REST PAIRS)")
    (symbol-macrolet "((&REST BINDINGS) &BODY BODY)") (tagbody "(&BODY STATEMENTS)")
    (the "(VALUE-TYPE FORM)") (throw "(TAG RESULT-FORM)")
    (unwind-protect "(PROTECTED-FORM &BODY CLEANUP-FORMS)"))
  "The standard's syntax of its special operators, for a Lisp whose
backend cannot give their lambda lists (CLISP).")

(defun arglist-text (name package)
  "NAME's lambda list printed relative to PACKAGE."
  (let ((arglist (arglist-of name)))
    (if (eq arglist :not-available)
        (or (second (assoc name *special-operator-syntax*))
            "(lambda list not available)")
        (let ((*package* package))
          (print-value arglist :limit 600)))))

(defun documentation-text (object type)
  "OBJECT's docstring of TYPE, capped, or NIL."
  (let ((doc (ignore-errors (documentation object type))))
    (and (stringp doc)
         (plusp (length doc))
         (cap doc *documentation-limit* "documentation"))))

(defun format-documentation (out doc)
  "Write DOC, indented, to OUT."
  (when doc
    (format out "~&  Documentation:~%~A~%" (indent doc "    "))))

(defun symbol-status-line (symbol package)
  "How SYMBOL relates to PACKAGE: e.g. \"external in MY-APP\"."
  (let ((home (symbol-package symbol)))
    (cond ((null home) "an uninterned symbol")
          (t (multiple-value-bind (found status)
                 (find-symbol (symbol-name symbol) home)
               (declare (ignore found))
               (format nil "~(~A~) in ~A~:[~;, accessible in ~A~]"
                       status (package-name home)
                       (not (eq home package)) (package-name package)))))))

(defun specializer-label (specializer)
  "A specializer as the model would write it in a DEFMETHOD."
  (handler-case
      (cond ((typep specializer 'class)
             (print-value (class-name specializer) :limit 200))
            ((and (backend-symbol "EQL-SPECIALIZER" :mop)
                  (typep specializer (backend-symbol "EQL-SPECIALIZER" :mop)))
             (format nil "(EQL ~A)"
                     (print-value (mop "EQL-SPECIALIZER-OBJECT" specializer) :limit 200)))
            (t (print-value specializer :limit 200)))
    (error () (print-value specializer :limit 200))))

(defun method-signature (method)
  "E.g. \":AROUND (STRING T)\" for METHOD."
  (format nil "~{~A ~}(~{~A~^ ~})"
          (mapcar (lambda (q) (print-value q :limit 100))
                  (ignore-errors (mop "METHOD-QUALIFIERS" method)))
          (mapcar #'specializer-label
                  (ignore-errors (mop "METHOD-SPECIALIZERS" method)))))

(defun describe-function-part (out symbol package)
  "Write what SYMBOL names as an operator."
  (flet ((signature ()
           (let ((arglist (arglist-of symbol))
                 (name (symbol-label symbol package)))
             (cond ((and (eq arglist :not-available) (assoc symbol *special-operator-syntax*))
                    (format nil "(~A ~A" name (subseq (second (assoc symbol *special-operator-syntax*)) 1)))
                   ((eq arglist :not-available)
                    (format nil "~A (lambda list not available)" name))
                   ((null arglist) (format nil "(~A)" name))
                   (t (let ((text (let ((*package* package))
                                    (print-value arglist :limit 600))))
                        (if (and (> (length text) 1) (char= (char text 0) #\())
                            (format nil "(~A ~A" name (subseq text 1))
                            (format nil "(~A . ~A)" name text))))))))
    (cond ((special-operator-p symbol)
           (format out "~&Special operator: ~A~%" (signature)))
          ((macro-function symbol)
           (format out "~&Macro: ~A~%" (signature))
           (format-documentation out (documentation-text symbol 'function)))
          ((generic-function-p symbol)
           (let* ((gf (fdefinition symbol))
                  (methods (ignore-errors (mop "GENERIC-FUNCTION-METHODS" gf))))
             (format out "~&Generic function: ~A~%  ~A: ~{~A~^, ~}~%"
                     (signature) (plural (length methods) "method")
                     (mapcar #'method-signature (subseq methods 0 (min 20 (length methods)))))
             (format-documentation out (documentation-text gf t))))
          ((fboundp symbol)
           (format out "~&Function: ~A~%" (signature))
           (format-documentation out (documentation-text symbol 'function))))
    (when (ignore-errors (fboundp (list 'setf symbol)))
      (format out "~&Setf function: (SETF ~A) ~A~%" (symbol-label symbol package)
              (arglist-text (list 'setf symbol) package)))
    (when (ignore-errors (compiler-macro-function symbol))
      (format out "~&Has a compiler macro.~%"))))

(defun describe-variable-part (out symbol package)
  "Write what SYMBOL names as a variable."
  (let ((*package* package))
    (cond ((keywordp symbol))
          ((constantp symbol)
           (format out "~&Constant: ~A~%" (print-value (symbol-value symbol) :limit 500))
           (format-documentation out (documentation-text symbol 'variable)))
          ((special-variable-p symbol)
           (if (boundp symbol)
               (format out "~&Special variable: global value ~A~%"
                       (print-value (symbol-value symbol) :limit 500))
               (format out "~&Special variable: globally unbound~%"))
           (format-documentation out (documentation-text symbol 'variable)))
          ((boundp symbol)
           (format out "~&Global variable (not declared special): value ~A~%"
                   (print-value (symbol-value symbol) :limit 500))
           (format-documentation out (documentation-text symbol 'variable)))
          ((symbol-macro-p symbol)
           (format out "~&Symbol macro: expands to ~A~%"
                   (print-value (macroexpand-1 symbol) :limit 500))))))

(defun class-names-text (classes package)
  "CLASSES' names printed relative to PACKAGE, comma-separated."
  (let ((*package* package))
    (format nil "~:[none~;~:*~{~A~^, ~}~]"
            (mapcar (lambda (class) (print-value (class-name class) :limit 200))
                    classes))))

(defun describe-class-part (out symbol package)
  "Write what SYMBOL names as a class or type."
  (let ((class (find-class symbol nil)))
    (cond
      (class
       (let ((supers (ignore-errors (mop "CLASS-DIRECT-SUPERCLASSES" class)))
             (subs (ignore-errors (mop "CLASS-DIRECT-SUBCLASSES" class)))
             (slots (ignore-errors (mop "CLASS-DIRECT-SLOTS" class))))
         (format out "~&Class (~A): direct superclasses: ~A; direct subclasses: ~A~%"
                 (let ((*package* package))
                   (print-value (class-name (class-of class)) :limit 200))
                 (class-names-text supers package)
                 (class-names-text (subseq subs 0 (min 20 (length subs))) package))
         (when slots
           (let ((*package* package))
             (format out "  Direct slots: ~{~A~^, ~} (see class_slots)~%"
                     (mapcar (lambda (slot)
                               (print-value (mop "SLOT-DEFINITION-NAME" slot) :limit 100))
                             slots))))
         (format-documentation out (documentation-text class t))))
      ((type-name-p symbol)
       (format out "~&Type specifier (DEFTYPE)~@[: ~A~]~%"
               (let ((arglist (ignore-errors (bcall "TYPE-SPECIFIER-ARGLIST" symbol))))
                 (and (listp arglist) arglist
                      (let ((*package* package)) (print-value arglist :limit 300)))))
       (format-documentation out (documentation-text symbol 'type))))))

(defun dspec-label (dspec package)
  "A definition specifier such as (DEFUN FOO), printed compactly."
  (let ((*package* package))
    (handler-case
        (first-line (print-value dspec :limit 300 :pretty nil) 200)
      (error () "?"))))

(defun describe-definitions-part (out name package)
  "Write where NAME is defined, as far as the image knows."
  (let ((definitions (definitions-of name)))
    (when definitions
      (format out "~&Defined at:~%")
      (loop for (dspec location) in definitions
            for i below 12
            do (format out "  ~A  ~A~%" (dspec-label dspec package) (format-location location)))
      (when (> (length definitions) 12)
        (format out "  ... and ~D more definitions~%" (- (length definitions) 12))))))

(defun describe-symbol-text (symbol package)
  "The describe_symbol report for SYMBOL, names relative to PACKAGE."
  (with-output-to-string (out)
    (format out "~A: ~A~%" (symbol-label symbol) (symbol-status-line symbol package))
    (let ((parts (with-output-to-string (parts)
                   (describe-function-part parts symbol package)
                   (describe-variable-part parts symbol package)
                   (describe-class-part parts symbol package)
                   (when (keywordp symbol)
                     (format parts "~&Keyword: evaluates to itself.~%")))))
      (if (zerop (length parts))
          (format out "It names no function, macro, variable, class or type.~%")
          (write-string parts out)))
    (describe-definitions-part out symbol package)))

(define-tool "describe_symbol" (&key symbol package)
  "What SYMBOL names, its documentation, lambda list, value and definitions."
  (let* ((package (tool-package package))
         (symbol (resolve-symbol (nonblank symbol "symbol" "a symbol name") package)))
    ;; Printing values runs user code: CALL-TOOL guards it (see
    ;; *TOOLS-GUARDING-THEMSELVES*).
    (describe-symbol-text symbol package)))


;;;; function_arglist

(defun operator-p (symbol)
  (or (fboundp symbol) (special-operator-p symbol)))

(defun resolve-function-name (text package)
  "The function name TEXT denotes: a symbol naming an operator, or a
list (SETF symbol) naming a setf function."
  (let ((trimmed (string-trim '(#\Space #\Tab #\Newline) text)))
    (if (and (> (length trimmed) 2)
             (char= (char trimmed 0) #\()
             (char= (char trimmed (1- (length trimmed))) #\)))
        (let* ((inner (string-trim " " (subseq trimmed 1 (1- (length trimmed)))))
               (space (position #\Space inner)))
          (unless (and space (string-equal "setf" (subseq inner 0 space)))
            (fail "~S is not a function name: use a symbol, or (setf symbol)." text))
          (let* ((symbol (resolve-symbol (string-trim " " (subseq inner space)) package))
                 (name (list 'setf symbol)))
            (unless (fboundp name)
              (fail "(SETF ~A) is not defined as a setf function~@[ (SETF of it may be ~
                     a setf expander or slot writer method instead)~]."
                    (symbol-label symbol package) (fboundp symbol)))
            name))
        (resolve-symbol text package
                        :what "Function"
                        :test #'operator-p
                        :test-description "a function, macro or special operator"))))

(defun operator-kind (name)
  "\"function\", \"macro\"... for the function name NAME."
  (cond ((consp name) "a setf function")
        ((special-operator-p name) "a special operator")
        ((macro-function name) "a macro")
        ((generic-function-p name) "a generic function")
        (t "a function")))

(define-tool "function_arglist" (&key function package)
  "The lambda list of a function, macro or generic function."
  (let* ((package (tool-package package))
         (name (resolve-function-name (nonblank function "function" "a function's name") package))
         (doc (documentation-text name 'function)))
    (format nil "~A is ~A.~%Lambda list: ~A~@[~%Documentation: ~A~]"
            (if (consp name)
                (format nil "(SETF ~A)" (symbol-label (second name)))
                (symbol-label name))
            (operator-kind name)
            (arglist-text name package)
            (and doc (first-line doc 300)))))


;;;; apropos_search

(defparameter *system-package-prefixes*
  '("SB-" "SB!" "SWANK" "SLYNK" "CCL" "ASDF" "UIOP" "QL-" "QUICKLISP" "SYSTEM" "SI"
    "EXT" "CLOS" "MOP" "GRAY" "FFI" "CUSTOM" "ECL" "MP" "LW" "HCL" "EXCL" "SLY-AGENT-Q")
  "Prefixes of package names that belong to the implementation or the
development environment: apropos ranks their symbols after the user's.")

(defun system-package-p (package)
  (and package
       (let ((name (package-name package)))
         (or (member name '("COMMON-LISP" "KEYWORD") :test #'string=)
             (some (lambda (prefix)
                     (and (>= (length name) (length prefix))
                          (string= prefix name :end2 (length prefix))))
                   *system-package-prefixes*)))))

(defun names-something-p (symbol)
  (ignore-errors (or (fboundp symbol) (boundp symbol) (find-class symbol nil)
                     (special-operator-p symbol))))

(defparameter *apropos-limit* 60
  "The most symbols apropos_search lists.")

(define-tool "apropos_search" (&key pattern package)
  "Symbols whose names contain PATTERN, with what each names."
  (let* ((pattern (nonblank pattern "pattern" "a substring of the names to find"))
         (only (and package (resolve-package package)))
         (seen (make-hash-table :test 'eq))
         (matches '()))
    (flet ((consider (symbol)
             (when (and (not (gethash symbol seen))
                        (not (keywordp symbol))
                        (search pattern (symbol-name symbol) :test #'char-equal))
               (setf (gethash symbol seen) t)
               (push symbol matches))))
      (if only
          (do-symbols (symbol only)
            (unless (eq (nth-value 1 (find-symbol (symbol-name symbol) only)) :inherited)
              (consider symbol)))
          (do-all-symbols (symbol)
            (consider symbol))))
    (let* ((ranked
             (sort (mapcar (lambda (symbol)
                             (let ((name (symbol-name symbol)))
                               ;; Sort keys, most important first: what
                               ;; names something, in the user's own
                               ;; packages, matching exactly or as a
                               ;; prefix, short.
                               (list symbol
                                     (symbol-label symbol)
                                     (if (names-something-p symbol) 0 1)
                                     (if (system-package-p (symbol-package symbol)) 1 0)
                                     (cond ((string-equal name pattern) 0)
                                           ((and (>= (length name) (length pattern))
                                                 (string-equal pattern name :end2 (length pattern)))
                                            1)
                                           (t 2))
                                     (length name))))
                           matches)
                   (lambda (a b)
                     (loop for x in (cddr a) for y in (cddr b)
                           unless (= x y) return (< x y)
                           finally (return (string< (second a) (second b)))))))
           (total (length ranked))
           (shown (subseq ranked 0 (min total *apropos-limit*))))
      (if (zerop total)
          (format nil "No symbols contain ~S~:[~; in package ~:*~A~] (keywords are not searched)."
                  pattern (and only (package-name only)))
          (with-output-to-string (out)
            (format out "~A contain~:[~;s~] ~S~@[ in package ~A~] (~:[all shown~;~:*~D shown, ~
                         best matches first~]; keywords not searched):~%"
                    (plural total "symbol") (= total 1) pattern
                    (and only (package-name only))
                    (and (> total (length shown)) (length shown)))
            (dolist (entry shown)
              (let ((kinds (symbol-kinds (first entry))))
                (format out "  ~A  ~:[-~;~:*~{~A~^, ~}~]~%" (second entry) kinds)))
            (when (> total (length shown))
              (format out "... ~D more not shown: use a longer pattern~:[ or pass a package~;~]."
                      (- total (length shown)) only)))))))


;;;; list_package_symbols

(defparameter *package-listing-limit* 300
  "The most symbols list_package_symbols lists.")

(define-tool "list_package_symbols" (&key package include-internal)
  "The external (optionally also internal) symbols of a package, with
what each names."
  (let* ((package (resolve-package (nonblank package "package" "a package name")))
         (external '())
         (internal '()))
    (do-symbols (symbol package)
      (multiple-value-bind (found status) (find-symbol (symbol-name symbol) package)
        (declare (ignore found))
        (case status
          (:external (pushnew symbol external))
          (:internal (pushnew symbol internal)))))
    (setf external (sort external #'string< :key #'symbol-name)
          internal (sort internal #'string< :key #'symbol-name))
    (with-output-to-string (out)
      (format out "Package ~A~@[ (nicknames: ~{~A~^, ~})~]; uses: ~:[none~;~:*~{~A~^, ~}~]~%"
              (package-name package) (package-nicknames package)
              (mapcar #'package-name (package-use-list package)))
      (let ((budget *package-listing-limit*))
        (flet ((section (title symbols)
                 (format out "~A (~D):~%" title (length symbols))
                 (dolist (symbol symbols)
                   (when (<= budget 0)
                     (format out "  ... listing cut at ~D symbols~%" *package-listing-limit*)
                     (return))
                   (decf budget)
                   (let ((kinds (symbol-kinds symbol)))
                     (format out "  ~A  ~:[-~;~:*~{~A~^, ~}~]~%"
                             (symbol-label symbol package) kinds)))))
          (section "External symbols" external)
          (if include-internal
              (section "Internal symbols" internal)
              (when internal
                (format out "(~A not listed; pass include_internal=true to list them.)~%"
                        (plural (length internal) "internal symbol")))))))))


;;;; list_packages

(defparameter *package-list-limit* 400
  "The most packages list_packages lists.")

(defparameter *package-list-chars* 20000
  "About the most characters list_packages answers: the packages after are counted, not listed.")

(defparameter *package-nickname-limit* 8
  "The most nicknames list_packages shows for one package.")

(define-tool "list_packages" (&key pattern)
  "The image's packages (those whose name or a nickname contains PATTERN),
with their nicknames and how many external symbols each has; the
implementation's own packages last."
  (let* ((pattern (and pattern (plusp (length pattern)) pattern))
         (matches
           (remove-if-not
            (lambda (package)
              (or (null pattern)
                  (some (lambda (name) (search pattern name :test #'char-equal))
                        (cons (package-name package) (package-nicknames package)))))
            (list-all-packages)))
         (sorted (sort (copy-list matches)
                       (lambda (a b)
                         (let ((sa (if (system-package-p a) 1 0))
                               (sb (if (system-package-p b) 1 0)))
                           (if (/= sa sb)
                               (< sa sb)
                               (string< (package-name a) (package-name b)))))))
         (total (length sorted))
         (shown (subseq sorted 0 (min total *package-list-limit*))))
    (if (zerop total)
        (format nil "No package's name or nickname contains ~S." pattern)
        (with-output-to-string (out)
          (format out "~A~@[ whose name or a nickname contains ~S~] (name  nicknames  external symbols):~%"
                  (plural total "package") pattern)
          (let ((listed 0) (chars 0))
            (dolist (package shown)
              (when (> chars *package-list-chars*)
                (return))
              (let ((external 0)
                    (nicknames (sort (copy-list (package-nicknames package)) #'string<)))
                (do-external-symbols (symbol package)
                  (declare (ignore symbol))
                  (incf external))
                ;; Names are the image's data, a hostile library's too: one line each, bounded.
                (let ((line (format nil "  ~A  ~:[-~;~:*~{~A~^, ~}~]~@[, and ~D more~]  ~D~%"
                                    (listing-name (package-name package))
                                    (mapcar #'listing-name
                                            (subseq nicknames 0 (min (length nicknames)
                                                                     *package-nickname-limit*)))
                                    (and (> (length nicknames) *package-nickname-limit*)
                                         (- (length nicknames) *package-nickname-limit*))
                                    external)))
                  (write-string line out)
                  (incf chars (length line)))
                (incf listed)))
            (when (> total listed)
              (format out "... ~D more not shown: pass a pattern.~%" (- total listed))))))))

