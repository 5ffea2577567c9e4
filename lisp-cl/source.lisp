;;;; source.lisp --- where definitions live in the source files, and
;;;; keeping the image and those files in agreement.
;;;
;;; find_definition asks the backend's definition finder (what M-.
;;; uses) and reads the form at the recorded position without
;;; evaluating or interning anything (*READ-SUPPRESS*, no #.).
;;; definition_edit locates one such form for the server's
;;; read_definition, replace_definition and insert_form (which read the
;;; text Emacs shows and make the edit in Emacs, after the user's
;;; review); compile_file_form then compiles the new form from the
;;; file, with the file recorded as its source.
;;; xref adds the cross-references of xref.lisp's kinds the backend
;;; offers besides callers and readers.

(in-package #:sly-agent-q)

(defparameter *definitions-limit* 30
  "The most definitions find_definition lists.")

(defparameter *definition-text-limit* 7000
  "The longest form read_definition and definition_edit return whole.")

(defun read-file-text (file)
  "The text of FILE (UTF-8, with Latin-1 as a fallback), or NIL."
  (flet ((slurp (format)
           (with-open-file (in file :direction :input :external-format format
                                    :if-does-not-exist nil)
             (when in
               (let* ((buffer (make-string (file-length in)))
                      (end (read-sequence buffer in)))
                 (subseq buffer 0 end))))))
    (or (ignore-errors (slurp (utf-8-format)))
        (ignore-errors (slurp (latin-1-format))))))

(defun form-span-at (text position)
  "The (START END) of the form starting at or after the 1-based
POSITION in TEXT (comments and blanks skipped), or NIL when there is
none or it does not read.  Nothing is interned or evaluated."
  (let ((start (skip-blank text (max 0 (min (length text) (1- position))))))
    (when (and (< start (length text)) (char= (char text start) #\())
      (handler-case
          (let ((*read-suppress* t) (*read-eval* nil))
            (multiple-value-bind (object end) (read-from-string text t nil :start start)
              (declare (ignore object))
              ;; READ consumes the whitespace after the form: not part of it.
              (loop while (and (> end start) (blank-char-p (char text (1- end))))
                    do (decf end))
              (list start end)))
        (error () nil)))))

(defun token-at (text start)
  "The token of TEXT at START (after blanks), and the index after it."
  (let* ((start (skip-blank text start))
         (end (or (position-if (lambda (c) (or (blank-char-p c) (member c '(#\( #\) #\' #\" #\;))))
                               text :start start)
                  (length text))))
    (values (subseq text start end) end)))

(defun token-names-p (token symbol)
  "True if TOKEN, as written in a file, could name SYMBOL."
  (let* ((colon (position #\: token :from-end t))
         (name (remove #\| (if colon (subseq token (1+ colon)) token))))
    (string-equal name (symbol-name symbol))))

(defun form-defines-p (text start symbol)
  "True if the form at START in TEXT reads as (DEF... NAME ...) with NAME
naming SYMBOL (or (SETF NAME)), judged from its text alone."
  (multiple-value-bind (head after-head) (token-at text (1+ start))
    (and (plusp (length head))
         (let ((name-start (skip-blank text after-head)))
           (and (< name-start (length text))
                (if (char= (char text name-start) #\()
                    ;; (defun (setf foo) ...), (defstruct (foo ...)).
                    (multiple-value-bind (first after-first) (token-at text (1+ name-start))
                      (or (token-names-p first symbol)
                          (token-names-p (token-at text after-first) symbol)))
                    (token-names-p (token-at text name-start) symbol)))))))

(defstruct (definition (:constructor make-definition (label dspec location file position)))
  label dspec location file position)

(defun symbol-definitions (symbol package)
  "SYMBOL's definitions as DEFINITION structures, duplicates removed."
  (let ((seen '()))
    (loop for (dspec location) in (definitions-of symbol)
          for label = (dspec-label dspec package)
          for file = (location-file location)
          for position = (location-char-position location)
          unless (member (list label file position) seen :test #'equal)
            do (push (list label file position) seen)
            and collect (make-definition label dspec location file position))))

(defun no-source-text ()
  "no source recorded (defined at the REPL, by eval_form or compile_form, or its file is gone)")

(defun definition-has-source-p (definition)
  (let ((file (definition-file definition)))
    (and file (definition-position definition) (ignore-errors (probe-file file)))))

(defun definition-first-line (definition)
  "The first line of DEFINITION's form in its file, or NIL."
  (when (definition-has-source-p definition)
    (let* ((text (read-file-text (definition-file definition)))
           (span (and text (form-span-at text (definition-position definition)))))
      (and span (form-excerpt text (first span) (second span) 100)))))

(define-tool "find_definition" (&key symbol package)
  "Where SYMBOL's definitions are: file, line and the form's first line."
  (let* ((package (tool-package package))
         (symbol (resolve-symbol (nonblank symbol "symbol" "a symbol's name") package))
         (definitions (symbol-definitions symbol package)))
    (with-output-to-string (out)
      (cond
        ((null definitions)
         (format out "No definitions of ~A are known to the image (~A).~%"
                 (symbol-label symbol) (no-source-text)))
        (t
         (format out "Definitions of ~A (~D):~%" (symbol-label symbol) (length definitions))
         (loop for definition in definitions
               for i below *definitions-limit*
               do (format out "  ~A  ~A~%" (definition-label definition)
                          (if (definition-has-source-p definition)
                              (format-location (definition-location definition))
                              (format nil "~A~@[ (~A)~]" (no-source-text)
                                      (and (definition-file definition)
                                           (format-location (definition-location definition))))))
                  (let ((line (definition-first-line definition)))
                    (when line (format out "      ~A~%" line))))
         (when (> (length definitions) *definitions-limit*)
           (format out "  ... and ~D more~%" (- (length definitions) *definitions-limit*))))))))


;;;; One definition's form

(defvar *previous-sources* (make-hash-table :test 'eq)
  "A symbol the agent redefined with eval_form or compile_form -> its
definitions that had a source file just before: where replace_definition
writes the new version, since the image's own record now names no file.")

(defun note-previous-sources (text package)
  "Before TEXT is evaluated or compiled in PACKAGE: keep, for each symbol
a top-level (DEF... NAME form of TEXT redefines, its definitions in
source files.  Names are looked up, never read or interned."
  (ignore-errors
   (loop for (start . nil) in (scan-forms-plainly text)
         when (char= (char text start) #\()
           do (multiple-value-bind (head after) (token-at text (1+ start))
                (when (and (> (length head) 3) (string-equal "def" head :end2 3))
                  (let ((symbol (ignore-errors
                                 (multiple-value-bind (package-name name) (parse-symbol-name (token-at text after))
                                   (let ((home (if package-name (find-package package-name) package)))
                                     (and home (values (find-symbol name home))))))))
                    (when symbol
                      (let ((with-source (remove-if-not #'definition-has-source-p
                                                        (symbol-definitions symbol package))))
                        (when with-source
                          (call-with-state-lock
                           (lambda () (setf (gethash symbol *previous-sources*) with-source))))))))))))

(defun choose-definition (symbol package which)
  "The definition of SYMBOL to read or edit: the only one with a source,
or the one whose label matches WHICH.  FAILs saying why otherwise.
A definition the agent replaced in the image only (compile_form,
eval_form) is edited where its previous version was."
  (let* ((all (symbol-definitions symbol package))
         (with-source (or (remove-if-not #'definition-has-source-p all)
                          (remove-if-not #'definition-has-source-p
                                         (call-with-state-lock
                                          (lambda () (gethash symbol *previous-sources*))))))
         (label (symbol-label symbol)))
    (when (null all)
      (fail "No definitions of ~A are known to the image, so there is no source to use." label))
    (when (null with-source)
      (fail "~A has no source location: ~A. Its definitions: ~{~A~^, ~}. Write it to a file ~
             (propose_file_edit) and load it instead."
            label (no-source-text) (mapcar #'definition-label all)))
    (let ((candidates
            (if (and which (notevery #'blank-char-p which))
                (let ((wanted (string-trim " " which)))
                  (or (remove-if-not (lambda (d) (string-equal (definition-label d) wanted)) with-source)
                      (remove-if-not (lambda (d) (search wanted (definition-label d) :test #'char-equal))
                                     with-source)
                      (fail "No definition of ~A with a source matches ~S. Its definitions: ~{~A~^, ~}."
                            label wanted (mapcar #'definition-label with-source))))
                with-source)))
      ;; A class and its accessors may share one form: one place is one form.
      (let ((places (remove-duplicates candidates :test #'equal
                                                  :key (lambda (d) (list (definition-file d)
                                                                         (definition-position d))))))
        (when (rest places)
          (fail "~A has ~D definitions in source files (~{~A~^; ~}): say which with the ~
                 \"definition\" argument, as listed here."
                label (length places)
                (mapcar (lambda (d) (format nil "~A at ~A" (definition-label d)
                                            (format-location (definition-location d))))
                        places)))
        (first places)))))

(defun moved-definition-span (text symbol dspec)
  "The (START END) of the only top-level form of TEXT that defines SYMBOL
with DSPEC's definer (DEFUN of (DEFUN NAME), ...), or NIL when there is
none or more than one, or DSPEC names no definer.  A recorded position
goes stale when text is added above the form: ECL records a character
position (SBCL a top-level form's number, stale only when forms are
added).  Judged from the text alone, as form-defines-p does."
  (let ((definer (and (consp dspec) (first dspec) (symbolp (first dspec)) (first dspec))))
    (when definer
      (let ((matches
              (loop for (start . nil) in (values (scan-forms text))
                    when (and (char= (char text start) #\()
                              (token-names-p (token-at text (1+ start)) definer)
                              (form-defines-p text start symbol))
                      collect start)))
        (when (and matches (null (rest matches)))
          (form-span-at text (1+ (first matches))))))))

(defstruct (located-form (:conc-name located-))
  label file text start end line)

(defun locate-form (symbol package which)
  "The LOCATED-FORM of SYMBOL's chosen definition, checked to still be
that definition's form.  FAILs otherwise."
  (let* ((definition (choose-definition symbol package which))
         (file (namestring (probe-file (definition-file definition))))
         (text (or (read-file-text file)
                   (fail "~A cannot be read." file)))
         (span (form-span-at text (definition-position definition)))
         (where (format-location (definition-location definition))))
    ;; A class's accessors are located at a slot, or at the class's form.
    (let* ((spans (scan-forms text))
           (index (and span (form-index-at spans (first span))))
           (top (and index (nth index spans))))
      (when (and span top (not (form-defines-p text (first span) symbol))
                 (search (symbol-name symbol) text :start2 (car top) :end2 (cdr top)
                                                   :test #'char-equal))
        (fail "~A is defined inside another definition's form, at ~A:~D (~A): edit that one instead."
              (symbol-label symbol) file (line-of text (car top))
              (form-excerpt text (car top) (cdr top) 60))))
    (unless (and span (form-defines-p text (first span) symbol))
      ;; The file changed since the definition was compiled (lines added above it by a checkout
      ;; or another editor): the form is where the only one like it is now.
      (let ((moved (moved-definition-span text symbol (definition-dspec definition))))
        (when moved (setf span moved))))
    (unless (and span (form-defines-p text (first span) symbol))
      ;; The server reads this sentence's start ("The form at FILE:LINE is not the definition of NAME
      ;; any more") to tell the user about an unsaved buffer the definition was compiled from.
      (fail "The form at ~A is not the definition of ~A any more (~:[no form reads there~;~:*it reads: ~A~]): ~
             the file changed since it was loaded. Load it again (load_system) or use find_definition, ~
             read_file and propose_file_edit."
            where (symbol-label symbol)
            (and span (form-excerpt text (first span) (second span) 80))))
    (make-located-form :label (definition-label definition) :file file :text text
                       :start (first span) :end (second span)
                       :line (line-of text (first span)))))

;;;; Preparing an edit of a definition (for replace_definition, insert_form)

(defun check-one-form (text)
  "FAIL unless TEXT reads as exactly one form with balanced parentheses
and strings.  It is scanned with *READ-SUPPRESS* and *READ-EVAL* NIL:
nothing is interned or evaluated, a #. form included (read, never run:
READ-EVAL-FORMS says which there are)."
  (multiple-value-bind (spans condition start)
      (let ((*readtable* (copy-readtable)))
        ;; Called even under *READ-SUPPRESS*, and for a #+ feature test read
        ;; without it: the form after #. is read suppressed, whatever the Lisp's own #. does.
        (set-dispatch-macro-character
         #\# #\. (lambda (stream char arg)
                   (declare (ignore char arg))
                   (let ((*read-suppress* t)) (read stream t nil t))
                   nil))
        (scan-forms text))
    (cond ((typep condition 'tool-error) (error condition))
          ((typep condition 'end-of-file)
           (fail "The new text is refused: ~A" (unbalanced-message text start (1+ (length spans)))))
          (condition
           (fail "The new text is refused: ~A" (read-error-message condition text start)))
          ((null spans)
           (fail "The new text is refused: it holds no form."))
          ((rest spans)
           (fail "The new text is refused: it reads as ~D forms (the second at line ~D: ~A), ~
                  not exactly one. Give one form."
                 (length spans) (line-of text (car (second spans)))
                 (form-excerpt text (car (second spans)) (cdr (second spans)) 60)))
          ((char/= (char text (car (first spans))) #\()
           (fail "The new text is refused: it is not a parenthesized form (~A)."
                 (form-excerpt text (car (first spans)) (cdr (first spans)) 60))))))

(define-tool "definition_edit" (&key symbol package definition text)
  "Locate SYMBOL's definition (for read_definition, replace_definition and
insert_form), first checking that TEXT, when given, is one form: JSON for
the server.  Without SYMBOL, only TEXT is checked.  TEXT's #. forms are
read, never evaluated: \"readEval\" lists them all, \"readEvalNew\"
those the definition's form does not have (what a replacement adds)."
  (when text
    (check-one-form text))
  (if (and text (or (null symbol) (every #'blank-char-p symbol)))
      (format nil "{\"checked\":true,\"readEval\":~A}" (json-strings (read-eval-forms text)))
      (let* ((package (tool-package package))
             (symbol (resolve-symbol (nonblank symbol "symbol" "a symbol's name") package))
             (form (locate-form symbol package definition))
             (old (subseq (located-text form) (located-start form) (located-end form))))
        (when (and text (> (length old) *definition-text-limit*))
          (fail "The definition of ~A is ~D characters long, too long to edit this way: use ~
                 propose_file_edit on ~A." (symbol-label symbol) (length old) (located-file form)))
        (when (> (length old) *definition-text-limit*)
          (setf old (format nil "~A~%... (~D more characters; read_file shows the rest)"
                            (subseq old 0 *definition-text-limit*)
                            (- (length old) *definition-text-limit*))))
        (format nil "{\"file\":~A,\"line\":~D,\"label\":~A,\"old\":~A~@[,\"readEval\":~A~]~@[,\"readEvalNew\":~A~]}"
                (json-string (located-file form)) (located-line form)
                (json-string (located-label form)) (json-string old)
                (and text (json-strings (read-eval-forms text)))
                (and text (json-strings (new-read-eval-forms
                                         text (subseq (located-text form) (located-start form)
                                                      (located-end form)))))))))


;;;; Compiling a form from its file

(defun file-package-at (text index)
  "The package named by the last top-level (in-package ...) form before
INDEX in TEXT, or CL-USER.  The forms are found by reading TEXT
suppressed with the standard readtable (SCAN-FORMS-PLAINLY): one named
in a comment, a string or a #| |# does not count."
  (let ((at nil))
    (loop for (start . nil) in (ignore-errors (scan-forms-plainly (subseq text 0 index)))
          for form = (ignore-errors
                      (let ((*readtable* (refuse-constructing-reads (copy-readtable nil))))
                        (skip-feature-conditionals text start)))
          when (and form (< form index) (char= (char text form) #\()
                    (token-names-p (token-at text (1+ form)) 'in-package))
            do (setf at (nth-value 1 (token-at text (1+ form)))))
    (or (and at
             (let* ((token (token-at text at))
                    (name (string-left-trim "#:" token)))
               (and (plusp (length name))
                    (find-package-leniently (if (find #\" name)
                                                (remove #\" name)
                                                (string-upcase (remove #\| name)))))))
        (find-package "COMMON-LISP-USER"))))

(defun compile-string-function ()
  "The backend's COMPILE-STRING interface (SLYNK- or SWANK-), or NIL."
  (find-if #'backend-implemented-p '("SLYNK-COMPILE-STRING" "SWANK-COMPILE-STRING")))

(defun compile-string-from-file (text file contents index)
  "Compile TEXT, found at the 0-based INDEX of FILE (whose text is
CONTENTS), with the backend,
recording FILE and the position as its source.  Returns success and
the list of (SEVERITY MESSAGE) notes."
  (let ((notes '()))
    (let ((ok (handler-bind
                  ((condition
                     (lambda (c)
                       (cond ((compiler-condition-p c)
                              (let ((severity (ignore-errors (bcall "SEVERITY" c))))
                                (unless (eq severity :redefinition)
                                  (push (list (or severity :warning)
                                              (compiler-condition-message c))
                                        notes))))
                             ((and (typep c 'warning) (redefinition-p c))
                              (muffle-warning c))))))
                (let ((*compile-verbose* nil) (*compile-print* nil)
                      (*load-verbose* nil) (*load-print* nil))
                  ;; CLISP's backend compiles the string as a lambda:
                  ;; without this it would record no file at all.
                  (call-recording-source
                   file (line-of contents index) (line-of contents (+ index (length text)))
                   (lambda ()
                     (bcall (compile-string-function) text
                            :buffer (file-namestring file)
                            :position (1+ index)
                            :filename file)))))))
      (values ok (nreverse notes)))))

(define-tool "compile_file_form" (&key path text)
  "Compile TEXT, as it stands in the file PATH, recording the file as its source."
  (let* ((path (nonblank path "path" "the file's absolute path"))
         (text (nonblank text "text" "the form's text"))
         (file (or (ignore-errors (probe-file path))
                   (fail "~A does not exist." path)))
         (file (namestring file))
         (contents (or (read-file-text file) (fail "~A cannot be read." file)))
         (index (or (search text contents)
                    (fail "~A does not hold the form's text (an unsaved buffer?), so it was not ~
                           compiled." file)))
         (line (line-of contents index)))
    ;; Compiled at a guessed one of two places, it would be read in that place's package.
    (when (search text contents :start2 (1+ index))
      (fail "~A holds the form's text more than once (first at line ~D), so which one the edit ~
             wrote is not known: it was not compiled. Make the definitions differ, or load the file."
            file line))
    (check-one-form text)
    (unless (compile-string-function)
      (fail "This Lisp's backend cannot compile a string with its file recorded."))
    (multiple-value-bind (ok notes)
        ;; Read as loading the file reads it: a #. runs now, as it will at every load.  The
        ;; server calls this only after the user approved the edit, shown with any new #. form.
        (let ((*package* (file-package-at contents index))
              (*read-eval* t))
          (compile-string-from-file text file contents index))
      (let ((summary (format nil "~{~A~^~%~}"
                             (loop for (severity message) in notes
                                   for i below *notes-limit*
                                   collect (format nil "  ~A: ~A" (severity-label severity)
                                                   (first-line message 300))))))
        (if ok
            (format nil "Compiled ~A from ~A:~D into the image (its source is now that file).~
                         ~@[~%Compiler notes:~%~A~]~%"
                    (form-excerpt text 0 (length text) 60) file line
                    (and notes summary))
            (error 'tool-failure
                   :message (format nil "Compiling the form at ~A:~D failed, so the image keeps the ~
                                         previous definition (the file holds the new text).~%~A"
                                    file line summary)))))))


;;;; More cross-reference

(defparameter *xref-kinds*
  '(("binds" "WHO-BINDS" "Code that binds ~A")
    ("sets" "WHO-SETS" "Code that sets ~A")
    ("specializes" "WHO-SPECIALIZES" "Methods specializing on ~A")
    ("callees" "LIST-CALLEES" "Functions ~A calls")
    ("macroexpands" "WHO-MACROEXPANDS" "Code that expands the macro ~A"))
  "xref's kinds: name, backend function, title.")

(define-tool "xref" (&key kind name package)
  "Cross-references of KIND (binds, sets, specializes, callees, macroexpands) for NAME."
  (let* ((entry (or (assoc (string-trim " " (or kind "")) *xref-kinds* :test #'string-equal)
                    (fail "Unknown xref kind ~S: use one of ~{~A~^, ~}." kind (mapcar #'first *xref-kinds*))))
         (package (tool-package package))
         (symbol (resolve-symbol (nonblank name "name" "a symbol's name") package))
         (entries (if (backend-implemented-p (second entry))
                      (let ((result (ignore-errors (bcall (second entry) symbol))))
                        (if (listp result) result :not-implemented))
                      :not-implemented)))
    (when (eq entries :not-implemented)
      (fail "xref ~A is not supported on this Lisp (~A ~A)." (first entry)
            (lisp-implementation-type) (or (backend-name) "without SLYNK/SWANK")))
    (with-output-to-string (out)
      (cond (entries
             (format out "~? (~D, from xref data):~%" (third entry) (list (symbol-label symbol))
                     (length entries))
             (write-xref-entries out entries package))
            (t
             (format out "None recorded: ~?.~%~A~%" (third entry) (list (symbol-label symbol))
                     *xref-caveat*))))))
