;;;; locations.lisp --- where definitions are, on a Lisp whose backend
;;;; cannot say.
;;;
;;; CLISP records, per name and kind of definition, the file it was
;;; loaded from and the lines of its form -- for code loaded from a
;;; fasl, the fasl, not its source.  SWANK's CLISP backend looks for the
;;; source beside the fasl, so code that ASDF compiled into its output
;;; cache (every system a user loads) had no source at all.  Here a
;;; fasl is mapped back to its source through ASDF's components (the
;;; component whose compiled output it is), and the recorded lines to
;;; the form in that file.  CLISP records methods only when they are
;;; compiled in this image, and then with the lines of whatever file was
;;; being loaded: a method is found by its DEFMETHOD form's name,
;;; qualifiers and specializers, read as text, in the files where its
;;; generic function, its classes and its recorded definitions are.
;;; Other Lisps record source files themselves and use the backend.

(in-package #:sly-agent-q)

(defun asdf-symbol (name)
  "ASDF's symbol NAME (a string), or NIL when ASDF is not loaded."
  (let ((package (find-package "ASDF")))
    (and package (values (find-symbol name package)))))

(defvar *fasl-sources* (make-hash-table :test 'equal)
  "The namestring of a fasl ASDF compiles -> its source file, as the
registered systems said when last asked.")

(defun note-asdf-outputs ()
  "Record, in *FASL-SOURCES*, the compiled output of every source file of
every system ASDF has registered.  Never signals."
  (let ((map-systems (asdf-symbol "MAP-SYSTEMS"))
        (output-files (asdf-symbol "OUTPUT-FILES"))
        (compile-op (asdf-symbol "COMPILE-OP"))
        (children (asdf-symbol "COMPONENT-CHILDREN"))
        (pathname-of (asdf-symbol "COMPONENT-PATHNAME"))
        (source-file (asdf-symbol "CL-SOURCE-FILE"))
        (parent (asdf-symbol "PARENT-COMPONENT")))
    (when (and map-systems output-files compile-op children pathname-of source-file parent
               (fboundp map-systems) (find-class source-file nil) (find-class parent nil))
      (labels ((walk (component)
                 (cond ((typep component source-file)
                        (let ((fasl (ignore-errors
                                     (first (funcall output-files compile-op component))))
                              (source (ignore-errors (funcall pathname-of component))))
                          (when (and fasl source)
                            (setf (gethash (namestring fasl) *fasl-sources*) source))))
                       ((typep component parent)
                        (dolist (child (ignore-errors (funcall children component)))
                          (walk child))))))
        (ignore-errors (funcall map-systems #'walk))))))

(defun compiled-file-p (file)
  "True if FILE's type is that of this Lisp's compiled files."
  (let ((type (pathname-type file)))
    (and (stringp type)
         (string-equal type (pathname-type (compile-file-pathname "x.lisp"))))))

(defun fasl-source (fasl)
  "The source file of the compiled file FASL: the one beside it, or the
one ASDF compiles into it; NIL when neither is known."
  (let ((key (namestring fasl)))
    (or (loop for type in '("lisp" "lsp" "cl")
              thereis (ignore-errors (probe-file (make-pathname :type type :defaults fasl))))
        (let ((known (gethash key *fasl-sources*)))
          (and known (ignore-errors (probe-file known))))
        (progn (note-asdf-outputs)
               (let ((known (gethash key *fasl-sources*)))
                 (and known (ignore-errors (probe-file known))))))))

(defun line-start (text line)
  "The 0-based index where the 1-based LINE of TEXT starts, or NIL."
  (loop with index = 0
        repeat (1- line)
        do (setf index (position #\Newline text :start index))
           (unless index (return-from line-start nil))
           (incf index)
        finally (return index)))

(defun top-level-form-start (text predicate)
  "The 0-based start of the first top-level form of TEXT whose start
satisfies PREDICATE, or NIL."
  (loop for (start) in (scan-forms text)
        when (and (< start (length text))
                  (char= (char text start) #\()
                  (funcall predicate start))
          return start))

(defun location-at (file index)
  "A backend location for the 0-based INDEX of FILE."
  (list :location (list :file (namestring file)) (list :position (1+ index)) nil))


;;;; CLISP's records

(defun recorded-definitions (name)
  "CLISP's records of NAME's definitions: a list of (KIND FILE LINE-1 LINE-2)."
  (declare (ignorable name))
  #+clisp (and (symbolp name) (ignore-errors (copy-list (documentation name 'system::file))))
  #-clisp nil)

(defun call-recording-source (file line-1 line-2 function)
  "Call FUNCTION (which compiles and loads code) so that what it defines
is recorded as being in FILE, at lines LINE-1 to LINE-2, where the Lisp
would record something else (CLISP: the temporary file it compiled)."
  (declare (ignorable file line-1 line-2))
  #+clisp (let ((system::*current-source-file* (pathname file))
                (system::*current-source-line-1* line-1)
                (system::*current-source-line-2* line-2))
            (funcall function))
  #-clisp (funcall function))

(defun method-record-p (record)
  (and (consp (first record)) (eq (first (first record)) 'defmethod)))

(defun accessor-record-p (record)
  (and (consp (first record)) (eq (first (first record)) 'defclass)))

(defun record-source (record)
  "The source file of RECORD, and true when its lines are those of the
form (recorded from a fasl, whose lines the compiler took from the
source; a record naming a source file may carry the lines of the file
being loaded when it was made)."
  (let ((file (second record)))
    (when (pathnamep file)
      (if (compiled-file-p file)
          (values (fasl-source file) t)
          (values (ignore-errors (probe-file file)) nil)))))

(defun record-location (name record)
  "The backend location of the definition of NAME that RECORD names."
  (multiple-value-bind (source lines-exact) (record-source record)
    (let ((file (second record))
          (line (third record)))
      (cond
        ((null source)
         (list :error (if (and (pathnamep file) (compiled-file-p file))
                          (format nil "loaded from ~A, whose source is neither beside it nor ~
                                       a source file of a system ASDF has registered"
                                  (namestring file))
                          "no source file recorded")))
        (t
         (let* ((text (read-file-text source))
                (at (and text (integerp line) (line-start text line))))
           (cond ((null text) (list :error (format nil "~A cannot be read" (namestring source))))
                 ;; From a fasl: the form is where the lines say, or the
                 ;; file has changed since (which the callers detect).  The
                 ;; first line is where the reader started: the comments
                 ;; above the form are skipped.
                 ((and at lines-exact) (location-at source (min (skip-blank text at) (length text))))
                 (t
                  (let ((start (or (and at (let ((start (skip-blank text at)))
                                             (and (< start (length text))
                                                  (form-defines-p text start name)
                                                  start)))
                                   (top-level-form-start
                                    text (lambda (start) (form-defines-p text start name))))))
                    (if start
                        (location-at source start)
                        (list :error (format nil "no form defining ~A in ~A"
                                             name (namestring source)))))))))))))

(defun record-dspec (name record)
  "The definition specifier, as SBCL's backend writes them, of RECORD."
  (let ((kind (first record)))
    (cond ((and (symbolp kind) (string= (symbol-name kind) "DEFUN/DEFMACRO"))
           (list (if (macro-function name) 'defmacro 'defun) name))
          ((equal kind '(setf find-class))
           (list 'defclass name))
          ((symbolp kind) (list kind name))
          (t (list (first kind) name)))))


;;;; Methods, found by their text

(defun defmethod-signature-at (text start)
  "Read the (DEFMETHOD NAME QUALIFIER... LAMBDA-LIST ...) form at START
of TEXT as text: its name token, qualifier tokens and one specializer
token per required parameter (\"T\" for none, \"(EQL\" for an EQL
specializer).  NIL when the form is not such a DEFMETHOD."
  (ignore-errors
   (multiple-value-bind (head index) (token-at text (1+ start))
     (unless (token-names-p head 'defmethod) (return-from defmethod-signature-at nil))
     (multiple-value-bind (name index) (token-at text index)
       (let ((qualifiers '()) (specializers '()))
         (loop for next = (skip-blank text index)
               until (char= (char text next) #\()
               do (multiple-value-bind (token end) (token-at text next)
                    (when (= end next) (return-from defmethod-signature-at nil))
                    (push token qualifiers)
                    (setf index end)))
         (let ((index (1+ (skip-blank text index))))
           (loop
             (setf index (skip-blank text index))
             (let ((char (char text index)))
               (cond ((char= char #\)) (return))
                     ((char= char #\()
                      (let* ((after-variable (nth-value 1 (token-at text (1+ index))))
                             (at (skip-blank text after-variable)))
                        (push (if (char= (char text at) #\()
                                  (concatenate 'string "(" (token-at text (1+ at)))
                                  (token-at text at))
                              specializers)
                        (setf index (second (form-span-at text (1+ index))))))
                     (t
                      (multiple-value-bind (token end) (token-at text index)
                        (when (or (= end index) (char= (char token 0) #\&)) (return))
                        (push "T" specializers)
                        (setf index end)))))))
         (values name (nreverse qualifiers) (nreverse specializers)))))))

(defun method-specializer-matches-p (token specializer)
  (cond ((typep specializer 'class)
         (token-names-p token (class-name specializer)))
        (t (string-equal token "(eql"))))

(defun defmethod-at-p (text start name method)
  "True if the form at START of TEXT is METHOD's DEFMETHOD (a method of
the generic function NAME), as far as its text says."
  (multiple-value-bind (token qualifiers specializer-tokens) (defmethod-signature-at text start)
    (let ((method-qualifiers (ignore-errors (mop "METHOD-QUALIFIERS" method)))
          (specializers (ignore-errors (mop "METHOD-SPECIALIZERS" method))))
      (and token
           (token-names-p token name)
           (= (length qualifiers) (length method-qualifiers))
           (every (lambda (token qualifier) (and (symbolp qualifier) (token-names-p token qualifier)))
                  qualifiers method-qualifiers)
           (= (length specializer-tokens) (length specializers))
           (every #'method-specializer-matches-p specializer-tokens specializers)))))

(defun method-candidate-files (name method)
  "The source files where METHOD of NAME may be defined: those of NAME's
records and of the records of the classes it specializes on."
  (let ((files '()))
    (flet ((add-records-of (symbol)
             (dolist (record (recorded-definitions symbol))
               (let ((source (record-source record)))
                 (when source (pushnew (namestring source) files :test #'string=))))))
      (add-records-of name)
      (dolist (specializer (ignore-errors (mop "METHOD-SPECIALIZERS" method)))
        (when (and (typep specializer 'class) (symbolp (class-name specializer))
                   (not (member (symbol-package (class-name specializer))
                                (list (find-package "COMMON-LISP")))))
          (add-records-of (class-name specializer)))))
    (nreverse files)))

(defun accessor-method-p (method)
  #+clisp (typep method 'clos:standard-accessor-method)
  #-clisp (progn method nil))

(defun method-location (name method)
  "The backend location of METHOD, a method of the generic function NAME."
  (or (loop for file in (method-candidate-files name method)
            for text = (read-file-text file)
            for start = (and text (top-level-form-start
                                   text (lambda (start) (defmethod-at-p text start name method))))
            when start return (location-at file start))
      ;; A slot's reader or writer is defined by its class's form.
      (and (accessor-method-p method)
           (let* ((class (find-if (lambda (s) (typep s 'class))
                                  (ignore-errors (mop "METHOD-SPECIALIZERS" method))))
                  (record (and class (symbolp (class-name class))
                               (find '(setf find-class) (recorded-definitions (class-name class))
                                     :key #'first :test #'equal))))
             (and record (record-location (class-name class) record))))
      (list :error (format nil "no DEFMETHOD form of ~A with these specializers in the files ~
                                where ~:*~A and its classes are defined" name))))

(defun method-dspec (name method)
  (append (list 'defmethod name)
          (ignore-errors (copy-list (mop "METHOD-QUALIFIERS" method)))
          (mapcar (lambda (specializer)
                    (if (typep specializer 'class)
                        (class-name specializer)
                        (list 'eql (ignore-errors (mop "EQL-SPECIALIZER-OBJECT" specializer)))))
                  (ignore-errors (mop "METHOD-SPECIALIZERS" method)))))


;;;; The entry points

(defun recorded-definitions-p ()
  "True where definitions are found from the Lisp's own records here,
not the backend's."
  #+clisp t #-clisp nil)

(defun definitions-from-records (name)
  "NAME's definitions as (DSPEC LOCATION), from the Lisp's records: the
records other than methods, then NAME's methods when it names a generic
function."
  (append
   (loop for record in (recorded-definitions name)
         unless (or (method-record-p record) (accessor-record-p record))
           collect (list (record-dspec name record) (record-location name record)))
   (let ((function (and (symbolp name) (fboundp name) (not (macro-function name))
                        (fdefinition name))))
     (when (typep function 'generic-function)
       (loop for method in (ignore-errors (mop "GENERIC-FUNCTION-METHODS" function))
             collect (list (method-dspec name method) (method-location name method)))))))

(defun object-location-from-records (object)
  "The location of OBJECT (a method or class) from the Lisp's records, or NIL."
  (cond ((and (typep object 'method)
              (ignore-errors (mop "METHOD-GENERIC-FUNCTION" object)))
         (let ((name (ignore-errors (mop "GENERIC-FUNCTION-NAME"
                                         (mop "METHOD-GENERIC-FUNCTION" object)))))
           (and (symbolp name) (method-location name object))))
        ((and (typep object 'class) (symbolp (class-name object)))
         (let ((record (find '(setf find-class) (recorded-definitions (class-name object))
                             :key #'first :test #'equal)))
           (and record (record-location (class-name object) record))))))
