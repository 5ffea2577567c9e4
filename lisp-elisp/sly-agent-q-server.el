;;; sly-agent-q-server.el --- Connection to the sly-agent-q server  -*- lexical-binding: t; -*-

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

;; Starts the bundled Node server (dist/sly-agent-q-server.js) over stdio
;; with `jsonrpc-process-connection', initializes it with the user's
;; configuration, and dispatches what the server sends:
;;
;; - each notification (chat/textDelta, chat/toolCall, ...) goes to its
;;   `sly-agent-q-handle-notification' method (sly-agent-q-protocol.el
;;   declares the protocol);
;; - `emacs/call' notifications (kinds tool, image, approval) go to the
;;   `sly-agent-q-handle-call' method of their kind.  A method starts its
;;   work and returns at once; it answers later with
;;   `sly-agent-q-call-reply' or `sly-agent-q-call-fail', which send
;;   `emacs/reply'.  Nothing here waits inside the process filter.
;;
;; The API key never travels in a JSON-RPC message (jsonrpc.el logs every
;; message in its events buffer): it is put in the server's process
;; environment (ANTHROPIC_API_KEY or OPENAI_API_KEY).
;;
;; When the server dies unexpectedly, pending calls are dropped, the
;; functions in `sly-agent-q-connection-died-functions' run (the chat buffer
;; prints a notice) and the server is started again.

;;; Code:

