;;;; backend.lisp --- reach SLYNK or SWANK without naming either at read time.
;;;
;;; Portability comes from the backend layer that SLY and SLIME already
;;; ship: SLYNK-BACKEND / SWANK/BACKEND (arglists, definitions, xref,
;;; backtraces, threads, compiler-condition hooks) and SLYNK-MOP /
;;; SWANK-MOP (the MOP).  Which of the two is loaded is only known when
;;; these helpers are loaded, possibly after them, so every call goes
;;; through FIND-SYMBOL + FUNCALL.  No source file of ours mentions a
;;; backend package at read time: the same fasl serves both.

(in-package #:sly-agent-q)

(defparameter *backend-candidates*
  ;; SLYNK first: when both are loaded either would do, and SLY's
  ;; users are more likely to have both.  Each entry: a name for
  ;; messages, the backend package, the MOP package.
  '(("SLYNK" "SLYNK-BACKEND" "SLYNK-MOP")
    ("SWANK" "SWANK/BACKEND" "SWANK-MOP")
    ("SWANK" "SWANK-BACKEND" "SWANK-MOP"))
  "Backends we know, in order of preference.")

(defvar *backend* nil
  "The backend in use: an entry of *BACKEND-CANDIDATES*, or NIL when
neither SLYNK nor SWANK has been found yet.")

(defun detect-backend ()
  "Return the first loaded backend of *BACKEND-CANDIDATES*, or NIL."
  (find-if (lambda (entry)
             (and (find-package (second entry))
                  (find-package (third entry))))
           *backend-candidates*))

(defun ensure-backend ()
  "Return the backend entry, detecting it now if needed.
Detection is repeated while none is found, so loading SWANK or SLYNK
after these helpers still works."
  (or *backend*
      (setf *backend* (detect-backend))))

(defun backend-name ()
  "The name of the backend in use (\"SLYNK\" or \"SWANK\"), or NIL."
  (first (ensure-backend)))

(define-condition backend-missing (error)
  ((what :initarg :what :reader backend-missing-what))
  (:report (lambda (c stream)
             (format stream "~A is not available: this tool needs SLYNK (SLY) ~
                             or SWANK (SLIME) loaded in the image, and a backend ~
                             that implements it."
                     (backend-missing-what c)))))

(defparameter *fallback-mop-packages* '("SB-MOP" "CLOSER-MOP")
  "MOP packages to use when neither SLYNK-MOP nor SWANK-MOP is loaded.")

(defun backend-symbol (name &optional (which :backend))
  "The symbol NAME (a string) of the backend package (WHICH :BACKEND)
or of its MOP package (:MOP), or NIL."
  (let* ((entry (ensure-backend))
         (package (cond (entry (find-package (if (eq which :mop) (third entry) (second entry))))
                        ((eq which :mop) (some #'find-package *fallback-mop-packages*)))))
    (and package (values (find-symbol name package)))))

(defun backend-implemented-p (name)
  "True if the backend function NAME exists and the backend implements it.
Definterfaces without an implementation for this Lisp are listed in the
backend's *UNIMPLEMENTED-INTERFACES*; calling those either signals or
does something trivial (SPAWN, for instance, may not spawn)."
  (let ((symbol (backend-symbol name))
        (unimplemented (backend-symbol "*UNIMPLEMENTED-INTERFACES*")))
    (and symbol
         (fboundp symbol)
         (not (and unimplemented
                   (boundp unimplemented)
                   (member symbol (symbol-value unimplemented)))))))

(defun bcall (name &rest args)
  "Call the backend function NAME (a string) with ARGS."
  (let ((symbol (backend-symbol name)))
    (unless (and symbol (fboundp symbol))
      (error 'backend-missing :what (format nil "The backend function ~A" name)))
    (apply symbol args)))

(defun mop (name &rest args)
  "Call the MOP function NAME (a string) through SLYNK-MOP / SWANK-MOP."
  (let ((symbol (backend-symbol name :mop)))
    (unless (and symbol (fboundp symbol))
      (error 'backend-missing :what (format nil "The MOP function ~A" name)))
    (apply symbol args)))

(defun backend-type (name)
  "The backend's condition or class named NAME, as a symbol, or NIL."
  (let ((symbol (backend-symbol name)))
    (and symbol (find-class symbol nil) symbol)))


;;;; Threads and locks

(defun threads-available-p ()
  "True if the backend can spawn and interrupt threads here."
  (and (backend-implemented-p "SPAWN")
       (backend-implemented-p "INTERRUPT-THREAD")
       (backend-implemented-p "CURRENT-THREAD")))

(defun make-backend-lock (name)
  "A lock from the backend, or NIL when it has none (then no locking)."
  (when (backend-implemented-p "MAKE-LOCK")
    (ignore-errors (bcall "MAKE-LOCK" :name name))))

(defun call-with-backend-lock (lock function)
  "Call FUNCTION holding LOCK (see MAKE-BACKEND-LOCK)."
  (if (and lock (backend-implemented-p "CALL-WITH-LOCK-HELD"))
      (bcall "CALL-WITH-LOCK-HELD" lock function)
      (funcall function)))


;;;; Conditions the helpers trap
;;;
;;; Without threads CLISP stops an evaluation at its time limit by a
;;; SIGINT, which it signals as a serious condition ("User break", the
;;; same as SLIME's interrupt).  Code that traps what it calls (a
;;; printer that fails, an error in user code) must let that one pass
;;; to the time limit, or an endless PRINT-OBJECT would never end.

(deftype trappable-condition ()
  "The serious conditions a helper may trap: all but an interrupt."
  #+clisp '(and serious-condition (not system::interrupt-condition))
  #-clisp 'serious-condition)


;;;; External formats
;;;
;;; :UTF-8 is not an external format everywhere (CLISP wants an
;;; encoding object): the backend translates Emacs's coding system
;;; names for its Lisp.

(defun external-format (coding-system fallback)
  "The external format of this Lisp for CODING-SYSTEM (an Emacs name,
such as \"utf-8-unix\"), as the backend finds it, else FALLBACK."
  (or (and (backend-implemented-p "FIND-EXTERNAL-FORMAT")
           (ignore-errors (bcall "FIND-EXTERNAL-FORMAT" coding-system)))
      fallback))

(defun utf-8-format ()
  "This Lisp's external format for UTF-8 files."
  (external-format "utf-8-unix" :utf-8))

(defun latin-1-format ()
  "This Lisp's external format for Latin-1 files."
  (external-format "latin-1-unix" :latin-1))


;;;; The connection to Emacs

(defun frontend-symbol (name)
  "The symbol NAME (a string) of SLYNK's or SWANK's own package, or NIL."
  (let ((package (and (backend-name) (find-package (backend-name)))))
    (and package (values (find-symbol name package)))))

(defun emacs-connection ()
  "This thread's connection to Emacs, SLYNK's or SWANK's
*EMACS-CONNECTION*, or NIL."
  (let ((variable (frontend-symbol "*EMACS-CONNECTION*")))
    (and variable (boundp variable) (symbol-value variable))))

(defvar *prompt-streams* '()
  "The connection streams SEND-PROMPTLY has set up, newest first (the
last eight: a session has one or two).")

(defun send-promptly ()
  "Have this thread's connection to Emacs send each message at once.
SLYNK and SWANK leave Nagle's algorithm on: a message written in two
parts while Emacs delays its acknowledgement of the first (it has
nothing to send back) waited 40 ms, and so did a burst of small
answers.  Sets TCP_NODELAY on the connection's socket, once per
connection; a no-op where that cannot be done.  Never signals."
  (ignore-errors
   (let* ((current (frontend-symbol "CURRENT-SOCKET-IO"))
          (stream (and current (fboundp current) (emacs-connection) (funcall current))))
     (when (and stream (not (member stream *prompt-streams*)))
       (push stream *prompt-streams*)
       (when (> (length *prompt-streams*) 8)
         (setf *prompt-streams* (subseq *prompt-streams* 0 8)))
       (set-tcp-nodelay stream)))))

(defun set-tcp-nodelay (stream)
  "Set TCP_NODELAY on the socket under STREAM, where this Lisp allows it."
  (declare (ignorable stream))
  #+(and sbcl (not win32))
  (let ((fd (sb-sys:fd-stream-fd stream)))
    (sb-alien:with-alien ((on sb-alien:int 1))
      ;; IPPROTO_TCP is 6 and TCP_NODELAY 1 on every Unix.
      (sb-alien:alien-funcall
       (sb-alien:extern-alien "setsockopt"
                              (function sb-alien:int sb-alien:int sb-alien:int sb-alien:int
                                        (* sb-alien:int) sb-alien:unsigned))
       fd 6 1 (sb-alien:addr on) 4))))


;;;; Source locations
;;;
;;; The backend describes where things are defined with location lists
;;; such as (:LOCATION (:FILE "/x.lisp") (:POSITION 123) (:SNIPPET "..."))
;;; or (:ERROR "message").  The model wants a file and a line.

(defun location-file (location)
  "The file of a backend LOCATION, or NIL."
  (when (and (consp location) (eq (first location) :location))
    (let ((buffer (second location)))
      (case (and (consp buffer) (first buffer))
        (:file (second buffer))
        (:buffer-and-file (third buffer))))))

(defun aligned-location-p (location)
  "True if LOCATION carries (:ALIGN T): the backend (ECL's) records where
the reader started, after the previous form, and the form is the next
one from there, past blank lines and comments (what the editor does
with such a location)."
  (let ((align (find-if (lambda (part) (and (consp part) (eq (first part) :align)))
                        (cdddr location))))
    (and align (second align))))

(defun form-start-in-file (file position)
  "The 1-based position of the first character at or after the 1-based
POSITION in FILE that is neither blank nor in a comment; POSITION when
FILE cannot be read."
  (let ((text (and file (ignore-errors (read-file-text file)))))
    (if (and text (<= 1 position (1+ (length text))))
        (let ((start (skip-blank text (1- position))))
          (if (< start (length text)) (1+ start) position))
        position)))

(defun location-char-position (location)
  "The 1-based character position of a backend LOCATION, or NIL."
  (when (and (consp location) (eq (first location) :location))
    (let ((position (third location)))
      (when (consp position)
        (case (first position)
          (:position (and (integerp (second position))
                          (if (aligned-location-p location)
                              (form-start-in-file (location-file location) (second position))
                              (second position))))
          ;; CLISP's backend locates by line: the line's first character.
          (:line (let ((file (location-file location)))
                   (and file (integerp (second position)) (plusp (second position))
                        (file-line-start file (second position)))))
          (:offset (and (integerp (second position))
                        (integerp (third position))
                        (+ (second position) (third position)))))))))

(defun file-line-at (file position)
  "The 1-based line of the 1-based character POSITION in FILE, or NIL."
  (ignore-errors
   (with-open-file (in file :direction :input :if-does-not-exist nil)
     (when in
       (let ((line 1))
         (dotimes (i (max 0 (1- position)) line)
           (let ((char (read-char in nil nil)))
             (cond ((null char) (return nil))
                   ((char= char #\Newline) (incf line))))))))))

(defun file-line-start (file line)
  "The 1-based character position where the 1-based LINE of FILE starts, or NIL."
  (ignore-errors
   (with-open-file (in file :direction :input :if-does-not-exist nil
                            :external-format (utf-8-format))
     (when in
       (let ((position 1) (at 1))
         (loop while (< at line)
               do (let ((char (read-char in nil nil)))
                    (cond ((null char) (return-from file-line-start nil))
                          ((char= char #\Newline) (incf at)))
                    (incf position)))
         position)))))

(defun format-location (location)
  "A short description of a backend LOCATION for the model."
  (cond
    ((and (consp location) (eq (first location) :error))
     (format nil "source unknown (~A)" (second location)))
    ((not (and (consp location) (eq (first location) :location)))
     "source unknown")
    (t
     (let ((file (location-file location))
           (position (location-char-position location))
           (buffer (second location)))
       (cond
         ((and file (not (ignore-errors (probe-file file))))
          (format nil "~A (file not found)" file))
         (file
          (let ((line (and position (file-line-at file position))))
            (cond (line (format nil "~A:~D" file line))
                  (position (format nil "~A, character ~D" file position))
                  (t file))))
         ((and (consp buffer) (eq (first buffer) :buffer))
          (format nil "Emacs buffer ~A~@[, character ~D~]" (second buffer) position))
         ((and (consp buffer) (eq (first buffer) :source-form))
          "a form evaluated without a source file")
         (t "source unknown"))))))

(defun definitions-of (name)
  "The definitions of NAME: a list of (DSPEC LOCATION), or NIL.  From
the backend, or where it cannot find the source of code loaded from a
fasl (CLISP), from the Lisp's records (locations.lisp)."
  (cond ((recorded-definitions-p) (definitions-from-records name))
        ((backend-implemented-p "FIND-DEFINITIONS")
         (let ((result (ignore-errors (bcall "FIND-DEFINITIONS" name))))
           (and (listp result) result)))))

(defun source-location-of (object)
  "The source location of OBJECT (a method, class...), or NIL."
  (or (and (recorded-definitions-p) (object-location-from-records object))
      (when (backend-implemented-p "FIND-SOURCE-LOCATION")
        (ignore-errors (bcall "FIND-SOURCE-LOCATION" object)))))


;;;; Compilation hooks
;;;
;;; The backends turn the compiler's warnings into compiler conditions
;;; that say where they are.  SWANK's CLISP hooks break: its C-ERROR
;;; hook formats the compiler's arguments wrongly (CLISP passes the
;;; offending form first), so a malformed form aborted compilation with
;;; a FORMAT error, and every warning came twice, once without its
;;; place.  On CLISP the compiler's own functions are wrapped here
;;; instead, and each warning they signal is resignalled as the
;;; backend's compiler condition, located at the line being compiled.

(defvar *compiler-severity* nil
  "While CLISP's compiler reports a problem: its severity.")

(defun call-with-compilation-hooks (function)
  "Call FUNCTION (which compiles) so that the compiler's warnings and
errors are signalled as the backend's located compiler conditions."
  #+clisp
  (let ((type (backend-type "COMPILER-CONDITION"))
        (c-warn #'system::c-warn) (c-style-warn #'system::c-style-warn) (c-error #'system::c-error)
        (c-report-problems #'system::c-report-problems))
    (labels ((note (original severity message file line)
               (let ((*compiler-severity* nil))
                 (signal (make-condition
                          type :original-condition original :severity severity
                               :message (string-trim '(#\Space #\Newline) message)
                               :location (if (and file (integerp line))
                                             (list :location (list :file (namestring file))
                                                   (list :line line) nil)
                                             (list :error "No location"))))))
             (resignal (c)
               (when (and type *compiler-severity*)
                 (note c *compiler-severity* (princ-to-string c)
                       system::*compile-file-truename* system::*compile-file-lineno1*)))
             (report-problems (original)
               ;; Undefined functions are only printed at the end, in a
               ;; list: each is reported as SBCL does, where it is called.
               (lambda (&rest args)
                 (when type
                   (loop for (name where) in system::*unknown-functions*
                         unless (ignore-errors (fboundp name))
                           do (note nil :style-warning (format nil "undefined function: ~S" name)
                                    (ignore-errors (system::c-source-point-file where))
                                    (ignore-errors (system::c-source-point-lineno1 where)))))
                 (apply original args)))
             (wrap (severity original)
               (lambda (&rest args)
                 (let ((*compiler-severity* (or *compiler-severity* severity)))
                   ;; The compiler signals an error it expects the
                   ;; debugger to continue from ("Ignore the error and
                   ;; proceed"): it is reported, and compilation goes
                   ;; on to report the rest, failing.
                   (handler-bind ((error (lambda (e)
                                           (let ((continue (find-restart 'continue e)))
                                             (when continue
                                               (resignal e)
                                               (invoke-restart continue))))))
                     (apply original args))))))
      (handler-bind ((warning #'resignal)
                     ;; An error while reading the file ends compiling:
                     ;; reported as a read error (CLISP does not say where).
                     (error (lambda (e)
                              (when (and type (null *compiler-severity*)
                                         system::*compile-file-truename*
                                         (typep e '(or reader-error package-error end-of-file)))
                                (note e :read-error (princ-to-string e) nil nil)))))
        (ext:letf* (((symbol-function 'system::c-warn) (wrap :warning c-warn))
                    ((symbol-function 'system::c-style-warn) (wrap :style-warning c-style-warn))
                    ((symbol-function 'system::c-error) (wrap :error c-error))
                    ((symbol-function 'system::c-report-problems) (report-problems c-report-problems)))
          (funcall function)))))
  #-clisp
  (if (backend-implemented-p "CALL-WITH-COMPILATION-HOOKS")
      (bcall "CALL-WITH-COMPILATION-HOOKS" function)
      (funcall function)))


;;;; Threads started by user code
;;;
;;; SLIME and SLY install their debugger hook globally, and a new thread
;;; sees only global values: an error in a thread that the agent's code
;;; started would open the user's debugger.  The one place every such
;;; thread passes through is the function that creates it, so we wrap
;;; that (SBCL: an encapsulation of SB-THREAD:MAKE-THREAD, which
;;; Bordeaux Threads and the backends call too).  Elsewhere it is not
;;; supported: such threads keep the Lisp's default behaviour.

(defun install-thread-wrapper (wrap)
  "Make every new thread run (FUNCALL WRAP FUNCTION) instead of its
FUNCTION; WRAP returns FUNCTION itself to leave a thread alone.
Returns true when installed, NIL when this Lisp is not supported.
Installing again replaces the previous wrapper."
  #+sbcl
  (progn
    (when (sb-int:encapsulated-p 'sb-thread:make-thread 'sly-agent-q)
      (sb-int:unencapsulate 'sb-thread:make-thread 'sly-agent-q))
    (sb-int:encapsulate 'sb-thread:make-thread 'sly-agent-q
                        (lambda (make-thread function &rest keys)
                          (apply make-thread (funcall wrap function) keys)))
    t)
  #-sbcl
  (progn wrap nil))

(defun thread-label (thread)
  "A short name for THREAD, for messages."
  (or (ignore-errors
       (let ((name (and (backend-implemented-p "THREAD-NAME") (bcall "THREAD-NAME" thread))))
         (and (stringp name) (plusp (length name)) name)))
      "unnamed"))

(defun call-with-interrupts-allowed (function)
  "Call FUNCTION with interrupts allowed, even inside an interrupt
handler (SBCL runs those with interrupts disabled), so that a timeout
can still stop it."
  #+sbcl (sb-sys:with-interrupts (funcall function))
  #-sbcl (funcall function))
