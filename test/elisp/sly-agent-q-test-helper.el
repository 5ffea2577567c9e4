;;; sly-agent-q-test-helper.el --- Shared helpers of the sly-agent-q ERT tests  -*- lexical-binding: t; -*-

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

;; Load path setup, a deadline-bounded wait (tests only: product code
;; never waits), the scripted mock LLM server and the real bundled
;; server, and finding SLIME / SLY for the bridge tests.

;;; Code:

(require 'ert)
(require 'cl-lib)
(require 'json)
(require 'url)

(defconst sly-agent-q-test-root
  (expand-file-name "../.." (file-name-directory (or load-file-name buffer-file-name)))
  "The root of the source checkout.")

(add-to-list 'load-path (expand-file-name "lisp-elisp" sly-agent-q-test-root))
(setq load-prefer-newer t)

(require 'sly-agent-q)

(defvar sly-agent-q-test-timeout 20
  "Default seconds `sly-agent-q-test-wait' waits.")

(defun sly-agent-q-test-wait (pred &optional timeout what)
  "Process events until PRED returns non-nil, at most TIMEOUT seconds.
Return PRED's value; fail the test naming WHAT on timeout (a string,
or a function returning one)."
  (let ((deadline (+ (float-time) (or timeout sly-agent-q-test-timeout)))
        value)
    (while (and (not (setq value (funcall pred)))
                (< (float-time) deadline))
      (accept-process-output nil 0.05))
    (or value
        (ert-fail (list (format "Timed out after %ss waiting for %s"
                                (or timeout sly-agent-q-test-timeout)
                                (if (functionp what) (funcall what) (or what pred))))))))

(defun sly-agent-q-test-sleep (seconds)
  "Process events for SECONDS."
  (let ((deadline (+ (float-time) seconds)))
    (while (< (float-time) deadline)
      (accept-process-output nil 0.02))))

;;;; A server killed at a request

(defvar sly-agent-q-test-killed-server nil
  "The server process `sly-agent-q-test-kill-server-at' killed, once it did.")

(defun sly-agent-q-test-kill-server-at (method)
  "Kill the server right after it is sent the request METHOD, a symbol.
What it wrote is never read: on a second core it may answer before
the kill, and the test would see a server that answered, then died.
The process killed goes into `sly-agent-q-test-killed-server'.  Call
`sly-agent-q-test-stop-killing' afterwards."
  (setq sly-agent-q-test-killed-server nil)
  (advice-add 'sly-agent-q-server-request :after
              (lambda (requested &rest _)
                (when (and (eq requested method) (not sly-agent-q-test-killed-server))
                  (let ((process (jsonrpc--process sly-agent-q-current-connection)))
                    (set-process-filter process #'ignore)
                    (signal-process process 'SIGKILL)
                    (setq sly-agent-q-test-killed-server process))))
              '((name . sly-agent-q-test-kill-at))))

(defun sly-agent-q-test-stop-killing ()
  "Undo `sly-agent-q-test-kill-server-at'."
  (advice-remove 'sly-agent-q-server-request 'sly-agent-q-test-kill-at))

;;;; The mock LLM

(defvar sly-agent-q-test-mock nil "The mock LLM process.")
(defvar sly-agent-q-test-mock-url nil "The mock LLM's base URL.")

(defun sly-agent-q-test-mock-available-p ()
  "Non-nil when the mock LLM and the bundled server exist."
  (and (file-exists-p (expand-file-name "test/fixtures/mock-llm/cli.mjs" sly-agent-q-test-root))
       (file-exists-p (expand-file-name "dist/sly-agent-q-server.js" sly-agent-q-test-root))
       (executable-find "node")))

(defun sly-agent-q-test-start-mock (script)
  "Start the mock LLM with SCRIPT (a Lisp value encoded as JSON); return its URL."
  (let* ((file (make-temp-file "agent-q-script" nil ".json" (json-encode script)))
         (buf (generate-new-buffer " *mock-llm*"))
         (proc (make-process :name "mock-llm" :buffer buf :noquery t
                             :connection-type 'pipe
                             :command (list "node" (expand-file-name "test/fixtures/mock-llm/cli.mjs"
                                                                     sly-agent-q-test-root)
                                            "--script" file)
                             :stderr (get-buffer-create " *mock-llm stderr*"))))
    (setq sly-agent-q-test-mock proc)
    (sly-agent-q-test-wait (lambda () (with-current-buffer buf
                                         (goto-char (point-min))
                                         (search-forward "\n" nil t)))
                           10 "the mock LLM to start")
    (setq sly-agent-q-test-mock-url
          (with-current-buffer buf
            (goto-char (point-min))
            (cdr (assq 'url (json-read)))))))

(defun sly-agent-q-test-stop-mock ()
  "Stop the mock LLM."
  (when (process-live-p sly-agent-q-test-mock)
    (ignore-errors (process-send-eof sly-agent-q-test-mock))
    (sly-agent-q-test-wait (lambda () (not (process-live-p sly-agent-q-test-mock))) 5 "mock exit")
    (when (process-live-p sly-agent-q-test-mock) (delete-process sly-agent-q-test-mock)))
  (setq sly-agent-q-test-mock nil))

(defun sly-agent-q-test-mock-requests ()
  "The requests the mock LLM recorded, as parsed JSON (alists)."
  (let ((buf (url-retrieve-synchronously (concat sly-agent-q-test-mock-url "/_requests") t t 5)))
    (with-current-buffer buf
      (goto-char (point-min))
      (re-search-forward "\n\n")
      ;; The body is UTF-8 bytes: read the characters the mock received.
      (set-buffer-multibyte t)
      (decode-coding-region (point) (point-max) 'utf-8)
      (prog1 (json-read) (kill-buffer)))))

(defun sly-agent-q-test-tool-results ()
  "Every tool_result the model received, in order, as (TEXT . IS-ERROR).
Read from the last request the mock LLM recorded, which carries the
whole history."
  (let ((last (car (last (append (sly-agent-q-test-mock-requests) nil)))))
    (cl-loop for message across (alist-get 'messages (alist-get 'body last))
             for content = (alist-get 'content message)
             when (vectorp content)
             append (cl-loop for block across content
                             when (equal (alist-get 'type block) "tool_result")
                             collect (cons (let ((c (alist-get 'content block)))
                                             (if (stringp c) c
                                               (mapconcat (lambda (b) (or (alist-get 'text b) "")) c "")))
                                           (eq (alist-get 'is_error block) t))))))

;;;; The real server

(defconst sly-agent-q-test-api-key "sk-ant-test-SECRET-0123456789"
  "The API key the tests give the server; it must never show in a buffer.")

(defun sly-agent-q-test-bundle-json (flag object-type)
  "What the bundled server prints for FLAG, parsed with OBJECT-TYPE (`alist', `plist')."
  (let ((file (car (sly-agent-q-locate-find-server))))
    (should (and file (file-exists-p file)))
    (with-temp-buffer
      (should (eql 0 (call-process "node" nil t nil file flag)))
      (json-parse-string (buffer-string) :object-type object-type :array-type 'list))))

;;;; Every message in shape

(defvar sly-agent-q-test-protocol-problems nil
  "What was wrong with the messages sent while checking (see below).")

(defvar sly-agent-q-test--call-kinds nil
  "Alist from an `emacs/call' id to its kind, to check the reply's result.")

(defun sly-agent-q-test--check-sent (_conn &rest message)
  "Record what is wrong with MESSAGE, which Emacs sends the server."
  (let ((method (plist-get message :method)))
    (when method
      (let* ((name (format "%s" method))
             (params (plist-get message :params)))
        (setq sly-agent-q-test-protocol-problems
              (append sly-agent-q-test-protocol-problems
                      (sly-agent-q-protocol-check name :params params)
                      ;; A reply's result has the shape of its call's kind.
                      (let ((kind (cdr (assoc (plist-get params :id) sly-agent-q-test--call-kinds))))
                        (and (equal name "emacs/reply") kind (plist-member params :result)
                             (sly-agent-q-protocol-check (format "emacs/call:%s" kind) :result
                                                         (plist-get params :result))))))))))

(defun sly-agent-q-test--check-received (_conn method params)
  "Record what is wrong with notification METHOD's PARAMS from the server."
  (when (eq method 'emacs/call)
    (push (cons (plist-get params :id) (plist-get params :kind)) sly-agent-q-test--call-kinds))
  (setq sly-agent-q-test-protocol-problems
        (append sly-agent-q-test-protocol-problems
                (sly-agent-q-protocol-check (symbol-name method) :params params))))

(defmacro sly-agent-q-test-checking-protocol (&rest body)
  "Run BODY, then fail if a message either end sent meanwhile is out of shape.
The shapes are server/protocol.ts's (`sly-agent-q-protocol-table-shapes')."
  (declare (indent 0) (debug t))
  `(let ((sly-agent-q-test-protocol-problems nil)
         (sly-agent-q-test--call-kinds nil))
     (advice-add 'jsonrpc-connection-send :before #'sly-agent-q-test--check-sent)
     (advice-add 'sly-agent-q-dispatch-notification :before #'sly-agent-q-test--check-received)
     (unwind-protect
         (prog1 (progn ,@body)
           (should-not sly-agent-q-test-protocol-problems))
       (advice-remove 'jsonrpc-connection-send #'sly-agent-q-test--check-sent)
       (advice-remove 'sly-agent-q-dispatch-notification #'sly-agent-q-test--check-received))))

(defmacro sly-agent-q-test-with-server (script &rest body)
  "Run BODY with the mock LLM playing SCRIPT and the real server started.
The chat buffer is fresh; everything is stopped afterwards."
  (declare (indent 1) (debug t))
  `(progn
     (unless (sly-agent-q-test-mock-available-p)
       (ert-skip "the mock LLM or the bundled server (node scripts/build.mjs) is missing"))
     (let* ((sly-agent-q-provider "anthropic")
            (sly-agent-q-base-url (sly-agent-q-test-start-mock ,script))
            (sly-agent-q-api-key sly-agent-q-test-api-key)
            (sly-agent-q-model "claude-sonnet-4-5")
            (sly-agent-q-server-file nil)
            (sly-agent-q-approval-function nil)
            (sly-agent-q-events-buffer-size nil))
       (unwind-protect
           (progn
             (when (get-buffer sly-agent-q-chat-buffer-name)
               (kill-buffer sly-agent-q-chat-buffer-name))
             (let (ready err)
               (sly-agent-q-server-ensure (lambda (conn e) (setq ready conn err e)))
               (sly-agent-q-test-wait (lambda () (or ready err)) 20 "the server to initialize")
               (should-not err))
             (sly-agent-q-test-checking-protocol ,@body))
         (sly-agent-q-server-stop)
         (sly-agent-q-test-stop-mock)
         (when (get-buffer sly-agent-q-chat-buffer-name)
           (let ((kill-buffer-query-functions nil))
             (kill-buffer sly-agent-q-chat-buffer-name)))))))

(defun sly-agent-q-test-send (text &optional timeout)
  "Send TEXT through `sly-agent-q-send' and wait for the turn's outcome plist."
  (let (outcome)
    (sly-agent-q-send text (lambda (plist) (setq outcome plist)))
    (sly-agent-q-test-wait (lambda () outcome) (or timeout 30) (format "the answer to %S" text))))

(defun sly-agent-q-test-chat-text ()
  "The chat buffer's text."
  (with-current-buffer (sly-agent-q-chat-buffer)
    (buffer-substring-no-properties (point-min) (point-max))))

;;;; The server as an npm package

(defun sly-agent-q-test-npm-pack (&optional version)
  "Make the server's npm package with `npm pack' in a temporary directory.
Return the tarball's file name.  The package is this checkout's, with
its bundle (dist/, built beforehand); with VERSION, a copy of the
checkout whose package.json says VERSION is built and packed instead,
so that its server really reports VERSION."
  (let* ((out (make-temp-file "agent-q-npm-pack" t))
         (src (if (not version)
                  sly-agent-q-test-root
                (let ((copy (expand-file-name "src" out)))
                  (make-directory copy)
                  (dolist (f '("server" "scripts" "package.json" "tsconfig.json" "LICENSE" "README.md"))
                    (sly-agent-q-test--copy (expand-file-name f sly-agent-q-test-root) (expand-file-name f copy)))
                  (make-symbolic-link (expand-file-name "node_modules" sly-agent-q-test-root)
                                      (expand-file-name "node_modules" copy))
                  (with-temp-buffer
                    (insert-file-contents (expand-file-name "package.json" copy))
                    (goto-char (point-min))
                    (re-search-forward "\"version\": *\"\\([^\"]+\\)\"")
                    (replace-match version t t nil 1)
                    (write-region nil nil (expand-file-name "package.json" copy)))
                  (let ((default-directory (file-name-as-directory copy)))
                    (unless (zerop (call-process "node" nil nil nil "scripts/build.mjs"))
                      (error "Building the %s bundle failed" version)))
                  copy)))
         (default-directory (file-name-as-directory src)))
    ;; --ignore-scripts: the bundle is built already (prepack would build it again).
    (with-temp-buffer
      (unless (zerop (call-process "npm" nil t nil "pack" "--ignore-scripts" "--silent"
                                   "--pack-destination" out))
        (error "npm pack failed: %s" (buffer-string))))
    (or (car (file-expand-wildcards (expand-file-name "*.tgz" out)))
        (error "npm pack made no tarball in %s" out))))

(defun sly-agent-q-test--copy (from to)
  "Copy the file or directory FROM to TO."
  (if (file-directory-p from) (copy-directory from to nil t t) (copy-file from to)))

;;;; SLIME and SLY

(load (expand-file-name "scripts/lisp-modes" sly-agent-q-test-root) nil t)

(declare-function slime-connected-p "ext:slime")
(declare-function slime-start "ext:slime")
(declare-function slime-init-command "ext:slime")
(declare-function sly-connected-p "ext:sly")
(declare-function sly-start "ext:sly")

(defvar sly-agent-q-test-lisp (intern (or (getenv "SLY_AGENT_Q_E2E_LISP") "slime"))
  "Which Lisp mode the tests that drive an image use: `slime' or `sly'.")

(defvar sly-agent-q-test--lisp-ready nil "Set when the Lisp mode has finished connecting.")

(defun sly-agent-q-test--lisp-ready ()
  "Note that the Lisp mode has finished connecting."
  (setq sly-agent-q-test--lisp-ready t))

(defun sly-agent-q-test-lisp-connected-p ()
  "Non-nil when the Lisp mode under test is connected."
  (if (eq sly-agent-q-test-lisp 'sly) (sly-connected-p) (slime-connected-p)))

(defconst sly-agent-q-test--lisp-programs
  '(("sbcl" "--noinform" "--no-userinit")
    ;; ECL keeps its own ASDF: it would otherwise upgrade itself to Debian's at
    ;; its first operation, a minute or more through gcc at each start (ECL 21
    ;; fails to load that upgrade back from its cache); test/cl/ does the same.
    ("ecl" "--norc" "--eval" "(require \"asdf\")"
     "--eval" "(asdf:register-immutable-system \"asdf\")")
    ("clisp" "-norc" "-q"))
  "The Lisps the tests can drive, each with its arguments for no init file.")

(defun sly-agent-q-test--lisp-program ()
  "The Lisp to drive and its arguments: SLY_AGENT_Q_TEST_PROGRAM (sbcl, ecl
or clisp), SBCL by default."
  (let ((name (or (getenv "SLY_AGENT_Q_TEST_PROGRAM") "")))
    (or (assoc (if (string-empty-p name) "sbcl" name) sly-agent-q-test--lisp-programs)
        (error "SLY_AGENT_Q_TEST_PROGRAM=%s is not one of sbcl, ecl, clisp" name))))

(defun sly-agent-q-test--slime-init-without-indentation-updates (port-filename coding-system)
  "Return SLIME's start-up form, with SWANK's indentation sync turned off.
PORT-FILENAME and CODING-SYSTEM are those of `slime-init-command'.
For ECL: after each reply SWANK's indentation-cache thread scans every
symbol of the image when a package came or went, concurrently with the
request threads that load and compile code, and ECL 21 fails there with
a segmentation violation of its own (once in the end-to-end group, a
debugger on that thread; reproduced by looping that scan beside a thread
that makes packages and macros).  The tests need no indentation from
the image."
  (let ((form (car (read-from-string (slime-init-command port-filename coding-system)))))
    ;; Turned off after SWANK loads and before its server starts: no update is ever asked for.
    (format "%S\n\n" (append (butlast form)
                              '((setf (symbol-value (read-from-string "swank:*configure-emacs-indentation*"))
                                      nil))
                              (last form)))))

(defun sly-agent-q-test--lisp-environment (name)
  "The `process-environment' to start the Lisp NAME in.
ECL gets a cache of its own under test/.work/ (its compiled SWANK,
systems and helpers), the one the CL suite's ECL run uses too
\(test/ecl-cache.sh: gcc compiles them once for both)."
  (if (not (equal name "ecl"))
      process-environment
    (let ((cache (expand-file-name "test/.work/ecl/xdg-cache/" sly-agent-q-test-root)))
      (make-directory cache t)
      (cons (concat "XDG_CACHE_HOME=" cache) process-environment))))

(defconst sly-agent-q-test--crash-signals
  '((4 . "SIGILL") (6 . "SIGABRT") (7 . "SIGBUS") (8 . "SIGFPE") (11 . "SIGSEGV") (31 . "SIGSYS"))
  "The signals that end a process because it crashed, never sent by a test to stop one.")

(defun sly-agent-q-test--watch-for-crash (name)
  "Say in one line when the Lisp NAME just started dies of a crash signal.
The line \"LISP-CRASH: NAME ended by signal N (SIGSEGV)\" tells the suites'
runner (test/ert-run.sh) that the Lisp implementation crashed, not a
test: it runs the group once more.  Tests stop a Lisp with SIGKILL or
SIGTERM, never with these signals."
  ;; SLIME and SLY both name the Lisp's process "inferior-lisp" (comint), whatever its buffer's name.
  (dolist (process (process-list))
    (when (and (process-live-p process) (string-prefix-p "inferior-lisp" (process-name process))
               (not (process-get process 'sly-agent-q-test-watched)))
      (process-put process 'sly-agent-q-test-watched t)
      ;; Before the sentinel of its own, which may fail (SLY's, inserting into a read-only REPL).
      (add-function :before (process-sentinel process)
                    (lambda (p _event)
                      (let ((crash (and (eq (process-status p) 'signal)
                                        (assq (process-exit-status p) sly-agent-q-test--crash-signals))))
                        (when crash
                          (message "\nLISP-CRASH: %s ended by signal %d (%s)" name (car crash) (cdr crash)))))))))

(defun sly-agent-q-test--note-lisp-closed (process)
  "Say in the test log that the Lisp's connection PROCESS closed, with the Lisp's last output.
A test that then finds no connection (\"Not connected.\") is explained in the log."
  (let ((inferior (seq-find (lambda (b) (string-match-p "\\*\\(inferior-lisp\\|sly-inferior-lisp\\)" (buffer-name b)))
                            (buffer-list))))
    (message "Lisp connection closed (%s, %s); the Lisp's last output:\n%s"
             (process-name process) (process-status process)
             (if (buffer-live-p inferior)
                 (with-current-buffer inferior
                   (buffer-substring-no-properties (max (point-min) (- (point-max) 2000)) (point-max)))
               "(no Lisp buffer)"))))

(defvar sly-agent-q-test--connect-from nil
  "The Lisp buffers as a start found them: (BUFFER . SIZE) each.")

(defun sly-agent-q-test-connect-lisp ()
  "Make sure the Lisp is connected through the Lisp mode under test.
Skip the test when the Lisp or the Lisp mode is not there."
  (unless (executable-find (car (sly-agent-q-test--lisp-program)))
    (ert-skip (format "%s is not installed" (car (sly-agent-q-test--lisp-program)))))
  (unless (if (eq sly-agent-q-test-lisp 'sly) (sly-agent-q-dev-require-sly) (sly-agent-q-dev-require-slime))
    (ert-skip (format "%s is not available%s" sly-agent-q-test-lisp
                      (if (eq sly-agent-q-test-lisp 'sly) " (set SLY_DIR)" ""))))
  (add-hook (if (eq sly-agent-q-test-lisp 'sly) 'sly-net-process-close-hooks 'slime-net-process-close-hooks)
            #'sly-agent-q-test--note-lisp-closed)
  (unless (sly-agent-q-test-lisp-connected-p)
    (setq sly-agent-q-test--lisp-ready nil)
    ;; The connected hook runs after the Lisp mode's own start-up evaluations (loading its
    ;; contribs): evaluating before that would cancel them.
    (add-hook (if (eq sly-agent-q-test-lisp 'sly) 'sly-connected-hook 'slime-connected-hook)
              #'sly-agent-q-test--lisp-ready)
    (let* ((program (sly-agent-q-test--lisp-program))
           (process-environment (sly-agent-q-test--lisp-environment (car program))))
      ;; What an earlier Lisp printed in a reused buffer is not this one's.
      (setq sly-agent-q-test--connect-from
            (mapcar (lambda (b) (cons b (buffer-size b))) (sly-agent-q-test--inferior-buffers)))
      (cond ((eq sly-agent-q-test-lisp 'sly)
             (sly-start :program (car program) :program-args (cdr program)))
            ((equal (car program) "ecl")
             (slime-start :program (car program) :program-args (cdr program)
                          :init #'sly-agent-q-test--slime-init-without-indentation-updates))
            (t (slime-start :program (car program) :program-args (cdr program))))
      (sly-agent-q-test--watch-for-crash (car program))
      ;; ECL compiles the backend through its C compiler the first time.
      (sly-agent-q-test-wait (lambda () (or (and sly-agent-q-test--lisp-ready (sly-agent-q-test-lisp-connected-p))
                                            (sly-agent-q-test--backend-failed-connecting)))
                             (if (equal (car program) "sbcl") 120 900) "the Lisp to connect")
      (let ((failed (sly-agent-q-test--backend-failed-connecting)))
        (when (and failed (not sly-agent-q-test--lisp-ready))
          ;; Its backend's own defect, not a test's: the runner runs the group once more.
          (message "\nLISP-CRASH: %s's backend failed while connecting (%s)" (car program) failed)
          (error "The Lisp's backend failed while connecting: %s" failed))))))

(defun sly-agent-q-test--backend-failed-connecting ()
  "What the Lisp's backend said when it failed to set up the connection, or nil.
SWANK on ECL sometimes fails in its own connection set-up (a worker
thread handles the first request before the connection is bound, and
`close-connection' then fails on NIL): it prints that and answers
nothing more, and the connection would be waited for until the group's
time runs out."
  (cl-some (lambda (inferior)
             (with-current-buffer inferior
               (save-excursion
                 (goto-char (min (point-max)
                                 (1+ (or (cdr (assq inferior sly-agent-q-test--connect-from)) 0))))
                 (and (re-search-forward ";; \\(swank\\|slynk\\):close-connection: \\(.*\\)" nil t)
                      (match-string 0)))))
           (sly-agent-q-test--inferior-buffers)))

(defun sly-agent-q-test--inferior-buffers ()
  "The live buffers of Lisp processes started by SLIME or SLY."
  (seq-filter (lambda (b) (string-match-p "\\*\\(inferior-lisp\\|sly-inferior-lisp\\)" (buffer-name b)))
              (buffer-list)))

(defun sly-agent-q-test-handler-keywords (function)
  "The JSON names of the keyword arguments FUNCTION (a `cl-defun') takes."
  (let ((usage (car (help-split-fundoc (documentation function t) function))))
    (when usage
      (cl-loop for arg in (cdr (memq '&key (car (read-from-string (downcase usage)))))
               collect (substring (symbol-name (cond ((consp (car-safe arg)) (caar arg))
                                                     ((consp arg) (car arg))
                                                     (t arg)))
                                  (if (consp (car-safe arg)) 1 0))))))

(declare-function sly-agent-q-tool-declaration "sly-agent-q-tool-declare" (name))

(defun sly-agent-q-test-handler-mismatches (catalog parameters)
  "Where CATALOG's Emacs tools and their handlers' keywords disagree.
PARAMETERS gives the parameter names a catalog entry's handler gets.
A primary tool's every parameter must be a keyword of its handler; a
handler's every keyword must be a parameter of a tool it implements
\(an alias may add one, as file_write adds append)."
  (let ((emacs (cl-remove-if-not (lambda (tool) (equal (plist-get tool :runtime) "emacs")) catalog)))
    (cl-loop for capability in (delete-dups (mapcar (lambda (tool) (plist-get tool :implementation)) emacs))
             for handler = (plist-get (sly-agent-q-tool-declaration capability) :handler)
             for taken = (sly-agent-q-test-handler-keywords handler)
             for tools = (cl-remove-if-not (lambda (tool) (equal (plist-get tool :implementation) capability))
                                           emacs)
             for declared = (delete-dups (mapcan (lambda (tool) (copy-sequence (funcall parameters tool))) tools))
             for primary = (cl-find-if-not (lambda (tool) (plist-get tool :aliasOf)) tools)
             for untaken = (cl-set-difference (funcall parameters primary) taken :test #'equal)
             for undeclared = (cl-set-difference taken declared :test #'equal)
             when (or untaken undeclared)
             collect (list capability :not-taken untaken :not-declared undeclared))))

(provide 'sly-agent-q-test-helper)
;;; sly-agent-q-test-helper.el ends here
