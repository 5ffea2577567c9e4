;;;; portable.lisp --- what the CL tests need from the Lisp, on any Lisp.
;;;
;;; The tests run on SBCL, ECL, CLISP and ABCL (test/cl/run.sh LISP).  What is
;;; not standard -- the environment, exiting, threads, locks, the
;;; debugger hook that BREAK honours -- is reached here and nowhere else
;;; in the tests.  Threads and locks go through the backend's portable
;;; interface (SWANK/BACKEND or SLYNK-BACKEND, through sly-agent-q's own
;;; BCALL), so this file names no thread package of a Lisp.  Loaded
;;; first by run-tests.lisp; forms that tests send
;;; to eval_form may call these functions by their package-qualified name.

(defpackage #:sly-agent-q-test-portable
  (:nicknames #:saq-portable)
  (:use #:common-lisp)
  (:export #:getenv #:quit #:lisp-name
           #:threads-p #:timeouts-p #:make-thread #:join-thread #:thread-alive-p #:terminate-thread
           #:current-thread #:all-threads #:thread-name
           #:make-lock #:with-lock #:lock-free-p
           #:call-with-debugger-hook #:abort-thread #:debugger-hook-portable-p
           #:xref-p #:agent-threads-trapped-p #:stack-overflow-condition-p
           #:bounded-frame-printing-p #:statistical-profiler-p #:fasl-names-its-source-p #:located-read-errors-p
           #:undefined-function-warnings-p #:frame-arguments-p #:deterministic-profiler-p
           #:watcher-process-p #:processes-matching-p #:method-source-locations-p
           #:posix-file-stat-p #:quick-compiled-code-p #:iterate-tests-p #:definition-dates-p #:buffer-compiled-text-p #:buffer-compilations-named-p #:file-stat-mode #:file-stat-modes-unlike #:gc-count))

(in-package #:sly-agent-q-test-portable)

(defun getenv (name)
  "The value of the environment variable NAME, or NIL."
  #+sbcl (sb-ext:posix-getenv name)
  #+ecl (ext:getenv name)
  #+clisp (ext:getenv name)
  #+ccl (ccl:getenv name)
  #+abcl (ext:getenv name)
  #-(or sbcl ecl clisp ccl abcl) (progn name nil))

(defun quit (code)
  "End this Lisp with exit status CODE, at once."
  (finish-output *standard-output*)
  (finish-output *error-output*)
  #+sbcl (sb-ext:exit :code code :abort t)
  ;; Not unwinding the other threads first: that fails on one that has
  ;; ended, and EXT:EXIT crashes in one still running.
  #+ecl (ext:quit code nil)
  #+clisp (ext:quit code)
  #+ccl (ccl:quit code)
  #+abcl (ext:quit :status code)
  #-(or sbcl ecl clisp ccl abcl) (error "Cannot exit this Lisp (code ~D)." code))

;;; ECL 21's ASDF (3.1.8.8) upgrades itself, at the first operation, to
;;; a newer ASDF it finds among the systems (Debian's cl-asdf): a minute
;;; or more of compiling through gcc at each start, as ECL 21 fails to
;;; load that upgrade back from its cache (an unbound ASDF/PLAN::STAMP
;;; slot), so the cache could not keep it.  The tests keep ECL's own.
(defun keep-lisps-own-asdf ()
  "Load ASDF and, on ECL, keep the version it came with: never upgraded
from the systems found on disk."
  (require "asdf")
  #+ecl (funcall (find-symbol "REGISTER-IMMUTABLE-SYSTEM" "ASDF") "asdf"))
(export 'keep-lisps-own-asdf)

(defun lisp-name ()
  "The short name of this Lisp, as test/cl/run.sh calls it."
  #+sbcl "sbcl" #+ecl "ecl" #+clisp "clisp" #+ccl "ccl" #+abcl "abcl"
  #-(or sbcl ecl clisp ccl abcl) (string-downcase (lisp-implementation-type)))


;;;; Threads, through the backend

(defun product (name &rest args)
  "Call sly-agent-q's function NAME (a string): this file is loaded
before lisp-cl/, so the package is not there when it is read."
  (apply (find-symbol name "SLY-AGENT-Q") args))

(defun bcall (name &rest args)
  (apply #'product "BCALL" name args))

(defun threads-p ()
  "True when the backend can spawn and interrupt threads in this Lisp."
  (product "THREADS-AVAILABLE-P"))

(defun timeouts-p ()
  "True when an evaluation can be stopped after a time limit: with
threads, or a signal the Lisp turns into a condition (CLISP)."
  (or (threads-p) #+(or sbcl clisp) t))

(defstruct (handle (:constructor %make-handle))
  thread (value nil) (done nil))

(defun make-thread (function &key (name "saq test thread"))
  "Run FUNCTION in a new thread; a handle for JOIN-THREAD, THREAD-ALIVE-P
and TERMINATE-THREAD."
  (let ((handle (%make-handle)))
    (setf (handle-thread handle)
          (bcall "SPAWN" (lambda ()
                           (unwind-protect (setf (handle-value handle) (funcall function))
                             (setf (handle-done handle) t)))
                 :name name))
    handle))

(defun thread-of (thread)
  (if (handle-p thread) (handle-thread thread) thread))

(defun thread-alive-p (thread)
  (bcall "THREAD-ALIVE-P" (thread-of thread)))

(defun join-thread (handle &key default (timeout 60))
  "The value of HANDLE's function once its thread ends, or DEFAULT when
it has not returned (it ended by a non-local exit, or is still running
after TIMEOUT seconds)."
  (loop with deadline = (+ (get-internal-real-time) (* timeout internal-time-units-per-second))
        while (and (not (handle-done handle))
                   (thread-alive-p handle)
                   (< (get-internal-real-time) deadline))
        do (sleep 0.01))
  ;; The thread may be finishing its UNWIND-PROTECT.
  (loop repeat 50 while (and (not (handle-done handle)) (thread-alive-p handle)) do (sleep 0.01))
  (if (handle-done handle) (handle-value handle) default))

(defun terminate-thread (thread)
  "Kill THREAD, unless it is a handle whose function has ended: that
thread is ending by itself, and killing a thread during its own exit
crashes ECL 21 (segmentation violations, later threads' work lost)."
  (unless (and (handle-p thread) (handle-done thread))
    (bcall "KILL-THREAD" (thread-of thread))))

(defun current-thread () (bcall "CURRENT-THREAD"))
(defun all-threads () (bcall "ALL-THREADS"))
(defun thread-name (thread) (ignore-errors (bcall "THREAD-NAME" (thread-of thread))))

(defun make-lock (name) (product "MAKE-BACKEND-LOCK" name))

(defun call-with-lock (lock function)
  (product "CALL-WITH-BACKEND-LOCK" lock function))

(defmacro with-lock ((lock) &body body)
  `(call-with-lock ,lock (lambda () ,@body)))

(defun lock-free-p (lock &optional (seconds 5))
  "True if another thread can take LOCK within SECONDS (without threads,
locks are not taken at all)."
  (unless (threads-p) (return-from lock-free-p t))
  (let ((handle (make-thread (lambda () (with-lock (lock) t)) :name "saq lock probe")))
    (prog1 (eq t (join-thread handle :default nil :timeout seconds))
      (when (thread-alive-p handle) (ignore-errors (terminate-thread handle))))))


(defun xref-p ()
  "True when the backend keeps cross-reference data (who calls...)."
  (let ((result (product "CALL-TOOL" "who_calls" '(("function" . "common-lisp:car")))))
    (not (search "keeps no cross-reference" (or (getf result :error) "")))))

(defun agent-threads-trapped-p ()
  "True when sly-agent-q keeps the errors of threads that agent code
starts from the debugger (SBCL: their creation is wrapped; ECL: the
global debugger hook is)."
  #+(or sbcl ecl) t #-(or sbcl ecl) nil)


(defun quick-compiled-code-p ()
  "True where cl-ppcre's own tests (every character code through six kinds
of test function) take seconds: SBCL; minutes in CLISP's bytecode, and
ECL compiles cl-ppcre through gcc first."
  #+(or clisp ecl) nil #-(or clisp ecl) t)

(defun iterate-tests-p ()
  "False where iterate's test-op does not run: ECL 21 (under its own ASDF
3.1 the test-op fails in ASDF's plan, and run by run_tests the image
crashed with a segmentation violation, not diagnosed yet)."
  #+ecl nil #-ecl t)

(defun stack-overflow-condition-p ()
  "True when a stack overflow is signalled as a condition that code can
handle (CLISP instead resets to its top level, ending a batch run)."
  #+clisp nil #-clisp t)


(defun bounded-frame-printing-p ()
  "False where the debugger tools' time limit on printing frames is
known not to work yet (CLISP: the SIGINT does not stop a printer
running inside the backend's debugging environment)."
  #+clisp nil #-clisp t)


(defun fasl-names-its-source-p ()
  "True where code loaded from a fasl compiled away from its source, not
by ASDF, still has that source (CLISP records only the fasl)."
  #+clisp nil #-clisp t)


(defun located-read-errors-p ()
  "True where a read error in compile_form's code is placed in its form
(CLISP's COMPILE-FILE says neither position nor line)."
  #+clisp nil #-clisp t)


(defun undefined-function-warnings-p ()
  "False where the compiler signals nothing for a call to an undefined
function (ECL: neither a warning nor a compiler condition SWANK sees)."
  #+ecl nil #-ecl t)


(defun definition-dates-p ()
  "True where a definition records its file's write date when it was
compiled (SBCL), so that a file changed since it was loaded is seen."
  #+sbcl t #-sbcl nil)

(defun buffer-compiled-text-p ()
  "True where a definition compiled from a buffer with its file (C-c C-c)
records the text compiled (SBCL); elsewhere it reads as loaded from the file."
  #+sbcl t #-sbcl nil)

(defun buffer-compilations-named-p ()
  "False where the backend keeps no buffer name with what it compiled
from a buffer (CLISP's SWANK compiles the text as a lambda)."
  #+clisp nil #-clisp t)

(defun method-source-locations-p ()
  "False where the Lisp records no source location for a method (ECL 21:
its methods' plists are empty and EXT:COMPILED-FUNCTION-FILE of a
method function answers NIL)."
  #+ecl nil #-ecl t)


(defun frame-arguments-p ()
  "False where the backend's frames carry no arguments (SWANK's ECL
backend: no FRAME-CALL, its frames are function names)."
  #+ecl nil #-ecl t)


(defun deterministic-profiler-p ()
  "True where profile_eval can wrap functions to profile them: not on
ABCL, whose 32-bit fixnums the metering's clock outgrows."
  #+abcl nil #-abcl t)


(defun watcher-process-p ()
  "True where an evaluation's time limit is kept by a watcher process
(CLISP, without threads), not by a thread."
  #+clisp t #-clisp nil)


(defun processes-matching-p (pattern)
  "True if a process whose command line matches PATTERN (pgrep -f) runs."
  #+clisp (null (ext:run-program "/bin/sh" :arguments (list "-c" (format nil "pgrep -f '~A' >/dev/null" pattern))
                                 :input nil :output nil :wait t))
  #-clisp (error "processes-matching-p is only needed where a watcher process is: ~A" pattern))


(defun statistical-profiler-p ()
  "True where profile_eval has a statistical profiler (SBCL's SB-SPROF)."
  #+sbcl t #-sbcl nil)


;;;; CLISP's POSIX:FILE-STAT (lisp-cl/clisp-file-stat.lisp)

(defun posix-file-stat-p ()
  "True where POSIX:FILE-STAT is (CLISP): what UIOP's PROBE-FILE* calls
there, wrapped by sly-agent-q against its garbage-collection defect."
  (and (find-package "POSIX") (find-symbol "FILE-STAT" "POSIX") t))

(defun file-stat-mode (file)
  "The mode POSIX:FILE-STAT gives FILE (CLISP), through the symbol as
UIOP calls it."
  (funcall (find-symbol "FILE-STAT-MODE" "POSIX")
           (funcall (find-symbol "FILE-STAT" "POSIX") file)))

(defvar *padding* nil
  "The last string FILE-STAT-MODES-UNLIKE made between two calls.")

(defun file-stat-modes-unlike (mode file calls)
  "How many of CALLS calls of POSIX:FILE-STAT on FILE (CLISP) give
another mode than MODE.  Strings of every length up to 60 are made
between the calls, so that garbage collections fall at every point of
FILE-STAT's own allocations."
  (let ((stat (find-symbol "FILE-STAT" "POSIX"))
        (stat-mode (find-symbol "FILE-STAT-MODE" "POSIX")))
    (loop for i below calls
          do (setf *padding* (make-string (mod i 61)))
          count (not (equal mode (funcall stat-mode (funcall stat file)))))))

;; Compiled: a million calls take seconds, not a minute, interpreted.
(compile 'file-stat-modes-unlike)

(defun gc-count ()
  "How many garbage collections this Lisp has made (CLISP)."
  #+clisp (nth-value 3 (system::%room))
  #-clisp (error "gc-count is only needed where POSIX:FILE-STAT is"))


;;;; The debugger hook that every entry into the debugger honours
;;;
;;; CL's *DEBUGGER-HOOK* is bypassed by BREAK; SBCL and ECL have a hook
;;; that is not, and it is the one SLIME and SLY set globally.

(defun debugger-hook-portable-p ()
  #+(or sbcl ecl) t #-(or sbcl ecl) nil)

(defun call-with-debugger-hook (hook function)
  "Call FUNCTION with HOOK (a function of a condition and the hook) as
the global debugger hook that BREAK honours too, restored afterwards."
  #+sbcl
  (let ((old sb-ext:*invoke-debugger-hook*))
    (unwind-protect (progn (setf sb-ext:*invoke-debugger-hook* hook) (funcall function))
      (setf sb-ext:*invoke-debugger-hook* old)))
  #+ecl
  (let ((old ext:*invoke-debugger-hook*))
    (unwind-protect (progn (setf ext:*invoke-debugger-hook* hook) (funcall function))
      (setf ext:*invoke-debugger-hook* old)))
  #-(or sbcl ecl)
  (let ((old *debugger-hook*))
    (unwind-protect (progn (setf *debugger-hook* hook) (funcall function))
      (setf *debugger-hook* old))))

(defmacro with-thread-debugger-hook ((hook) &body body)
  "BODY with HOOK bound, in this thread only, as the debugger hook."
  `(let (#+sbcl (sb-ext:*invoke-debugger-hook* ,hook)
         #+ecl (ext:*invoke-debugger-hook* ,hook)
         #-(or sbcl ecl) (*debugger-hook* ,hook))
     ,@body))
(export 'with-thread-debugger-hook)

(defun abort-thread ()
  "End the current thread (from a debugger hook)."
  #+sbcl (sb-thread:abort-thread)
  #+ecl (mp:exit-process)
  #-(or sbcl ecl) (abort))
