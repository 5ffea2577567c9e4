;;; sly-agent-q-bridge.el --- Relay the agent's image calls through SLY or SLIME  -*- lexical-binding: t; -*-

;; Copyright (C) 2026 The sly-agent-q authors

;; This file is not part of GNU Emacs.

;; This program is free software; you can redistribute it and/or modify
;; it under the terms of the GNU General Public License as published by
;; the Free Software Foundation, either version 3 of the License, or
;; (at your option) any later version.

;; This program is distributed in the hope that it will be useful,
;; but WITHOUT ANY WARRANTY; without even the implied warranty of
;; MERCHANTABILITY or FITNESS FOR A PARTICULAR PURPOSE.  See the
;; GNU General Public License for more details.

;; You should have received a copy of the GNU General Public License
;; along with this program.  If not, see <https://www.gnu.org/licenses/>.

;;; Commentary:

;; The server asks for work in the Lisp image with `emacs/call' of kind
;; "image": {tool, arguments, package}.  This file answers through the
;; user's SLY or SLIME connection:
;;
;; - one code path, with a thin adapter (`sly-agent-q-bridge-adapter')
;;   holding the few functions that differ between SLY and SLIME;
;; - it loads lisp-cl/load.lisp into the image when the connection
;;   opens while the agent is in use (sly-agent-q-helpers-load.el), or
;;   at the first call, which waits for a load that runs; then it
;;   calls (sly-agent-q:call-tool NAME ARGS :package P :timeout N),
;;   the form built as data from the JSON arguments;
;; - evaluation is always asynchronous (an :emacs-rex event with our own
;;   continuation, so an :abort becomes an error reply and never a
;;   message in the echo area), guarded by a deadline (one timer serves
;;   every pending call); a late answer is ignored; a connection that
;;   closes fails every pending call.
;;
;; Neither SLY nor SLIME is required at load time.

;;; Code:

