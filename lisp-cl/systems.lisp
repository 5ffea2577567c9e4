;;;; systems.lisp --- ASDF systems: which the image knows, loading one
;;;; with its compiler warnings per file and form, what one is made of.
;;;
;;; ASDF (and Quicklisp, when present) are found at run time with
;;; FIND-PACKAGE / FIND-SYMBOL: nothing here needs them to load.

(in-package #:sly-agent-q)

(defparameter *systems-limit* 200
  "The most systems list_systems shows.")

(defun asdf-function-if-any (name)
  "ASDF's function NAME (a string), or NIL when ASDF or this ASDF lacks it."
  (let ((symbol (and (find-package "ASDF") (find-symbol name "ASDF"))))
    (and symbol (fboundp symbol) symbol)))

(defun asdf-function (name)
  "ASDF's function NAME (a string); FAILs when ASDF is not in the image."
  (unless (find-package "ASDF")
    (fail "ASDF is not loaded in this image: (require \"asdf\") first."))
  (or (asdf-function-if-any name)
      (fail "This image's ASDF has no ~A." name)))

(defun asdf-call (name &rest args)
  (apply (asdf-function name) args))

(defun system-names ()
  "The names of the systems ASDF has registered."
  (sort (copy-list (asdf-call "REGISTERED-SYSTEMS")) #'string<))

;;; system_info and list_systems are safe tools: they run without
;;; approval, so they never read a system definition.  An .asd file is
;;; Lisp code, and ASDF:FIND-SYSTEM loads one it has not read yet (from
;;; its source registry) and reloads one changed on disk: these tools
;;; look up only the systems ASDF has registered.  load_system and
;;; run_tests, which are asked for, use FIND-SYSTEM-OR-FAIL.

(defun system-name-argument (name)
  (string-downcase (string-trim " " (nonblank name "system" "a system's name"))))

(defun system-not-found (name)
  (fail "ASDF knows no system ~S.~@[ Closest: ~{~A~^, ~}.~] A project's system is found once its ~
         .asd file is loaded (asdf:load-asd) or its directory is in ASDF's source registry."
        name (closest-strings name (system-names))))

(defun find-system-or-fail (name)
  "The ASDF system NAME, or a FAIL naming the closest registered ones.
May load NAME's .asd file: only for the tools that are asked for."
  (let ((name (system-name-argument name)))
    (or (ignore-errors (asdf-call "FIND-SYSTEM" name nil))
        (system-not-found name))))

(defun asdf-symbol-value (name)
  "The value of ASDF's variable NAME (a string), or NIL."
  (let ((symbol (and (find-package "ASDF") (find-symbol name "ASDF"))))
    (and symbol (boundp symbol) (symbol-value symbol))))

(defun registered-system (name)
  "The system NAME if ASDF has registered it, else NIL.  Never reads an
.asd file: ASDF:REGISTERED-SYSTEM (ASDF 3.1 and later), else ASDF's
table of systems (whose values are systems, or (TIME . SYSTEM) before
ASDF 3.3)."
  (let ((function (asdf-function-if-any "REGISTERED-SYSTEM")))
    (if function
        (ignore-errors (funcall function name))
        (let ((table (or (asdf-symbol-value "*REGISTERED-SYSTEMS*")
                         (asdf-symbol-value "*DEFINED-SYSTEMS*"))))
          (when (hash-table-p table)
            (let ((entry (gethash name table)))
              (if (consp entry) (cdr entry) entry)))))))

(defun primary-system-name (name)
  "\"foo\" of the system name \"foo/bar\"."
  (subseq name 0 (position #\/ name)))

(defun central-registry-asd (name)
  "NAME's .asd file in a directory of ASDF's *CENTRAL-REGISTRY*, or NIL.
Only the entries that are pathnames or strings are searched: ASDF
evaluates the others, and this evaluates nothing."
  (dolist (entry (asdf-symbol-value "*CENTRAL-REGISTRY*"))
    (let* ((directory (and (or (pathnamep entry) (stringp entry))
                           (ignore-errors (pathname entry))))
           (file (and directory (null (pathname-name directory)) (null (pathname-type directory))
                      (ignore-errors
                       (probe-file (merge-pathnames (make-pathname :name name :type "asd")
                                                    directory))))))
      (when file (return file)))))

(defun locate-system-definition (name)
  "The .asd file defining system NAME that ASDF would read, found
without reading any: in ASDF's central registry or its source registry
(SYSDEF-SOURCE-REGISTRY-SEARCH, which scans directories and reads only
its configuration, with *READ-EVAL* off).  NIL when none is found."
  (let ((primary (primary-system-name name)))
    (or (central-registry-asd primary)
        (let* ((search (asdf-function-if-any "SYSDEF-SOURCE-REGISTRY-SEARCH"))
               (file (and search (ignore-errors (funcall search primary)))))
          (and (pathnamep file) file)))))

(defun unread-system-message (name file)
  (format nil "System ~A is not loaded: ASDF has not read its definition, ~A. ~
               It was not read now because reading a system definition runs its code; ~
               load_system (which asks for approval) loads the system.~%"
          name (namestring file)))

(defun directory-within-p (directory root)
  "True if the directory pathname DIRECTORY is ROOT or inside it."
  (let ((d (namestring directory))
        (r (namestring root)))
    (and (>= (length d) (length r)) (string= r d :end2 (length r)))))

(defun directory-of (text)
  "TEXT (a directory name, with or without a final slash) as a pathname."
  (let* ((name (concatenate 'string (string-right-trim "/" text) "/"))
         ;; CLISP's PROBE-FILE refuses directories; its TRUENAME takes them.
         (probe (ignore-errors #+clisp (truename name) #-clisp (probe-file name))))
    (and probe (make-pathname :name nil :type nil :version nil :defaults probe))))

(define-tool "list_systems" (&key directory)
  "The ASDF systems the image knows, marking those under DIRECTORY."
  (let* ((names (system-names))
         (root (and directory (notevery #'blank-char-p directory) (directory-of directory)))
         (loaded (asdf-function "COMPONENT-LOADED-P"))
         (source-directory (asdf-function "SYSTEM-SOURCE-DIRECTORY")))
    (with-output-to-string (out)
      (flet ((describe-one (name)
               (let* ((system (registered-system name))
                      (dir (and system (ignore-errors (funcall source-directory system)))))
                 (list name
                       (and system (ignore-errors (funcall loaded system)))
                       dir
                       (and root dir (directory-within-p dir root))))))
        (let* ((all (mapcar #'describe-one names))
               (mine (remove-if-not #'fourth all)))
          (when root
            (if mine
                (format out "Systems under ~A: ~{~A~^, ~}~%" (namestring root) (mapcar #'first mine))
                (format out "No registered system is under ~A (load its .asd file first).~%"
                        (namestring root))))
          (format out "~D systems registered:~%" (length all))
          (loop for (name loaded-p dir) in all
                for i below *systems-limit*
                do (format out "  ~A~:[~; (loaded)~]~@[  ~A~]~%" name loaded-p
                           (and dir (namestring dir))))
          (when (> (length all) *systems-limit*)
            (format out "  ... and ~D more~%" (- (length all) *systems-limit*))))))))


;;;; Loading

(defstruct (load-note (:constructor make-load-note (severity message file line form)))
  severity message file line form)

(defun note-from-condition (c)
  "A LOAD-NOTE for the backend's compiler condition C."
  (let* ((location (ignore-errors (bcall "LOCATION" c)))
         (file (location-file location))
         (position (location-char-position location))
         (text (and file position (read-file-text file)))
         ;; The location is often a subform: name the top-level form.
         (spans (and text (scan-forms text)))
         (index (and spans (form-index-at spans (1- position))))
         (span (and index (let ((s (nth index spans))) (list (car s) (cdr s))))))
    (make-load-note (or (ignore-errors (bcall "SEVERITY" c)) :warning)
                    (compiler-condition-message c)
                    file
                    (and text (line-of text (1- position)))
                    (and span (form-excerpt text (first span) (second span) 60)))))

(defun call-collecting-notes (function)
  "Call FUNCTION inside the backend's compilation hooks; return its
value and the LOAD-NOTEs of the compiler conditions signalled."
  (let ((notes '()) (located '()))
    (let ((value
            (handler-bind
                ((condition
                   (lambda (c)
                     (cond ((compiler-condition-p c)
                            (let ((original (ignore-errors (bcall "ORIGINAL-CONDITION" c))))
                              (push original located)
                              (unless (or (eq (ignore-errors (bcall "SEVERITY" c)) :redefinition)
                                          (and original (redefinition-p original)))
                                (push (note-from-condition c) notes))))
                           ((and (typep c 'warning)
                                 (or (member c located) (redefinition-p c)))
                            (muffle-warning c))))))
              (let ((*compile-verbose* nil) (*compile-print* nil)
                    (*load-verbose* nil) (*load-print* nil))
                (call-with-compilation-hooks function)))))
      (values value (nreverse notes)))))

(defun write-load-notes (out notes)
  "Write NOTES grouped by file, at most *NOTES-LIMIT*."
  (let ((shown 0))
    (dolist (file (remove-duplicates (mapcar #'load-note-file notes) :test #'equal :from-end t))
      (format out "~A:~%" (or file "(no file)"))
      (dolist (note (remove-if-not (lambda (n) (equal (load-note-file n) file)) notes))
        (when (< shown *notes-limit*)
          (incf shown)
          (format out "  ~A~@[ at line ~D~]~@[ in ~A~]: ~A~%"
                  (severity-label (load-note-severity note)) (load-note-line note)
                  (load-note-form note) (first-line (load-note-message note) 300)))))
    (when (> (length notes) shown)
      (format out "... and ~D more notes~%" (- (length notes) shown)))))

(defun quicklisp-loader ()
  "QL:QUICKLOAD when Quicklisp is in the image, else NIL."
  (let ((symbol (and (find-package "QUICKLISP-CLIENT")
                     (find-symbol "QUICKLOAD" "QUICKLISP-CLIENT"))))
    (and symbol (fboundp symbol) symbol)))

(define-tool "load_system" (&key system)
  "Load an ASDF system (with Quicklisp when present), reporting compiler notes."
  (let* ((object (find-system-or-fail system))
         (name (asdf-call "COMPONENT-NAME" object))
         (asd (ignore-errors (asdf-call "SYSTEM-SOURCE-FILE" object)))
         (quickload (quicklisp-loader))
         (started (get-internal-real-time))
         (failure nil)
         (upgraded nil))
    (multiple-value-bind (value notes)
        (call-collecting-notes
         (lambda ()
           (flet ((load-it ()
                    (setf failure nil)
                    (handler-case
                        (if quickload
                            (funcall quickload name :silent t)
                            (asdf-call "LOAD-SYSTEM" name))
                      (error (c) (setf failure c) nil))))
             (let ((version (ignore-errors (asdf-call "ASDF-VERSION"))))
               (load-it)
               ;; An old ASDF (CLISP's 3.2) upgrades itself from the
               ;; source registry at its first operation and forgets
               ;; the systems known through asdf:load-asd: the system's
               ;; .asd is loaded again and the load tried once more.
               (when (and failure asd
                          (not (equal version (ignore-errors (asdf-call "ASDF-VERSION"))))
                          (not (ignore-errors (asdf-call "FIND-SYSTEM" name nil))))
                 (setf upgraded (list version (ignore-errors (asdf-call "ASDF-VERSION"))))
                 (ignore-errors (asdf-call "LOAD-ASD" asd))
                 (load-it))))))
      (declare (ignore value))
      (let ((seconds (/ (- (get-internal-real-time) started) internal-time-units-per-second))
            (errors (count-if (lambda (n) (error-severity-p (load-note-severity n))) notes)))
        (with-output-to-string (out)
          (when upgraded
            (format out "ASDF upgraded itself from ~A to ~A during the load and forgot the systems ~
                         it knew; ~A was loaded again and the load retried.~%"
                    (first upgraded) (second upgraded) asd))
          (if failure
              (format out "Loading ~A FAILED~@[ (~A)~]: ~A: ~A~%"
                      name (and quickload "ql:quickload")
                      (condition-type-label failure) (first-line (condition-message failure) 400))
              (format out "Loaded ~A with ~:[asdf:load-system~;ql:quickload~] in ~,1F s: ~D error~:P, ~
                           ~D warning~:P and note~:P.~%"
                      name quickload seconds errors (- (length notes) errors)))
          (write-load-notes out notes))))))

(defun component-tree (out component depth)
  "Write COMPONENT's children, indented by DEPTH."
  (let ((children (ignore-errors (asdf-call "COMPONENT-CHILDREN" component))))
    (dolist (child children)
      (format out "~vT~A~@[  ~A~]~%" (* 2 depth)
              (asdf-call "COMPONENT-NAME" child)
              (let ((path (ignore-errors (asdf-call "COMPONENT-PATHNAME" child))))
                (and path (pathname-name path) (file-namestring path))))
      (when (< depth 6) (component-tree out child (1+ depth))))))

(defun describe-system (object)
  "What system_info says of the registered system OBJECT."
  (let ((name (asdf-call "COMPONENT-NAME" object)))
    (with-output-to-string (out)
      (format out "System ~A~@[ ~A~]~:[~; (loaded)~]~%"
              name (ignore-errors (asdf-call "COMPONENT-VERSION" object))
              (ignore-errors (asdf-call "COMPONENT-LOADED-P" object)))
      (let ((file (ignore-errors (asdf-call "SYSTEM-SOURCE-FILE" object)))
            (description (ignore-errors (asdf-call "SYSTEM-DESCRIPTION" object))))
        (when file (format out "Defined in ~A~%" (namestring file)))
        (when description (format out "~A~%" (first-line description 300))))
      (format out "Depends on: ~{~A~^, ~}~%"
              (or (mapcar (lambda (d) (princ-value d :limit 100))
                          (ignore-errors (asdf-call "SYSTEM-DEPENDS-ON" object)))
                  '("nothing")))
      (format out "Components:~%")
      (component-tree out object 1))))

(define-tool "system_info" (&key system)
  "An ASDF system's file, dependencies and components: of a system ASDF
has registered, without reading any .asd file."
  (let* ((name (system-name-argument system))
         (object (progn (asdf-function "REGISTERED-SYSTEMS") ; FAILs without ASDF
                        (registered-system name)))
         (file (and (not object) (locate-system-definition name))))
    (cond
      (object (describe-system object))
      (file (unread-system-message name file))
      (t (system-not-found name)))))
