;;;; debugger.lisp --- the user's debugger, seen from inside its thread.
;;;
;;; The user's debugger (SLY's sly-db, SLIME's sldb) runs in the thread
;;; that hit the error: SLYNK/SWANK's debugger loop for that thread,
;;; with the frames of its debugging environment.  The backend's frame
;;; facilities (COMPUTE-BACKTRACE, FRAME-LOCALS, EVAL-IN-FRAME...) work
;;; only there, so Emacs sends these operations to that thread, with
;;; the thread and level its debugger buffer knows, as the debugger
;;; buffer's own requests are sent (lisp-elisp/sly-agent-q-debugger.el).
;;;
;;; They are not image tools of the catalog (those run in a worker
;;; thread of their own): DEBUGGER-CALL runs them under CALL-TOOL's
;;; guard, so an error, a BREAK or a timeout in them gives an error
;;; result and never a nested debugger level; every value is printed
;;; within *PRINT-SECONDS*, so a PRINT-OBJECT that never returns leaves
;;; the debugger as it was.

(in-package #:sly-agent-q)

(defvar *debugger-operations* (make-hash-table :test 'equal)
  "Name => TOOL: the operations DEBUGGER-CALL runs in a debugged thread.")

(defmacro define-debugger-operation (name lambda-list &body body)
  "Like DEFINE-TOOL, for an operation of DEBUGGER-CALL."
  `(let ((*tools* *debugger-operations*))
     (define-tool ,name ,lambda-list ,@body)))

(defun debugger-call (name args &key package timeout call-id)
  "Run the debugger operation NAME with ARGS (as CALL-TOOL's) in this
thread, which must be in the user's debugger; CALL-ID names it for
CANCEL-CALL.  Returns CALL-TOOL's result plist; never signals and never
enters the debugger."
  (let ((*tools* *debugger-operations*))
    (call-tool name args :package package :timeout timeout :call-id call-id)))

(pushnew "eval_in_frame" *tools-guarding-themselves* :test #'string=)

(defparameter *print-seconds* 2
  "The most seconds printing one value for the model may take.")

(defun print-bounded (object &key (limit 300))
  "OBJECT printed as PRINT-VALUE does, within *PRINT-SECONDS*; a
placeholder when its PRINT-OBJECT method does not return in time."
  (let ((text nil))
    (if (let ((*call-id* nil))
          (call-with-interrupts-allowed
           (lambda ()
             (call-with-timeout *print-seconds*
                                (lambda () (setf text (print-value object :limit limit :pretty nil)))
                                (lambda () nil)))))
        (format nil "#<~A not printable within ~D s: its PRINT-OBJECT does not return>"
                (or (ignore-errors (let ((*package* (find-package "KEYWORD")))
                                     (prin1-to-string (type-of object))))
                    "object")
                *print-seconds*)
        text)))

(defparameter *frames-seconds* 10
  "The most seconds printing a backtrace's frames may take in all;
later frames show their function only.")

(defun frame-text-bounded (frame)
  "FRAME printed as backtraces print it, within *PRINT-SECONDS*: its
arguments' PRINT-OBJECT methods are user code."
  (let ((text nil))
    (if (let ((*call-id* nil))
          (call-with-interrupts-allowed
           (lambda ()
             (call-with-timeout *print-seconds*
                                (lambda () (setf text (frame-text frame)))
                                (lambda () nil)))))
        (format nil "(~A ...) [arguments not printable in time: a PRINT-OBJECT does not return]"
                (or (frame-function-name frame) "#<unknown function>"))
        text)))

(defun frame-function-name (frame)
  "The name of FRAME's function, printed without its arguments, or NIL."
  (declare (ignorable frame))
  #+sbcl (ignore-errors
          (with-model-printing (*package*)
            (prin1-to-string (sb-di:debug-fun-name (sb-di:frame-debug-fun frame)))))
  ;; The ECL backends' frames are lists headed by the function or its name.
  #+ecl (ignore-errors
         (let ((head (and (consp frame) (first frame))))
           (when head
             (with-model-printing (*package*)
               (prin1-to-string (if (functionp head)
                                    (or (si:compiled-function-name head) head)
                                    head))))))
  #-(or sbcl ecl) nil)

(defun frame-name-package (frame)
  "The package of the symbol naming FRAME's function, or NIL: where a
form about that frame is read when the backend has no FRAME-PACKAGE
\(SWANK's and SLYNK's ECL backends), so that its locals are named as in
its source."
  (declare (ignorable frame))
  (let ((name #+sbcl (ignore-errors (sb-di:debug-fun-name (sb-di:frame-debug-fun frame)))
              #+ecl (ignore-errors
                     (let ((head (and (consp frame) (first frame))))
                       (if (functionp head) (si:compiled-function-name head) head)))
              #-(or sbcl ecl) nil))
    (when (and (consp name) (eq (first name) 'setf)) (setf name (second name)))
    (let ((package (and name (symbolp name) (symbol-package name))))
      (and package
           (not (member package (mapcar #'find-package '("COMMON-LISP" "KEYWORD"))))
           package))))

(defun need-debugging-backend ()
  (unless (and (backend-implemented-p "COMPUTE-BACKTRACE")
               (backend-implemented-p "FRAME-LOCALS"))
    (fail "This Lisp's ~A backend has no debugger frame facilities."
          (or (backend-name) "SLYNK/SWANK"))))

(defun frame-at (index)
  "The frame INDEX of the debugger, or a FAIL."
  (need-debugging-backend)
  (unless (and (integerp index) (>= index 0))
    (fail "The frame must be a frame number; debugger_state lists them."))
  (let* ((frames (bcall "COMPUTE-BACKTRACE" 0 (1+ index)))
         (frame (and (> (length frames) index) (nth index frames))))
    (unless frame
      (fail "There is no frame ~D in this debugger; debugger_state lists the frames." index))
    frame))

(define-debugger-operation "backtrace" (&key start count)
  "Frames START (default 0) to START+COUNT (default 15), each with its
function and source location."
  (need-debugging-backend)
  (let* ((start (or start 0))
         (count (or count 15))
         (frames (bcall "COMPUTE-BACKTRACE" start (+ start count 1)))
         (more (> (length frames) count))
         (frames (subseq frames 0 (min count (length frames))))
         (deadline (+ (get-internal-real-time) (* *frames-seconds* internal-time-units-per-second)))
         (texts (mapcar (lambda (frame)
                          (if (< (get-internal-real-time) deadline)
                              (frame-text-bounded frame)
                              (format nil "(~A ...) [not printed: the frames took ~D s already]"
                                      (or (frame-function-name frame) "#<unknown function>")
                                      *frames-seconds*)))
                        frames)))
    (with-output-to-string (out)
      (loop for text in texts
            for i from start
            do (format out "  ~D: ~A~%" i text)
               (let ((location (and (backend-implemented-p "FRAME-SOURCE-LOCATION")
                                    (ignore-errors (bcall "FRAME-SOURCE-LOCATION" i)))))
                 (when (and location (not (eq (first location) :error)))
                   (format out "     at ~A~%" (format-location location)))))
      (when more
        (format out "  ... more frames (ask with a larger frames count)~%")))))

(define-debugger-operation "frame_locals" (&key frame)
  "The local variables of FRAME, each value printed within *PRINT-SECONDS*."
  (frame-at frame)
  (let ((locals (bcall "FRAME-LOCALS" frame)))
    (with-output-to-string (out)
      (format out "Frame ~D: ~A~%" frame (frame-text-bounded (frame-at frame)))
      (if (null locals)
          (format out "No local variables are known in this frame (compiled without debug information?).~%")
          (loop for local in locals
                for i from 0
                do (format out "  ~D ~A = ~A~%"
                           i
                           (let ((name (getf local :name)))
                             (if (symbolp name) (symbol-label name *package*) (princ-value name)))
                           (print-bounded (getf local :value))))))))

(define-debugger-operation "eval_in_frame" (&key frame form)
  "Evaluate FORM in FRAME's lexical environment; print its values."
  (unless (backend-implemented-p "EVAL-IN-FRAME")
    (fail "This Lisp's backend cannot evaluate in a frame."))
  (let* ((object (frame-at frame))
         (package (or (ignore-errors (and (backend-implemented-p "FRAME-PACKAGE")
                                          (bcall "FRAME-PACKAGE" frame)))
                      (frame-name-package object)
                      (tool-package nil)))
         (form (let ((*package* package)
                     (*read-eval* nil)
                     (text (nonblank form "form" "one Lisp form")))
                 (call-reading-code
                  (lambda ()
                    (handler-case (read-from-string text)
                      (error (c) (fail "Cannot read the form: ~A" (condition-message c))))))))
         (values '()))
    (let ((outcome (run-user-code (lambda ()
                                    (setf values (multiple-value-list
                                                  (bcall "EVAL-IN-FRAME" form frame)))))))
      (cond ((outcome-timed-out outcome)
             (fail "The evaluation in frame ~D timed out after ~A s and was interrupted."
                   frame (outcome-seconds outcome)))
            ((outcome-condition outcome)
             (fail "The evaluation in frame ~D signalled ~A: ~A"
                   frame (outcome-type outcome) (outcome-message outcome)))
            (t
             (with-output-to-string (out)
               (let ((*package* package))
                 (if values
                     (loop for value in values
                           do (format out "~A~%" (print-bounded value :limit 2000)))
                     (format out "No values.~%")))
               (let ((output (outcome-output outcome)))
                 (when (plusp (length output))
                   (format out "Output:~%~A~%" output)))))))))
