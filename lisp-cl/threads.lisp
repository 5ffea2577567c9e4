;;;; threads.lisp --- list_threads, interrupt_thread.
;;;
;;; Threads are named by the backend's THREAD-ID, the number SLY's and
;;; SLIME's debugger buffers name them by too.  interrupt_thread breaks
;;; a thread into the user's debugger (as the thread list's "debug"
;;; command does), where debugger_state and the other debugger tools
;;; see it; the catalog makes it dangerous.

(in-package #:sly-agent-q)

(defun need-thread-backend (&rest functions)
  (unless (threads-available-p)
    (fail "This Lisp (~A ~A) runs without threads here: the only thread is the one running ~
           this call, so there is no other to list or interrupt."
          (lisp-implementation-type) (lisp-implementation-version)))
  (dolist (name functions)
    (unless (backend-implemented-p name)
      (fail "This Lisp's ~A backend does not support threads (~A is missing)."
            (or (backend-name) "SLYNK/SWANK") name))))

(defun thread-line (thread current)
  "One line describing THREAD for list_threads."
  (format nil "~A  ~A  [~A]~:[~; (this tool's own thread)~]"
          (or (ignore-errors (bcall "THREAD-ID" thread)) "?")
          (let ((name (ignore-errors (bcall "THREAD-NAME" thread))))
            (if (and (stringp name) (plusp (length name))) (first-line name 80) "unnamed"))
          (or (ignore-errors (first-line (princ-to-string (bcall "THREAD-STATUS" thread)) 60))
              "unknown")
          (eq thread current)))

(define-tool "list_threads" ()
  "The image's threads: id, name and state."
  (need-thread-backend "ALL-THREADS" "THREAD-ID")
  (let ((current (ignore-errors (bcall "CURRENT-THREAD")))
        (threads (bcall "ALL-THREADS")))
    (with-output-to-string (out)
      (format out "~D thread~:P (id, name, state):~%" (length threads))
      (dolist (thread threads)
        (format out "  ~A~%" (thread-line thread current))))))

(defun find-thread-by-id (id)
  (find-if (lambda (thread) (eql (ignore-errors (bcall "THREAD-ID" thread)) id))
           (bcall "ALL-THREADS")))

(defparameter *interrupt-message* "Interrupted by sly-agent-q (interrupt_thread)")

(defun break-into-debugger-function (connection)
  "A function that, run in another thread, enters the user's debugger
there, talking to CONNECTION (the frontend's *EMACS-CONNECTION*): what
the frontend's own debug-nth-thread runs, (WITH-CONNECTION (CONNECTION)
(SIMPLE-BREAK)), built when the frontend is known (WITH-CONNECTION is a
macro).  Without them, a plain BREAK."
  (let ((with-connection (frontend-symbol "WITH-CONNECTION"))
        (simple-break (frontend-symbol "SIMPLE-BREAK")))
    (if (and connection with-connection (macro-function with-connection)
             simple-break (fboundp simple-break))
        (coerce `(lambda ()
                   (,with-connection (',connection)
                     (,simple-break ,*interrupt-message*)))
                'function)
        (lambda () (break *interrupt-message*)))))

(define-tool "interrupt_thread" (&key thread)
  "Interrupt THREAD (an id) into the user's debugger."
  (need-thread-backend "ALL-THREADS" "THREAD-ID" "INTERRUPT-THREAD")
  (let ((target (find-thread-by-id thread))
        (current (ignore-errors (bcall "CURRENT-THREAD"))))
    (cond ((null target)
           (fail "No thread has id ~A; list_threads shows the threads." thread))
          ((eq target current)
           (fail "Thread ~A is this tool's own thread; interrupt another." thread))
          ((and (backend-implemented-p "THREAD-ALIVE-P") (not (bcall "THREAD-ALIVE-P" target)))
           (fail "Thread ~A has finished." thread)))
    (let ((queue (frontend-symbol "QUEUE-THREAD-INTERRUPT"))
          (function (break-into-debugger-function (emacs-connection))))
      ;; The frontend's way (safe against its own critical sections) when it has one.
      (if (and queue (fboundp queue))
          (funcall queue target function)
          (bcall "INTERRUPT-THREAD" target function)))
    (format nil "Interrupted thread ~A: it entered the user's debugger (debugger_state shows it)."
            (thread-line target current))))
