;;;; image-changes.lisp --- what the image holds that no file does:
;;;; image_changes.
;;;
;;; In image-based development a fix evaluated in the image and never
;;; written to a file is lost at the next restart.  image_changes walks
;;; the definitions of the user's packages (functions, macros, methods,
;;; classes, variables; on SBCL also the methods of other packages'
;;; generic functions on the user's classes; the implementation's and the
;;; development environment's own packages, known by exact name, are
;;; skipped) and lists those whose
;;; current version did not come from their file, or whose file changed
;;; on disk after they were loaded, each with where it came from and
;;; when.
;;;
;;; SBCL says exactly: every definition records its source file (none
;;; for a form evaluated at the REPL or by eval_form), compile_form's
;;; temporary file, or, for text compiled from an Emacs buffer (C-c C-c,
;;; compile_file_form), the buffer, its file and the text compiled; a
;;; function also records its file's write date when it was compiled.
;;; A file changed since is compared form by form with the text seen
;;; when the file was last known to be the one loaded (a baseline this
;;; file keeps), so that saving a buffer after C-c C-c does not list
;;; every other definition of the file.  Elsewhere what the backend's
;;; definition finder tells is used, and the rest is said to be not
;;; known here.

(in-package #:sly-agent-q)

(defparameter *image-changes-limit* 60
  "The most definitions image_changes lists one by one.")

(defparameter *image-changes-seconds* 20
  "How long image_changes walks the image before it stops and says so.")

(defvar *agent-definitions* '()
  "What the agent defined through eval_form, eval_in_package and
compile_form, newest first: lists (NAME-TOKEN HEAD-TOKEN TOOL TIME).
image_changes says from these who made a definition without a file,
and when, where the Lisp records no time.")

(defparameter *agent-definitions-limit* 500)

(defvar *file-baselines* (make-hash-table :test 'equal)
  "A source file's namestring -> (WRITE-DATE . FORMS): its top-level
forms as (KEY . DIGEST), read while the file was the version loaded.")

(defun note-agent-definitions (tool text)
  "Remember the definitions (top-level forms whose head starts with DEF)
that TEXT, which TOOL ran without error, made."
  (let ((spans (ignore-errors (scan-forms-plainly text)))
        (now (get-universal-time)))
    (call-with-state-lock
     (lambda ()
       (loop for (start . nil) in spans
             when (char= (char text start) #\()
               do (multiple-value-bind (head after) (token-at text (1+ start))
                    (when (and (> (length head) 3)
                               (string-equal "def" (subseq head (1+ (or (position #\: head :from-end t) -1)))
                                             :end2 (min 3 (length head))))
                      (let ((name (token-at text (if (and (< (skip-blank text after) (length text))
                                                          (char= (char text (skip-blank text after)) #\())
                                                     ;; (defun (setf foo)), (defstruct (foo ...)).
                                                     (let ((inner (1+ (skip-blank text after))))
                                                       (multiple-value-bind (first after-first) (token-at text inner)
                                                         (if (string-equal first "setf") after-first inner)))
                                                     after))))
                        (push (list name head tool now) *agent-definitions*)))))
       (when (> (length *agent-definitions*) *agent-definitions-limit*)
         (setf *agent-definitions* (subseq *agent-definitions* 0 *agent-definitions-limit*)))))))

(defvar *agent-definitions-index* nil
  "While image_changes runs: *AGENT-DEFINITIONS* by the upcased name
part of NAME-TOKEN (a hash table), each list newest first, so that
judging many definitions does not search the whole list for each.")

(defun agent-name-key (token)
  (let ((colon (position #\: token :from-end t)))
    (string-upcase (remove #\| (if colon (subseq token (1+ colon)) token)))))

(defun agent-definitions-index ()
  (let ((index (make-hash-table :test 'equal)))
    (dolist (entry (reverse (call-with-state-lock (lambda () (copy-list *agent-definitions*)))) index)
      (push entry (gethash (agent-name-key (first entry)) index)))))

(defun agent-definition-of (symbol)
  "The newest (NAME-TOKEN HEAD-TOKEN TOOL TIME) of the agent's that
defined SYMBOL's name, or NIL."
  (if *agent-definitions-index*
      (first (gethash (string-upcase (symbol-name symbol)) *agent-definitions-index*))
      (find-if (lambda (entry) (token-names-p (first entry) symbol))
               (call-with-state-lock (lambda () (copy-list *agent-definitions*))))))


;;;; Which packages are the user's

(defparameter *implementation-package-names*
  '("COMMON-LISP" "KEYWORD" "SYSTEM" "SI" "EXT" "CLOS" "MOP" "GRAY" "FFI" "CUSTOM" "ECL" "MP" "LW"
    "HCL" "EXCL" "CCL" "OPENMCL-MOP" "C" "WALKER" "SERVE-EVENT" "SB-BSD-SOCKETS" "ECL-CDB"
    "CHARSET" "I18N" "SOCKET" "GSTREAM" "POSIX" "READLINE" "REGEXP" "SCREEN" "THREADS" "ZLIB"
    "CS-COMMON-LISP" "CS-COMMON-LISP-USER" "COMMON-LISP-CONTROLLER" "SWANK" "SLYNK" "ASDF" "UIOP"
    "QUICKLISP" "QUICKLISP-CLIENT" "FIVEAM" "IT.BESE.FIVEAM" "ALEXANDRIA" "ALEXANDRIA-2"
    "ALEXANDRIA.1.0.0" "ALEXANDRIA-1" "TRIVIAL-BACKTRACE")
  "Exact names of the implementations' packages and of the libraries the
development environment itself loads: a user's package whose name only
starts like one of these (SIMPLE-APP, EXTRACTOR) is the user's.")

(defparameter *implementation-package-prefixes*
  '("SB-" "SB!" "SWANK/" "SWANK-" "SLYNK/" "SLYNK-" "ASDF/" "UIOP/" "QL-" "SLY-AGENT-Q")
  "Prefixes, each ending where a family's own names go on, of packages
that belong to SBCL, SLIME, SLY, ASDF, Quicklisp or this project.")

(defun implementation-package-name-p (name)
  (or (member name *implementation-package-names* :test #'string=)
      (some (lambda (prefix)
              (and (>= (length name) (length prefix)) (string= prefix name :end2 (length prefix))))
            *implementation-package-prefixes*)))

(defun user-package-p (package)
  (notany #'implementation-package-name-p (cons (package-name package) (package-nicknames package))))

(defun candidate-packages (only)
  (if only
      (list only)
      (remove-if-not #'user-package-p (list-all-packages))))


;;;; One definition's record

(defstruct (image-definition (:conc-name idef-))
  label       ; "(DEFUN MY-APP::FOO)"
  symbol      ; the name's symbol
  file        ; the source file's namestring, or NIL
  date        ; the file's write date when compiled, or NIL
  plist       ; what a compilation from an Emacs buffer recorded
  tlf)        ; the top-level form's index in FILE, or NIL

(defun dspec-text (definer name &optional suffix)
  (format nil "(~A ~A~@[ ~A~])" definer
          (if (consp name)
              (format nil "(~{~A~^ ~})" (mapcar #'symbol-label name))
              (symbol-label name))
          suffix))

#+sbcl
(defun sbi (name)
  "SB-INTROSPECT's function NAME."
  (let ((package (find-package "SB-INTROSPECT")))
    (and package (find-symbol name package))))

#+sbcl
(defun sbcl-record (label symbol source)
  "An IMAGE-DEFINITION from SB-INTROSPECT's definition SOURCE."
  (flet ((slot (name) (funcall (sbi (concatenate 'string "DEFINITION-SOURCE-" name)) source)))
    (let ((pathname (slot "PATHNAME")))
      (make-image-definition
       :label label :symbol symbol
       :file (and pathname (ignore-errors (namestring (translate-logical-pathname pathname))))
       :date (slot "FILE-WRITE-DATE") :plist (slot "PLIST")
       :tlf (let ((path (slot "FORM-PATH"))) (and (consp path) (integerp (first path)) (first path)))))))

#+sbcl
(defun sbcl-source (object)
  (and (sbi "FIND-DEFINITION-SOURCE")
       (ignore-errors (funcall (sbi "FIND-DEFINITION-SOURCE") object))))

#+sbcl
(defun sbcl-definitions-of (symbol)
  "SYMBOL's definitions, as IMAGE-DEFINITIONs."
  (let ((found '()))
    (flet ((add (label object &optional source)
             (let ((source (or source (sbcl-source object))))
               (when source (push (sbcl-record label symbol source) found)))))
      (dolist (name (list symbol (list 'setf symbol)))
        (when (and (ignore-errors (fboundp name))
                   (not (and (symbolp name) (special-operator-p name))))
          (let ((function (if (and (symbolp name) (macro-function name))
                              (macro-function name)
                              (fdefinition name))))
            (cond ((and (symbolp name) (macro-function name))
                   (add (dspec-text "DEFMACRO" name) function))
                  ((typep function 'generic-function)
                   (dolist (method (ignore-errors (mop "GENERIC-FUNCTION-METHODS" function)))
                     ;; A class's accessors are the class's definition.
                     (unless (typep method (or (find-symbol "STANDARD-ACCESSOR-METHOD" "SB-MOP") 'null))
                       (add (dspec-text "DEFMETHOD" name (method-signature method)) method))))
                  (t (add (dspec-text "DEFUN" name) function))))))
      (let ((class (find-class symbol nil)))
        (when (and class (not (typep class 'built-in-class)))
          (add (dspec-text (if (typep class 'structure-class) "DEFSTRUCT" "DEFCLASS") symbol)
               class)))
      (when (and (special-variable-p symbol) (not (constantp symbol)))
        (let ((source (first (ignore-errors (funcall (sbi "FIND-DEFINITION-SOURCES-BY-NAME")
                                                    symbol :variable)))))
          (when source
            (push (sbcl-record (dspec-text "DEFVAR" symbol) symbol source) found)))))
    (nreverse found)))


;;;; Files: their text and what was loaded from them

(defun form-key (text start)
  "The head and name tokens of the form at START in TEXT, upcased:
what the form defines, judged from its text."
  (multiple-value-bind (head after) (token-at text (1+ start))
    (let ((name-start (skip-blank text after)))
      (string-upcase
       (format nil "~A ~A" head
               (if (and (< name-start (length text)) (char= (char text name-start) #\())
                   (subseq text name-start
                           (or (ignore-errors (second (form-span-at text (1+ name-start))))
                               (min (length text) (+ name-start 40))))
                   (token-at text name-start)))))))

(defun form-digest (text start end)
  (cons (- end start) (sxhash (subseq text start end))))

(defun file-forms (text)
  "TEXT's top-level forms as a vector of (KEY . DIGEST)."
  (coerce (loop for (start . end) in (scan-forms-plainly text)
                collect (cons (if (char= (char text start) #\() (form-key text start) "")
                              (form-digest text start end)))
          'vector))

(defstruct (file-state (:conc-name fstate-))
  name exists date text (text-read nil) forms)

(defun file-state (files name)
  "What is known of the file NAME in this walk (FILES caches it)."
  (or (gethash name files)
      (setf (gethash name files)
            (let ((exists (ignore-errors (probe-file name))))
              (make-file-state :name name :exists exists
                               :date (and exists (ignore-errors (file-write-date name))))))))

(defun file-current-text (state)
  (unless (fstate-text-read state)
    (setf (fstate-text-read state) t
          (fstate-text state) (and (fstate-exists state) (read-file-text (fstate-name state)))))
  (fstate-text state))

(defun file-current-forms (state)
  (or (fstate-forms state)
      (let ((text (file-current-text state)))
        (and text (setf (fstate-forms state) (file-forms text))))))

(defun file-holds-form-p (state string)
  "True if STRING, the text of one form compiled from a buffer, is one of
the top-level forms of STATE's file as it is now (not just somewhere in
its text: a comment or a string holds no definition)."
  (let ((spans (ignore-errors (scan-forms-plainly string)))
        (forms (file-current-forms state)))
    (and forms (= 1 (length spans))
         (let ((digest (form-digest string (car (first spans)) (cdr (first spans)))))
           (find digest forms :key #'cdr :test #'equal)))))

(defun note-baseline (state)
  "Keep the forms of STATE's file as the version loaded (its write date
is the one its definitions recorded)."
  (let ((known (call-with-state-lock (lambda () (gethash (fstate-name state) *file-baselines*)))))
    (unless (and known (eql (car known) (fstate-date state)))
      (let ((forms (file-current-forms state)))
        (when forms
          ;; Two walks may run at once (the turn's end, the model's call): the table is shared.
          (call-with-state-lock
           (lambda ()
             (setf (gethash (fstate-name state) *file-baselines*) (cons (fstate-date state) forms)))))))))


;;;; Judging a definition

(defun compile-form-file-p (file)
  "True if FILE is one of compile_form's temporary files."
  (let ((name (pathname-name file)))
    (and (stringp name) (>= (length name) 20) (string= "sly-agent-q-compile-" name :end2 20))))

(defun when-text (time)
  (multiple-value-bind (s m h) (decode-universal-time time)
    (format nil "~2,'0D:~2,'0D:~2,'0D (~A)" h m s (time-ago time))))

(defun agent-when (symbol)
  "Who of the agent's tools made SYMBOL's definition and when, or NIL."
  (let ((entry (agent-definition-of symbol)))
    (and entry (format nil "~A by the agent at ~A" (third entry) (when-text (fourth entry))))))

(defun judge-definition (definition files)
  "How DEFINITION's current version came, as (KIND DETAIL), or NIL when
it came from its file as it is now."
  (let* ((file (idef-file definition))
         (plist (idef-plist definition))
         (date (idef-date definition))
         (symbol (idef-symbol definition)))
    (cond
      ((getf plist :emacs-buffer)
       (let ((buffer (getf plist :emacs-buffer))
             (buffer-file (getf plist :emacs-filename))
             (string (getf plist :emacs-string))
             (at (if date (format nil " at ~A" (when-text date)) "")))
         (cond ((null buffer-file)
                (list :buffer (format nil "compiled from the Emacs buffer ~A, which visits no file~A"
                                      buffer at)))
               ((not (fstate-exists (file-state files buffer-file)))
                (list :buffer (format nil "compiled from the buffer ~A~A; its file ~A is gone"
                                      buffer at buffer-file)))
               ((and (stringp string) (file-holds-form-p (file-state files buffer-file) string))
                nil)
               (t (list :buffer (format nil "compiled from the buffer ~A~A (C-c C-c): ~A does not hold ~
                                             that text (the buffer was not saved, or the file changed since)"
                                        buffer at buffer-file))))))
      ((null file)
       (let ((agent (agent-definition-of symbol)))
         (list :no-file
               (if (and agent (equal (third agent) "compile_form"))
                   (format nil "compiled by compile_form at ~A; its text was never written to a file"
                           (when-text (fourth agent)))
                   (format nil "evaluated without a source file (~A)"
                           (or (agent-when symbol) "at the REPL, or by code that ran; when is not recorded"))))))
      ((compile-form-file-p file)
       (list :compile-form
             (format nil "compiled by compile_form~A; its text was never written to a file"
                     (cond (date (format nil " at ~A" (when-text date)))
                           ((agent-when symbol) (format nil " (~A)" (agent-when symbol)))
                           (t "")))))
      ((not (fstate-exists (file-state files file)))
       (list :file-gone (format nil "loaded from ~A, which is gone" file)))
      (t (judge-from-file definition (file-state files file))))))

(defun judge-from-file (definition state)
  "DEFINITION was loaded from STATE's file: NIL when the file is the
version loaded, or its form there is unchanged, else (KIND DETAIL)."
  (let ((loaded (idef-date definition))
        (now (fstate-date state)))
    (cond
      ((or (null loaded) (null now) (<= now loaded)) nil)
      (t
       (let* ((baseline (call-with-state-lock (lambda () (gethash (fstate-name state) *file-baselines*))))
              (old (and baseline (eql (car baseline) loaded) (idef-tlf definition)
                        (< (idef-tlf definition) (length (cdr baseline)))
                        (aref (cdr baseline) (idef-tlf definition))))
              (forms (and old (file-current-forms state))))
         (cond
           ((null old)
            (list :file-changed-unknown
                  (format nil "its file changed on disk after it was loaded; whether this form did is not ~
                               known (the file changed before image_changes first read it)")))
           ((find old forms :test #'equal) nil)
           ((find (car old) forms :key #'car :test #'string=)
            (list :form-changed (format nil "its form ~A changed in the file since it was loaded"
                                        (first-line (car old) 60))))
           (t
            (list :form-gone (format nil "its form ~A is no longer in the file"
                                     (first-line (car old) 60))))))))))


;;;; The walk

(defun date-known-p () #+sbcl t #-sbcl nil)

(defun definitions-in (symbol)
  "SYMBOL's definitions as IMAGE-DEFINITIONs."
  #+sbcl (sbcl-definitions-of symbol)
  #-sbcl (portable-definitions-of symbol))

#-sbcl
(defun portable-definitions-of (symbol)
  "SYMBOL's definitions, from the backend's definition finder: files
and buffers, no dates."
  (let ((function-p (and (ignore-errors (fboundp symbol)) (not (special-operator-p symbol)))))
    (when (or function-p (find-class symbol nil) (special-variable-p symbol))
      (let ((found (loop for (dspec location) in (definitions-of symbol)
                         for buffer = (and (consp location) (eq (first location) :location)
                                           (second location))
                         for file = (location-file location)
                         for tmpfile-buffer = (and file (backend-tmpfile-buffer file))
                         ;; A place the Lisp cannot say (CLISP: its file is gone) is not known here.
                         unless (and (consp location) (eq (first location) :error))
                           collect (make-image-definition
                                  :label (dspec-label dspec (find-package "COMMON-LISP-USER"))
                                  :symbol symbol
                                  :file (and (not tmpfile-buffer) file)
                                  :plist (cond (tmpfile-buffer (list :emacs-buffer tmpfile-buffer))
                                               ((and (consp buffer) (eq (first buffer) :buffer))
                                                (list :emacs-buffer (second buffer))))))))
        ;; A function the finder knows no place of was made without a file (the REPL,
        ;; eval_form); not a generic function, whose methods some Lisps (ECL) record no place of.
        (if (and (null found) function-p (not (typep (fdefinition symbol) 'generic-function)))
            (list (make-image-definition
                   :label (dspec-text (if (macro-function symbol) "DEFMACRO" "DEFUN") symbol)
                   :symbol symbol))
            found)))))

(defun backend-tmpfile-buffer (file)
  "The Emacs buffer whose text the backend compiled from its temporary
FILE (ECL's SWANK writes a buffer's C-c C-c there and maps it back only
by the exact namestring), or NIL."
  (let ((name (pathname-name file)))
    (when (and (stringp name) (>= (length name) 17) (string= "ecl-swank-tmpfile" name :end2 17))
      (let* ((package (find-package "SWANK/ECL"))
             (map (and package (find-symbol "*TMPFILE-MAP*" package)))
             (table (and map (boundp map) (symbol-value map))))
        (or (and (hash-table-p table)
                 (loop for key being the hash-keys of table using (hash-value buffer)
                       when (equal (pathname-name key) name) return buffer))
            "(the backend did not keep its name)")))))

(defun walk-image (packages deadline)
  "The definitions of PACKAGES' own symbols, until DEADLINE (an internal
real time); and whether the walk stopped there."
  (let ((found '()) (stopped nil) (count 0))
    (block walk
      (dolist (package packages)
        (do-symbols (symbol package)
          (when (eq (symbol-package symbol) package)
            (when (and (zerop (mod (incf count) 256)) (>= (get-internal-real-time) deadline))
              (setf stopped t)
              (return-from walk))
            (dolist (definition (ignore-errors (definitions-in symbol)))
              (push definition found))
            (dolist (definition (ignore-errors (others-methods-of symbol packages)))
              (push definition found))))))
    (values (nreverse found) stopped)))

(defparameter *methods-per-class-limit* 200
  "The most methods of other packages' generic functions walked per class.")

(defun others-methods-of (symbol packages)
  "Definitions of the methods specialized on SYMBOL's class whose generic
functions are named in none of PACKAGES (those are walked by name):
(defmethod print-object ((o my-class) s) ...) at the REPL."
  #-sbcl (declare (ignore symbol packages))
  #+sbcl
  (let ((class (find-class symbol nil)))
    (when (and class (not (typep class 'built-in-class)))
      (loop for method in (ignore-errors (sb-mop:specializer-direct-methods class))
            for i below *methods-per-class-limit*
            for gf = (ignore-errors (sb-mop:method-generic-function method))
            for name = (and gf (sb-mop:generic-function-name gf))
            for base = (if (consp name) (second name) name)
            for source = (and gf (symbolp base)
                              (not (member (symbol-package base) packages))
                              (not (typep method 'sb-mop:standard-accessor-method))
                              (sbcl-source method))
            when source
              collect (sbcl-record (dspec-text "DEFMETHOD" name (method-signature method))
                                   base source)))))

(defun loaded-dates (definitions)
  "Each file's newest recorded write date among DEFINITIONS: the version
last loaded from it (a hash table)."
  (let ((dates (make-hash-table :test 'equal)))
    (dolist (d definitions dates)
      (when (and (idef-file d) (idef-date d) (null (idef-plist d)))
        (setf (gethash (idef-file d) dates) (max (idef-date d) (gethash (idef-file d) dates 0)))))))

(defun image-changes (package)
  "Judge the definitions of PACKAGE (or every user package): returns the
changed ones as (DEFINITION KIND DETAIL), how many were checked, in how
many packages, whether the walk or the judging stopped at the time limit
(walk and judging share it), and how many definitions were found."
  (let ((files (make-hash-table :test 'equal))
        (packages (candidate-packages package))
        (deadline (+ (get-internal-real-time)
                     (* *image-changes-seconds* internal-time-units-per-second)))
        (*agent-definitions-index* (agent-definitions-index)))
    (multiple-value-bind (definitions stopped) (walk-image packages deadline)
      (let ((dates (loaded-dates definitions)))
        ;; A definition without a date (a class, a method's place) was loaded with its file's newest.
        (dolist (d definitions)
          (when (and (idef-file d) (null (idef-date d)) (null (idef-plist d)))
            (setf (idef-date d) (gethash (idef-file d) dates))))
        (let ((checked 0) (changed '()))
          ;; The judging shares the walk's time limit: reading files and the agent's records is slow too.
          (dolist (d definitions)
            (when (>= (get-internal-real-time) deadline)
              (setf stopped t)
              (return))
            (incf checked)
            (let ((verdict (ignore-errors (judge-definition d files))))
              (when verdict (push (cons d verdict) changed))))
          (setf changed (nreverse changed))
          ;; The files that are the version loaded are kept as baselines for later walks.
          (maphash (lambda (file date)
                     (let ((state (file-state files file)))
                       (when (eql (fstate-date state) date)
                         (ignore-errors (note-baseline state)))))
                   dates)
          (values changed checked (length packages) stopped (length definitions)))))))

(defun image-changes-count ()
  "How many definitions in the image differ from their files (not
counting those whose difference is not known)."
  (count :file-changed-unknown (values (image-changes nil)) :key #'second :test-not #'eq))

(define-tool "image_changes" (&key package)
  "The definitions whose current version did not come from their file, or
whose file changed on disk after they were loaded."
  (let ((only (and package (notevery #'blank-char-p package) (resolve-package package))))
    (multiple-value-bind (changed checked package-count stopped found) (image-changes only)
      (let* ((unknown (remove :file-changed-unknown changed :key #'second :test-not #'eq))
             (known (remove :file-changed-unknown changed :key #'second))
             ;; Whether a form of a file changed since is not known: not counted as differing.
             (count (length known)))
        (with-output-to-string (out)
          (if (zerop count)
              (format out "No definition in the image differs from its file~:[~; as far as is known~]" unknown)
              (format out "~D definition~:[s in the image differ from their files~; in the image differs from its file~]"
                      count (= count 1)))
          (if stopped
              (format out " (checked ~D of ~:[at least ~;~]~D definition~:P in ~D package~:P, stopped at the time ~
                           limit of ~D s; the rest was not checked).~%"
                      checked (< checked found) (max found checked) package-count *image-changes-seconds*)
              (format out " (~D definition~:P checked in ~D package~:P).~%" checked package-count))
          (when known
            (format out "~%Not as in any file (lost at the next restart unless written to one):~%")
            (loop for (d nil detail) in known
                  for i below *image-changes-limit*
                  do (format out "  ~A  ~A~%" (idef-label d)
                             (if (and (idef-file d) (not (compile-form-file-p (idef-file d)))
                                      (not (getf (idef-plist d) :emacs-buffer)))
                                 (format nil "~A: ~A" (idef-file d) detail)
                                 detail)))
            (when (> (length known) *image-changes-limit*)
              (format out "  ... and ~D more~%" (- (length known) *image-changes-limit*))))
          (when unknown
            (format out "~%Not known (~D, not counted above), from files changed on disk since they were ~
                         loaded (the image holds the version loaded; whether each form changed is not known):~%"
                    (length unknown))
            (let ((by-file (make-hash-table :test 'equal)) (order '()))
              (dolist (entry unknown)
                (let ((file (idef-file (first entry))))
                  (unless (gethash file by-file) (push file order))
                  (push (idef-label (first entry)) (gethash file by-file))))
              (dolist (file (nreverse order))
                (let ((labels (reverse (gethash file by-file))))
                  (format out "  ~A (~D): ~{~A~^, ~}~:[~;, ...~]~%" file (length labels)
                          (subseq labels 0 (min 8 (length labels))) (> (length labels) 8))))))
          (unless (date-known-p)
            (format out "~%Not known here (~A): whether a file changed on disk after it was loaded ~
                         (this Lisp records no file dates), and when a definition was made, but for ~
                         the agent's own.~%"
                    (lisp-implementation-type)))
          (when known
            (format out "~%To keep one: replace_definition or propose_file_edit writes it to its file.~%")))))))
