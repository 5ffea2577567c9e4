;;;; guard.lisp --- running code the agent asked for, guarded.
;;;
;;; User code runs under RUN-USER-CODE, which
;;;
;;;  - captures *STANDARD-OUTPUT*, *ERROR-OUTPUT* and *TRACE-OUTPUT*, up
;;;    to *OUTPUT-LIMIT* characters (a capped stream, so a printing loop
;;;    cannot fill the heap), and gives it an empty *STANDARD-INPUT* (a
;;;    READ-LINE must fail, not wait for the user's REPL);
;;;  - traps every serious condition and every entry into the debugger
;;;    (BREAK, INVOKE-DEBUGGER), recording type, message and backtrace,
;;;    so the user's debugger never pops up;
;;;  - interrupts the code after a timeout or at a cancel
;;;    (CALL-WITH-TIMEOUT, interrupt.lisp): the evaluating thread records
;;;    where it was and throws out of the user code.  Unwinding runs
;;;    UNWIND-PROTECT cleanups and releases locks, so the image stays
;;;    usable.
;;;
;;; CALL-TOOL (protocol.lisp, loaded after this file) binds the specials
;;; below for each call and runs every tool but the evaluating ones
;;; under CALL-GUARDING-USER-CODE.

(in-package #:sly-agent-q)

;;;; What the current call binds

(defvar *call-timeout* nil
  "The TIMEOUT of the current CALL-TOOL, in seconds, or NIL.")

(defvar *call-id* nil
  "The :CALL-ID of the current CALL-TOOL, or NIL (see CANCEL-CALL).")

(defvar *in-agent-code* nil
  "True while code the agent asked for runs in this thread (see
WRAP-AGENT-THREAD-FUNCTION).")

(defvar *current-evaluation* nil
  "The serial of the CALL-TOOL running in this thread.")

(defvar *output-limit* 4000
  "The most characters of printed output an evaluation keeps.")

(defparameter *backtrace-limit* 25
  "The most frames a recorded backtrace keeps.")

(defparameter *backtrace-shown* 12
  "The most frames an error result shows (get_last_error shows all kept).")

(defvar *state-lock* nil
  "Guards the state tools share across threads: the running calls, the
history and the last error.")

(defun call-with-state-lock (function)
  (unless *state-lock*
    (setf *state-lock* (make-backend-lock "sly-agent-q state")))
  (call-with-backend-lock *state-lock* function))

;;;; The debugger trap

(defun call-with-debugger-trap (hook function)
  "Call FUNCTION with HOOK (taking a condition) as the debugger.
The backend binds *DEBUGGER-HOOK* and, where the implementation has
one, its own hook that even BREAK and INVOKE-DEBUGGER honour (e.g.
SB-EXT:*INVOKE-DEBUGGER-HOOK*); without a backend, *DEBUGGER-HOOK*
alone is bound.  HOOK must not return normally."
  (let ((debugger-hook (lambda (condition old-hook)
                         (declare (ignore old-hook))
                         (funcall hook condition))))
    (if (backend-implemented-p "CALL-WITH-DEBUGGER-HOOK")
        (bcall "CALL-WITH-DEBUGGER-HOOK" debugger-hook function)
        (let ((*debugger-hook* debugger-hook)
              ;; BREAK binds *DEBUGGER-HOOK* to NIL; SBCL's own hook
              ;; is consulted first by INVOKE-DEBUGGER.
              #+sbcl (sb-ext:*invoke-debugger-hook* debugger-hook))
          (funcall function)))))

;;;; Backtraces

(defparameter *machinery-frame-markers*
  '("(ERROR " "(CERROR " "(SIGNAL " "(WARN " "(BREAK" "(INVOKE-DEBUGGER "
    "(SB-KERNEL:" "(SB-KERNEL::" "(SB-INT:" "(SB-DEBUG:" "(SB-DEBUG::"
    "(SB-THREAD:" "(SB-THREAD::" "((FLET SB-THREAD::" "((FLET SB-UNIX::" "((LAMBDA () :IN SB-THREAD"
    "(SB-UNIX:" "(SB-UNIX::" "(SB-SYS:" "(SB-IMPL::" "(\"foreign function"
    "((FLET \"WITHOUT-INTERRUPTS" "((FLET SB-KERNEL::" "(SB-DI:" "(SB-DI::"
    "(\"bogus stack frame\"")
  "Beginnings of printed frames that belong to the condition system,
signal handling or thread interruption: dropped from the top of a
backtrace, where they sit above the user's frames.")

(defun our-frame-p (text)
  "True for frames of sly-agent-q or of the SLYNK/SWANK backend."
  (or (search "SLY-AGENT-Q" text)
      (search "SWANK" text)
      (search "SLYNK" text)))

(defun anonymous-frame-p (text)
  "True for the frame of an anonymous function, ours or the user's."
  (or (eql 0 (search "#:LAMBDA" text))
      (eql 0 (search "((LAMBDA " text))))

(defun machinery-frame-p (text)
  (some (lambda (marker)
          (and (>= (length text) (length marker))
               (string= marker text :end2 (length marker))))
        *machinery-frame-markers*))

(defun loader-frame-p (text)
  "True for the frames of LOAD running a fasl, or of the compiler,
below the user's code (the compiler's macroexpansion and compile-time
evaluation of the user's forms, the loader's top-level forms)."
  (some (lambda (marker)
          (and (>= (length text) (length marker))
               (string= marker text :end2 (length marker))))
        '("(SB-FASL::" "((LAMBDA NIL :IN SB-FASL::" "((LAMBDA () :IN SB-FASL::"
          "(SB-C::" "((FLET SB-C::" "((LAMBDA (SB-KERNEL:FORM" "(COMPILE-FILE ")))

(defun frame-text (frame)
  ;; ECL's backend frames print their function with PRINC (no package,
  ;; no arguments): name it fully qualified, so our own frames are known.
  #+ecl
  (let ((head (and (consp frame) (first frame))))
    (when head
      (return-from frame-text
        (or (ignore-errors
             (let ((*package* (find-package "KEYWORD")))
               (prin1-to-string (if (functionp head)
                                    (or (si:compiled-function-name head) head)
                                    head))))
            "#<frame not printable>"))))
  (handler-case
      (let ((*print-length* 8)
            (*print-level* 4)
            (*print-pretty* nil)
            (*print-circle* t)
            (*print-readably* nil))
        (first-line (with-output-to-string (out) (bcall "PRINT-FRAME" frame out)) 240))
    (trappable-condition () "#<frame not printable>")))

(defparameter *backtrace-seconds* 2
  "The most seconds printing a backtrace may take: frames show their
arguments, whose PRINT-OBJECT methods are user code and may not return.")

(defun print-frames-bounded (frames)
  "The texts of FRAMES, printed within *BACKTRACE-SECONDS*; a frame
that could not be printed in time ends the list with a marker."
  (let ((texts '()))
    (when (let ((*call-id* nil))
            (call-with-interrupts-allowed
             (lambda ()
               (call-with-timeout *backtrace-seconds*
                                  (lambda () (dolist (frame frames) (push (frame-text frame) texts)))
                                  (lambda () nil)))))
      (push "#<frame not printable in time: a PRINT-OBJECT method does not return>" texts))
    (nreverse texts)))

(defun call-with-stack-saved (function)
  "Call FUNCTION where the backend can see the current stack.  ABCL's
backends read the stack ABCL saves on entering its debugger, and a
handler is not in the debugger: there it is saved here."
  #+abcl (let ((sys::*saved-backtrace* (rest (sys:backtrace)))) (funcall function))
  #-abcl (funcall function))

(defun capture-backtrace (&optional (limit *backtrace-limit*))
  "The frames of the user's code on the current stack, innermost first,
as strings: frames of ours and of the signalling machinery above it are
dropped, and so is everything below the code we evaluated.  NIL if the
backend cannot compute a backtrace."
  (when (and (backend-implemented-p "CALL-WITH-DEBUGGING-ENVIRONMENT")
             (backend-implemented-p "COMPUTE-BACKTRACE"))
    (handler-case
        (let ((texts (call-with-stack-saved
                      (lambda ()
                        (bcall "CALL-WITH-DEBUGGING-ENVIRONMENT"
                               (lambda ()
                                 (print-frames-bounded (bcall "COMPUTE-BACKTRACE" 0 200))))))))
          ;; Above the user's code: our handler, the backend, the signal.
          ;; ECL names our anonymous functions as it names the user's
          ;; (#:LAMBDA60), so the top block of ours, the signal's and
          ;; anonymous frames is cut after its last frame of ours.
          (let ((last-ours nil))
            (loop for text in texts
                  for i from 0
                  while (or (our-frame-p text) (machinery-frame-p text) (anonymous-frame-p text))
                  when (our-frame-p text) do (setf last-ours i))
            (when last-ours (setf texts (nthcdr (1+ last-ours) texts))))
          (loop while (and texts (or (our-frame-p (first texts))
                                     (machinery-frame-p (first texts))))
                do (pop texts))
          ;; Below it: our evaluation loop (or the loader running a
          ;; compiled file) and whatever called CALL-TOOL.
          (let ((end (or (position-if (lambda (text) (or (our-frame-p text) (loader-frame-p text)))
                                      texts :start (min 1 (length texts)))
                         (length texts))))
            (subseq texts 0 (min end limit))))
      (trappable-condition () nil))))

(defun format-backtrace (frames &optional (limit *backtrace-shown*))
  (with-output-to-string (out)
    (loop for frame in frames
          for i below limit
          do (format out "  ~D: ~A~%" i frame))
    (when (> (length frames) limit)
      (format out "  ... ~D more frames (get_last_error shows up to ~D)~%"
              (- (length frames) limit) *backtrace-limit*))))


;;;; Threads the agent's code starts
;;;
;;; A thread created while agent code runs (or by such a thread) runs
;;; its function under our debugger trap: an error that nobody handles
;;; is recorded, the thread ends, and the error shows in the result of
;;; the call (or of the next one) instead of in the user's debugger.

(defvar *thread-errors* '()
  "Errors of agent threads not yet reported, newest first: plists with
:THREAD :TYPE :MESSAGE :BACKTRACE :STARTED-BY.")

(defparameter *thread-errors-kept* 10
  "The most unreported thread errors kept.")

(defun record-thread-error (condition started-by)
  (let ((entry (list :thread (thread-label (ignore-errors (bcall "CURRENT-THREAD")))
                     :type (condition-type-label condition)
                     :message (first-line (condition-message condition) 300)
                     :backtrace (ignore-errors (capture-backtrace 5))
                     :started-by started-by)))
    (call-with-state-lock
     (lambda ()
       (push entry *thread-errors*)
       (when (> (length *thread-errors*) *thread-errors-kept*)
         (setf *thread-errors* (subseq *thread-errors* 0 *thread-errors-kept*)))))))

(defun wrap-agent-thread-function (function)
  "FUNCTION, or, when agent code is creating the thread, FUNCTION run
under the trap described above."
  (if (not *in-agent-code*)
      function
      (let ((started-by *current-evaluation*))
        (lambda (&rest args)
          (let ((*in-agent-code* t)
                (*current-evaluation* started-by)
                (tag (list 'agent-thread)))
            (catch tag
              (call-with-debugger-trap
               (lambda (condition)
                 (ignore-errors (record-thread-error condition started-by))
                 (throw tag nil))
               (lambda () (apply function args)))))))))

(defun take-thread-notes ()
  "Notes on the errors of agent threads not reported yet, or NIL."
  (let ((errors (call-with-state-lock
                 (lambda () (shiftf *thread-errors* '())))))
    (when errors
      (with-output-to-string (out)
        (dolist (entry (reverse errors))
          (destructuring-bind (&key thread type message backtrace started-by) entry
            (format out "~&Note: a thread started by ~:[an earlier evaluation~;this evaluation~] ~
                         (thread \"~A\") signalled ~A: ~A~%It was ended; the debugger was not entered.~%"
                    (eql started-by *current-evaluation*) thread type message)
            (when backtrace
              (format out "Its backtrace (innermost first):~%~A" (format-backtrace backtrace 5)))))))))

;; Never let a failure here stop the helpers from loading.
(ignore-errors (install-thread-wrapper 'wrap-agent-thread-function))

;;; ECL: compiled code (Bordeaux Threads, the backends) calls the C
;;; function behind MP:PROCESS-RUN-FUNCTION directly, so thread creation
;;; cannot be wrapped, and a new thread starts with the global bindings
;;; only.  Instead the global EXT:*INVOKE-DEBUGGER-HOOK* (which the
;;; backends set) is wrapped: in a thread the agent's code started it
;;; records the error and ends the thread, elsewhere it passes on to the
;;; hook it wraps.  A thread counts as the agent's when it did not exist
;;; when an agent evaluation began and it fails while that evaluation
;;; runs, or it was still alive when the evaluation ended.  The backend's
;;; own threads (its workers) are never counted.

#+ecl
(progn
  (defvar *agent-evaluations* '()
    "Running agent evaluations: (EVALUATION-ID . THREADS-THAT-EXISTED-BEFORE).")

  (defvar *agent-threads* (make-hash-table :test 'eq :weakness :key)
    "Threads started by agent code that outlived their evaluation => its id.")

  (defvar *debugger-hook-wrapper* nil
    "The global debugger hook we installed, to see whether it is still ours.")

  (defun backend-thread-p (thread)
    (let ((name (string-downcase (thread-label thread))))
      (or (member name '("worker" "repl-thread" "reader-thread" "control-thread"
                         "auto-flush-thread" "sly-agent-q timeout watcher")
                  :test #'string=)
          (some (lambda (prefix) (eql 0 (search prefix name)))
                '("swank" "slynk" "sly-" "slime")))))

  (defun agent-thread-started-by (thread)
    "The evaluation that started THREAD, or NIL when it is not the agent's."
    (call-with-state-lock
     (lambda ()
       (or (gethash thread *agent-threads*)
           (and (not (backend-thread-p thread))
                (car (find-if (lambda (entry) (not (member thread (cdr entry))))
                              *agent-evaluations*)))))))

  ;; The global value, whatever this thread has bound (the backends
  ;; bind the hook in their request threads); no thread is started for
  ;; it (see ECL's shared watcher in interrupt.lisp for why).
  (defun global-invoke-debugger-hook ()
    (let ((symbol 'ext:*invoke-debugger-hook*))
      (ffi:c-inline (symbol) (:object) :object "(#0)->symbol.value" :one-liner t)))

  (defun (setf global-invoke-debugger-hook) (value)
    (let ((symbol 'ext:*invoke-debugger-hook*))
      (ffi:c-inline (symbol value) (:object :object) :object
                    "(#0)->symbol.value = #1" :one-liner t)))

  (defun ensure-agent-thread-debugger-hook ()
    "Make the global EXT:*INVOKE-DEBUGGER-HOOK* our wrapper of whatever it is."
    (let ((old (global-invoke-debugger-hook)))
      (unless (and old (eq old *debugger-hook-wrapper*))
        (let ((wrapper (lambda (condition hook)
                         (let ((started-by (ignore-errors (agent-thread-started-by mp:*current-process*))))
                           (cond (started-by
                                  (ignore-errors (record-thread-error condition started-by))
                                  (mp:exit-process))
                                 (old (funcall old condition hook)))))))
          (setf *debugger-hook-wrapper* wrapper
                (global-invoke-debugger-hook) wrapper)))))

  (defun call-watching-agent-threads (function)
    "Call FUNCTION (agent code) so that errors of the threads it starts
never reach the user's debugger."
    (ignore-errors (ensure-agent-thread-debugger-hook))
    (let ((entry (cons *current-evaluation* (ignore-errors (bcall "ALL-THREADS")))))
      (call-with-state-lock (lambda () (push entry *agent-evaluations*)))
      (unwind-protect (funcall function)
        (ignore-errors
         (let ((after (bcall "ALL-THREADS")))
           (call-with-state-lock
            (lambda ()
              (setf *agent-evaluations* (remove entry *agent-evaluations*))
              (dolist (thread after)
                (unless (or (member thread (cdr entry)) (backend-thread-p thread)
                            (not (bcall "THREAD-ALIVE-P" thread)))
                  (setf (gethash thread *agent-threads*) (car entry))))))))))))

;; Elsewhere (SBCL) new threads are wrapped where they are made.
#-ecl
(defun call-watching-agent-threads (function) (funcall function))


;;;; Running user code

(defstruct (outcome (:constructor make-outcome ()))
  "What happened when user code ran."
  (output "")
  ;; When a serious condition or the debugger stopped it:
  (condition nil)
  (type nil)
  (message nil)
  (backtrace nil)
  ;; When the timeout stopped it:
  (timed-out nil)
  ;; When CANCEL-CALL stopped it:
  (cancelled nil)
  (seconds nil))

(defun call-trapping-conditions (thunk outcome)
  "Call THUNK.  An unhandled serious condition, or any entry into the
debugger, is recorded in OUTCOME and unwinds THUNK.  Returns true if
THUNK finished normally."
  (let ((tag (list 'trapped))
        (finished nil))
    (flet ((trap (condition)
             (setf (outcome-condition outcome) condition
                   (outcome-type outcome) (condition-type-label condition)
                   (outcome-message outcome) (condition-message condition)
                   ;; A tool's own error needs no backtrace.
                   (outcome-backtrace outcome) (unless (typep condition '(or tool-error tool-failure))
                                                 (capture-backtrace)))
             (throw tag nil)))
      (catch tag
        (call-with-debugger-trap
         #'trap
         (lambda ()
           ;; Handlers inside THUNK (COMPILE-FILE's among them) run
           ;; first; we only see what none of them handled.
           (handler-bind ((trappable-condition #'trap))
             (funcall thunk)
             (setf finished t))))))
    finished))

(defun call-with-terminal-io (io function)
  "Call FUNCTION with *DEBUG-IO* and *TERMINAL-IO* bound to IO, except on
CLISP: a stack overflow there is no condition but a RESET, whose top
level then reads *DEBUG-IO*; reading the end of IO, it quit, and the
user's image was gone.  CLISP's agent code that reads the terminal waits
until the time limit instead."
  #+clisp (progn io (funcall function))
  #-clisp (let ((*debug-io* io) (*terminal-io* io)) (funcall function)))

(defun run-user-code (thunk &key (timeout *call-timeout*))
  "Run THUNK, user code, with output captured, conditions trapped and
TIMEOUT seconds allowed.  Returns an OUTCOME; when the call was
cancelled, signals a TOOL-FAILURE saying so instead."
  (let* ((outcome (make-outcome))
         (sink (make-sink *output-limit*))
         (stream (make-capture-stream sink))
         (empty (make-string-input-stream ""))
         (io (make-two-way-stream empty stream))
         (how (call-with-timeout
               timeout
               (lambda ()
                 (let ((*standard-output* stream)
                       (*error-output* stream)
                       (*trace-output* stream)
                       (*standard-input* empty)
                       (*query-io* io)
                       (*in-agent-code* t))
                   (call-with-terminal-io
                    io
                    (lambda ()
                      (call-watching-agent-threads
                       (lambda () (call-trapping-conditions thunk outcome)))))))
               (lambda ()
                 (setf (outcome-backtrace outcome) (capture-backtrace))))))
    (setf (outcome-timed-out outcome) (eq how :timeout)
          (outcome-cancelled outcome) (eq how :cancelled))
    (setf (outcome-seconds outcome) timeout)
    (setf (outcome-output outcome) (finish-capture stream sink))
    (when (outcome-cancelled outcome)
      (error 'tool-failure
             :message "The call was cancelled: its evaluation was interrupted. Side effects made before the interruption remain."))
    outcome))


(defun call-guarding-user-code (what function &key (why "printing a value, or a reader macro reading code, may not terminate"))
  "Call FUNCTION, which may run user code incidentally (PRINT-OBJECT
methods of values it shows), under the timeout and condition trap of
RUN-USER-CODE; return its value or FAIL saying what went wrong, and,
on a timeout, WHY it may have run so long.  The tool's own TOOL-ERRORs
and TOOL-FAILUREs pass through unchanged."
  (let* ((value nil)
         (outcome (run-user-code (lambda () (setf value (funcall function))))))
    (cond ((outcome-timed-out outcome)
           (fail "~A timed out after ~A s and was interrupted (~A)."
                 what (outcome-seconds outcome) why))
          ((typep (outcome-condition outcome) '(or tool-error tool-failure))
           (error (outcome-condition outcome)))
          ((outcome-condition outcome)
           (fail "~A failed: ~A: ~A" what (outcome-type outcome) (outcome-message outcome)))
          (t value))))

(defun call-reading-code (function)
  "Call FUNCTION, which reads code with the image's readtable, bounded as
user code is: a reader macro is user code, and one that never returns
held the tool's thread (on CLISP, the whole image) with no time limit.
Returns FUNCTION's values."
  (values-list (call-guarding-user-code "Reading the code" (lambda () (multiple-value-list (funcall function)))
                                        :why "a reader macro of the current readtable may not terminate")))
