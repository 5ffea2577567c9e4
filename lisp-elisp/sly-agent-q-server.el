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
;; functions in `sly-agent-q-server-died-functions' run (the chat buffer
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

(declare-function sly-agent-q-bridge-current-package "sly-agent-q-bridge" ())
(declare-function sly-agent-q-tools-project-root "sly-agent-q-files" ())
(declare-function auth-source-search "auth-source" (&rest spec))
(declare-function url-host "url-parse" (cl-x))
(declare-function url-generic-parse-url "url-parse" (url))

(defgroup sly-agent-q nil
  "An AI agent for Common Lisp programmers, working in the running image."
  :group 'tools
  :prefix "sly-agent-q-")

;;;; Customization

(defcustom sly-agent-q-node-program "node"
  "The Node.js executable that runs the server (version 20 or newer)."
  :type 'string)

(defcustom sly-agent-q-server-file nil
  "The bundled server script, sly-agent-q-server.js.
nil means find it: next to this package (dist/ in a source checkout,
or the package directory, or its server/ or dist/ subdirectory, in a
package built with its server), else the one
`sly-agent-q-install-server' installed."
  :type '(choice (const :tag "Automatic" nil) file))

(defcustom sly-agent-q-provider "anthropic"
  "The LLM provider: \"anthropic\" or \"openai\" (any OpenAI-compatible endpoint)."
  :type '(choice (const "anthropic") (const "openai")))

(defcustom sly-agent-q-model nil
  "The model name, or nil for the server's default."
  :type '(choice (const :tag "Server default" nil) string))

(defcustom sly-agent-q-base-url nil
  "The provider's base URL, or nil for the default endpoint."
  :type '(choice (const :tag "Default" nil) string))

(defcustom sly-agent-q-api-key nil
  "How to find the API key.
nil: the environment (ANTHROPIC_API_KEY or OPENAI_API_KEY), else
`auth-source' (a matching entry for the provider's host, such as
\"machine api.anthropic.com password KEY\").  A string: the key
itself.  A function: called with no arguments, returns the key.
The key is handed to the server through its process environment,
never through a protocol message, so it appears in no buffer."
  :type '(choice (const :tag "Environment or auth-source" nil)
                 (string :tag "Key")
                 (function :tag "Function returning the key")))

(defcustom sly-agent-q-max-steps nil
  "Tool steps per turn before the agent stops, or nil for the server's default."
  :type '(choice (const :tag "Default" nil) integer))

(defcustom sly-agent-q-max-tokens nil
  "Maximum output tokens per model response, or nil for the default."
  :type '(choice (const :tag "Default" nil) integer))

(defcustom sly-agent-q-turn-timeout nil
  "Wall-clock limit of one turn in seconds, or nil for the server's default."
  :type '(choice (const :tag "Default" nil) number))

(defconst sly-agent-q-tool-categories
  '("execution" "evaluation" "filesystem" "buffer" "diff" "introspection"
    "xref" "clos" "packages" "navigation")
  "The tool categories the server knows.
A key of `sly-agent-q-trust-levels' that is one of them names a
category, any other key a tool.")

(defcustom sly-agent-q-stream-idle-timeout 90
  "Seconds the model's answer may stall (send nothing) before it is given up.
A stall before any text was shown is retried once; after text was
shown, the turn fails with a message saying so."
  :type 'number)

(defcustom sly-agent-q-trust-levels nil
  "Your trust level per tool or per category, overriding the tools' own.
An alist of (NAME . LEVEL), LEVEL one of the symbols `safe' (runs
without asking), `cautious' (runs and is logged) or `dangerous'
\(asks for approval first).  NAME is a tool name, whose setting also
covers its aliases, or one of the categories execution, evaluation,
filesystem, buffer, diff, introspection, xref, clos, packages and
navigation (see `sly-agent-q-tool-categories'), whose setting covers
every tool in it.  For example
  ((\"evaluation\" . dangerous) (\"write_file\" . cautious))
Removing an entry and reconfiguring (or restarting) takes effect at
once: the server's configuration is replaced, never merged."
  :type '(alist :key-type (string :tag "Tool or category")
                :value-type (choice (const safe) (const cautious) (const dangerous))))

(defcustom sly-agent-q-permission-rules nil
  "Rules that allow, ask about or deny tool calls, checked by the server.
A list of plists (:action ACTION :tool NAME :category NAME :argument
PARAM :pattern REGEXP), ACTION one of the symbols `allow', `ask' or
`deny'; every other key is optional.  A rule matches a call of the
tool NAME (or of a tool in the category NAME); with :argument and
:pattern, only when the argument PARAM matches REGEXP, a JavaScript
regular expression.  When several rules match, deny wins over ask,
and ask over allow.  For example, never write .asd files:
  ((:action deny :tool \"write_file\" :argument \"path\" :pattern \"\\\\.asd$\"))"
  :type '(repeat
          (plist :options
                 ((:action (choice (const allow) (const ask) (const deny)))
                  (:tool string)
                  (:category string)
                  (:argument string)
                  (:pattern string)))))

(defcustom sly-agent-q-ask-before-evaluating nil
  "Non-nil means every tool that evaluates code in the image asks first.
It adds the rule (:action ask :category \"evaluation\") to
`sly-agent-q-permission-rules'."
  :type 'boolean)

(defcustom sly-agent-q-max-safety-level 'dangerous
  "The most dangerous level of tools offered to the model.
`safe' offers only safe tools, `cautious' also cautious ones,
`dangerous' everything (dangerous tools always ask for approval)."
  :type '(choice (const safe) (const cautious) (const dangerous)))

(defcustom sly-agent-q-read-outside-project 'ask
  "Whether read_definition may read a definition's source outside the project root.
The image may have loaded the definition from a library's file (or
any file it ever loaded); reading it is read-only, but the text
goes to the model.  `allow' reads it, `ask' asks you each time
\(naming the file), `deny' refuses.  Enforced by the server's
policy, like the file tools' own confinement."
  :type '(choice (const :tag "Allow (read-only)" allow)
                 (const :tag "Ask each time" ask)
                 (const :tag "Deny" deny)))

(defcustom sly-agent-q-server-log-level "info"
  "The server's log level (its log goes to the stderr buffer)."
  :type '(choice (const "debug") (const "info") (const "warn") (const "error")))

(defcustom sly-agent-q-extra-configuration nil
  "More configuration for the server, a plist of protocol fields.
For example (:temperature 0.2 :auditLogFile \"~/agent-audit.jsonl\")."
  :type 'plist)

(defcustom sly-agent-q-conversation-directory
  (locate-user-emacs-file "sly-agent-q/conversations/")
  "Directory where conversations are saved as they happen, or nil.
Each conversation is one JSON Lines file there, written after every
message and tool result; \[sly-agent-q-resume] reopens them.  nil means
conversations are not saved.  A remote directory is not used."
  :type '(choice (const :tag "Do not save conversations" nil) directory))

(defcustom sly-agent-q-context-window nil
  "The model's context window in tokens, or nil for the server's table.
Set it for a local model (Ollama...) the table does not know: the
history is compacted when it nears this size."
  :type '(choice (const :tag "From the server's models table" nil) integer))

;; Off by default.  jsonrpc.el pretty-prints every message into
;; its events buffer, and once the buffer is full trims it from the front
;; for every message: the largest cost on the tool path that this package
;; controls.  make bench (README, Benchmarks; 2 cores at load 2.5-4), log
;; off against on: one tool call 1.81x against 2.08x a bare `slime-eval';
;; 100 calls from one model message 1.40x against 2.20x 100 bare evals;
;; 1,000 calls in a row flat (0.92x), where with the log on they drift up
;; once its buffer is full (1.21-1.64x in earlier runs); 20,000 streamed
;; deltas 25 against 46 ms of largest input gap.  Nothing is lost for a
;; user who does not debug; one command turns it on, for the running
;; server too.
(defcustom sly-agent-q-events-buffer-size 0
  "Maximum size in characters of the JSON-RPC events buffer.
0 disables event logging (the default: logging costs every message a
pretty-print); nil means no limit.  To debug, turn it on with
\\[sly-agent-q-toggle-events-log], or set this to 2000000 or so."
  :type '(choice (const :tag "Unlimited" nil) integer))

(defconst sly-agent-q-events-log-on-size 2000000
  "The size `sly-agent-q-toggle-events-log' gives the events log.")

(defcustom sly-agent-q-server-auto-restart t
  "Non-nil means start the server again when it dies unexpectedly.
At most three restarts happen within a minute."
  :type 'boolean)

(defcustom sly-agent-q-request-timeout 30
  "Seconds to wait for the server's answer to a request."
  :type 'number)

(defvar sly-agent-q-project-root)       ; defined by sly-agent-q-tools.el

;;;; Locating things

(defconst sly-agent-q--lisp-directory
  (file-name-directory (or load-file-name buffer-file-name default-directory))
  "The directory this file was loaded from.")

(defun sly-agent-q-server-package-candidates (&rest relatives)
  "Existing files among RELATIVES, tried from the package directory and its parent."
  (cl-loop for base in (list sly-agent-q--lisp-directory
                             (file-name-directory
                              (directory-file-name sly-agent-q--lisp-directory)))
           append (cl-loop for rel in relatives
                           for f = (expand-file-name rel base)
                           when (file-exists-p f) collect f)))

(defun sly-agent-q-server-find ()
  "Return the server script to run and where it was found, or nil.
The value is (FILE . SOURCE), SOURCE one of `setting' (the user's
`sly-agent-q-server-file'), `package' (a bundle shipped with this
package, or a source checkout's build) or `installed' (the one
`sly-agent-q-install-server' installed).  Signal a `user-error' when
the setting names a file that does not exist."
  (if sly-agent-q-server-file
      (let ((f (expand-file-name sly-agent-q-server-file)))
        (if (file-readable-p f) (cons f 'setting)
          (user-error "The file `sly-agent-q-server-file' names, %s, does not exist" f)))
    (let ((bundled (car (sly-agent-q-server-package-candidates
                         "sly-agent-q-server.js" "server/sly-agent-q-server.js"
                         "dist/sly-agent-q-server.js")))
          (installed (sly-agent-q-install-server-file)))
      (cond (bundled (cons bundled 'package))
            (installed (cons installed 'installed))))))

(defun sly-agent-q-server-locate ()
  "Return the server script to run, or signal a `user-error' saying why not."
  (or (car (sly-agent-q-server-find))
      (user-error "The sly-agent-q server is not installed: M-x sly-agent-q-install-server \
installs it with npm (version %s, into %s); in a source checkout `make build' builds it"
                  sly-agent-q-server-version
                  (abbreviate-file-name sly-agent-q-install-directory))))

(defun sly-agent-q-server-version-advice (version found)
  "What to tell the user when the server is VERSION, not the one needed.
FOUND is the server's (FILE . SOURCE) from `sly-agent-q-server-find'.
Return nil when VERSION is the needed one."
  (unless (equal version sly-agent-q-server-version)
    (let ((head (format "The sly-agent-q server %s is version %s, but this sly-agent-q needs %s."
                        (abbreviate-file-name (or (car found) "?"))
                        (or version "unknown") sly-agent-q-server-version)))
      (concat
       head " "
       (pcase (cdr found)
         ('installed
          (format "Run M-x sly-agent-q-install-server to install %s, then M-x sly-agent-q-restart-server."
                  sly-agent-q-server-version))
         ('setting
          (format "Point `sly-agent-q-server-file' at a %s server, or set it to nil and run \
M-x sly-agent-q-install-server, then M-x sly-agent-q-restart-server."
                  sly-agent-q-server-version))
         (_
          "In a source checkout run `make build'; otherwise reinstall the sly-agent-q package, \
or delete that file and run M-x sly-agent-q-install-server; then M-x sly-agent-q-restart-server."))))))

(defvar sly-agent-q--node-checked nil
  "Cons (PROGRAM . PATH) of the last Node program found good enough.")

(defun sly-agent-q--check-node ()
  "Return the full path of a Node.js 20+ executable, or signal a `user-error'."
  (let ((path (executable-find sly-agent-q-node-program)))
    (unless path
      (user-error "Cannot find Node.js for sly-agent-q (`sly-agent-q-node-program' is %S); \
install Node.js 20 or newer, or set that option to its full path"
                  sly-agent-q-node-program))
    (unless (equal sly-agent-q--node-checked (cons sly-agent-q-node-program path))
      (let* ((out (condition-case err
                      (car (process-lines path "--version"))
                    (error (user-error "Running %s --version failed: %s"
                                       path (error-message-string err)))))
             (major (and out (string-match "\\`v?\\([0-9]+\\)\\." out)
                         (string-to-number (match-string 1 out)))))
        (unless (and major (>= major 20))
          (user-error "The Node.js program %s is Node.js %s; version 20 or newer is needed"
                      path (or out "of an unknown version")))
        (setq sly-agent-q--node-checked (cons sly-agent-q-node-program path))))
    path))

(defun sly-agent-q--provider-host ()
  "Return the host of the `auth-source' entry with the API key."
  (or (and sly-agent-q-base-url
           (progn (require 'url-parse)
                  (url-host (url-generic-parse-url sly-agent-q-base-url))))
      (if (equal sly-agent-q-provider "openai") "api.openai.com" "api.anthropic.com")))

(defun sly-agent-q--key-variable ()
  "Return the environment variable with the API key for the server."
  (if (equal sly-agent-q-provider "openai") "OPENAI_API_KEY" "ANTHROPIC_API_KEY"))

(defun sly-agent-q--api-key ()
  "The API key to give the server, or nil to leave its environment alone."
  (cond ((stringp sly-agent-q-api-key) sly-agent-q-api-key)
        ((functionp sly-agent-q-api-key) (funcall sly-agent-q-api-key))
        ((getenv (sly-agent-q--key-variable)) nil)
        (t (require 'auth-source)
           (let* ((found (car (auth-source-search :host (sly-agent-q--provider-host)
                                                  :max 1)))
                  (secret (plist-get found :secret)))
             (if (functionp secret) (funcall secret) secret)))))

(defun sly-agent-q-server-project-root ()
  "The project root to tell the server about.
The root the file tools confine to (`sly-agent-q-tools-project-root'):
one lookup, so that the server and the tools never disagree."
  (let ((root (or (and (fboundp 'sly-agent-q-tools-project-root)
                       (ignore-errors (sly-agent-q-tools-project-root)))
                  default-directory)))
    (directory-file-name (expand-file-name root))))

(defun sly-agent-q-server-plist-compact (plist)
  "PLIST without the properties whose value is nil."
  (cl-loop for (k v) on plist by #'cddr when v append (list k v)))

(defun sly-agent-q--levels-table (categories)
  "The trust levels of `sly-agent-q-trust-levels' as a hash table.
CATEGORIES non-nil: the entries naming a category, else the others."
  (let ((h (make-hash-table :test #'equal)))
    (dolist (e sly-agent-q-trust-levels h)
      (let ((name (format "%s" (car e))))
        (when (eq (and (member name sly-agent-q-tool-categories) t)
                  (and categories t))
          (puthash name (format "%s" (cdr e)) h))))))

(defun sly-agent-q--permission-rules ()
  "The permission rules to send, a vector of plists with string values."
  (vconcat
   (mapcar (lambda (rule)
             (cl-loop for key in '(:action :tool :category :argument :pattern)
                      for value = (plist-get rule key)
                      when value append (list key (format "%s" value))))
           (append sly-agent-q-permission-rules
                   (and sly-agent-q-ask-before-evaluating
                        (list (list :action 'ask :category "evaluation")))))))

(defun sly-agent-q-server-conversation-directory ()
  "The local directory conversations are saved in, or nil.
The server runs on this machine: a remote directory (TRAMP) is not
used, so that it never writes to a local path of the same spelling."
  (let ((dir sly-agent-q-conversation-directory))
    (cond ((not dir) nil)
          ((file-remote-p dir)
           (display-warning 'sly-agent-q
                            (format "sly-agent-q-conversation-directory %s is remote; conversations are not saved" dir))
           nil)
          (t (file-name-as-directory (expand-file-name dir))))))

(defun sly-agent-q-server-configuration ()
  "The configuration sent to the server, from the customization options.
Never contains the API key.  The trust settings are always sent,
empty when unset: the server replaces its configuration, and a
setting left out would keep an old one in force."
  (append
   (sly-agent-q-server-plist-compact
    (list :provider sly-agent-q-provider
          :model sly-agent-q-model
          :baseUrl sly-agent-q-base-url
          :maxSteps sly-agent-q-max-steps
          :maxTokens sly-agent-q-max-tokens
          :turnTimeoutMs (and sly-agent-q-turn-timeout
                              (round (* 1000 sly-agent-q-turn-timeout)))
          :streamIdleTimeoutMs (and sly-agent-q-stream-idle-timeout
                                    (round (* 1000 sly-agent-q-stream-idle-timeout)))
          ;; Defined in sly-agent-q-bridge.el, which loads this file.
          :imageTimeoutMs (and (boundp 'sly-agent-q-image-timeout)
                               (round (* 1000 (symbol-value 'sly-agent-q-image-timeout))))
          :imageLoadTimeoutMs (and (boundp 'sly-agent-q-helpers-load-timeout)
                                   (round (* 1000 (symbol-value 'sly-agent-q-helpers-load-timeout))))
          :maxSafetyLevel (and sly-agent-q-max-safety-level
                               (format "%s" sly-agent-q-max-safety-level))
          :readOutsideProject (and sly-agent-q-read-outside-project
                                   (format "%s" sly-agent-q-read-outside-project))
          :projectRoot (sly-agent-q-server-project-root)
          :conversationDirectory (sly-agent-q-server-conversation-directory)
          :contextWindow sly-agent-q-context-window
          :logLevel sly-agent-q-server-log-level))
   (list :safetyOverrides (sly-agent-q--levels-table nil)
         :categoryLevels (sly-agent-q--levels-table t)
         :permissionRules (sly-agent-q--permission-rules))
   (cl-loop for (k v) on sly-agent-q-extra-configuration by #'cddr
            unless (eq k :apiKey) append (list k v))))

;;;; The connection

(defclass sly-agent-q-connection (jsonrpc-process-connection)
  ((status :initform 'starting :accessor sly-agent-q--status
           :documentation "starting, ready, failed or stopping.")
   (ready-callbacks :initform nil :accessor sly-agent-q--ready-callbacks)
   (init-result :initform nil :accessor sly-agent-q--init-result)
   (calls :initform (make-hash-table :test #'equal) :accessor sly-agent-q--calls
          :documentation "Pending `emacs/call's by id.")
   (started :initform (float-time) :accessor sly-agent-q--started)
   (found :initform nil :accessor sly-agent-q--found
          :documentation "The server's (FILE . SOURCE), from `sly-agent-q-server-find'.")
   (outbox :initform nil :accessor sly-agent-q--outbox
           :documentation "What waits to be written, in order: (:message . PLIST) to
encode, strings, (STRING . FROM) for the rest of STRING from FROM, and
functions that send.
Non-nil while a large message goes out in pieces.")
   (outbox-timer :initform nil :accessor sly-agent-q--outbox-timer))
  :documentation "The connection to one sly-agent-q server process.")

(defvar sly-agent-q--server-key nil
  "(VARIABLE . KEY): the API key handed to the running server, or nil.
Remembered so that replies can be redacted without asking
auth-source again.")

(defvar sly-agent-q--connection nil
  "The current `sly-agent-q-connection', or nil.")

(defvar sly-agent-q--restart-times nil
  "Times of the recent automatic restarts.")

(defvar sly-agent-q-server-died-functions nil
  "Functions called with a message when the server died unexpectedly.")

(defvar sly-agent-q-server-started-functions nil
  "Functions called with the connection once the server is initialized.")

(defvar sly-agent-q-server-last-handler-error nil
  "The last error signalled by a notification or call handler (for debugging).")

(defun sly-agent-q--log (conn format-string &rest args)
  "Write a line made of FORMAT-STRING and ARGS to CONN's events buffer."
  (when (and conn (not (equal sly-agent-q-events-buffer-size 0)))
    (with-current-buffer (jsonrpc-events-buffer conn)
      (let ((inhibit-read-only t))
        (goto-char (point-max))
        (insert "[sly-agent-q] " (apply #'format format-string args) "\n")))))

(defun sly-agent-q-server-log (format-string &rest args)
  "Write FORMAT-STRING and ARGS to the events buffer of the current connection.
Without a connection, nothing is written."
  (apply #'sly-agent-q--log sly-agent-q--connection format-string args))

(defun sly-agent-q-server-live-p (&optional conn)
  "Non-nil if CONN (default: the current connection) has a running process."
  (let ((c (or conn sly-agent-q--connection)))
    (and c (jsonrpc-running-p c))))

(defun sly-agent-q-server-ready-p ()
  "Non-nil if the server is running and initialized."
  (and (sly-agent-q-server-live-p)
       (eq (sly-agent-q--status sly-agent-q--connection) 'ready)))

(defun sly-agent-q-server-connection ()
  "The current connection, or nil."
  sly-agent-q--connection)

(defun sly-agent-q--capabilities ()
  "What this Emacs can do for the server."
  (list :tools (if (fboundp 'sly-agent-q-tools-call) t :json-false)
        :image t
        :approvals t))

(defcustom sly-agent-q-read-process-output-max (* 1024 1024)
  "The least `read-process-output-max' that starting the server sets, or nil.
With Emacs's default of 4 KB a large tool result arrives in hundreds
of reads, and keys wait until they are done: a 1 MB result made a key
take 300 ms to show (benchmarks, figure 7), 20 ms with 1 MB.  The
value is global, so starting the server raises it (never lowers it)
and leaves it so; nil leaves it alone."
  :type '(choice (const :tag "Leave read-process-output-max alone" nil) integer))

(defun sly-agent-q--make-process (node file)
  "Start NODE running the server FILE, the API key in its environment."
  (when (and sly-agent-q-read-process-output-max
             (< read-process-output-max sly-agent-q-read-process-output-max))
    (setq read-process-output-max sly-agent-q-read-process-output-max))
  (let* ((key (sly-agent-q--api-key))
         (_ (setq sly-agent-q--server-key
                  (and key (cons (sly-agent-q--key-variable) key))))
         (process-environment
          (if key
              (cons (concat (sly-agent-q--key-variable) "=" key) process-environment)
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

(defun sly-agent-q--events-buffer-initargs (size)
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
  (let* ((node (sly-agent-q--check-node))
         (found (or (sly-agent-q-server-find) (sly-agent-q-server-locate)))
         (file (car found)))
    (when (sly-agent-q-server-live-p)
      (sly-agent-q-server-stop))
    (let ((conn (apply
                 #'make-instance
                 'sly-agent-q-connection
                 :name "sly-agent-q"
                 :notification-dispatcher #'sly-agent-q--dispatch-notification
                 :request-dispatcher #'sly-agent-q--dispatch-request
                 :on-shutdown #'sly-agent-q--on-shutdown
                 :process (lambda () (sly-agent-q--make-process node file))
                 (sly-agent-q--events-buffer-initargs sly-agent-q-events-buffer-size))))
      (setq sly-agent-q--connection conn)
      (setf (sly-agent-q--found conn) found)
      (sly-agent-q--log conn "started %s %s" node file)
      ;; If the process is already dead the request cannot be sent;
      ;; the sentinel reports that.
      (ignore-error error
       (jsonrpc-async-request
       conn 'initialize
       (list :clientInfo (list :name "sly-agent-q.el"
                               :version (or (bound-and-true-p sly-agent-q-version) "0"))
             :capabilities (sly-agent-q--capabilities)
             :configuration (sly-agent-q-server-configuration)
             :context (sly-agent-q-server-plist-compact
                       (list :projectRoot (sly-agent-q-server-project-root)
                             :currentPackage
                             (and (fboundp 'sly-agent-q-bridge-current-package)
                                  (ignore-errors (sly-agent-q-bridge-current-package))))))
       :success-fn (lambda (result) (sly-agent-q--initialized conn result nil))
       :error-fn (lambda (err) (sly-agent-q--initialized
                                conn nil (or (plist-get err :message) (format "%S" err))))
       :timeout-fn (lambda () (sly-agent-q--initialized
                               conn nil "the server did not answer initialize"))
       :timeout sly-agent-q-request-timeout))
      conn)))

(defun sly-agent-q--initialized (conn result error)
  "Record initialize's RESULT or ERROR for CONN and run its ready callbacks."
  (if (and error (not (jsonrpc-running-p conn)))
      ;; The process died: `sly-agent-q--on-shutdown' reports it, with its stderr.
      nil
    (sly-agent-q--initialized-1 conn result error)))

(defun sly-agent-q--initialized-1 (conn result error)
  "Record initialize's RESULT or ERROR for CONN and run its ready callbacks."
  (setf (sly-agent-q--status conn) (if error 'failed 'ready))
  (setf (sly-agent-q--init-result conn) result)
  (when error
    (message "sly-agent-q: the server failed to initialize: %s" (sly-agent-q-display-line error)))
  (let ((advice (and (not error) (sly-agent-q-server-version-problem conn))))
    ;; The version handshake: say what to run; carry on, most versions still talk.
    (when advice (display-warning 'sly-agent-q advice :warning)))
  (let ((callbacks (reverse (sly-agent-q--ready-callbacks conn))))
    (setf (sly-agent-q--ready-callbacks conn) nil)
    (unless error
      (sly-agent-q-server-run-safely sly-agent-q-server-started-functions conn))
    (dolist (cb callbacks)
      (sly-agent-q-server-call-safely cb (and (not error) conn)
                                (and error (format "The server failed to initialize: %s" error))))))

(defun sly-agent-q-server-version-problem (&optional conn)
  "What the user should run when CONN's server is not the version needed, or nil.
CONN defaults to the current connection."
  (let ((c (or conn sly-agent-q--connection)))
    (and c (sly-agent-q--init-result c)
         (sly-agent-q-server-version-advice
          (plist-get (plist-get (sly-agent-q--init-result c) :serverInfo) :version)
          (sly-agent-q--found c)))))

(defun sly-agent-q-server-call-safely (fn &rest args)
  "Call FN with ARGS; log an error instead of letting it escape."
  (condition-case err
      (apply fn args)
    (error (setq sly-agent-q-server-last-handler-error err)
           ;; The error may name what a peer sent: drawn as one line of data.
           (message "sly-agent-q: %s" (sly-agent-q-display-line (error-message-string err)))
           nil)))

(defun sly-agent-q-server-run-safely (functions &rest args)
  "Call each of FUNCTIONS (a hook value) with ARGS, containing errors."
  (dolist (fn (if (functionp functions) (list functions) functions))
    (unless (eq fn t)
      (apply #'sly-agent-q-server-call-safely fn args))))

(defun sly-agent-q-server-ensure (callback)
  "Call CALLBACK with (CONNECTION nil) once the server is ready.
Start it when it is not running.  On failure CALLBACK gets (nil MESSAGE).
CALLBACK may be called before this function returns."
  (let* ((problem nil)
         (conn (condition-case err
                   (if (and (sly-agent-q-server-live-p)
                            (not (eq (sly-agent-q--status sly-agent-q--connection) 'failed)))
                       sly-agent-q--connection
                     ;; Not running, or initialize failed (a bad option?): start afresh.
                     (sly-agent-q-server-start))
                 (user-error (setq problem (error-message-string err)) nil)
                 (error (setq problem (format "Could not start the sly-agent-q server: %s"
                                              (error-message-string err)))
                        nil))))
    (if problem
        (funcall callback nil problem)
      (pcase (sly-agent-q--status conn)
        ('ready (funcall callback conn nil))
        ('starting (push callback (sly-agent-q--ready-callbacks conn)))
        (_ (funcall callback nil "The server is not available; M-x sly-agent-q-restart-server starts it again."))))))

(defun sly-agent-q--check-method (method kind)
  "Signal unless METHOD is a KIND Emacs may send (see sly-agent-q-protocol.el)."
  (unless (sly-agent-q-protocol-method-p method 'emacs->server kind)
    (error "sly-agent-q: %s is not a %s of the protocol" method kind)))

(defun sly-agent-q-server-async-request (conn method params &rest args)
  "Send request METHOD with PARAMS on CONN; ARGS go to `jsonrpc-async-request'.
METHOD must be a request of the protocol."
  (sly-agent-q--check-method method 'request)
  (apply #'jsonrpc-async-request conn method params args))

(defun sly-agent-q-server-request (method params success &optional failure)
  "Send request METHOD with PARAMS once the server is ready, asynchronously.
Call SUCCESS with the result, or FAILURE (if given) with a message."
  (sly-agent-q--check-method method 'request)
  (let ((fail (lambda (msg)
                (if failure (funcall failure msg)
                  (message "sly-agent-q: %s failed: %s" method (sly-agent-q-display-line msg))))))
    (sly-agent-q-server-ensure
     (lambda (conn err)
       (if err (funcall fail err)
         (sly-agent-q-server-async-request
          conn method params
          :success-fn success
          :error-fn (lambda (e) (funcall fail (or (plist-get e :message) (format "%S" e))))
          :timeout-fn (lambda () (funcall fail (format "the server did not answer %s" method)))
          :timeout sly-agent-q-request-timeout))))))

(defun sly-agent-q-server-notify (method params)
  "Send notification METHOD with PARAMS if the server is running."
  (sly-agent-q--check-method method 'notification)
  (when (sly-agent-q-server-live-p)
    (jsonrpc-notify sly-agent-q--connection method params)))

(defun sly-agent-q-server-reconfigure (&optional interactive)
  "Send the current configuration options to the running server.
INTERACTIVE non-nil (as when called as a command) says so in the echo
area once the server took them; the answer comes in a callback, where
`called-interactively-p' would always be nil."
  (interactive (list t))
  (if (sly-agent-q-server-ready-p)
      (sly-agent-q-server-request 'configuration/change
                                  (list :configuration (sly-agent-q-server-configuration))
                                  (lambda (_) (when interactive
                                                (message "sly-agent-q: configuration sent"))))
    (when interactive
      (message "sly-agent-q: the server is not running; it gets the configuration when it starts"))))

(defun sly-agent-q-server-stop ()
  "Shut the server down cleanly: shutdown, exit, then `jsonrpc-shutdown'.
Waits at most about three seconds, so it is for commands only: never
call it from a process filter, a timer or `kill-emacs-hook' (see
`sly-agent-q--kill-emacs')."
  (interactive)
  (let ((conn sly-agent-q--connection))
    (when (and conn (jsonrpc-running-p conn))
      (setf (sly-agent-q--status conn) 'stopping)
      (ignore-errors (jsonrpc-request conn 'shutdown nil :timeout 2))
      (ignore-errors (jsonrpc-notify conn 'exit nil))
      ;; A moment to exit on its own (status 0); `jsonrpc-shutdown' then
      ;; deletes what is left and waits for the sentinel's cleanup.
      (let ((proc (jsonrpc--process conn))
            (deadline (+ (float-time) 1)))
        (while (and (process-live-p proc) (< (float-time) deadline))
          (accept-process-output proc 0.05)))
      (jsonrpc-shutdown conn))
    (setq sly-agent-q--connection nil)))

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
  (unless sly-agent-q--connection (user-error "The sly-agent-q server is not running"))
  (display-buffer (jsonrpc-events-buffer sly-agent-q--connection))
  (when (equal sly-agent-q-events-buffer-size 0)
    (message "The events log is off; %s turns it on"
             (substitute-command-keys "\\[sly-agent-q-toggle-events-log]"))))

(defun sly-agent-q--set-events-log (conn size)
  "Make CONN log up to SIZE characters of events from now on (0: none).
The connection's slot is set the way `sly-agent-q--events-buffer-initargs'
chose it at the start, so the running server need not restart."
  (let ((initargs (sly-agent-q--events-buffer-initargs size)))
    (if (eq (car initargs) :events-buffer-config)
        (setf (slot-value conn '-events-buffer-config) (cadr initargs))
      (setf (slot-value conn '-events-buffer-scrollback-size) size))))

(defun sly-agent-q-toggle-events-log ()
  "Turn the JSON-RPC events log on or off, for the running server too.
See `sly-agent-q-events-buffer-size'; \\[sly-agent-q-events-buffer] shows the log."
  (interactive)
  (setq sly-agent-q-events-buffer-size
        (if (equal sly-agent-q-events-buffer-size 0) sly-agent-q-events-log-on-size 0))
  (when sly-agent-q--connection
    (sly-agent-q--set-events-log sly-agent-q--connection sly-agent-q-events-buffer-size))
  (message "sly-agent-q: the events log is %s"
           (if (equal sly-agent-q-events-buffer-size 0) "off" "on")))

(defun sly-agent-q-stderr-buffer ()
  "Show the server's standard error (its log)."
  (interactive)
  (let ((buf (and sly-agent-q--connection
                  (jsonrpc-stderr-buffer sly-agent-q--connection))))
    (unless (buffer-live-p buf) (user-error "No sly-agent-q server log"))
    (display-buffer buf)))

(defun sly-agent-q--on-shutdown (conn)
  "Clean up after the death of CONN's process; tell the user, maybe restart."
  (let* ((proc (jsonrpc--process conn))
         (status (sly-agent-q--status conn))
         (expected (memq status '(stopping)))
         (msg (format "The sly-agent-q server exited (%s %s)"
                      (process-status proc) (process-exit-status proc))))
    (setf (sly-agent-q--status conn) 'dead)
    ;; No more traffic is coming: the user's threshold is back at once.
    (sly-agent-q-server-release-collections)
    (when (sly-agent-q--outbox-timer conn) (cancel-timer (sly-agent-q--outbox-timer conn)))
    (setf (sly-agent-q--outbox conn) nil)
    (maphash (lambda (_id call) (sly-agent-q--call-drop call "the server exited"))
             (sly-agent-q--calls conn))
    (clrhash (sly-agent-q--calls conn))
    (let ((callbacks (reverse (sly-agent-q--ready-callbacks conn))))
      (setf (sly-agent-q--ready-callbacks conn) nil)
      (when callbacks
        ;; Report a little later, so that the last of its stderr has arrived.
        (run-with-timer
         0.2 nil
         (lambda ()
           (let ((why (format "%s before it was ready%s; see M-x sly-agent-q-stderr-buffer."
                              msg (sly-agent-q--stderr-tail conn))))
             (dolist (cb callbacks)
               (sly-agent-q-server-call-safely cb nil why)))))))
    (when (eq conn sly-agent-q--connection)
      (unless expected
        (let* ((now (float-time))
               (recent (cl-remove-if (lambda (tm) (< tm (- now 60))) sly-agent-q--restart-times))
               (restart (and sly-agent-q-server-auto-restart
                             (eq status 'ready)
                             (< (length recent) 3))))
          (setq sly-agent-q--restart-times recent)
          (sly-agent-q-server-run-safely sly-agent-q-server-died-functions
                                   (concat msg (if restart "; restarting it."
                                                 "; M-x sly-agent-q-restart-server starts it again.")))
          (when restart
            (push now sly-agent-q--restart-times)
            (run-with-timer 0 nil #'sly-agent-q--auto-restart conn)))))))

(defun sly-agent-q--stderr-tail (conn)
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

(defun sly-agent-q--auto-restart (dead)
  "Start the server again unless something replaced DEAD already."
  (when (and (eq sly-agent-q--connection dead) (not (sly-agent-q-server-live-p)))
    (sly-agent-q-server-ensure
     (lambda (_conn err)
       (when err (message "sly-agent-q: restart failed: %s" (sly-agent-q-display-line err)))))))

(defun sly-agent-q--kill-emacs ()
  "Tell the server to shut down when Emacs exits, without waiting for it.
Waiting here hangs an Emacs whose terminal is gone (SIGHUP): it kept
running, busy, after its terminal closed.  The server reads shutdown
and exit from the pipe and exits on its own."
  (let ((conn sly-agent-q--connection))
    (when (and conn (jsonrpc-running-p conn))
      (setf (sly-agent-q--status conn) 'stopping)
      (ignore-errors
        (jsonrpc-async-request conn 'shutdown nil
                               :success-fn #'ignore :error-fn #'ignore :timeout-fn #'ignore))
      (ignore-errors (jsonrpc-notify conn 'exit nil)))))

(add-hook 'kill-emacs-hook #'sly-agent-q--kill-emacs)

;;;; Dispatch

(defcustom sly-agent-q-gc-cons-threshold (* 64 1024 1024)
  "The `gc-cons-threshold' while the server's traffic lasts, or nil.
A message of the server raises `gc-cons-threshold' to this (never
lowers it) until the server has been quiet for
`sly-agent-q-gc-quiet-time' seconds; then the user's value is back,
unless something else changed it meanwhile.  A model's burst of tool
calls, with their results for the chat, the image's answers and the
replies, conses megabytes: with Emacs's default threshold that was a
garbage collection every 800 KB, each one marking the whole heap, at
20-25 ms each in batch Emacs with SLIME loaded, and together most of the
time a burst took (benchmarks, figures 2 and 7).  Held off, they are
one collection when the burst ends.  nil leaves `gc-cons-threshold'
alone."
  :type '(choice (const :tag "Leave gc-cons-threshold alone" nil) integer))

(defcustom sly-agent-q-gc-quiet-time 0.5
  "Seconds without server traffic that end the holding off of collections.
See `sly-agent-q-gc-cons-threshold'."
  :type 'number)

(defvar sly-agent-q--gc-held nil
  "While collections are held off, (USER-VALUE . RAISED-VALUE).
Of `gc-cons-threshold': USER-VALUE is the one given back.")

(defvar sly-agent-q--gc-last-traffic 0.0
  "When the server's traffic was last seen, a `float-time'.")

(defvar sly-agent-q--gc-timer nil
  "The one timer that ends the holding off of collections.")

(defun sly-agent-q-server-hold-collections ()
  "Hold garbage collections off while the server's traffic lasts.
See `sly-agent-q-gc-cons-threshold'.  The global (top-level) value is
the one changed: a `let' of `gc-cons-threshold' around the caller is
neither changed nor restored by mistake."
  (setq sly-agent-q--gc-last-traffic (float-time))
  (when (and sly-agent-q-gc-cons-threshold (not sly-agent-q--gc-held))
    (let ((user (default-toplevel-value 'gc-cons-threshold)))
      (when (< user sly-agent-q-gc-cons-threshold)
        (setq sly-agent-q--gc-held (cons user sly-agent-q-gc-cons-threshold))
        (set-default-toplevel-value 'gc-cons-threshold sly-agent-q-gc-cons-threshold)
        (sly-agent-q--gc-arm sly-agent-q-gc-quiet-time)))))

(defun sly-agent-q--gc-arm (seconds)
  "Check in SECONDS whether the server has gone quiet."
  (when sly-agent-q--gc-timer (cancel-timer sly-agent-q--gc-timer))
  (setq sly-agent-q--gc-timer (run-with-timer seconds nil #'sly-agent-q--gc-check)))

(defun sly-agent-q--gc-check ()
  "Release collections once the server has been quiet long enough.
Until then, check again later: one timer, re-armed, as a timer per
message would cost more than it saves."
  (setq sly-agent-q--gc-timer nil)
  (let ((quiet (- (float-time) sly-agent-q--gc-last-traffic)))
    (if (< quiet sly-agent-q-gc-quiet-time)
        (sly-agent-q--gc-arm (- sly-agent-q-gc-quiet-time quiet))
      (sly-agent-q-server-release-collections))))

(defun sly-agent-q-server-release-collections ()
  "Give `gc-cons-threshold' back its value from before the server's traffic.
A value that something else set meanwhile is left as it is.  The
collection held off happens at Emacs's next allocation check."
  (when sly-agent-q--gc-timer
    (cancel-timer sly-agent-q--gc-timer)
    (setq sly-agent-q--gc-timer nil))
  (pcase-let ((`(,user . ,raised) sly-agent-q--gc-held))
    (setq sly-agent-q--gc-held nil)
    (when (and raised (eql (default-toplevel-value 'gc-cons-threshold) raised))
      (set-default-toplevel-value 'gc-cons-threshold user))))

(defun sly-agent-q--dispatch-request (_conn method _params)
  "The server sends no requests; answer any with an error naming METHOD."
  (signal 'jsonrpc-error
          `((jsonrpc-error-code . -32601) ; JSON-RPC's MethodNotFound
            (jsonrpc-error-message . ,(format "Emacs does not answer %s requests" method)))))

(defun sly-agent-q--dispatch-notification (conn method params)
  "Hand notification METHOD with PARAMS from CONN to its method.  Never signals."
  (condition-case err
      (if (sly-agent-q-protocol-method-p method 'server->emacs 'notification)
          (progn
            (sly-agent-q-server-hold-collections)
            (sly-agent-q-handle-notification conn method params))
        (sly-agent-q--log conn "ignored %s: not a notification of protocol %d"
                          method sly-agent-q-protocol-version))
    (error
     (setq sly-agent-q-server-last-handler-error err)
     (sly-agent-q--log conn "handler for %s failed: %s" method (error-message-string err)))))

(cl-defmethod sly-agent-q-handle-notification (conn method _params)
  "Log a declared notification METHOD from CONN that nothing here handles."
  (sly-agent-q--log conn "no handler for %s" method))

(cl-defmethod sly-agent-q-handle-notification (conn (_method (eql emacs/call)) params)
  "Start the `emacs/call' PARAMS from CONN."
  (sly-agent-q--handle-call conn params))

(cl-defmethod sly-agent-q-handle-notification (conn (_method (eql emacs/cancel)) params)
  "The server no longer wants an answer to the call in PARAMS from CONN."
  (cl-destructuring-bind (&key id reason &allow-other-keys) params
    (let ((call (gethash id (sly-agent-q--calls conn))))
      (when call
        (sly-agent-q--call-drop call (or reason "cancelled"))))))

;;;; emacs/call objects

(cl-defstruct (sly-agent-q-call (:constructor sly-agent-q--make-call))
  "One pending `emacs/call' from the server."
  id kind params conn done cancel-functions (start (float-time)))

(defun sly-agent-q--handle-call (conn params)
  "Start the `emacs/call' PARAMS from CONN through its kind's method."
  (let* ((id (plist-get params :id))
         (kind (plist-get params :kind))
         (call (sly-agent-q--make-call :id id :kind kind :conn conn
                                       :params (plist-get params :params)))
         (known (sly-agent-q-protocol-call-kind kind)))
    (puthash id call (sly-agent-q--calls conn))
    (if (not known)
        (sly-agent-q-call-fail call (format "Emacs cannot answer calls of kind %s." kind))
      (condition-case err
          (sly-agent-q-handle-call known call)
        (error
         (setq sly-agent-q-server-last-handler-error err)
         (sly-agent-q-call-fail call (format "Emacs failed to start the %s call: %s"
                                             kind (error-message-string err))))))))

(cl-defmethod sly-agent-q-handle-call (kind call)
  "Fail CALL, whose KIND nothing here answers (its module is not loaded)."
  (sly-agent-q-call-fail call (format "Emacs cannot answer calls of kind %s (not loaded)." kind)))

(defun sly-agent-q--call-drop (call reason)
  "Mark CALL done without answering; run its cancel functions with REASON."
  (unless (sly-agent-q-call-done call)
    (setf (sly-agent-q-call-done call) t)
    (when (sly-agent-q-call-conn call)
      (remhash (sly-agent-q-call-id call) (sly-agent-q--calls (sly-agent-q-call-conn call))))
    (dolist (fn (sly-agent-q-call-cancel-functions call))
      (sly-agent-q-server-call-safely fn reason))))

(defun sly-agent-q-call-on-cancel (call function)
  "Run FUNCTION with a reason if CALL is cancelled or its server dies."
  (push function (sly-agent-q-call-cancel-functions call)))

(defvar sly-agent-q--secrets-cache nil
  "(KEY ENVIRONMENT SECRETS): the last answer of `sly-agent-q-server-secrets'.
KEY and ENVIRONMENT are copies of what it was computed from.")

(defun sly-agent-q-server-secrets ()
  "Return the known secrets as an alist of (NAME . VALUE), longest first.
They are the API key handed to the server, and the values (of 8
characters or more) of the environment variables whose names end in
_KEY, _TOKEN or _SECRET or contain PASSWORD; a Lisp image started
from this Emacs inherits them.  Every reply is redacted with them, so
the answer is kept until the key or the environment changes."
  (if (and sly-agent-q--secrets-cache
           (equal (nth 0 sly-agent-q--secrets-cache) sly-agent-q--server-key)
           (equal (nth 1 sly-agent-q--secrets-cache) process-environment))
      (nth 2 sly-agent-q--secrets-cache)
    (let ((found (and sly-agent-q--server-key (list sly-agent-q--server-key)))
          (case-fold-search t))
      (dolist (entry process-environment)
        (when (string-match "\\`\\([^=]+\\)=\\(.\\{8,\\}\\)" entry)
          (let ((name (match-string 1 entry)))
            (when (string-match-p "\\(?:_KEY\\|_TOKEN\\|_SECRET\\)\\'\\|PASSWORD" name)
              (push (cons name (match-string 2 entry)) found)))))
      (let ((secrets (sort (delete-dups found) (lambda (a b) (> (length (cdr a)) (length (cdr b)))))))
        (setq sly-agent-q--secrets-cache
              (list (copy-tree sly-agent-q--server-key) (copy-sequence process-environment) secrets))
        secrets))))

(defun sly-agent-q--secret-in-p (value secrets)
  "Look for SECRETS in the strings of VALUE; return non-nil if one is there.
VALUE is as for `sly-agent-q-server-redact'."
  (cond ((stringp value)
         (let (hit)
           (dolist (s secrets hit)
             (unless hit (setq hit (string-search (cdr s) value))))))
        ((consp value) (or (sly-agent-q--secret-in-p (car value) secrets)
                           (sly-agent-q--secret-in-p (cdr value) secrets)))
        ((vectorp value)
         (cl-loop for v across value thereis (sly-agent-q--secret-in-p v secrets)))
        ((hash-table-p value)
         (catch 'found
           (maphash (lambda (_k v) (when (sly-agent-q--secret-in-p v secrets) (throw 'found t))) value)
           nil))))

(defun sly-agent-q-server-redact (value &optional secrets)
  "Return VALUE with every known secret replaced by a marker.
VALUE is a string, or a plist, list, vector or hash table of them
\(as sent in JSON).  SECRETS defaults to `sly-agent-q-server-secrets'.
A secret becomes [secret NAME redacted].  VALUE itself is returned,
not a copy, when it holds no secret (every reply is redacted)."
  (let ((secrets (or secrets (sly-agent-q-server-secrets))))
    (if (and secrets (sly-agent-q--secret-in-p value secrets))
        (sly-agent-q--redact value secrets)
      value)))

(defun sly-agent-q--redact (value secrets)
  "A copy of VALUE with each of SECRETS replaced by a marker."
  (cond
   ((stringp value)
    (dolist (s secrets value)
      (when (string-search (cdr s) value)
        (setq value (string-replace (cdr s) (format "[secret %s redacted]" (car s))
                                    value)))))
   ((consp value)
    (cons (sly-agent-q--redact (car value) secrets)
          (sly-agent-q--redact (cdr value) secrets)))
   ((vectorp value)
    (vconcat (mapcar (lambda (v) (sly-agent-q--redact v secrets)) value)))
   ((hash-table-p value)
    (let ((copy (make-hash-table :test (hash-table-test value))))
      (maphash (lambda (k v) (puthash k (sly-agent-q--redact v secrets) copy)) value)
      copy))
   (t value)))

;;;; Large messages, in pieces

(defconst sly-agent-q--piece-size 65536
  "Characters of a large message written to the server at a time.")

(defconst sly-agent-q--piece-pause 0.001
  "Seconds between two pieces of a large message: time to read a key.")

(cl-defmethod jsonrpc-connection-send :around ((conn sly-agent-q-connection) &rest _)
  "Send after what waits in CONN's outbox, if anything does: in order."
  (if (sly-agent-q--outbox conn)
      (sly-agent-q--outbox-add conn (list (lambda () (cl-call-next-method))))
    (cl-call-next-method)))

(defconst sly-agent-q--unencodable
  (rx (any (#xD800 . #xDFFF) (#x3FFF80 . #x3FFFFF)))
  "Characters JSON cannot carry: surrogate codes and raw bytes.")

(defun sly-agent-q--wire-safe (value)
  "VALUE, or a copy of it where each character JSON cannot carry is U+FFFD.
Emacs's JSON encoder refuses a whole message for one such character (a
buffer holding raw bytes): the reply would be lost and its call wait
for its timeout.  VALUE is made of strings, plists, lists and vectors."
  (cond
   ((stringp value)
    (if (string-match-p sly-agent-q--unencodable value)
        (replace-regexp-in-string sly-agent-q--unencodable "\ufffd" value t t)
      value))
   ((consp value)
    (let ((head (sly-agent-q--wire-safe (car value)))
          (tail (sly-agent-q--wire-safe (cdr value))))
      (if (and (eq head (car value)) (eq tail (cdr value))) value (cons head tail))))
   ((vectorp value)
    (let ((copy (cl-map 'vector #'sly-agent-q--wire-safe value)))
      (if (cl-every #'eq copy value) value copy)))
   (t value)))

(defun sly-agent-q--notify-large (conn method params)
  "Send notification METHOD with PARAMS on CONN; a large one in pieces.
`process-send-string' of a whole message waits while the pipe is full,
20 ms each time, with no key read: a 3 MB tool result kept Emacs
deaf for half a second (benchmarks, figure 7).  A large message is
encoded, then written a piece at a time, each step from a timer, and
keys are read between them."
  (if (<= (sly-agent-q--text-size params) sly-agent-q--piece-size)
      (jsonrpc-notify conn method params)
    (sly-agent-q--outbox-add
     conn (list (cons :message (list :jsonrpc "2.0" :method (symbol-name method) :params params))))))

(defun sly-agent-q--text-size (value)
  "The characters of the strings in VALUE: about the size of its JSON.
VALUE is made of plists, lists and vectors."
  (cond ((stringp value) (length value))
        ((consp value) (cl-loop for tail on value
                                sum (sly-agent-q--text-size (car tail))
                                while (consp (cdr tail))))
        ((vectorp value) (cl-loop for v across value sum (sly-agent-q--text-size v)))
        (t 0)))

(defun sly-agent-q--outbox-add (conn items)
  "Queue ITEMS on CONN's outbox and see that they are written."
  (setf (sly-agent-q--outbox conn) (append (sly-agent-q--outbox conn) items))
  (unless (sly-agent-q--outbox-timer conn)
    (setf (sly-agent-q--outbox-timer conn)
          (run-at-time 0 nil #'sly-agent-q--outbox-write conn))))

(defun sly-agent-q--outbox-write (conn)
  "Write the next piece of CONN's outbox, or run the next send; then come back."
  (setf (sly-agent-q--outbox-timer conn) nil)
  (let ((item (pop (sly-agent-q--outbox conn))))
    (condition-case err
        (pcase item
          (`(:message . ,message)
           ;; Encoded on its own step: encoding megabytes takes tens of ms.
           (let ((json (json-serialize message :false-object :json-false :null-object nil)))
             (sly-agent-q--log conn "%s: %d bytes, sent in pieces"
                               (plist-get message :method) (string-bytes json))
             ;; Cut as they go: cutting megabytes at once took 20 ms more.
             (push (cons json 0) (sly-agent-q--outbox conn))
             (push (format "Content-Length: %d\r\n\r\n" (string-bytes json))
                   (sly-agent-q--outbox conn))))
          ((pred stringp) (process-send-string (jsonrpc--process conn) item))
          (`(,(and (pred stringp) string) . ,from)
           (let ((to (min (length string) (+ from sly-agent-q--piece-size))))
             (when (< to (length string))
               (push (cons string to) (sly-agent-q--outbox conn)))
             (process-send-string (jsonrpc--process conn) (substring string from to))))
          ((pred functionp) (funcall item)))
      (error
       ;; The server is gone: what waited is dropped (its sentinel reports it).
       (setf (sly-agent-q--outbox conn) nil)
       (sly-agent-q--log conn "sending failed: %s" (error-message-string err)))))
  (when (sly-agent-q--outbox conn)
    ;; Not 0: Emacs runs timers that are due one after another before it
    ;; reads a key or redraws, and a chain of them kept keys waiting.
    (setf (sly-agent-q--outbox-timer conn)
          (run-at-time sly-agent-q--piece-pause nil #'sly-agent-q--outbox-write conn))))

(defun sly-agent-q--call-send (call reply)
  "Send REPLY (a plist) for CALL unless it was answered or dropped already.
Known secrets are redacted first: the reply goes to the events
buffer, the chat and the model."
  (unless (sly-agent-q-call-done call)
    (setf (sly-agent-q-call-done call) t)
    (let ((conn (sly-agent-q-call-conn call)))
      (when conn
        (remhash (sly-agent-q-call-id call) (sly-agent-q--calls conn)))
      (when (and conn (jsonrpc-running-p conn))
        (sly-agent-q-server-hold-collections)
        (sly-agent-q--notify-large conn 'emacs/reply
                                   (append (list :id (sly-agent-q-call-id call))
                                           (sly-agent-q--wire-safe (sly-agent-q-server-redact reply))))
        t))))

(defun sly-agent-q-call-reply (call result)
  "Answer CALL with RESULT (a plist, sent as a JSON object).
Return non-nil if the answer was sent; a second answer is ignored."
  (sly-agent-q--call-send call (list :result result)))

(defun sly-agent-q-call-fail (call message)
  "Answer CALL with an error MESSAGE (written for the model)."
  (sly-agent-q--call-send call (list :error (list :message (format "%s" message)))))

(defun sly-agent-q-call-pending (&optional kind)
  "Return what the current connection waits for (of KIND if given)."
  (when sly-agent-q--connection
    (let (out)
      (maphash (lambda (_ c) (when (or (null kind) (equal kind (sly-agent-q-call-kind c)))
                               (push c out)))
               (sly-agent-q--calls sly-agent-q--connection))
      out)))

;;;; Emacs-runtime tools (the buffer and file tools live in sly-agent-q-tools.el)

(declare-function sly-agent-q-tools-call "sly-agent-q-tools" (capability args callback &optional changes-callback))
(declare-function sly-agent-q-tools-check-approved "sly-agent-q-tools" (approved))

(cl-defmethod sly-agent-q-handle-call ((_kind (eql tool)) call)
  "Run the Emacs capability asked for by CALL through `sly-agent-q-tools-call'."
  (let ((params (sly-agent-q-call-params call)))
    (cond
     ((not (fboundp 'sly-agent-q-tools-call))
      (sly-agent-q-call-fail call "The Emacs buffer and file tools are not loaded (sly-agent-q-tools)."))
     ;; An approved call runs only on the target approved, checked here,
     ;; in the same command that runs it.
     ((and (plist-get params :approved)
           (condition-case err
               (progn (sly-agent-q-tools-check-approved (plist-get params :approved)) nil)
             (sly-agent-q-tool-error (sly-agent-q-call-fail call (cadr err)) t))))
     (t
      (let* (changes
             (cancel
              (sly-agent-q-tools-call
               (plist-get params :tool) (plist-get params :arguments)
               (lambda (content error)
                 (if error
                     (sly-agent-q-call-fail call error)
                   ;; The changes go with the result, so that the server keeps
                   ;; them in the saved conversation for a rewind.
                   (sly-agent-q-call-reply call (sly-agent-q-server-plist-compact
                                                 (list :content (format "%s" (or content ""))
                                                       :changes (and (> (length changes) 0) changes))))))
               (lambda (c) (setq changes c)))))
        ;; A capability that answers later may be stopped: the server's
        ;; emacs/cancel (a cancelled turn or call, its timeout) stops it.
        (when (functionp cancel)
          (sly-agent-q-call-on-cancel call (lambda (_reason) (funcall cancel)))))))))

(provide 'sly-agent-q-server)
;;; sly-agent-q-server.el ends here
