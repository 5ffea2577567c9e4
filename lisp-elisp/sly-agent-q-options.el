;;; sly-agent-q-options.el --- The options of sly-agent-q's server and agent  -*- lexical-binding: t; -*-

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

;; The customization options the server is started and configured
;; with: the provider, model and key, the agent's limits, trust levels
;; and permission rules, logging and restarts.

;;; Code:

(require 'sly-agent-q-protocol-table)

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

(defcustom sly-agent-q-thinking nil
  "How each model thinks before it answers and between its tool calls.
An alist of (MODEL . SETTING).  MODEL is a model name, the start of
one (\"claude-opus\"), or \"*\" for any model; the longest that
matches wins.  SETTING is `off', `auto' (what a model not named gets:
the mode its documentation recommends), an effort level (`low',
`medium', `high', `xhigh' or `max'; Claude 4.6 and later, and
OpenAI-compatible models that take a reasoning effort) or a number of
tokens (a thinking budget, for Claude models before 4.6).  Thinking
tokens are billed as output tokens.  A change applies from the next
turn: a turn keeps one setting."
  :type '(alist :key-type (string :tag "Model or its start")
                :value-type (choice (const :tag "Off" off) (const :tag "Auto" auto)
                                    (const low) (const medium) (const high)
                                    (const xhigh) (const max)
                                    (integer :tag "Budget in tokens"))))

(defcustom sly-agent-q-turn-timeout nil
  "Wall-clock limit of one turn in seconds, or nil for the server's default."
  :type '(choice (const :tag "Default" nil) number))

(defconst sly-agent-q-tool-categories sly-agent-q-protocol-table-tool-categories
  "The tool categories the server knows (generated from its catalog).
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
covers its aliases, or one of the categories of
`sly-agent-q-tool-categories' (evaluation, filesystem, systems,
debugger...), whose setting covers every tool in it.  For example
  ((\"evaluation\" . dangerous) (\"write_file\" . cautious))
Removing an entry and reconfiguring (or restarting) takes effect at
once: the server's configuration is replaced, never merged."
  :type '(alist :key-type (string :tag "Tool or category")
                :value-type (choice (const safe) (const cautious) (const dangerous))))

(defcustom sly-agent-q-permission-rules nil
  "Rules that allow, ask about or deny tool calls, checked by the server.
A list of plists (:action ACTION :tool NAME :category NAME :argument
PARAM :pattern REGEXP :command WORDS), ACTION one of the symbols
`allow', `ask' or `deny'; every other key is optional.  A rule matches
a call of the tool NAME (or of a tool in the category NAME); with
:argument and :pattern, only when the argument PARAM matches REGEXP, a
JavaScript regular expression.  With :command, only a command of
run_command whose words are WORDS (a final * stands for any further
arguments; see the README's section on run_command).  When several
rules match, deny wins over ask, and ask over allow.  For example,
never write .asd files, and run `make test' without asking:
  ((:action deny :tool \"write_file\" :argument \"path\" :pattern \"\\\\.asd$\")
   (:action allow :tool \"run_command\" :command \"make test*\"))"
  :type '(repeat
          (plist :options
                 ((:action (choice (const allow) (const ask) (const deny)))
                  (:tool string)
                  (:category string)
                  (:argument string)
                  (:pattern string)
                  (:command string)))))

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

(defcustom sly-agent-q-allow-shell-commands nil
  "Non-nil means run_command may run a shell line, not only a program.
Off, the model gives a program and its arguments (no pipes,
redirections or `&&'), which permission rules can judge word by word;
on, it may also give a line for /bin/sh, which always asks unless a
rule names that exact line."
  :type 'boolean)

(defcustom sly-agent-q-command-timeout 120
  "Seconds a command of run_command may run before it is stopped.
Its whole process group is stopped, and the model gets the output so
far."
  :type 'number)

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


;; Options that widen what the agent may do (or what runs, where data
;; goes) are marked risky, so that a .dir-locals.el planted in a cloned
;; repository cannot set them silently, nor be marked safe for good.
;; Autoloaded: a .dir-locals.el visited before the package loads is
;; asked about as risky too (package.el loads the autoloads at start).
;;;###autoload
(dolist (option '(sly-agent-q-node-program
                  sly-agent-q-server-file
                  sly-agent-q-provider
                  sly-agent-q-base-url
                  sly-agent-q-api-key
                  sly-agent-q-max-steps
                  sly-agent-q-trust-levels
                  sly-agent-q-permission-rules
                  sly-agent-q-ask-before-evaluating
                  sly-agent-q-max-safety-level
                  sly-agent-q-read-outside-project
                  sly-agent-q-allow-shell-commands
                  sly-agent-q-command-timeout
                  sly-agent-q-extra-configuration
                  sly-agent-q-conversation-directory))
  (put option 'risky-local-variable t)
  ;; A value marked safe for good (`!') before the option was known to
  ;; be risky would be applied without a question: it is forgotten.
  (setq safe-local-variable-values
        (assq-delete-all option safe-local-variable-values)))

(provide 'sly-agent-q-options)
;;; sly-agent-q-options.el ends here