(require 'cl-lib)
(require 'subr-x)
(require 'sly-agent-q-server)
(require 'sly-agent-q-display)

(defvar sly-dispatching-connection)
(defvar sly-buffer-package)
(defvar sly-net-processes)
(defvar sly-net-process-close-hooks)
(defvar slime-dispatching-connection)
(defvar slime-net-processes)
(defvar slime-net-process-close-hooks)
(defvar slime-log-events)
(defvar sly-log-events)
(declare-function sly-dispatch-event "ext:sly" (event &optional process))
(declare-function sly-current-connection "ext:sly" ())
(declare-function sly-connection-name "ext:sly" (&optional connection))
(declare-function sly-mrepl--find-buffer "ext:sly-mrepl" (&optional connection thread))
(declare-function sly-mrepl-guess-package "ext:sly-mrepl" (&optional point interactive))
(declare-function slime-dispatch-event "ext:slime" (event &optional process))
(declare-function slime-current-connection "ext:slime" ())
(declare-function slime-connection-name "ext:slime" (&optional process))
(declare-function slime-lisp-package "ext:slime-repl" (&optional process))
(declare-function sly-inferior-process "ext:sly" (&optional connection))
(declare-function sly-communication-style "ext:sly" (&optional process))
(declare-function slime-communication-style "ext:slime" (&optional process))
(declare-function slime-inferior-process "ext:slime" (&optional connection))

(defcustom sly-agent-q-image-timeout 50
  "Seconds one evaluation in the Lisp image may run.
The one limit of an image call: the helpers in the image interrupt
the evaluation after this long and say so; Emacs waits five seconds
more for that message, and the server's deadline is derived from it
\(it is sent in the configuration).  After changing it while the
server runs, send the configuration again."
  :type 'number
  :group 'sly-agent-q)

(defcustom sly-agent-q-helpers-load-timeout 300
  "Seconds to wait for lisp-cl/load.lisp to compile and load in the image.
Sent to the server too, whose deadline for an image call allows it."
  :type 'number
  :group 'sly-agent-q)

(defcustom sly-agent-q-lisp-cl-directory nil
  "The directory holding the Common Lisp helpers (lisp-cl/load.lisp).
nil means find it next to this package."
  :type '(choice (const :tag "Automatic" nil) directory)
  :group 'sly-agent-q)

(defcustom sly-agent-q-prefer-sly t
  "When both SLY and SLIME are connected, non-nil means use SLY."
  :type 'boolean
  :group 'sly-agent-q)

;; SLIME and SLY pretty-print every event into their event log (`slime-log-events',
;; `sly-log-events'): 8-9 KB of garbage per event, about half of all that a
;; tool call allocates in Emacs.  The garbage collections that follow were most
;; of what 100 calls from one model message waited for (make bench, figure 2:
;; 5 collections, 0.2 s of a 0.28 s batch).  The bridge's requests are
;; machine traffic, so by default they are left out of that log; their answers
;; are still written to it (that happens in SLIME's own process filter).
(defcustom sly-agent-q-bridge-log-events nil
  "Non-nil means the tool calls' requests go to SLY's or SLIME's event log.
Their event log is on by default (`sly-log-events', `slime-log-events');
nil leaves out the requests this package sends to the image, which are
many (a model may call a hundred tools at once) and costly to log.
Set it to t when debugging the bridge in the *sly-events* or
*slime-events* buffer."
  :type 'boolean
  :group 'sly-agent-q)

(defconst sly-agent-q-bridge-no-lisp-message
  "No Lisp is connected; start one with M-x sly (or M-x slime)."
  "The answer to an image call when no Lisp is reachable.")

(defconst sly-agent-q-bridge-exited-message
  "The Lisp process exited during the evaluation (the code may have called exit or quit): its connection closed.  Start it again with M-x sly (or M-x slime)."
  "The answer to an image call whose evaluation ended the Lisp.")

(defconst sly-agent-q-bridge-reset-message
  "The Lisp reset itself during the evaluation (CLISP does on a stack overflow), which closed its connection; the Lisp process still runs, with its state, at its own prompt in its inferior Lisp buffer.  To connect to it again, evaluate (swank:create-server) there, or (slynk:create-server), then M-x slime-connect (or M-x sly-connect); or start a new Lisp with M-x sly (or M-x slime)."
  "The answer to an image call that closed the connection, the Lisp still running.")

(defvar sly-agent-q-bridge-abort-grace 5
  "Seconds an aborted evaluation waits for its connection to close.
SBCL's exit unwinds the evaluating thread first (an abort) and closes
the connection a moment later: within this time, the answer says that
the Lisp exited rather than that the evaluation was aborted.")

;;;; The adapter

(cl-defstruct (sly-agent-q-bridge-adapter (:constructor sly-agent-q-bridge--make-adapter))
  "The functions that differ between SLY and SLIME."
  name          ; "SLY" or "SLIME"
  connection    ; () -> the connection (a network process) to use, or nil
  dispatch      ; (CONN EVENT) -> send an event on CONN
  repl-package  ; (CONN) -> the REPL's current package name, or nil
  inferior      ; (CONN) -> the Lisp's process when Emacs started it, or nil
  close-hook    ; the hook run with a connection when it closes
  connection-name ; (CONN) -> the connection's name as the Lisp mode shows it, or nil
  style)        ; (CONN) -> the backend's communication style (:spawn with threads), or `unknown'

(defun sly-agent-q-bridge--live (conn)
  "CONN if it is an open network process."
  (and (processp conn) (process-live-p conn) conn))

(defun sly-agent-q-bridge--sly-connection ()
  "SLY's connection to use, or nil."
  (and (featurep 'sly)
       (bound-and-true-p sly-net-processes)
       (sly-agent-q-bridge--live
        (or (ignore-errors (sly-current-connection)) (car sly-net-processes)))))

(defun sly-agent-q-bridge--slime-connection ()
  "SLIME's connection to use, or nil."
  (and (featurep 'slime)
       (bound-and-true-p slime-net-processes)
       (sly-agent-q-bridge--live
        (or (ignore-errors (slime-current-connection)) (car slime-net-processes)))))

(defun sly-agent-q-bridge--sly-dispatch (conn event)
  "Send EVENT on SLY connection CONN."
  (let ((sly-dispatching-connection conn)
        (sly-log-events (and sly-agent-q-bridge-log-events sly-log-events)))
    (sly-dispatch-event event)))

(defun sly-agent-q-bridge--slime-dispatch (conn event)
  "Send EVENT on SLIME connection CONN."
  (let ((slime-dispatching-connection conn)
        (slime-log-events (and sly-agent-q-bridge-log-events slime-log-events)))
    (slime-dispatch-event event)))

(defun sly-agent-q-bridge--sly-repl-package (conn)
  "The package of SLY's REPL on CONN, or nil."
  (let ((buf (and (fboundp 'sly-mrepl--find-buffer)
                  (ignore-errors (sly-mrepl--find-buffer conn)))))
    (when (buffer-live-p buf)
      (let ((pkg (or (buffer-local-value 'sly-buffer-package buf)
                     (and (fboundp 'sly-mrepl-guess-package)
                          (with-current-buffer buf
                            (ignore-errors (sly-mrepl-guess-package (point-max))))))))
        ;; The REPL's prompt shows the name downcased.
        (and (stringp pkg)
             (if (string= pkg (downcase pkg)) (upcase pkg) pkg))))))

(defun sly-agent-q-bridge--slime-repl-package (conn)
  "The package of SLIME's REPL on CONN, or nil."
  (and (fboundp 'slime-lisp-package)
       (ignore-errors (let ((slime-dispatching-connection conn))
                        (slime-lisp-package conn)))))

(defvar sly-agent-q-bridge-adapters
  (list (sly-agent-q-bridge--make-adapter
         :name "SLY"
         :connection #'sly-agent-q-bridge--sly-connection
         :dispatch #'sly-agent-q-bridge--sly-dispatch
         :repl-package #'sly-agent-q-bridge--sly-repl-package
         :inferior (lambda (conn) (and (fboundp 'sly-inferior-process)
                                       (ignore-errors (sly-inferior-process conn))))
         :close-hook 'sly-net-process-close-hooks
         :connection-name (lambda (conn) (and (fboundp 'sly-connection-name)
                                              (ignore-errors (sly-connection-name conn))))
         :style (lambda (conn) (if (fboundp 'sly-communication-style)
                                   (ignore-errors (sly-communication-style conn))
                                 'unknown)))
        (sly-agent-q-bridge--make-adapter
         :name "SLIME"
         :connection #'sly-agent-q-bridge--slime-connection
         :dispatch #'sly-agent-q-bridge--slime-dispatch
         :repl-package #'sly-agent-q-bridge--slime-repl-package
         :inferior (lambda (conn) (and (fboundp 'slime-inferior-process)
                                       (ignore-errors (slime-inferior-process conn))))
         :close-hook 'slime-net-process-close-hooks
         :connection-name (lambda (conn) (and (fboundp 'slime-connection-name)
                                              (ignore-errors (slime-connection-name conn))))
         :style (lambda (conn) (if (fboundp 'slime-communication-style)
                                   (ignore-errors (slime-communication-style conn))
                                 'unknown))))
  "The adapters, SLY's first.")

(defvar sly-agent-q-bridge-lisp-function nil
  "Function choosing the Lisp an image call runs in, or nil.
Called with the call's params (a plist: :tool, :arguments,
:conversationId...); returns (ADAPTER . CONNECTION), a string (why
the call cannot run: it fails with that message), or nil (the Lisp
current now).  The chats set it: a chat's calls run in its own Lisp.")

(defun sly-agent-q-bridge-current ()
  "Return (ADAPTER . CONNECTION) for the Lisp to use.
While an Emacs tool call of a chat's turn starts
\(`sly-agent-q-call-conversation-id'), that chat's Lisp, even when its
connection is closed: its calls then fail naming it, never reaching
whichever Lisp is current.  Return nil when no Lisp is connected."
  (let ((chosen (and sly-agent-q-call-conversation-id sly-agent-q-bridge-lisp-function
                     (funcall sly-agent-q-bridge-lisp-function
                              (list :conversationId sly-agent-q-call-conversation-id)))))
    (if (consp chosen) chosen (sly-agent-q-bridge--current-of-mode))))

(defun sly-agent-q-bridge-closed-message (lisp)
  "Why a call of a chat whose Lisp, LISP, closed cannot run; nil while it is open."
  (and lisp (not (sly-agent-q-bridge--live (cdr lisp)))
       (format "The Lisp connection %s of this chat is closed; connect it again, or choose another Lisp from the chat's menu (C-c C-m)."
               (sly-agent-q-bridge-lisp-name lisp))))

(defun sly-agent-q-bridge--current-of-mode ()
  "Return (ADAPTER . CONNECTION) for the Lisp mode's current connection, or nil."
  (let ((adapters (if sly-agent-q-prefer-sly sly-agent-q-bridge-adapters
                    (reverse sly-agent-q-bridge-adapters))))
    (cl-loop for a in adapters
             for conn = (funcall (sly-agent-q-bridge-adapter-connection a))
             when conn return (cons a conn))))

(defun sly-agent-q-bridge-current-package (&optional lisp)
  "The current package of the REPL of LISP, or nil.
LISP is (ADAPTER . CONNECTION); nil means the Lisp current now
\(`sly-agent-q-bridge-current')."
  (let ((cur (or lisp (sly-agent-q-bridge-current))))
    (and cur (sly-agent-q-bridge--live (cdr cur))
         (funcall (sly-agent-q-bridge-adapter-repl-package (car cur)) (cdr cur)))))

(defun sly-agent-q-bridge-lisp-name (lisp)
  "LISP, (ADAPTER . CONNECTION), named for the user: \"sbcl (SLY)\"."
  (format "%s (%s)"
          (or (funcall (sly-agent-q-bridge-adapter-connection-name (car lisp)) (cdr lisp))
              (process-name (cdr lisp)))
          (sly-agent-q-bridge-adapter-name (car lisp))))

(defun sly-agent-q-bridge-lisps ()
  "Every open Lisp connection: a list of (ADAPTER . CONNECTION)."
  (cl-loop for a in sly-agent-q-bridge-adapters
           for processes = (if (equal (sly-agent-q-bridge-adapter-name a) "SLY")
                               (and (featurep 'sly) (bound-and-true-p sly-net-processes))
                             (and (featurep 'slime) (bound-and-true-p slime-net-processes)))
           append (cl-loop for p in processes
                           when (sly-agent-q-bridge--live p) collect (cons a p))))

;;;; Asynchronous evaluation

;; Every pending evaluation has a deadline, and one timer serves them all:
;; armed for the earliest, it expires what is due and re-arms itself.  A
;; timer per call made each call insert into and delete from `timer-list'
;; (linear in the timers pending: 100 calls from one model message meant
;; 100 timers at once; make bench, figures 1 and 2).

(defvar sly-agent-q-bridge--pending nil
  "Pending evaluations: a list of (CONNECTION . FAIL-FUNCTION).")

(defvar sly-agent-q-bridge--deadlines nil
  "Pending deadlines: a list of (TIME . FUNCTION), TIME a `float-time'.")

(defvar sly-agent-q-bridge--deadline-timer nil
  "The one timer of `sly-agent-q-bridge--deadlines', or nil.")

(defvar sly-agent-q-bridge--deadline-at nil
  "When `sly-agent-q-bridge--deadline-timer' fires, a `float-time'.")

(defun sly-agent-q-bridge--arm (at)
  "Arm the deadline timer for time AT (a `float-time'), or disarm it if AT is nil."
  (when sly-agent-q-bridge--deadline-timer
    (cancel-timer sly-agent-q-bridge--deadline-timer))
  (setq sly-agent-q-bridge--deadline-at at
        sly-agent-q-bridge--deadline-timer
        (and at (run-at-time (max 0 (- at (float-time))) nil #'sly-agent-q-bridge--expire))))

(defun sly-agent-q-bridge--add-deadline (seconds function)
  "Call FUNCTION in SECONDS unless the returned deadline is dropped first."
  (let ((deadline (cons (+ (float-time) seconds) function)))
    (push deadline sly-agent-q-bridge--deadlines)
    (when (or (null sly-agent-q-bridge--deadline-at)
              (< (car deadline) sly-agent-q-bridge--deadline-at))
      (sly-agent-q-bridge--arm (car deadline)))
    deadline))

(defun sly-agent-q-bridge--drop-deadline (deadline)
  "Forget DEADLINE (from `sly-agent-q-bridge--add-deadline'); nil is ignored."
  (when deadline
    (setq sly-agent-q-bridge--deadlines (delq deadline sly-agent-q-bridge--deadlines))
    (unless sly-agent-q-bridge--deadlines (sly-agent-q-bridge--arm nil))))

(defun sly-agent-q-bridge--expire ()
  "Call the functions of the deadlines that are due, and re-arm for the next."
  (setq sly-agent-q-bridge--deadline-timer nil
        sly-agent-q-bridge--deadline-at nil)
  (let ((now (float-time)) due)
    (dolist (d sly-agent-q-bridge--deadlines)
      (when (<= (car d) now) (push d due)))
    (dolist (d due)
      (setq sly-agent-q-bridge--deadlines (delq d sly-agent-q-bridge--deadlines)))
    (when sly-agent-q-bridge--deadlines
      (sly-agent-q-bridge--arm (apply #'min (mapcar #'car sly-agent-q-bridge--deadlines))))
    (dolist (d (nreverse due))
      (sly-agent-q-connection-call-safely (cdr d)))))

(defun sly-agent-q-bridge--exited-or-reset (inferior finish)
  "Call FINISH with the message for a connection closed after an abort.
The Lisp exited, unless its process INFERIOR still runs after
`sly-agent-q-bridge-abort-grace' seconds: then it reset.  INFERIOR nil
\(a Lisp Emacs did not start): either may be true."
  (cond
   ((not (processp inferior))
    ;; A Lisp Emacs did not start (M-x slime-connect): whether it lives is unknown.
    (funcall finish nil (concat "The connection to the Lisp closed during the evaluation: the code may "
                                "have exited the Lisp, or the Lisp reset itself (CLISP does on a stack "
                                "overflow).  If it still runs, connect to it again; otherwise start one "
                                "with M-x sly (or M-x slime).")))
   ((not (process-live-p inferior))
    (funcall finish nil sly-agent-q-bridge-exited-message))
   (t
    (let ((deadline (+ (float-time) sly-agent-q-bridge-abort-grace)) timer)
      (setq timer
            (run-with-timer
             0.1 0.1
             (lambda ()
               (cond ((not (process-live-p inferior))
                      (cancel-timer timer)
                      (funcall finish nil sly-agent-q-bridge-exited-message))
                     ((> (float-time) deadline)
                      (cancel-timer timer)
                      (funcall finish nil sly-agent-q-bridge-reset-message))))))))))

(defun sly-agent-q-bridge-eval (adapter conn form package timeout callback &optional on-timeout thread)
  "Evaluate FORM in package PACKAGE on CONN through ADAPTER, asynchronously.
Call CALLBACK exactly once with (VALUE nil) on success, or (nil MESSAGE)
on an abort, after TIMEOUT seconds (then ON-TIMEOUT too, if given),
when the connection closes, or when the returned function is called
with a message.  Return that function at once.
THREAD, when non-nil, is the image thread (as its debugger buffer
names it) to evaluate in; otherwise a worker thread of its own."
  (let* ((done nil) deadline entry aborted
         ;; Known now: once the connection is closed, the Lisp mode may forget it.
         (inferior (ignore-errors (funcall (sly-agent-q-bridge-adapter-inferior adapter) conn)))
         (finish (lambda (value error)
                   (unless done
                     (setq done t)
                     (sly-agent-q-bridge--drop-deadline deadline)
                     (setq sly-agent-q-bridge--pending
                           (delq entry sly-agent-q-bridge--pending))
                     (sly-agent-q-connection-call-safely callback value error)))))
    (setq entry (cons conn (lambda (msg)
                             (if aborted
                                 (progn
                                   ;; Closed: the abort's wait ends here.
                                   (sly-agent-q-bridge--drop-deadline deadline)
                                   (setq deadline nil)
                                   (sly-agent-q-bridge--exited-or-reset inferior finish))
                               (funcall finish nil msg)))))
    (sly-agent-q-bridge--ensure-close-hook adapter)
    (push entry sly-agent-q-bridge--pending)
    (setq deadline (sly-agent-q-bridge--add-deadline
                    timeout
                    (lambda ()
                      (setq deadline nil)
                      (when on-timeout (sly-agent-q-connection-call-safely on-timeout))
                      (funcall finish nil (format "The Lisp image did not answer within %s seconds." timeout)))))
    (condition-case err
        (funcall (sly-agent-q-bridge-adapter-dispatch adapter) conn
                 (list :emacs-rex form package (or thread t)
                       (lambda (result)
                         (pcase result
                           (`(:ok ,value) (funcall finish value nil))
                           (`(:abort ,condition)
                            (let ((msg (format "The evaluation in the Lisp image was aborted%s."
                                               (if (member condition '(nil "NIL" ""))
                                                   ""
                                                 (format ": %s" condition)))))
                              ;; An exit aborts the evaluation, then closes the
                              ;; connection: wait a little to tell which.
                              (if (not (process-live-p conn))
                                  (funcall finish nil sly-agent-q-bridge-exited-message)
                                (setq aborted t)
                                (sly-agent-q-bridge--drop-deadline deadline)
                                (setq deadline (sly-agent-q-bridge--add-deadline
                                                sly-agent-q-bridge-abort-grace
                                                (lambda ()
                                                  (setq deadline nil)
                                                  (funcall finish nil msg)))))))
                           (_ (funcall finish nil (format "Unexpected answer from the Lisp image: %S" result)))))))
      (error (funcall finish nil (format "Could not send the call to the Lisp image: %s"
                                         (error-message-string err)))))
    (lambda (msg) (funcall finish nil msg))))

(defun sly-agent-q-bridge--cancel-form (call-id)
  "A form stopping the helpers' evaluation of CALL-ID; harmless without them."
  `(cl:let ((f (cl:and (cl:find-package "SLY-AGENT-Q")
                       (cl:find-symbol "CANCEL-CALL" "SLY-AGENT-Q"))))
     (cl:when (cl:and f (cl:fboundp f))
       (cl:funcall f ,call-id))))

(defun sly-agent-q-bridge-send-cancel (adapter conn call-id)
  "Ask the image on CONN, through ADAPTER, to interrupt the call CALL-ID.
Sent as a request of its own (its own worker thread in the image); its
answer is ignored, and nothing else on the connection is touched."
  (when (process-live-p conn)
    (condition-case nil
        (funcall (sly-agent-q-bridge-adapter-dispatch adapter) conn
                 (list :emacs-rex (sly-agent-q-bridge--cancel-form call-id) "CL-USER" t #'ignore))
      (error nil))))

(defvar sly-agent-q-bridge--hooked nil
  "The close hooks this file added itself to.")

(defun sly-agent-q-bridge--ensure-close-hook (adapter)
  "Make sure a closing connection of ADAPTER fails what waits on it."
  (let ((hook (sly-agent-q-bridge-adapter-close-hook adapter)))
    (unless (memq hook sly-agent-q-bridge--hooked)
      (push hook sly-agent-q-bridge--hooked)
      (add-hook hook #'sly-agent-q-bridge--connection-closed))))

(defun sly-agent-q-bridge--connection-closed (conn &rest _)
  "CONN closed: answer every call pending on it with an error.
When Emacs started the Lisp, the error says how its process ended (an
exit from the evaluated code, or a kill), once that is known."
  ;; While the helpers load, the load's own pending call, failed below,
  ;; answers the calls waiting for them: forgetting them here lost them.
  (unless (eq (car-safe (process-get conn 'sly-agent-q-helpers)) 'loading)
    (process-put conn 'sly-agent-q-helpers nil))
  (let ((entries (cl-remove-if-not (lambda (entry) (eq (car entry) conn))
                                   (reverse sly-agent-q-bridge--pending))))
    (when entries
      (let ((inferior (cl-some (lambda (a) (funcall (sly-agent-q-bridge-adapter-inferior a) conn))
                               sly-agent-q-bridge-adapters))
            (tries 20))
        (if (not (processp inferior))
            (sly-agent-q-bridge--fail-closed entries nil)
          ;; The connection usually closes a moment before the process
          ;; is reaped: wait (never inside this hook) to learn how it ended.
          (let ((timer nil))
            (setq timer
                  (run-with-timer
                   0 0.1
                   (lambda ()
                     (when (or (not (process-live-p inferior)) (<= (cl-decf tries) 0))
                       (cancel-timer timer)
                       (sly-agent-q-bridge--fail-closed entries inferior)))))))))))

(defun sly-agent-q-bridge--fail-closed (entries inferior)
  "Fail the pending ENTRIES of a closed connection.
INFERIOR is its Lisp process, or nil when Emacs did not start it."
  (let ((msg (pcase (and (processp inferior) (not (process-live-p inferior))
                         (process-status inferior))
               ('exit (format "The Lisp process exited (exit code %d) during the call, so its connection closed (the code may have called exit or quit). Start it again with M-x sly (or M-x slime)."
                              (process-exit-status inferior)))
               ('signal (format "The connection to the Lisp image closed during the call: the Lisp process was killed (signal %d)."
                                (process-exit-status inferior)))
               (_ "The connection to the Lisp image closed during the call (the Lisp may have exited, crashed or been killed)."))))
    (dolist (entry entries)
      (funcall (cdr entry) msg))))

;;;; Loading the helpers

(defun sly-agent-q-bridge-helpers-file ()
  "The absolute file name of lisp-cl/load.lisp, or nil if it cannot be found."
  (if sly-agent-q-lisp-cl-directory
      (let ((f (expand-file-name "load.lisp" sly-agent-q-lisp-cl-directory)))
        (and (file-exists-p f) f))
    (car (sly-agent-q-locate-package-files "lisp-cl/load.lisp"))))

(defun sly-agent-q-bridge--load-form (file)
  "Return a form to load FILE and report how it went, never debugging.
One load at a time in an image: a load that outlived Emacs's wait for
it (`sly-agent-q-helpers-load-timeout') still runs there, and a second
one beside it would compile the same files at once; the next waits for
it, marked on a keyword's property list (nothing interned elsewhere)."
  `(cl:progn
     (cl:loop :while (cl:get :sly-agent-q-helpers :loading) :do (cl:sleep 0.2))
     (cl:setf (cl:get :sly-agent-q-helpers :loading) t)
     (cl:unwind-protect
          (cl:handler-case
              (cl:progn
                (cl:load ,file)
                (cl:if (cl:find-package "SLY-AGENT-Q")
                       (cl:list :ok t)
                       (cl:list :ok nil :error ,(format "%s did not define the package SLY-AGENT-Q." file))))
            (cl:serious-condition (c)
              (cl:list :ok nil :error (cl:format nil "~A: ~A" (cl:type-of c) c))))
       (cl:setf (cl:get :sly-agent-q-helpers :loading) nil))))

(defvar sly-agent-q-bridge-helpers-functions nil
  "Functions told how a load of the helpers into an image goes.
Each is called with EVENT, CONN (the connection) and more:
- `started' LISP: the load starts in LISP (implementation and version,
  e.g. \"SBCL 2.2.9\");
- `waiting' CALL-ID: a tool call (the chat's CALL-ID, or nil when it
  has none) waits for the load instead of running now;
- `finished' LISP SECONDS ERROR: the load ended after SECONDS, with
  ERROR a message when it failed, nil when the helpers are loaded.
The chat shows them (sly-agent-q-helpers-load.el).")

(defun sly-agent-q-bridge--helpers-event (event conn &rest args)
  "Tell `sly-agent-q-bridge-helpers-functions' about EVENT on CONN with ARGS.
A failing function is logged, never in the way of the load."
  (apply #'sly-agent-q-connection-run-safely sly-agent-q-bridge-helpers-functions event conn args))

(defconst sly-agent-q-bridge--implementation-form
  '(cl:format nil "~A ~A" (cl:lisp-implementation-type) (cl:lisp-implementation-version))
  "The implementation and version of an image, as one string.")

(defun sly-agent-q-bridge-helpers-loading-p (conn)
  "Non-nil while the helpers load into CONN's image."
  (eq (car-safe (process-get conn 'sly-agent-q-helpers)) 'loading))

(defconst sly-agent-q-bridge-helpers-missing-message
  "The sly-agent-q Lisp helpers (lisp-cl/load.lisp) cannot be found; set sly-agent-q-lisp-cl-directory."
  "The answer to an image call when lisp-cl/load.lisp is not found.")

(defun sly-agent-q-bridge-ensure-helpers (adapter conn callback &optional call-id)
  "Load the helpers into CONN's image through ADAPTER unless done.
Then call CALLBACK with nil on success or an error message.  A load
that runs already is waited for, never started twice; a call that
waits says so to `sly-agent-q-bridge-helpers-functions' with CALL-ID,
the chat's id of the tool call (nil when it has none)."
  (let ((state (process-get conn 'sly-agent-q-helpers)))
    (pcase state
      ('loaded (funcall callback nil))
      (`(loading . ,_)
       (process-put conn 'sly-agent-q-helpers (append state (list callback)))
       (sly-agent-q-bridge--helpers-event 'waiting conn call-id))
      (_
       (let ((file (sly-agent-q-bridge-helpers-file)))
         (if (not file)
             (funcall callback sly-agent-q-bridge-helpers-missing-message)
           (process-put conn 'sly-agent-q-helpers (list 'loading callback))
           (sly-agent-q-bridge--helpers-event 'waiting conn call-id)
           (sly-agent-q-bridge--load-helpers adapter conn file)))))))

(defun sly-agent-q-bridge-start-helpers (adapter conn)
  "Start loading the helpers into CONN's image through ADAPTER, ahead of any call.
Nothing is done when they are loaded or loading; calls that come
meanwhile wait for this load.  Return non-nil when a load started."
  (let ((file (and (process-live-p conn)
                   (null (process-get conn 'sly-agent-q-helpers))
                   (sly-agent-q-bridge-helpers-file))))
    (when file
      (process-put conn 'sly-agent-q-helpers (list 'loading))
      (sly-agent-q-bridge--load-helpers adapter conn file)
      t)))

(defun sly-agent-q-bridge--load-helpers (adapter conn file)
  "Load FILE, the helpers, into CONN's image through ADAPTER; answer the waiting.
First the image says what it is (for the chat's notice and its
estimate), then the load runs, timed.  Both are asynchronous
evaluations: Emacs never waits, and an error is an answer, never the
user's debugger."
  (let ((finish
         (lambda (lisp seconds error)
           (let ((waiting (cdr (process-get conn 'sly-agent-q-helpers))))
             (process-put conn 'sly-agent-q-helpers (and (not error) 'loaded))
             (sly-agent-q-bridge--helpers-event 'finished conn lisp seconds error)
             (dolist (cb waiting) (sly-agent-q-connection-call-safely cb error))))))
    (sly-agent-q-bridge-eval
     adapter conn sly-agent-q-bridge--implementation-form "CL-USER" sly-agent-q-helpers-load-timeout
     (lambda (value error)
       (if error
           (funcall finish nil 0 (format "Loading the sly-agent-q helpers into the image failed: %s" error))
         (let ((lisp (format "%s" value))
               (start (float-time)))
           (sly-agent-q-bridge--helpers-event 'started conn lisp)
           (sly-agent-q-bridge-eval
            adapter conn (sly-agent-q-bridge--load-form file) "CL-USER"
            sly-agent-q-helpers-load-timeout
            (lambda (value error)
              (let* ((ok (and (not error) (plist-get value :ok)))
                     (msg (unless ok
                            (format "Loading the sly-agent-q helpers into the image failed: %s"
                                    (or error (plist-get value :error) "no reason given")))))
                (when msg (message "sly-agent-q: %s" (sly-agent-q-display-line msg)))
                (funcall finish lisp (- (float-time) start) msg))))))))))

;;;; Image calls

(defun sly-agent-q-bridge-json-to-lisp (value)
  "Turn the parsed JSON VALUE into data for the image.
Objects (plists) become alists with string keys, arrays lists, false
and null nil; strings, numbers and t stay."
  (cond ((eq value :json-false) nil)
        ((eq value :null) nil)
        ((vectorp value) (mapcar #'sly-agent-q-bridge-json-to-lisp value))
        ((and (consp value) (keywordp (car value)))
         (cl-loop for (k v) on value by #'cddr
                  collect (cons (substring (symbol-name k) 1)
                                (sly-agent-q-bridge-json-to-lisp v))))
        ((consp value) (mapcar #'sly-agent-q-bridge-json-to-lisp value))
        ((hash-table-p value)
         (let (out)
           (maphash (lambda (k v) (push (cons (format "%s" k) (sly-agent-q-bridge-json-to-lisp v)) out))
                    value)
           (nreverse out)))
        ((or (stringp value) (numberp value) (eq value t) (null value)) value)
        ((symbolp value) (symbol-name value))
        (t (format "%s" value))))

(defconst sly-agent-q-bridge-not-loaded-result
  '(cl:list :ok nil :error "The sly-agent-q helpers are not loaded in this image.")
  "The form answering a call when the helpers' package is missing.")

(defun sly-agent-q-bridge-helper-form (function arguments &optional count)
  "The form calling lisp-cl's FUNCTION (a string) with ARGUMENTS (forms).
When the helpers' package is missing, the form answers with
`sly-agent-q-bridge-not-loaded-result' instead of failing to read; COUNT,
if given, is how many calls FUNCTION answers, and as many answers come
back.  Built as data; nothing is pasted into source text."
  `(cl:if (cl:find-package "SLY-AGENT-Q")
          (cl:funcall (cl:find-symbol ,function "SLY-AGENT-Q") ,@arguments)
          ,(if count
               `(cl:list ,@(make-list count sly-agent-q-bridge-not-loaded-result))
             sly-agent-q-bridge-not-loaded-result)))

(defun sly-agent-q-bridge--call-arguments (tool arguments package timeout call-id)
  "CALL-TOOL's arguments, as forms, for helper TOOL with JSON ARGUMENTS.
PACKAGE, TIMEOUT and CALL-ID (when non-nil) are passed as keywords."
  `(,tool (quote ,(sly-agent-q-bridge-json-to-lisp arguments))
          :package ,package :timeout ,timeout ,@(and call-id `(:call-id ,call-id))))

(defun sly-agent-q-bridge-call-form (tool arguments package timeout &optional call-id)
  "The form calling helper TOOL with JSON ARGUMENTS in PACKAGE with TIMEOUT.
CALL-ID names the call for the helpers' cancel-call."
  (sly-agent-q-bridge-helper-form
   "CALL-TOOL" (sly-agent-q-bridge--call-arguments tool arguments package timeout call-id)))

;;;; Image calls sent together
;;
;; Each request through SLYNK/SWANK costs the image a worker thread,
;; spawned in turn by the connection's one control thread: a model's
;; hundred lookups sent as a hundred requests took ~100 ms of the
;; image's time, where running them took 12 ms (benchmarks, figure 2).
;; The calls that arrive together (the server's emacs/call notifications
;; read in one go) are queued on their connection and sent, when Emacs
;; is next idle for a moment, as one request: lisp-cl's CALL-TOOLS,
;; which runs them and answers each.  A call alone goes as before.

(defvar sly-agent-q-bridge--call-counter 0
  "Numbers the image calls, for their ids in the image.")

(cl-defstruct (sly-agent-q-bridge--job (:constructor sly-agent-q-bridge--make-job))
  "One image call waiting to be sent, or sent and not answered."
  tool arguments package timeout call-id
  deliver   ; (CONTENT ERROR) -> answers the call
  answered  ; non-nil once it was: a later answer is dropped
  batch)    ; the sly-agent-q-bridge--batch it went in, once sent

(cl-defstruct (sly-agent-q-bridge--batch (:constructor sly-agent-q-bridge--make-batch))
  "A request that carries several calls."
  stop      ; (MESSAGE) -> stops waiting for the request
  (live 0)) ; its calls not answered yet

(defun sly-agent-q-bridge--answer (job content error)
  "Answer JOB with CONTENT or ERROR unless it was answered; count it in its batch."
  (unless (sly-agent-q-bridge--job-answered job)
    (setf (sly-agent-q-bridge--job-answered job) t)
    (let ((batch (sly-agent-q-bridge--job-batch job)))
      (when batch (cl-decf (sly-agent-q-bridge--batch-live batch))))
    (sly-agent-q-connection-call-safely (sly-agent-q-bridge--job-deliver job) content error)))

(defun sly-agent-q-bridge--result (value)
  "The (CONTENT . ERROR) of VALUE, a result plist of CALL-TOOL."
  (cond ((and (consp value) (plist-get value :ok))
         (cons (format "%s" (or (plist-get value :content) "")) nil))
        (t (cons nil (format "%s" (or (and (consp value) (plist-get value :error))
                                      "The helper failed without a message."))))))

(defun sly-agent-q-bridge--enqueue (adapter conn job)
  "Queue JOB for CONN, to go through ADAPTER with whatever arrives with it."
  (process-put conn 'sly-agent-q-queue
               (cons job (process-get conn 'sly-agent-q-queue)))
  (unless (process-get conn 'sly-agent-q-flush)
    (process-put conn 'sly-agent-q-flush
                 (run-at-time 0 nil #'sly-agent-q-bridge--flush adapter conn))))

(defun sly-agent-q-bridge--flush (adapter conn)
  "Send what is queued on CONN through ADAPTER: one request for all of it."
  (let ((jobs (nreverse (process-get conn 'sly-agent-q-queue))))
    (process-put conn 'sly-agent-q-queue nil)
    (process-put conn 'sly-agent-q-flush nil)
    (cond ((null jobs))
          ((not (process-live-p conn))
           (dolist (job jobs)
             (sly-agent-q-bridge--answer job nil "The connection to the Lisp image closed.")))
          (t (sly-agent-q-bridge--send adapter conn jobs)))))

(defun sly-agent-q-bridge--send (adapter conn jobs)
  "Evaluate JOBS on CONN through ADAPTER in one request; answer each."
  (let* ((batch (sly-agent-q-bridge--make-batch :live (length jobs)))
         (one (null (cdr jobs)))
         (job1 (car jobs))
         (pkg (sly-agent-q-bridge--job-package job1))
         (timeout (sly-agent-q-bridge--job-timeout job1))
         (form (if one
                   (sly-agent-q-bridge-call-form
                    (sly-agent-q-bridge--job-tool job1) (sly-agent-q-bridge--job-arguments job1)
                    pkg timeout (sly-agent-q-bridge--job-call-id job1))
                 (sly-agent-q-bridge-calls-form jobs))))
    (dolist (job jobs) (setf (sly-agent-q-bridge--job-batch job) batch))
    (setf (sly-agent-q-bridge--batch-stop batch)
          (sly-agent-q-bridge-eval
           adapter conn form pkg
           ;; A batch runs its calls one after another for a moment, then
           ;; the rest side by side: at most two call timeouts in all.
           (if one (+ timeout 5) (+ (* 2 timeout) 5))
           (lambda (value error)
             (let ((values (if one (list value) value)))
               (dolist (job jobs)
                 (pcase-let ((`(,content . ,err)
                              (cond (error (cons nil error))
                                    ((consp values) (sly-agent-q-bridge--result (pop values)))
                                    (t (cons nil (format "Unexpected answer from the Lisp image: %S" value))))))
                   (sly-agent-q-bridge--answer job content err)))))
           ;; The image's own timeouts did not answer: still stop the calls.
           (lambda ()
             (dolist (job jobs)
               (sly-agent-q-bridge-send-cancel adapter conn (sly-agent-q-bridge--job-call-id job))))))))

(defun sly-agent-q-bridge-calls-form (jobs)
  "The form running JOBS (`sly-agent-q-bridge--job's) with CALL-TOOLS."
  (sly-agent-q-bridge-helper-form
   "CALL-TOOLS"
   `((cl:list ,@(mapcar (lambda (job)
                          `(cl:list ,@(sly-agent-q-bridge--call-arguments
                                       (sly-agent-q-bridge--job-tool job)
                                       (sly-agent-q-bridge--job-arguments job)
                                       (sly-agent-q-bridge--job-package job)
                                       (sly-agent-q-bridge--job-timeout job)
                                       (sly-agent-q-bridge--job-call-id job))))
                        jobs)))
   (length jobs)))

(defun sly-agent-q-bridge--cancel-job (adapter conn job message)
  "Answer JOB with MESSAGE; if it was sent, have the image stop it.
The cancel goes on CONN through ADAPTER.  When JOB was the last call
its request waited for, stop waiting."
  (let ((batch (sly-agent-q-bridge--job-batch job)))
    (if (not batch)
        ;; Still queued: dropped from the queue, never sent.
        (progn
          (process-put conn 'sly-agent-q-queue (delq job (process-get conn 'sly-agent-q-queue)))
          (sly-agent-q-bridge--answer job nil "The call was cancelled before it was sent to the image."))
      (sly-agent-q-bridge-send-cancel adapter conn (sly-agent-q-bridge--job-call-id job))
      (sly-agent-q-bridge--answer job nil message)
      (when (zerop (sly-agent-q-bridge--batch-live batch))
        (funcall (sly-agent-q-bridge--batch-stop batch) message)))))

(defun sly-agent-q-bridge-call-tool (tool arguments package callback &optional lisp chat-call-id)
  "Run helper TOOL with ARGUMENTS (a JSON plist) in the image, asynchronously.
PACKAGE is the package to read and evaluate in (nil: the REPL's).
CALLBACK gets (CONTENT nil) on success or (nil MESSAGE).
LISP, (ADAPTER . CONNECTION), is the Lisp to run it in (nil: the
current one); when its connection is closed, the call fails saying so.
CHAT-CALL-ID, the chat's id of the tool call, names the call when it
waits for the helpers' load (`sly-agent-q-bridge-helpers-functions').
Calls made together go to the image in one request.
Return a function of no arguments that cancels the call: the image
interrupts its evaluation, and CALLBACK gets an error."
  (let ((cur (or lisp (sly-agent-q-bridge-current)))
        (call-id (format "saq-%d-%d" (emacs-pid) (cl-incf sly-agent-q-bridge--call-counter)))
        cancelled job)
    (cond
     ((not cur)
      (funcall callback nil sly-agent-q-bridge-no-lisp-message) #'ignore)
     ((sly-agent-q-bridge-closed-message cur)
      (funcall callback nil (sly-agent-q-bridge-closed-message cur))
      #'ignore)
     (t
      (let ((adapter (car cur)) (conn (cdr cur)))
        (sly-agent-q-bridge-ensure-helpers
         adapter conn
         (lambda (load-error)
           (cond
            (cancelled nil)
            (load-error (funcall callback nil load-error))
            ((not (process-live-p conn))
             (funcall callback nil "The connection to the Lisp image closed."))
            (t
             (setq job (sly-agent-q-bridge--make-job
                        :tool tool :arguments arguments
                        :package (or (and (stringp package) (not (string-empty-p package)) package)
                                     (funcall (sly-agent-q-bridge-adapter-repl-package adapter) conn)
                                     "CL-USER")
                        :timeout sly-agent-q-image-timeout :call-id call-id :deliver callback))
             (sly-agent-q-bridge--enqueue adapter conn job))))
         chat-call-id)
        (lambda ()
          (unless cancelled
            (setq cancelled t)
            (if (not job)
                ;; Still loading the helpers: the call is never sent.
                (funcall callback nil "The call was cancelled before it was sent to the image.")
              (sly-agent-q-bridge--cancel-job
               adapter conn job (sly-agent-q-bridge--cancel-message adapter conn))))))))))

(defun sly-agent-q-bridge--cancel-message (adapter conn)
  "What a cancelled call answers on CONN, whose backend ADAPTER asks.
Without threads (a communication style other than :spawn, such as
CLISP's) the cancel waits behind the evaluation it would stop, so the
answer says the evaluation goes on, bounded by the image timeout."
  (let ((style (funcall (sly-agent-q-bridge-adapter-style adapter) conn)))
    (if (memq style '(:spawn unknown))
        "The call was cancelled; its evaluation in the image was interrupted."
      (format "The call was cancelled, but this Lisp runs without threads (communication style %s), so its evaluation in the image could not be interrupted: it goes on until it ends or reaches the image timeout (%s s)."
              style sly-agent-q-image-timeout))))

(cl-defmethod sly-agent-q-handle-call ((_kind (eql image)) call)
  "Answer the server's image CALL through the connected Lisp."
  (cl-destructuring-bind (&key tool arguments package callId &allow-other-keys)
      (sly-agent-q-call-params call)
    (let* ((lisp (and sly-agent-q-bridge-lisp-function
                      (funcall sly-agent-q-bridge-lisp-function (sly-agent-q-call-params call))))
           (answer (lambda (content error)
                     (if error
                         (sly-agent-q-call-fail call error)
                       (sly-agent-q-call-reply call (list :content content)))))
           (cancel (if (stringp lisp)
                       (progn (funcall answer nil lisp) #'ignore)
                     (sly-agent-q-bridge-call-tool tool arguments package answer lisp
                                                   (and (stringp callId) callId)))))
      ;; The server's emacs/cancel (a cancelled turn or call, its timeout)
      ;; stops the evaluation in the image, not only the wait for it.
      (sly-agent-q-call-on-cancel call (lambda (_reason) (funcall cancel))))))

(defun sly-agent-q-bridge--lisp-connected (&rest _)
  "Tell the server the current package of a Lisp that just connected."
  (when (sly-agent-q-connection-ready-p)
    (let ((pkg (ignore-errors (sly-agent-q-bridge-current-package))))
      (when pkg
        (sly-agent-q-server-notify 'context/change (list :currentPackage pkg))))))

(add-hook 'sly-connected-hook #'sly-agent-q-bridge--lisp-connected)
(add-hook 'slime-connected-hook #'sly-agent-q-bridge--lisp-connected)

;; Options that widen what the agent may do (or what runs, where data
;; goes) are marked risky, so that a .dir-locals.el planted in a cloned
;; repository cannot set them silently, nor be marked safe for good.
;; Autoloaded: a .dir-locals.el visited before the package loads is
;; asked about as risky too (package.el loads the autoloads at start).
;;;###autoload
(dolist (option '(sly-agent-q-lisp-cl-directory))
  (put option 'risky-local-variable t)
  ;; A value marked safe for good (`!') before the option was known to
  ;; be risky would be applied without a question: it is forgotten.
  (setq safe-local-variable-values
        (assq-delete-all option safe-local-variable-values)))

(provide 'sly-agent-q-bridge)
;;; sly-agent-q-bridge.el ends here
