;;;; profile.lisp --- profile_eval: evaluate forms under a profiler.
;;;
;;; Two kinds of profile, and the result says which it is.  On SBCL,
;;; unless packages are named, the statistical profiler SB-SPROF samples
;;; the evaluating thread every millisecond and sees every function.
;;; Otherwise the profile is deterministic: the functions of the named
;;; packages (default: the form's package) are wrapped for the one
;;; evaluation, counting calls and time, and unwrapped when it ends,
;;; however it ends.  The wrapping goes through the backend's profiler
;;; interface (PROFILE, UNPROFILE, PROFILE-REPORT...) where this Lisp's
;;; backend implements it (SBCL, CCL, CLISP), else through the metering
;;; profiler that SLIME and SLY ship beside their backends (the one
;;; their CLISP and CCL backends use), loaded from there when first
;;; needed (ECL built without its profile module, ABCL).

(in-package #:sly-agent-q)

(pushnew "profile_eval" *tools-guarding-themselves* :test #'string=)

(defparameter *profile-function-limit* 500
  "The most functions profile_eval wraps for one evaluation: more is
the Lisp's own code, not the user's, and slow to wrap and unwrap.")


;;;; SBCL's statistical profiler

(defun sprof-function (name)
  (let ((package (find-package "SB-SPROF")))
    (and package (fboundp (find-symbol name package)) (find-symbol name package))))

(defun ensure-sprof ()
  "True when SBCL's statistical profiler is loaded (loading it if need be)."
  #+sbcl (or (find-package "SB-SPROF")
             (ignore-errors (let ((*standard-output* (make-broadcast-stream)))
                              (require "SB-SPROF"))
                            (find-package "SB-SPROF")))
  #-sbcl nil)

(defun statistical-profile (text package)
  (let ((result nil)
        (report nil))
    (funcall (sprof-function "RESET"))
    (unwind-protect
         (progn
           (funcall (sprof-function "START-PROFILING") :sample-interval 0.001 :max-samples 100000
                    :threads (list (bcall "CURRENT-THREAD")))
           (setf result (evaluate-text "profile_eval" text package)))
      (funcall (sprof-function "STOP-PROFILING"))
      (setf report (with-output-to-string (out)
                     (ignore-errors
                      (funcall (sprof-function "REPORT") :type :flat :max 15 :stream out))))
      (funcall (sprof-function "RESET")))
    (format nil "~A~%Statistical profile (SB-SPROF, 1 ms samples, top 15 by self time):~%~A"
            result (cap report 3000 "profile"))))


;;;; The deterministic profiler: the backend's, or its metering

(defun monitor-package ()
  "The backend's metering package (SWANK-MONITOR, SLYNK-MONITOR), or NIL."
  (and (backend-name) (find-package (format nil "~A-MONITOR" (backend-name)))))

(defun monitor-symbol (name)
  (let ((package (monitor-package)))
    (and package (values (find-symbol name package)))))

(defun backend-source-directory ()
  "The directory SWANK or SLYNK was loaded from, as its loader records it, or NIL."
  (let* ((loader (and (backend-name) (find-package (format nil "~A-LOADER" (backend-name)))))
         (variable (and loader (find-symbol "*SOURCE-DIRECTORY*" loader))))
    (and variable (boundp variable) (ignore-errors (pathname (symbol-value variable))))))

(defun load-metering ()
  "True when the backend's metering profiler is loaded, loading its
source from beside the backend if need be."
  (or (monitor-package)
      (let ((file (let ((directory (backend-source-directory)))
                    (and directory
                         (ignore-errors (probe-file (merge-pathnames "metering.lisp" directory)))))))
        (when file
          (ignore-errors
           (let ((*package* (find-package "COMMON-LISP-USER"))
                 (*readtable* (copy-readtable nil))
                 (*standard-output* (make-broadcast-stream))
                 (*error-output* (make-broadcast-stream))
                 (*load-verbose* nil) (*load-print* nil))
             ;; It warns that it does not know this Lisp: its portable
             ;; timing is what we want.
             (handler-bind ((warning #'muffle-warning))
               (load file))))
          (monitor-package)))))

(defmacro quietly (&body body)
  "BODY with what the profilers print (warnings, notes) thrown away."
  `(let* ((*standard-output* (make-broadcast-stream))
          (*error-output* *standard-output*)
          (*trace-output* *standard-output*)
          ;; SBCL's profiler says on *DEBUG-IO* that it measures its overhead.
          (*debug-io* (make-two-way-stream (make-concatenated-stream) *standard-output*)))
     (handler-bind ((warning #'muffle-warning))
       ,@body)))

(defvar *metering-works* :unknown
  "Whether a function wrapped by the metering can still be called in
this Lisp (T or NIL), once tried.")

(defun metering-works-p ()
  "True when a function the metering wraps still runs.  Its counters
are declared fixnums: where the clock outgrows them (ABCL's fixnums are
32 bits) every wrapped call fails, and the user's code with it."
  (when (eq *metering-works* :unknown)
    (setf *metering-works*
          (let ((probe (make-symbol "PROFILE-PROBE")))
            (setf (symbol-function probe) (lambda (x) (1+ x)))
            (unwind-protect
                 (quietly
                  (eval `(,(monitor-symbol "MONITOR") ,probe))
                  (and (member probe (symbol-value (monitor-symbol "*MONITORED-FUNCTIONS*")))
                       (ignore-errors (eql 2 (funcall probe 1)))
                       t))
              (ignore-errors (quietly (eval `(,(monitor-symbol "UNMONITOR") ,probe))))))))
  *metering-works*)

(defun deterministic-profiler ()
  "How this image wraps functions to profile them: :BACKEND (the
backend's PROFILE interface), :METERING (the backend's metering.lisp),
or NIL when neither is there or works."
  (cond ((backend-implemented-p "PROFILE") :backend)
        ((and (load-metering) (metering-works-p)) :metering)))

(defun profiled-now (profiler)
  "The names PROFILER has wrapped now (the user's included), but the
metering's own stub, which it may leave wrapped after measuring its
overhead (ABCL)."
  (remove-if (lambda (name) (and (symbolp name) (eq (symbol-package name) (monitor-package))))
             (ignore-errors
              (copy-list (ecase profiler
                           (:backend (bcall "PROFILED-FUNCTIONS"))
                           (:metering (symbol-value (monitor-symbol "*MONITORED-FUNCTIONS*"))))))))

(defun profile-names (profiler names)
  "Wrap each of NAMES; one that cannot be wrapped is left alone."
  (quietly
   (dolist (name names)
     (ignore-errors
      (ecase profiler
        (:backend (bcall "PROFILE" name))
        ;; MONITOR is a macro: the names are not evaluated.
        (:metering (eval `(,(monitor-symbol "MONITOR") ,name))))))))

(defun unprofile-names (profiler names)
  "Unwrap each of NAMES.  A function redefined meanwhile keeps its new
definition: both profilers restore only a definition they wrapped."
  (quietly
   (dolist (name names)
     (ignore-errors
      (ecase profiler
        (:backend (bcall "UNPROFILE" name))
        (:metering (eval `(,(monitor-symbol "UNMONITOR") ,name))))))))

(defun reset-profile (profiler)
  (quietly
   (ecase profiler
     (:backend (bcall "PROFILE-RESET"))
     (:metering (funcall (monitor-symbol "RESET-ALL-MONITORING"))))))

(defun metering-counts (names)
  "(NAME CALLS TIME) of each of NAMES as the metering counted it, TIME
net of its estimated overhead, or NIL when the metering cannot say."
  (let ((info (monitor-symbol "MONITOR-INFO-VALUES")))
    (and info (fboundp info)
         (ignore-errors
          (mapcar (lambda (name)
                    (multiple-value-bind (calls nested time) (funcall info name :exclusive)
                      (declare (ignore nested))
                      (list name calls time)))
                  names)))))

(defun write-call-counts (counts out)
  "Write the calls of COUNTS ((NAME CALLS TIME)...), the most called first, to OUT."
  (let ((called (sort (remove-if-not #'plusp (copy-list counts) :key #'second) #'> :key #'second))
        (*package* (find-package "KEYWORD")))
    (when called
      (format out "The evaluation took less time than the clock measures, so no time is shared ~
                   out; the calls of each function called:~%")
      (loop for (name calls) in called
            do (format out "~8D  ~A~%" calls (print-value name :limit 200))))))

(defun profile-report (profiler names)
  "The profiler's report on NAMES, as text.
Where the metering measured no time at all (a form quicker than the
clock, with an overhead estimated at zero), it would say only that there
was not enough time: the calls it counted are written instead."
  (with-output-to-string (out)
    (let ((*standard-output* out)
          (*trace-output* out)
          (*error-output* (make-broadcast-stream))
          (*debug-io* (make-two-way-stream (make-concatenated-stream) (make-broadcast-stream)))
          (report (monitor-symbol "REPORT-MONITORING"))
          (monitored (monitor-symbol "*MONITORED-FUNCTIONS*")))
      (ignore-errors
       (handler-bind ((warning #'muffle-warning))
         (if (and report monitored (boundp monitored)
                  (subsetp names (symbol-value monitored) :test #'equal))
             (let ((counts (metering-counts names)))
               (if (and counts (zerop (reduce #'+ counts :key #'third)))
                   (write-call-counts counts out)
                   ;; Every function called, however short (the default
                   ;; leaves out those under 1% of the time).
                   (funcall report names :exclusive 0 :percent-time t)))
             (let ((text (bcall "PROFILE-REPORT")))
               (when (stringp text) (write-string text out)))))))))


;;;; What to profile

(defun refused-profile-package-p (package)
  "True for a package whose functions profile_eval does not wrap: the
standard's, the backend's, the agent's own and the Lisp's extensions
(those CL-USER uses).  Wrapping them would profile, or break, the tools
and the Lisp that run the profile."
  (let ((name (package-name package)))
    (or (member package (list (find-package "COMMON-LISP") (find-package "KEYWORD")
                              (find-package "SLY-AGENT-Q")))
        (member package (package-use-list (find-package "COMMON-LISP-USER")))
        (some (lambda (prefix)
                (and (>= (length name) (length prefix)) (string= prefix name :end2 (length prefix))))
              '("SWANK" "SLYNK" "SLY-AGENT-Q")))))

(defun profilable-functions (package)
  "The global functions whose names PACKAGE owns, but macros, special
operators and generic functions (a wrapped generic function would make
a DEFMETHOD during the evaluation fail)."
  (let ((names '()))
    (do-symbols (symbol package)
      (when (and (eq (symbol-package symbol) package)
                 (fboundp symbol)
                 (not (macro-function symbol))
                 (not (special-operator-p symbol))
                 (not (typep (fdefinition symbol) 'generic-function)))
        (pushnew symbol names)))
    (sort names #'string< :key #'symbol-name)))

(defun deterministic-profile (text package packages)
  (dolist (each packages)
    (when (refused-profile-package-p each)
      (fail "profile_eval does not wrap the functions of ~A (the Lisp's, the backend's or ~
             the agent's own); name the packages of the code to profile."
            (package-name each))))
  (let ((profiler (or (deterministic-profiler)
                      (fail "Profiling is not available in this image: ~A has no statistical ~
                             profiler here, the ~A backend implements no profiler interface on ~
                             it, and its metering.lisp is not beside it or fails in this Lisp."
                            (lisp-implementation-type) (or (backend-name) "SWANK or SLYNK")))))
    (let ((names (remove-duplicates (mapcan #'profilable-functions packages)))
          (already (profiled-now profiler)))
      (when already
        (fail "Functions are profiled already (~{~A~^, ~}~:[~;, ...~]): profile_eval would reset ~
               their counts.  Unprofile them first."
              (mapcar (lambda (name) (print-value name :limit 100)) (subseq already 0 (min 5 (length already))))
              (> (length already) 5)))
      (when (null names)
        (fail "~{~A~^, ~} ~:[has~;have~] no functions to profile (macros and generic functions ~
               are left out); name the packages of the functions the form calls in \"packages\"."
              (mapcar #'package-name packages) (rest packages)))
      (when (> (length names) *profile-function-limit*)
        (fail "~{~A~^, ~} ~:[has~;have~] ~D functions, more than the ~D profile_eval wraps; ~
               name smaller packages."
              (mapcar #'package-name packages) (rest packages) (length names)
              *profile-function-limit*))
      (let ((result nil)
            (report nil))
        (unwind-protect
             (progn
               (profile-names profiler names)
               (reset-profile profiler)
               (setf result (evaluate-text "profile_eval" text package))
               (setf report (profile-report profiler (intersection names (profiled-now profiler)
                                                                  :test #'equal))))
          ;; Whatever happened, nothing of ours stays wrapped.
          (unprofile-names profiler (intersection names (profiled-now profiler) :test #'equal)))
        (format nil "~A~%Deterministic profile (~A) of the ~D functions of ~{~A~^, ~}: ~
                     calls and time of each, counted by wrapping them for this evaluation only ~
                     (unwrapped now); calls the compiler made direct or inline are not counted.~%~A"
                result
                (ecase profiler
                  (:backend (format nil "the ~A backend's profiler" (backend-name)))
                  (:metering (format nil "~A's metering" (backend-name))))
                (length names) (mapcar #'package-name packages)
                (let ((text (string-right-trim '(#\Space #\Tab #\Newline) (string-left-trim '(#\Newline) report))))
                  (if (plusp (length text))
                      (cap text 3000 "profile")
                      "No profiled function was called.")))))))


;;;; The tool

(define-tool "profile_eval" (&key form package packages)
  "Evaluate FORM under a profiler: SBCL's statistical one, unless
PACKAGES are named or on another Lisp, deterministic of the functions of
PACKAGES (default: the form's package)."
  (let* ((package (tool-package package))
         (text (nonblank form "form" "one or more Lisp forms"))
         (named (remove-duplicates
                 (mapcar (lambda (name)
                           (resolve-package (nonblank name "packages" "package names")))
                         (if (listp packages) packages (list packages))))))
    (if (and (null named) (ensure-sprof))
        (statistical-profile text package)
        (deterministic-profile text package (or named (list package))))))