(require 'cl-lib)
(require 'eieio)
(require 'jsonrpc)
(require 'seq)
(require 'subr-x)
(require 'sly-agent-q-install)
(require 'sly-agent-q-protocol)
(require 'sly-agent-q-display)
(require 'sly-agent-q-options)
(require 'sly-agent-q-locate)
(require 'sly-agent-q-configuration)
(require 'sly-agent-q-connection)
(require 'sly-agent-q-collections)
(require 'sly-agent-q-redact)
(require 'sly-agent-q-pieces)
(require 'sly-agent-q-dispatch)

(declare-function sly-agent-q-bridge-current-package "sly-agent-q-bridge" ())
(declare-function url-generic-parse-url "url-parse" (url))
(defun sly-agent-q-server--capabilities ()
  "What this Emacs can do for the server."
  (list :tools (if (fboundp 'sly-agent-q-tool-call-run) t :json-false)
        :image t
        :approvals t))

(defvar sly-agent-q-server--restart-times nil
  "Times of the recent automatic restarts.")

(defcustom sly-agent-q-read-process-output-max (* 1024 1024)
  "The least `read-process-output-max' that starting the server sets, or nil.
With Emacs's default of 4 KB a large tool result arrives in hundreds
of reads, and keys wait until they are done: a 1 MB result made a key
take 300 ms to show (benchmarks, figure 7), 20 ms with 1 MB.  The
value is global, so starting the server raises it (never lowers it)
and leaves it so; nil leaves it alone."
  :type '(choice (const :tag "Leave read-process-output-max alone" nil) integer)
  :group 'sly-agent-q)

(defun sly-agent-q-server--make-process (node file)
  "Start NODE running the server FILE, the API key in its environment."
  (when (and sly-agent-q-read-process-output-max
             (< read-process-output-max sly-agent-q-read-process-output-max))
    (setq read-process-output-max sly-agent-q-read-process-output-max))
  (let* ((key (sly-agent-q-configuration-api-key))
         (_ (setq sly-agent-q-redact-server-key
                  (and key (cons (sly-agent-q-configuration-key-variable) key))))
         (process-environment
          (if key
              (cons (concat (sly-agent-q-configuration-key-variable) "=" key) process-environment)
            process-environment))
         (default-directory (file-name-directory file))
         ;; Adaptive buffering holds back small reads for up to tens of milliseconds, a delay
         ;; every message of every tool round trip would pay (make bench, figure 1).
         (process-adaptive-read-buffering nil))
    (make-process
     :name "sly-agent-q"
     :command (list node file "--stdio" "--log-level"
                    (or sly-agent-q-server-log-level "info"))
     :connection-type 'pipe
     :coding 'utf-8-emacs-unix
     :noquery t
     :file-handler nil
     :stderr (get-buffer-create "*sly-agent-q stderr*"))))

(defun sly-agent-q-server--events-buffer-initargs (size)
  "The initargs that cap the connection's events buffer at SIZE characters.
Newer jsonrpc.el takes `:events-buffer-config' and warns at every start
about `:events-buffer-scrollback-size', the only one 1.0.14 (Emacs 28)
knows.  The class is probed for the newer slot: the library says no
version."
  (if (memq '-events-buffer-config
            (mapcar #'eieio-slot-descriptor-name (eieio-class-slots 'jsonrpc-connection)))
      (list :events-buffer-config (list :size size :format 'full))
    (list :events-buffer-scrollback-size size)))

(defun sly-agent-q-server-start ()
  "Start the server (stopping a running one) and initialize it.
Return the new connection; it becomes ready asynchronously."
  (let* ((node (sly-agent-q-locate-node))
         (found (or (sly-agent-q-locate-find-server) (sly-agent-q-locate-server)))
         (file (car found)))
    (when (sly-agent-q-connection-live-p)
      (sly-agent-q-server-stop))
    (let ((conn (apply
                 #'make-instance
                 'sly-agent-q-connection
                 :name "sly-agent-q"
                 :notification-dispatcher #'sly-agent-q-dispatch-notification
                 :request-dispatcher #'sly-agent-q-dispatch-request
                 :on-shutdown #'sly-agent-q-server--on-shutdown
                 :process (lambda () (sly-agent-q-server--make-process node file))
                 (sly-agent-q-server--events-buffer-initargs sly-agent-q-events-buffer-size))))
      (setq sly-agent-q-current-connection conn)
      (setf (sly-agent-q-connection-found conn) found)
      (sly-agent-q-connection-log conn "started %s %s" node file)
      ;; If the process is already dead the request cannot be sent;
      ;; the sentinel reports that.
      (ignore-error error
       (jsonrpc-async-request
       conn 'initialize
       (list :clientInfo (list :name "sly-agent-q.el"
                               :version (or (bound-and-true-p sly-agent-q-version) "0"))
             :capabilities (sly-agent-q-server--capabilities)
             :configuration (sly-agent-q-configuration-for-server)
             :context (sly-agent-q-configuration-plist-compact
                       (list :projectRoot (sly-agent-q-configuration-project-root)
                             :currentPackage
                             (and (fboundp 'sly-agent-q-bridge-current-package)
                                  (ignore-errors (sly-agent-q-bridge-current-package))))))
       :success-fn (lambda (result) (sly-agent-q-server--initialized conn result nil))
       :error-fn (lambda (err) (sly-agent-q-server--initialized
                                conn nil (or (plist-get err :message) (format "%S" err))))
       :timeout-fn (lambda () (sly-agent-q-server--initialized
                               conn nil "the server did not answer initialize"))
       :timeout sly-agent-q-request-timeout))
      conn)))

(defun sly-agent-q-server--initialized (conn result error)
  "Record initialize's RESULT or ERROR for CONN and run its ready callbacks."
  (if (and error (not (jsonrpc-running-p conn)))
      ;; The process died: `sly-agent-q-server--on-shutdown' reports it, with its stderr.
      nil
    (sly-agent-q-server--initialized-1 conn result error)))

(defun sly-agent-q-server--initialized-1 (conn result error)
  "Record initialize's RESULT or ERROR for CONN and run its ready callbacks."
  (setf (sly-agent-q-connection-status conn) (if error 'failed 'ready))
  (setf (sly-agent-q-connection-init-result conn) result)
  (setf (sly-agent-q-connection-model-thinking conn) (plist-get result :thinking))
  (when error
    (message "sly-agent-q: the server failed to initialize: %s" (sly-agent-q-display-line error)))
  (let ((advice (and (not error) (sly-agent-q-server-version-problem conn))))
    ;; The version handshake: say what to run; carry on, most versions still talk.
    (when advice (display-warning 'sly-agent-q advice :warning)))
  (let ((callbacks (reverse (sly-agent-q-connection-ready-callbacks conn))))
    (setf (sly-agent-q-connection-ready-callbacks conn) nil)
    (unless error
      (sly-agent-q-connection-run-safely sly-agent-q-connection-started-functions conn))
    (dolist (cb callbacks)
      (sly-agent-q-connection-call-safely cb (and (not error) conn)
                                          (and error (format "The server failed to initialize: %s" error))))))

(defun sly-agent-q-server-lisp-arguments (tool)
  "The names (strings) of the arguments of TOOL that hold Lisp source, or nil.
TOOL is a tool's name as the model calls it; the running server said
which at initialize."
  (let* ((c sly-agent-q-current-connection)
         (table (and c (plist-get (sly-agent-q-connection-init-result c) :lispArguments)))
         (names (and (stringp tool) (listp table) (plist-get table (intern (concat ":" tool))))))
    (and (or (vectorp names) (listp names))
         (seq-filter #'stringp (append names nil)))))

(defun sly-agent-q-server-version-problem (&optional conn)
  "What the user should run when CONN's server is not the version needed, or nil.
CONN defaults to the current connection."
  (let ((c (or conn sly-agent-q-current-connection)))
    (and c (sly-agent-q-connection-init-result c)
         (sly-agent-q-locate-version-advice
          (plist-get (plist-get (sly-agent-q-connection-init-result c) :serverInfo) :version)
          (sly-agent-q-connection-found c)))))

(defun sly-agent-q-server-ensure (callback)
  "Call CALLBACK with (CONNECTION nil) once the server is ready.
Start it when it is not running.  On failure CALLBACK gets (nil MESSAGE).
CALLBACK may be called before this function returns.
Called while the current server's death is being handled (from a
request's error handler, which jsonrpc runs before
`sly-agent-q-server--on-shutdown'), it waits until that is done: a server
started then would take the dead one's place before its death was
reported, and the chat would never be told."
  (let ((c sly-agent-q-current-connection))
    (if (and c (not (jsonrpc-running-p c))
             (not (memq (sly-agent-q-connection-status c) '(dead failed))))
        (run-at-time 0 nil #'sly-agent-q-server--ensure-now callback)
      (sly-agent-q-server--ensure-now callback))))

(defun sly-agent-q-server--ensure-now (callback)
  "Call CALLBACK with (CONNECTION nil) once the server is ready, starting it.
See `sly-agent-q-server-ensure'."
  (let* ((problem nil)
         (conn (condition-case err
                   (if (and (sly-agent-q-connection-live-p)
                            (not (eq (sly-agent-q-connection-status sly-agent-q-current-connection) 'failed)))
                       sly-agent-q-current-connection
                     ;; Not running, or initialize failed (a bad option?): start afresh.
                     (sly-agent-q-server-start))
                 (user-error (setq problem (error-message-string err)) nil)
                 (error (setq problem (format "Could not start the sly-agent-q server: %s"
                                              (error-message-string err)))
                        nil))))
    (if problem
        (funcall callback nil problem)
      (pcase (sly-agent-q-connection-status conn)
        ('ready (funcall callback conn nil))
        ('starting (push callback (sly-agent-q-connection-ready-callbacks conn)))
        (_ (funcall callback nil "The server is not available; M-x sly-agent-q-restart-server starts it again."))))))

(defun sly-agent-q-server--check-method (method kind)
  "Signal unless METHOD is a KIND Emacs may send (see sly-agent-q-protocol.el)."
  (unless (sly-agent-q-protocol-method-p method 'emacs->server kind)
    (error "sly-agent-q: %s is not a %s of the protocol" method kind)))

(defun sly-agent-q-server-async-request (conn method params &rest args)
  "Send request METHOD with PARAMS on CONN; ARGS go to `jsonrpc-async-request'.
METHOD must be a request of the protocol."
  (sly-agent-q-server--check-method method 'request)
  (apply #'jsonrpc-async-request conn method params args))

(defun sly-agent-q-server-request (method params success &optional failure)
  "Send request METHOD with PARAMS once the server is ready, asynchronously.
Call SUCCESS with the result, or FAILURE (if given) with a message;
a request that cannot be written to the server (its process stopped
by a signal) fails too, rather than signalling."
  (sly-agent-q-server--check-method method 'request)
  (let ((fail (lambda (msg)
                (if failure (funcall failure msg)
                  (message "sly-agent-q: %s failed: %s" method (sly-agent-q-display-line msg))))))
    (sly-agent-q-server-ensure
     (lambda (conn err)
       (if err (funcall fail err)
         (condition-case e
             (sly-agent-q-server-async-request
              conn method params
              :success-fn success
              :error-fn (lambda (e) (funcall fail (or (plist-get e :message) (format "%S" e))))
              :timeout-fn (lambda () (funcall fail (format "the server did not answer %s" method)))
              :timeout sly-agent-q-request-timeout)
           (error (funcall fail (format "%s was not sent (%s)" method (error-message-string e))))))))))

(defun sly-agent-q-server-notify (method params)
  "Send notification METHOD with PARAMS if the server is running."
  (sly-agent-q-server--check-method method 'notification)
  (when (sly-agent-q-connection-live-p)
    (jsonrpc-notify sly-agent-q-current-connection method params)))

(defun sly-agent-q-server-reconfigure (&optional interactive)
  "Send the current configuration options to the running server.
INTERACTIVE non-nil (as when called as a command) says so in the echo
area once the server took them; the answer comes in a callback, where
`called-interactively-p' would always be nil."
  (interactive (list t))
  (if (sly-agent-q-connection-ready-p)
      (let ((conn sly-agent-q-current-connection))
        (sly-agent-q-server-request 'configuration/change
                                    (list :configuration (sly-agent-q-configuration-for-server))
                                    (lambda (result)
                                      ;; What the model now in use thinks: the menu says it.
                                      (when conn
                                        (setf (sly-agent-q-connection-model-thinking conn)
                                              (plist-get result :thinking)))
                                      (when interactive
                                        (message "sly-agent-q: configuration sent")))))
    (when interactive
      (message "sly-agent-q: the server is not running; it gets the configuration when it starts"))))

;; An option the configuration reads, changed however (setq, Customize, the menu), reaches a
;; running server: the README promises that a level or rule takes effect at once.

(defvar sly-agent-q-server--reconfigure-timer nil
  "The timer that sends the configuration after options changed, or nil.")

(defun sly-agent-q-server--option-changed (_symbol _value operation where)
  "Send the configuration again once an option in it changed.
This watches `setq', `set-default' and Customize (OPERATION `set'
with no buffer WHERE), not `let'.  A watcher runs before the value
is set: the configuration goes from a timer, once for a burst."
  (when (and (memq operation '(set makunbound)) (null where)
             (not (timerp sly-agent-q-server--reconfigure-timer)))
    (setq sly-agent-q-server--reconfigure-timer
          (run-at-time 0 nil (lambda ()
                               (setq sly-agent-q-server--reconfigure-timer nil)
                               (sly-agent-q-server-reconfigure))))))

(dolist (option sly-agent-q-configuration-options)
  (add-variable-watcher option #'sly-agent-q-server--option-changed))

(defun sly-agent-q-server-stop ()
  "Shut the server down cleanly: shutdown, exit, then `jsonrpc-shutdown'.
Waits at most about three seconds, so it is for commands only: never
call it from a process filter, a timer or `kill-emacs-hook' (see
`sly-agent-q-server--kill-emacs')."
  (interactive)
  (let ((conn sly-agent-q-current-connection))
    (when (and conn (jsonrpc-running-p conn))
      (setf (sly-agent-q-connection-status conn) 'stopping)
      (ignore-errors (jsonrpc-request conn 'shutdown nil :timeout 2))
      (ignore-errors (jsonrpc-notify conn 'exit nil))
      ;; A moment to exit on its own (status 0); `jsonrpc-shutdown' then
      ;; deletes what is left and waits for the sentinel's cleanup.
      (let ((proc (jsonrpc--process conn))
            (deadline (+ (float-time) 1)))
        (while (and (process-live-p proc) (< (float-time) deadline))
          (accept-process-output proc 0.05)))
      (jsonrpc-shutdown conn))
    (setq sly-agent-q-current-connection nil)))

(defun sly-agent-q-restart-server ()
  "Stop the server if it is running and start it again."
  (interactive)
  (sly-agent-q-server-stop)
  (sly-agent-q-server-ensure
   (lambda (_conn err)
     (message "sly-agent-q: %s" (sly-agent-q-display-line (or err "server restarted"))))))

(defun sly-agent-q-list-tools (&optional all)
  "Show the tools offered to the model, with their safety levels.
With a prefix argument ALL, show every registered tool."
  (interactive "P")
  (sly-agent-q-server-request
   'tools/list (list :all (if all t :json-false))
   (lambda (result)
     (with-help-window "*sly-agent-q tools*"
       (princ (format "%-24s %-10s %-10s %-7s %s\n" "Tool" "Level" "In force" "Runs in" "Description"))
       (seq-doseq (tool (plist-get result :tools))
         (princ (format "%-24s %-10s %-10s %-7s %s\n"
                        (plist-get tool :name)
                        (plist-get tool :safetyLevel)
                        (plist-get tool :effectiveSafetyLevel)
                        (plist-get tool :runtime)
                        (car (split-string (or (plist-get tool :description) "") "\n")))))))))

(defun sly-agent-q-events-buffer ()
  "Show the JSON-RPC events buffer of the server connection."
  (interactive)
  (unless sly-agent-q-current-connection (user-error "The sly-agent-q server is not running"))
  (display-buffer (jsonrpc-events-buffer sly-agent-q-current-connection))
  (when (equal sly-agent-q-events-buffer-size 0)
    (message "The events log is off; %s turns it on"
             (substitute-command-keys "\\[sly-agent-q-toggle-events-log]"))))

(defun sly-agent-q-server--set-events-log (conn size)
  "Make CONN log up to SIZE characters of events from now on (0: none).
The connection's slot is set the way
`sly-agent-q-server--events-buffer-initargs' chose it at the start, so
the running server need not restart."
  (let ((initargs (sly-agent-q-server--events-buffer-initargs size)))
    (if (eq (car initargs) :events-buffer-config)
        (setf (slot-value conn '-events-buffer-config) (cadr initargs))
      (setf (slot-value conn '-events-buffer-scrollback-size) size))))

(defun sly-agent-q-toggle-events-log ()
  "Turn the JSON-RPC events log on or off, for the running server too.
See `sly-agent-q-events-buffer-size'; \\[sly-agent-q-events-buffer] shows the log."
  (interactive)
  (setq sly-agent-q-events-buffer-size
        (if (equal sly-agent-q-events-buffer-size 0) sly-agent-q-events-log-on-size 0))
  (when sly-agent-q-current-connection
    (sly-agent-q-server--set-events-log sly-agent-q-current-connection sly-agent-q-events-buffer-size))
  (message "sly-agent-q: the events log is %s"
           (if (equal sly-agent-q-events-buffer-size 0) "off" "on")))

(defun sly-agent-q-stderr-buffer ()
  "Show the server's standard error (its log)."
  (interactive)
  (let ((buf (and sly-agent-q-current-connection
                  (jsonrpc-stderr-buffer sly-agent-q-current-connection))))
    (unless (buffer-live-p buf) (user-error "No sly-agent-q server log"))
    (display-buffer buf)))

(defun sly-agent-q-server--on-shutdown (conn)
  "Clean up after the death of CONN's process; tell the user, maybe restart."
  (let* ((proc (jsonrpc--process conn))
         (status (sly-agent-q-connection-status conn))
         (expected (memq status '(stopping)))
         (msg (format "The sly-agent-q server exited (%s %s)"
                      (process-status proc) (process-exit-status proc))))
    (setf (sly-agent-q-connection-status conn) 'dead)
    ;; No more traffic is coming: the user's threshold is back at once.
    (sly-agent-q-collections-release)
    (when (sly-agent-q-connection-outbox-timer conn) (cancel-timer (sly-agent-q-connection-outbox-timer conn)))
    (setf (sly-agent-q-connection-outbox conn) nil)
    (maphash (lambda (_id call) (sly-agent-q-call-drop call "the server exited"))
             (sly-agent-q-connection-calls conn))
    (clrhash (sly-agent-q-connection-calls conn))
    (let ((callbacks (reverse (sly-agent-q-connection-ready-callbacks conn))))
      (setf (sly-agent-q-connection-ready-callbacks conn) nil)
      (when callbacks
        ;; Report a little later, so that the last of its stderr has arrived.
        (run-with-timer
         0.2 nil
         (lambda ()
           (let ((why (format "%s before it was ready%s; see M-x sly-agent-q-stderr-buffer."
                              msg (sly-agent-q-server--stderr-tail conn))))
             (dolist (cb callbacks)
               (sly-agent-q-connection-call-safely cb nil why)))))))
    (when (eq conn sly-agent-q-current-connection)
      (unless expected
        (let* ((now (float-time))
               (recent (cl-remove-if (lambda (tm) (< tm (- now 60))) sly-agent-q-server--restart-times))
               (restart (and sly-agent-q-server-auto-restart
                             (eq status 'ready)
                             (< (length recent) 3))))
          (setq sly-agent-q-server--restart-times recent)
          (sly-agent-q-connection-run-safely sly-agent-q-connection-died-functions
                                             (concat msg (if restart "; restarting it."
                                                           "; M-x sly-agent-q-restart-server starts it again.")))
          (when restart
            (push now sly-agent-q-server--restart-times)
            (run-with-timer 0 nil #'sly-agent-q-server--auto-restart conn)))))))

(defun sly-agent-q-server--stderr-tail (conn)
  "The last lines CONN's server wrote to stderr after a colon, or the empty string."
  (let ((buf (ignore-errors (jsonrpc-stderr-buffer conn))))
    (if (not (buffer-live-p buf)) ""
      (with-current-buffer buf
        (let ((text (string-trim (buffer-substring-no-properties
                                  (save-excursion (goto-char (point-max))
                                                  (forward-line -3)
                                                  (point))
                                  (point-max)))))
          (if (string-empty-p text) "" (concat ": " text)))))))

(defun sly-agent-q-server--auto-restart (dead)
  "Start the server again unless something replaced DEAD already."
  (when (and (eq sly-agent-q-current-connection dead) (not (sly-agent-q-connection-live-p)))
    (sly-agent-q-server-ensure
     (lambda (_conn err)
       (when err (message "sly-agent-q: restart failed: %s" (sly-agent-q-display-line err)))))))

(defun sly-agent-q-server--kill-emacs ()
  "Tell the server to shut down when Emacs exits, without waiting for it.
Waiting here hangs an Emacs whose terminal is gone (SIGHUP): it kept
running, busy, after its terminal closed.  The server reads shutdown
and exit from the pipe and exits on its own."
  (let ((conn sly-agent-q-current-connection))
    (when (and conn (jsonrpc-running-p conn))
      (setf (sly-agent-q-connection-status conn) 'stopping)
      (ignore-errors
        (jsonrpc-async-request conn 'shutdown nil
                               :success-fn #'ignore :error-fn #'ignore :timeout-fn #'ignore))
      (ignore-errors (jsonrpc-notify conn 'exit nil)))))

(add-hook 'kill-emacs-hook #'sly-agent-q-server--kill-emacs)

(provide 'sly-agent-q-server)
;;; sly-agent-q-server.el ends here
