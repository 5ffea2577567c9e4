;;;; eval.lisp --- running the model's code: eval_form, eval_in_package,
;;;; get_last_error, get_repl_history.
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
;;;  - interrupts the code after a timeout: a watcher thread, spawned
;;;    through the backend, interrupts the evaluating thread, which
;;;    records where it was and throws out of the user code.  Unwinding
;;;    runs UNWIND-PROTECT cleanups and releases locks, so the image
;;;    stays usable.

(in-package #:sly-agent-q)

(defvar *output-limit* 4000
  "The most characters of printed output an evaluation keeps.")

(defvar *history-limit* 100
  "The most entries the REPL history of these tools keeps.")

(defparameter *backtrace-limit* 25
  "The most frames a recorded backtrace keeps.")

(defparameter *backtrace-shown* 12
  "The most frames an error result shows (get_last_error shows all kept).")

(defvar *history* '()
  "Recent evaluations through these tools, newest first: plists with
:ID :TOOL :PACKAGE :FORM :RESULT :OK :TIME.")

(defvar *history-counter* 0
  "The id of the most recent history entry.")

(defvar *last-error* nil
  "The last error of eval_form, eval_in_package or compile_form: a plist
with :TOOL :PACKAGE :FORM :TYPE :MESSAGE :WHILE :BACKTRACE :OUTPUT :ID.")

(defvar *state-lock* nil
  "Guards *HISTORY* and *LAST-ERROR*: tools may run in several threads.")

(defun call-with-state-lock (function)
  (unless *state-lock*
    (setf *state-lock* (make-backend-lock "sly-agent-q state")))
  (call-with-backend-lock *state-lock* function))


;;;; Captured output

(defstruct (sink (:constructor make-sink (limit)))
  "Where captured output goes: the first LIMIT characters are kept, the
rest only counted."
  (limit 0)
  (buffer (make-string-output-stream))
  (kept 0)
  (dropped 0))

(defun sink-write (sink string)
  (let* ((room (max 0 (- (sink-limit sink) (sink-kept sink))))
         (n (length string))
         (keep (min n room)))
    (when (plusp keep)
      (write-string string (sink-buffer sink) :end keep)
      (incf (sink-kept sink) keep))
    (incf (sink-dropped sink) (- n keep))))

(defun sink-text (sink)
  "The captured text, with a note if some was dropped."
  (let ((text (get-output-stream-string (sink-buffer sink))))
    (if (plusp (sink-dropped sink))
        (format nil "~A~%[... output truncated: ~D more characters not kept]"
                text (sink-dropped sink))
        text)))

(defun make-capture-stream (sink)
  "An output stream writing into SINK.  The backend's stream calls us
with chunks, so nothing beyond the limit is ever kept; without one, a
string stream whose text is cut afterwards."
  (or (and (backend-implemented-p "MAKE-OUTPUT-STREAM")
           (ignore-errors
            (bcall "MAKE-OUTPUT-STREAM" (lambda (string) (sink-write sink string)))))
      (sink-buffer sink)))

(defun finish-capture (stream sink)
  "Flush STREAM into SINK; return the captured text."
  (unless (eq stream (sink-buffer sink))
    (ignore-errors (finish-output stream)))
  (sink-text sink))


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

(defun capture-backtrace (&optional (limit *backtrace-limit*))
  "The frames of the user's code on the current stack, innermost first,
as strings: frames of ours and of the signalling machinery above it are
dropped, and so is everything below the code we evaluated.  NIL if the
backend cannot compute a backtrace."
  (when (and (backend-implemented-p "CALL-WITH-DEBUGGING-ENVIRONMENT")
             (backend-implemented-p "COMPUTE-BACKTRACE"))
    (handler-case
        (let ((texts (bcall "CALL-WITH-DEBUGGING-ENVIRONMENT"
                            (lambda ()
                              (print-frames-bounded (bcall "COMPUTE-BACKTRACE" 0 200))))))
          ;; Above the user's code: our handler, the backend, the signal.
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


;;;; Timeouts and cancellation
;;;
;;; Each guarded evaluation has a STATE, a cons whose car is :RUNNING,
;;; :CANCEL (asked for by CANCEL-CALL), :TIMED-OUT, :CANCELLED or :DONE,
;;; and a watcher thread that interrupts the evaluating thread when the
;;; deadline passes or a cancel is asked for.  Evaluations are recorded
;;; under the id of their call (CALL-TOOL's :CALL-ID), so that a second
;;; request can stop exactly that one and nothing else.

(defvar *running* (make-hash-table :test 'equal)
  "Call id => the STATEs of its guarded evaluations, innermost first.")

(defvar *cancelled-early* '()
  "Ids cancelled before their call started, newest first (bounded).")

(defun note-running (id state)
  (when id
    (call-with-state-lock (lambda () (push state (gethash id *running*))))))

(defun note-finished (id state)
  (when id
    (call-with-state-lock
     (lambda ()
       (let ((states (remove state (gethash id *running*))))
         (if states
             (setf (gethash id *running*) states)
             (remhash id *running*)))))))

(defun cancel-call (id)
  "Stop the evaluation of the call ID (CALL-TOOL's :CALL-ID): its thread
is interrupted and unwinds, and the call answers that it was cancelled.
Returns T if an evaluation of that call was running; otherwise NIL, and
the call, should it arrive later, does not run.  Never signals."
  (ignore-errors
   (let ((id (if (stringp id) id (princ-to-string id))))
     (call-with-state-lock
      (lambda ()
        (let ((state (first (gethash id *running*))))
          (cond ((and state (eq (car state) :running))
                 (setf (car state) :cancel)
                 t)
                (state t)
                (t
                 (push id *cancelled-early*)
                 (when (> (length *cancelled-early*) 100)
                   (setf *cancelled-early* (subseq *cancelled-early* 0 100)))
                 nil))))))))

(defun take-early-cancel (id)
  "True (once) if ID was cancelled before its call started."
  (and id
       (call-with-state-lock
        (lambda ()
          (when (member id *cancelled-early* :test #'equal)
            (setf *cancelled-early* (remove id *cancelled-early* :test #'equal))
            t)))))

(defun watch-deadline (state seconds worker interrupt)
  "In the watcher thread: wait until STATE is no longer :RUNNING or
:CANCEL; interrupt WORKER with INTERRUPT when SECONDS (NIL: no limit)
have passed or a cancel was asked for."
  (handler-case
      (let ((deadline (and seconds
                           (+ (get-internal-real-time)
                              (round (* seconds internal-time-units-per-second))))))
        (loop while (member (car state) '(:running :cancel))
              do (when (or (eq (car state) :cancel)
                           (and deadline (>= (get-internal-real-time) deadline)))
                   (bcall "INTERRUPT-THREAD" worker interrupt)
                   (return))
                 (sleep 0.05)))
    ;; Never let the user's debugger pop up in our watcher thread.
    (serious-condition () nil)))

(defun call-with-timeout (seconds thunk on-timeout)
  "Call THUNK.  If it is still running after SECONDS (NIL: no limit), or
CANCEL-CALL asks for the current call to stop, call ON-TIMEOUT in
THUNK's thread, at the point where it was interrupted, then unwind out
of THUNK.  Returns NIL, :TIMEOUT or :CANCELLED.  Without thread support
in the backend, SBCL's own timer is used and cancelling is not
supported; on CLISP a SIGINT from a watcher process stops it
\(CALL-WITH-SIGNAL-TIMEOUT); elsewhere THUNK runs unbounded."
  (cond
    #+ecl
    ((threads-available-p)
     (call-with-shared-watcher seconds thunk on-timeout))
    ((threads-available-p)
     (let* ((state (list :running))
            (tag (list 'timeout))
            (id *call-id*)
            (how :timeout)
            (worker (bcall "CURRENT-THREAD")))
       (catch tag
         (unwind-protect
              (progn
                (note-running id state)
                (let ((*in-agent-code* nil))
                  (bcall "SPAWN"
                         (lambda ()
                           (watch-deadline
                            state seconds worker
                            (lambda ()
                              ;; Runs in the worker.  The check is made
                              ;; here, in the worker itself, so an
                              ;; interrupt arriving after THUNK finished
                              ;; does nothing.
                              (let ((now (car state)))
                                (when (member now '(:running :cancel))
                                  (setf (car state) (if (eq now :cancel) :cancelled :timed-out))
                                  (ignore-errors (funcall on-timeout))
                                  (throw tag nil))))))
                         :name "sly-agent-q timeout watcher"))
                (funcall thunk)
                (setf how nil))
           (when (eq (car state) :cancelled) (setf how :cancelled))
           (setf (car state) :done)
           (note-finished id state)))
       how))
    ((null seconds)
     (funcall thunk)
     nil)
    #+sbcl
    (t
     (handler-case (progn (sb-ext:with-timeout seconds (funcall thunk)) nil)
       (sb-ext:timeout () (ignore-errors (funcall on-timeout)) :timeout)))
    #+clisp
    (t (call-with-signal-timeout seconds thunk on-timeout))
    #-(or sbcl clisp)
    (t
     (funcall thunk)
     nil)))

#+ecl
(progn
  ;; ECL's segmentation violations came from the watcher threads, one
  ;; started and ended per evaluation: a signal handled by a thread that
  ;; is ending finds its environment gone ("pthread_getspecific()
  ;; failed" in ECL's handler, or a write to the environment while its
  ;; interrupts are disabled for the exit).  Signals are frequent while
  ;; systems compile (the collector's, the C compiler's SIGCHLD), so on
  ;; ECL one long-lived watcher serves every evaluation.
  (defvar *watched* '()
    "(STATE DEADLINE WORKER INTERRUPT) of the evaluations being watched.")

  (defvar *shared-watcher* nil
    "The long-lived watcher thread, or NIL before the first evaluation.")

  (defun watch-all ()
    "The shared watcher's loop: interrupt each watched worker whose
deadline passed or whose cancel was asked for; forget finished ones."
    (loop
      (handler-case
          (let ((now (get-internal-real-time))
                (due '()))
            (call-with-state-lock
             (lambda ()
               (setf *watched*
                     (remove-if (lambda (entry)
                                  (destructuring-bind (state deadline worker interrupt) entry
                                    (cond ((not (member (car state) '(:running :cancel))) t)
                                          ((or (eq (car state) :cancel)
                                               (and deadline (>= now deadline)))
                                           (push (cons worker interrupt) due)
                                           t))))
                                *watched*))))
            (loop for (worker . interrupt) in due
                  do (ignore-errors (bcall "INTERRUPT-THREAD" worker interrupt))))
        ;; Never let the user's debugger pop up in our watcher thread.
        (serious-condition () nil))
      (sleep 0.05)))

  (defun ensure-shared-watcher ()
    (call-with-state-lock
     (lambda ()
       (unless (and *shared-watcher* (bcall "THREAD-ALIVE-P" *shared-watcher*))
         (setf *shared-watcher*
               (let ((*in-agent-code* nil))
                 (bcall "SPAWN" #'watch-all :name "sly-agent-q timeout watcher")))))))

  (defun call-with-shared-watcher (seconds thunk on-timeout)
    "CALL-WITH-TIMEOUT with threads, on ECL: the shared watcher stops THUNK."
    (let* ((state (list :running))
           (tag (list 'timeout))
           (id *call-id*)
           (how :timeout)
           (worker (bcall "CURRENT-THREAD"))
           (deadline (and seconds
                          (+ (get-internal-real-time)
                             (round (* seconds internal-time-units-per-second)))))
           (interrupt (lambda ()
                        ;; Runs in the worker; checked here so that an
                        ;; interrupt arriving after THUNK finished does nothing.
                        (let ((now (car state)))
                          (when (member now '(:running :cancel))
                            (setf (car state) (if (eq now :cancel) :cancelled :timed-out))
                            (ignore-errors (funcall on-timeout))
                            (throw tag nil))))))
      (ensure-shared-watcher)
      (catch tag
        (unwind-protect
             (progn
               (note-running id state)
               (call-with-state-lock
                (lambda () (push (list state deadline worker interrupt) *watched*)))
               (funcall thunk)
               (setf how nil))
          (when (eq (car state) :cancelled) (setf how :cancelled))
          (setf (car state) :done)
          (note-finished id state)))
      how)))

#+clisp
(defun call-with-signal-timeout (seconds thunk on-timeout)
  "CALL-WITH-TIMEOUT where the Lisp has no threads but stops at a
SIGINT, as CLISP does (its \"User break\", what SLIME's interrupt
sends): a watcher process sends this Lisp SIGINT after SECONDS, and
again every 2 seconds until it is killed, which is done as soon as THUNK
returns or has been stopped."
  (let* ((tag (list 'timeout))
         (watcher (ignore-errors
                   (ext:run-program
                    "/bin/sh"
                    :arguments (list "-c" (format nil "echo $$; sleep ~,2F; while kill -INT ~D; do sleep 2; done"
                                                  seconds (os:process-id)))
                    :input nil :output :stream :wait nil)))
         (watcher-pid (and watcher (ignore-errors (parse-integer (read-line watcher nil "")))))
         (fired nil)
         (done nil))
    (unless watcher-pid
      (when watcher (ignore-errors (close watcher)))
      (funcall thunk)
      (return-from call-with-signal-timeout nil))
    (handler-bind ((system::interrupt-condition
                     (lambda (c)
                       (if (or fired done)
                           ;; Sent while stopping, or as THUNK returned:
                           ;; absorbed here, never the user's REPL's.
                           (let ((continue (find-restart 'continue c)))
                             (cond (continue (invoke-restart continue))
                                   ((not done) (throw tag nil))))
                           (progn
                             (setf fired t)
                             ;; A handler runs without itself: the next
                             ;; SIGINT (ON-TIMEOUT printing a value that
                             ;; never prints) needs a handler of its own.
                             (handler-bind ((system::interrupt-condition
                                              (lambda (c)
                                                (declare (ignore c))
                                                (throw tag nil))))
                               (ignore-errors (funcall on-timeout)))
                             (throw tag nil))))))
      (unwind-protect
           (catch tag
             (funcall thunk))
        (setf done t)
        (ignore-errors
         (ext:run-program "/bin/kill" :arguments (list "-KILL" (princ-to-string watcher-pid))
                                      :input nil :output nil :wait t))
        (ignore-errors (close watcher))
        (sleep 0.02)))
    (and fired :timeout)))


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
  ;; it (see the shared watcher above for why).
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
                       (*debug-io* io)
                       (*terminal-io* io)
                       (*in-agent-code* t))
                   (call-watching-agent-threads
                    (lambda () (call-trapping-conditions thunk outcome)))))
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


(defun call-guarding-user-code (what function)
  "Call FUNCTION, which may run user code incidentally (PRINT-OBJECT
methods of values it shows), under the timeout and condition trap of
RUN-USER-CODE; return its value or FAIL saying what went wrong.  The
tool's own TOOL-ERRORs and TOOL-FAILUREs pass through unchanged."
  (let* ((value nil)
         (outcome (run-user-code (lambda () (setf value (funcall function))))))
    (cond ((outcome-timed-out outcome)
           (fail "~A timed out after ~A s and was interrupted (printing a value may not terminate)."
                 what (outcome-seconds outcome)))
          ((typep (outcome-condition outcome) '(or tool-error tool-failure))
           (error (outcome-condition outcome)))
          ((outcome-condition outcome)
           (fail "~A failed: ~A: ~A" what (outcome-type outcome) (outcome-message outcome)))
          (t value))))


;;;; History and the last error

(defun record-history (tool package form result ok)
  "Add an entry to the history; return its id."
  (call-with-state-lock
   (lambda ()
     (let ((id (incf *history-counter*)))
       ;; Capped, so that a hundred big evaluations stay small.
       (push (list :id id :tool tool :package package :form (cap form 4000 "code")
                   :result (cap result 1000 "result") :ok ok :time (get-universal-time))
             *history*)
       (when (> (length *history*) *history-limit*)
         (setf *history* (subseq *history* 0 (max 0 *history-limit*))))
       id))))

(defun record-error (&rest plist &key form &allow-other-keys)
  "Make PLIST the last error."
  (let ((plist (list* :form (and form (cap form 4000 "code")) plist)))
    (call-with-state-lock
     (lambda () (setf *last-error* (list* :time (get-universal-time) plist))))))

(defun values-text (values package)
  "The printed VALUES, for a result."
  (let ((*package* package))
    (case (length values)
      (0 "No values.")
      (1 (format nil "Value: ~A" (print-value (first values))))
      (t (format nil "Values (~D):~%~{~A~^~%~}" (length values)
                 (mapcar (lambda (v) (indent (print-value v) "  ")) values))))))

(defun values-summary (values package)
  "A one-line summary of VALUES, for the history."
  (let ((*package* package))
    (if values
        (format nil "=> ~{~A~^, ~}"
                (mapcar (lambda (v) (first-line (print-value v :limit 300) 200)) values))
        "=> no values")))

;;;; Evaluating the model's code
;;;
;;; EVALUATE-TEXT checks the whole text reads, runs its forms one by
;;; one as user code (RUN-FORMS), and turns the OUTCOME into a result or
;;; a TOOL-FAILURE that says which form failed and in which phase.

(defstruct (evaluation (:constructor make-evaluation (tool text package form-count)))
  "One eval_form or eval_in_package call, and how far it got.  The
slots that track progress are set as the forms run, so that they still
say where it was when a condition or the timeout unwinds it."
  tool
  text
  package
  ;; The number of forms, or NIL when the scan stopped at a reader
  ;; error (which the evaluation will then meet).
  form-count
  (current 0)                           ; the form being read or run, from 1
  (current-start 0)                     ; where it starts in TEXT
  (phase :read)                         ; :read, :eval or :print
  (final-package nil)                   ; *PACKAGE* after the last form
  (values-text nil)
  (summary nil)                         ; for the history
  (outcome nil))

(defun count-evaluable-forms (text)
  "The number of forms of TEXT (NIL if a reader error stops the scan,
to be reported when evaluation gets there), or a FAIL when TEXT is
unbalanced or empty: then nothing runs."
  (multiple-value-bind (spans scan-error scan-start) (scan-forms text)
    (when (typep scan-error 'end-of-file)
      (fail "~A Nothing was evaluated." (unbalanced-message text scan-start (1+ (length spans)))))
    (when (and (null spans) (null scan-error))
      (fail "The code is empty: give one or more Lisp forms."))
    (if scan-error nil (length spans))))

(defun run-forms (evaluation)
  "Read and evaluate the forms of EVALUATION's text one by one, then
print the values of the last, all as user code; return the OUTCOME."
  (let ((text (evaluation-text evaluation))
        (package (evaluation-package evaluation)))
    (run-user-code
     (lambda ()
       (let ((*package* package)
             (position 0)
             (values '()))
         (loop
           (setf position (skip-blank text position))
           (when (>= position (length text)) (return))
           (setf (evaluation-phase evaluation) :read
                 (evaluation-current evaluation) (1+ (evaluation-current evaluation))
                 (evaluation-current-start evaluation) position)
           (multiple-value-bind (form end) (read-from-string text t nil :start position)
             (setf position end
                   (evaluation-phase evaluation) :eval)
             (setf values (multiple-value-list (eval form)))))
         (let ((final-package *package*))
           (setf (evaluation-final-package evaluation) final-package)
           ;; Printing runs the user's PRINT-OBJECT methods: it is user
           ;; code too, under the same timeout.
           (setf (evaluation-phase evaluation) :print
                 (evaluation-values-text evaluation) (with-inspect-ids
                                                      (values-text values final-package) values)
                 (evaluation-summary evaluation) (values-summary values final-package))))))))

(defun evaluation-place (evaluation)
  "Which form EVALUATION was at, for messages."
  (let ((text (evaluation-text evaluation))
        (start (evaluation-current-start evaluation)))
    (format nil "form ~D~@[ of ~D~] (line ~D: ~A) in package ~A"
            (evaluation-current evaluation) (evaluation-form-count evaluation)
            (line-of text start) (form-excerpt text start (length text) 60)
            (package-name (evaluation-package evaluation)))))

(defun evaluation-doing (evaluation)
  "What EVALUATION was doing to its current form."
  (ecase (evaluation-phase evaluation)
    (:read "reading")
    (:eval "evaluating")
    (:print "printing the values of")))

(defun evaluation-output-part (evaluation title)
  "The output EVALUATION printed, under TITLE, or \"\"."
  (let ((output (outcome-output (evaluation-outcome evaluation))))
    (if (plusp (length output))
        (format nil "~%~A:~%~A" title output)
        "")))

(defun evaluation-completed-part (evaluation)
  "A sentence on the forms that completed before the current one failed."
  (let ((current (evaluation-current evaluation)))
    (if (and (> current 1) (not (eq (evaluation-phase evaluation) :print)))
        (format nil "~%Forms 1 to ~D completed before that." (1- current))
        "")))

(defun record-evaluation-error (evaluation history-result &rest details)
  "Record EVALUATION in the history (as HISTORY-RESULT, failed) and as
the last error, described by the plist DETAILS."
  (let* ((tool (evaluation-tool evaluation))
         (package-name (package-name (evaluation-package evaluation)))
         (text (evaluation-text evaluation))
         (id (record-history tool package-name text history-result nil)))
    (apply #'record-error :tool tool :package package-name :form text :id id
           :while (format nil "~A ~A" (evaluation-doing evaluation) (evaluation-place evaluation))
           :output (outcome-output (evaluation-outcome evaluation))
           details)))

(defun fail-timed-out-evaluation (evaluation)
  "Record EVALUATION, interrupted by the timeout, and signal a TOOL-FAILURE."
  (let* ((outcome (evaluation-outcome evaluation))
         (seconds (outcome-seconds outcome)))
    (record-evaluation-error evaluation (format nil "TIMEOUT after ~A s" seconds)
                             :type "TIMEOUT"
                             :message (format nil "timed out after ~A s" seconds)
                             :backtrace (outcome-backtrace outcome))
    (error 'tool-failure
           :message
           (with-output-to-string (out)
             (format out "Evaluation timed out after ~A s and was interrupted, ~A ~A.~A~%"
                     seconds (evaluation-doing evaluation) (evaluation-place evaluation)
                     (evaluation-completed-part evaluation))
             (format out "The image is still usable; side effects made before the ~
                          interruption remain.")
             (when (outcome-backtrace outcome)
               (format out "~%Where it was when interrupted (innermost first):~%~A"
                       (format-backtrace (outcome-backtrace outcome))))
             (write-string (evaluation-output-part evaluation "Output before the interruption")
                           out)))))

(defun fail-signalling-evaluation (evaluation)
  "Record EVALUATION, stopped by a condition, and signal a TOOL-FAILURE."
  (let* ((outcome (evaluation-outcome evaluation))
         (reading (eq (evaluation-phase evaluation) :read))
         ;; A reader error's backtrace shows only the reader.
         (backtrace (if reading nil (outcome-backtrace outcome))))
    (record-evaluation-error evaluation
                             (format nil "ERROR ~A: ~A" (outcome-type outcome)
                                     (first-line (outcome-message outcome) 200))
                             :type (outcome-type outcome)
                             :message (outcome-message outcome)
                             :backtrace backtrace)
    (error 'tool-failure
           :message
           (with-output-to-string (out)
             (format out "~:[Error~;Reader error~] while ~A ~A:~%~A: ~A~A"
                     reading (evaluation-doing evaluation) (evaluation-place evaluation)
                     (outcome-type outcome) (outcome-message outcome)
                     (evaluation-completed-part evaluation))
             (when backtrace
               (format out "~%Backtrace (innermost first):~%~A"
                       (string-right-trim '(#\Newline) (format-backtrace backtrace))))
             (write-string (evaluation-output-part evaluation "Output before the error") out)
             (format out "~%(get_last_error shows this again.)")))))

(defun evaluation-result (evaluation)
  "Record EVALUATION, which completed, in the history; return its result text."
  (let ((package (evaluation-package evaluation))
        (final-package (evaluation-final-package evaluation))
        (current (evaluation-current evaluation)))
    (record-history (evaluation-tool evaluation) (package-name package) (evaluation-text evaluation)
                    (evaluation-summary evaluation) t)
    (with-output-to-string (out)
      (when (> current 1)
        (format out "Evaluated ~D forms in package ~A; values of the last form:~%"
                current (package-name package)))
      (write-string (evaluation-values-text evaluation) out)
      (write-string (evaluation-output-part evaluation "Output") out)
      (unless (eq final-package package)
        (format out "~%Note: the code changed *PACKAGE* (to ~A) for this call only."
                (package-name final-package))))))

(defun evaluate-text (tool text package)
  "Read and evaluate every form of TEXT in PACKAGE; return the result text
or signal TOOL-FAILURE."
  (let ((evaluation (make-evaluation tool text package (count-evaluable-forms text))))
    (setf (evaluation-outcome evaluation) (run-forms evaluation))
    (cond ((outcome-timed-out (evaluation-outcome evaluation))
           (fail-timed-out-evaluation evaluation))
          ((outcome-condition (evaluation-outcome evaluation))
           (fail-signalling-evaluation evaluation))
          (t (evaluation-result evaluation)))))

(define-tool "eval_form" (&key form package)
  "Evaluate every form of FORM in PACKAGE."
  (evaluate-text "eval_form" (nonblank form "form" "one or more Lisp forms")
                 (tool-package package)))

(define-tool "eval_in_package" (&key form package)
  "Evaluate every form of FORM with *PACKAGE* bound to PACKAGE."
  (evaluate-text "eval_in_package" (nonblank form "form" "one or more Lisp forms")
                 ;; Unlike eval_form's, this package has no default.
                 (tool-package (nonblank package "package" "the package to evaluate in"))))


;;;; get_last_error, get_repl_history

(define-tool "get_last_error" ()
  "The last error of eval_form, eval_in_package or compile_form."
  (let ((last (call-with-state-lock (lambda () *last-error*))))
    (if (null last)
        "No error recorded yet."
        (destructuring-bind (&key tool package form type message while backtrace output id time
                             &allow-other-keys)
            last
          (with-output-to-string (out)
            (format out "Last error, from ~A in package ~A~@[ (history entry ~D)~]~@[, ~A~]:~%"
                    tool package id (and time (time-ago time)))
            (format out "Condition: ~A~%Message: ~A~%" type message)
            (when while (format out "While: ~A~%" while))
            (format out "Code:~%~A~%" (indent (cap form 1500 "code") "  "))
            (when backtrace
              (format out "Backtrace (innermost first):~%~A"
                      (format-backtrace backtrace *backtrace-limit*)))
            (when (and output (plusp (length output)))
              (format out "Output before the error:~%~A~%" (cap output 1500 "output"))))))))

(defun time-ago (universal-time)
  (let ((seconds (max 0 (- (get-universal-time) universal-time))))
    (cond ((< seconds 2) "just now")
          ((< seconds 120) (format nil "~D seconds ago" seconds))
          ((< seconds 7200) (format nil "~D minutes ago" (round seconds 60)))
          (t (format nil "~D hours ago" (round seconds 3600))))))

(define-tool "get_repl_history" (&key limit)
  "The most recent LIMIT (default 10) evaluations made through these tools."
  (let* ((history (call-with-state-lock (lambda () (copy-list *history*))))
         (limit (or limit 10))
         (shown (reverse (subseq history 0 (min limit (length history))))))
    (if (null history)
        "No evaluations recorded yet (only eval_form, eval_in_package and compile_form calls are recorded)."
        (with-output-to-string (out)
          (format out "~:[The~;The last~] ~A of ~A (oldest first; ~D kept at most):~%"
                  (< (length shown) (length history))
                  (plural (length shown) "entry" "entries")
                  (plural *history-counter* "evaluation")
                  *history-limit*)
          (dolist (entry shown)
            (destructuring-bind (&key id tool package form result &allow-other-keys) entry
              (format out "[~D] ~A in ~A:~%~A~%~A~%"
                      id tool package
                      (indent (cap form 400 "code") "    ")
                      (indent (cap result 400 "result") "    "))))))))
