;;;; interrupt.lisp --- stopping an evaluation: its timeout and its cancel.
;;;
;;; Each guarded evaluation has a STATE, a cons whose car is :RUNNING,
;;; :CANCEL (asked for by CANCEL-CALL), :TIMED-OUT, :CANCELLED or :DONE.
;;; One interrupter (MAKE-INTERRUPTER) stops it, for a timeout and for a
;;; cancel alike, and decides from STATE, in one place, which of the two
;;; it was.  What watches an evaluation and calls the interrupter in its
;;; thread differs per implementation, behind one function
;;; (CALL-WATCHED), each in a section of its own below:
;;;
;;;  - with threads (the backend's), a watcher thread per evaluation;
;;;  - ECL, one shared watcher thread for every evaluation;
;;;  - SBCL without threads, its own timer (no cancel);
;;;  - CLISP, which has no threads, a watcher process sending SIGINT
;;;    (no cancel);
;;;  - elsewhere without threads, nothing: the code runs unbounded.
;;;
;;; Evaluations are recorded under the id of their call (CALL-TOOL's
;;; :CALL-ID), so that a second request can stop exactly that one and
;;; nothing else.  Loaded after guard.lisp, whose specials it binds.

(in-package #:sly-agent-q)

;;;; The running evaluations and cancelling one

(defvar *running* (make-hash-table :test 'equal)
  "Call id => the STATEs of its guarded evaluations, innermost first.")

(defvar *cancelled-early* '()
  "Ids cancelled before their call started, newest first (bounded).")

(defun note-running (id state)
  (when id
    (call-with-state-lock (lambda () (push state (gethash id *running*))))))

(defun note-finished (id state)
  "Mark STATE done, unless it was stopped, and forget it under ID: from
now on an interrupt does nothing and a cancel finds nothing.  With an
ID, under the state lock, as CANCEL-CALL asks: no cancel is asked of a
finished state.  Without one no cancel can find STATE."
  (flet ((finish () (when (watched-p state) (setf (car state) :done))))
    (if (null id)
        (finish)
        (call-with-state-lock
         (lambda ()
           (finish)
           (let ((states (remove state (gethash id *running*))))
             (if states
                 (setf (gethash id *running*) states)
                 (remhash id *running*))))))))

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

;;;; The interrupter

(defun watched-p (state)
  "True while the evaluation of STATE may still be stopped."
  (member (car state) '(:running :cancel)))

(defun deadline-after (seconds)
  "The internal real time SECONDS from now, or NIL when SECONDS is NIL."
  (and seconds
       (+ (get-internal-real-time)
          (round (* seconds internal-time-units-per-second)))))

(defun interrupt-due-p (state deadline)
  "True when the evaluation of STATE is to be stopped: a cancel was
asked for, or DEADLINE (internal real time, NIL: none) passed."
  (or (eq (car state) :cancel)
      (and deadline (>= (get-internal-real-time) deadline))))

(defun make-interrupter (state tag on-timeout)
  "The one function that stops the evaluation of STATE, for a timeout or
a cancel: run in the evaluating thread where it was interrupted, it
records which of the two it was (a cancel was asked for, or else the
time ran out), calls ON-TIMEOUT there and throws to TAG.  An interrupt
arriving once the evaluation finished, or was stopped, does nothing:
the check is made here, in the evaluating thread itself."
  (lambda ()
    (let ((now (car state)))
      (when (member now '(:running :cancel))
        (setf (car state) (if (eq now :cancel) :cancelled :timed-out))
        (ignore-errors (funcall on-timeout))
        (throw tag nil)))))

(defun call-with-timeout (seconds thunk on-timeout)
  "Call THUNK.  If it is still running after SECONDS (NIL: no limit), or
CANCEL-CALL asks for the current call to stop, call ON-TIMEOUT in
THUNK's thread, at the point where it was interrupted, then unwind out
of THUNK.  Returns NIL, :TIMEOUT or :CANCELLED.  Without thread support
in the backend, SBCL's own timer is used and cancelling is not
supported; on CLISP a SIGINT from a watcher process stops it; elsewhere
THUNK runs unbounded (see CALL-WATCHED)."
  (let* ((state (list :running))
         (tag (list 'timeout))
         ;; Only a watcher thread acts on a cancel: without one, none is recorded.
         (id (and (threads-available-p) *call-id*))
         (interrupt (make-interrupter state tag on-timeout)))
    (catch tag
      (unwind-protect
           (progn
             (note-running id state)
             (call-watched state seconds interrupt tag thunk)
             (note-finished id state))
        (note-finished id state)))
    (case (car state)
      (:timed-out :timeout)
      (:cancelled :cancelled))))

(defun call-watched (state seconds interrupt tag thunk)
  "Call THUNK, watched: INTERRUPT is called in this thread, wherever
THUNK is, once SECONDS (NIL: no limit) have passed or, where threads
let a cancel be seen, STATE's car is :CANCEL.  TAG is what INTERRUPT
throws to.  The implementation's way is one of the sections below."
  (cond ((threads-available-p)
         (call-watched-by-thread state (deadline-after seconds) interrupt thunk))
        ((null seconds)
         (funcall thunk))
        (t
         (call-watched-by-timer seconds interrupt tag thunk))))

;;;; With threads: a watcher thread per evaluation

#-ecl
(progn
  (defun watch-deadline (state deadline worker interrupt)
    "In the watcher thread: wait until STATE is no longer watched;
interrupt WORKER with INTERRUPT when DEADLINE passed or a cancel was
asked for."
    (handler-case
        (loop while (watched-p state)
              do (when (interrupt-due-p state deadline)
                   (bcall "INTERRUPT-THREAD" worker interrupt)
                   (return))
                 (sleep 0.05))
      ;; Never let the user's debugger pop up in our watcher thread.
      (serious-condition () nil)))

  (defun call-watched-by-thread (state deadline interrupt thunk)
    (let ((worker (bcall "CURRENT-THREAD")))
      (let ((*in-agent-code* nil))
        (bcall "SPAWN" (lambda () (watch-deadline state deadline worker interrupt))
               :name "sly-agent-q timeout watcher"))
      (funcall thunk))))

;;;; ECL: one shared watcher thread

#+ecl
(progn
  ;; One long-lived watcher serves every evaluation on ECL, rather than
  ;; a thread started and ended per evaluation: ECL aborts when a thread
  ;; interrupt (MP:INTERRUPT-PROCESS, which the watcher sends) arrives
  ;; while C code has interrupts disabled and then writes to its
  ;; environment ("write access to the environment while interrupts
  ;; were disabled"), and threads ending are such code.  A crash of that
  ;; kind was reported after a system was compiled and loaded; it was
  ;; not reproduced with either design (test
  ;; compile-form-again-and-again-after-compiled-systems).
  (defvar *watched* '()
    "(STATE DEADLINE WORKER INTERRUPT) of the evaluations being watched.")

  (defvar *shared-watcher* nil
    "The long-lived watcher thread, or NIL before the first evaluation.")

  (defun watch-all ()
    "The shared watcher's loop: interrupt each watched worker whose
deadline passed or whose cancel was asked for; forget finished ones.
With nothing to watch it waits in its mailbox for the next evaluation
(CALL-WATCHED-BY-THREAD sends it a message), rather than waking every
50 ms: ECL tears down its memory when the image quits without stopping
other threads first, and a thread that wakes then crashes the image
on its way out (a segmentation violation in the watcher)."
    (loop
      (let ((idle nil))
        (handler-case
            (let ((due '()))
              (call-with-state-lock
               (lambda ()
                 (setf *watched*
                       (remove-if (lambda (entry)
                                    (destructuring-bind (state deadline worker interrupt) entry
                                      (cond ((not (watched-p state)) t)
                                            ((interrupt-due-p state deadline)
                                             (push (cons worker interrupt) due)
                                             t))))
                                  *watched*))
                 (setf idle (null *watched*))))
              (loop for (worker . interrupt) in due
                    do (ignore-errors (bcall "INTERRUPT-THREAD" worker interrupt)))
              (when idle
                ;; A message sent after the check above is in the mailbox
                ;; already, so none is missed; those that piled up are
                ;; taken all at once.
                (bcall "RECEIVE-IF" (constantly t))
                (loop while (bcall "RECEIVE-IF" (constantly t) t))))
          ;; Never let the user's debugger pop up in our watcher thread.
          (serious-condition () (setf idle nil)))
        (unless idle (sleep 0.05)))))

  (defun ensure-shared-watcher ()
    (call-with-state-lock
     (lambda ()
       (unless (and *shared-watcher* (bcall "THREAD-ALIVE-P" *shared-watcher*))
         (setf *shared-watcher*
               (let ((*in-agent-code* nil))
                 (bcall "SPAWN" #'watch-all :name "sly-agent-q timeout watcher"))))
       *shared-watcher*)))

  (defun call-watched-by-thread (state deadline interrupt thunk)
    (let ((worker (bcall "CURRENT-THREAD")))
      (call-with-state-lock
       (lambda () (push (list state deadline worker interrupt) *watched*)))
      (bcall "SEND" (ensure-shared-watcher) :watch)
      (funcall thunk))))

;;;; SBCL without threads: its own timer

#+sbcl
(defun call-watched-by-timer (seconds interrupt tag thunk)
  "SB-EXT:WITH-TIMEOUT signals after SECONDS; THUNK is unwound, then
INTERRUPT runs."
  (declare (ignore tag))
  (handler-case (sb-ext:with-timeout seconds (funcall thunk))
    (sb-ext:timeout () (funcall interrupt))))

;;;; CLISP: a watcher process sending SIGINT

#+clisp
(defun call-watched-by-timer (seconds interrupt tag thunk)
  "Where the Lisp has no threads but stops at a SIGINT, as CLISP does
\(its \"User break\", what SLIME's interrupt sends): a watcher process
sends this Lisp SIGINT after SECONDS, and again every 2 seconds until it
is killed, which is done as soon as THUNK returns or has been stopped.
The first SIGINT runs INTERRUPT, which throws to TAG, caught here."
  (let* ((absorbed (list 'absorbed))
         (watcher (ignore-errors
                   (ext:run-program
                    "/bin/sh"
                    ;; The sleeps run in the background and are waited for,
                    ;; so that a TERM ends the one under way too (a killed
                    ;; shell would leave it running, orphaned).  The PID is
                    ;; told only once the first sleep is known, and the trap
                    ;; kills every job: a TERM that came before "s=$!" left
                    ;; the sleep behind.
                    :arguments (list "-c" (format nil "trap 'kill $s $(jobs -p) 2>/dev/null; exit 0' TERM; ~
                                                       sleep ~,2F & s=$!; echo $$; wait $s; ~
                                                       while kill -INT ~D; do sleep 2 & s=$!; wait $s; done"
                                                  seconds (os:process-id)))
                    :input nil :output :stream :wait nil)))
         (watcher-pid (and watcher (ignore-errors (parse-integer (read-line watcher nil "")))))
         (fired nil)
         (done nil))
    (unless watcher-pid
      (when watcher (ignore-errors (close watcher)))
      (funcall thunk)
      (return-from call-watched-by-timer nil))
    (handler-bind ((system::interrupt-condition
                     (lambda (c)
                       (if (or fired done)
                           ;; Sent while stopping, or as THUNK returned:
                           ;; absorbed here, never the user's REPL's (a
                           ;; batch CLISP exits at a SIGINT that reaches
                           ;; its top level).
                           (let ((continue (find-restart 'continue c)))
                             (cond (continue (invoke-restart continue))
                                   (done (throw absorbed nil))
                                   (t (throw tag nil))))
                           (progn
                             (setf fired t)
                             ;; A handler runs without itself: the next
                             ;; SIGINT (ON-TIMEOUT printing a value that
                             ;; never prints) needs a handler of its own.
                             (handler-bind ((system::interrupt-condition
                                              (lambda (c)
                                                (declare (ignore c))
                                                (throw tag nil))))
                               (funcall interrupt))
                             (throw tag nil))))))
      (unwind-protect
           ;; TAG is caught here too, so that the watcher is stopped
           ;; below, not while unwinding.
           (catch tag
             (funcall thunk))
        ;; A SIGINT the watcher sent just before it was killed may arrive
        ;; while stopping it or just after: stopping is retried when one
        ;; cuts it short, and waits a little inside the handler for any
        ;; still on its way.
        (loop repeat 5
              until (catch absorbed
                      (setf done t)
                      (ignore-errors
                       (ext:run-program "/bin/kill" :arguments (list "-TERM" (princ-to-string watcher-pid))
                                                    :input nil :output nil :wait t))
                      (ignore-errors (close watcher))
                      (sleep 0.05)
                      t))))))

;;;; Elsewhere without threads: unbounded

#-(or sbcl clisp)
(defun call-watched-by-timer (seconds interrupt tag thunk)
  (declare (ignore seconds interrupt tag))
  (funcall thunk))
