;;; sly-agent-q-mcp.el --- MCP both ways: your image for other agents, MCP servers for ours  -*- lexical-binding: t; -*-

;; Copyright (C) 2026 The sly-agent-q contributors

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

;; Serving: M-x sly-agent-q-mcp-start makes the server also serve its
;; tools over MCP (Streamable HTTP on 127.0.0.1, a random bearer token),
;; so that Claude Code, Codex and other MCP clients reach the running
;; image through your SLY/SLIME connection, under the same trust rules
;; as the chat: safe tools run, cautious ones are logged, dangerous ones
;; ask in the chat buffer, naming the client, and are denied after
;; `sly-agent-q-mcp-approval-timeout' seconds without an answer.  The URL
;; and token go to `sly-agent-q-mcp-state-file' (mode 0600).
;; M-x sly-agent-q-mcp-config shows the entries for Claude Code's
;; .mcp.json and Codex's config.toml (with a prefix argument it writes
;; the project's .mcp.json).  Every MCP call is shown in the buffer
;; *sly-agent-q MCP*.
;;
;; Using: the MCP servers named in `sly-agent-q-mcp-server-files'
;; (.mcp.json files) and `sly-agent-q-mcp-servers' are offered to the
;; agent as mcp__SERVER__TOOL, each at the level given in
;; `sly-agent-q-mcp-server-levels' (default dangerous: every call asks).

;;; Code:

(require 'cl-lib)
(require 'json)
(require 'subr-x)
(require 'sly-agent-q-files)
(require 'sly-agent-q-server)
(require 'sly-agent-q-display)

(defgroup sly-agent-q-mcp nil
  "MCP for sly-agent-q: serving its tools, and using MCP servers."
  :group 'sly-agent-q
  :prefix "sly-agent-q-mcp-")

(defcustom sly-agent-q-mcp-start-with-server nil
  "Non-nil means serve MCP whenever the sly-agent-q server starts."
  :type 'boolean)

(defcustom sly-agent-q-mcp-port 0
  "The loopback port MCP is served on; 0 means a free port each time."
  :type 'integer)

(defun sly-agent-q-mcp-default-state-file ()
  "Return the default state file, as the stdio entry point has it.
That is $XDG_STATE_HOME/sly-agent-q/mcp.json, else under ~/.local/state."
  (expand-file-name "sly-agent-q/mcp.json"
                    (let ((xdg (getenv "XDG_STATE_HOME")))
                      (if (and xdg (file-name-absolute-p xdg)) xdg "~/.local/state"))))

(defcustom sly-agent-q-mcp-state-file (sly-agent-q-mcp-default-state-file)
  "Where the MCP server's URL and token are written, readable by you alone.
The stdio entry point (sly-agent-q-server --mcp-stdio) reads it; its
default is the same place."
  :type 'file)

(defcustom sly-agent-q-mcp-approval-timeout 120
  "Seconds a dangerous MCP call waits for your answer before it is denied."
  :type 'number)

(defcustom sly-agent-q-mcp-max-sessions 16
  "Most MCP client sessions open at once.
Each costs the server memory.  Past this number a client's new
session closes the one unused for the longest time, and is refused,
saying so, only while every session is answering a request."
  :type 'integer)

(defcustom sly-agent-q-mcp-session-idle-timeout 1800
  "Seconds an MCP client session may go unused before it is closed.
A client whose session was closed starts a new one."
  :type 'number)

(defcustom sly-agent-q-mcp-server-files nil
  "Files in the .mcp.json format naming MCP servers the agent may use.
Each holds {\"mcpServers\": {NAME: {\"command\": ..., \"args\": [...],
\"env\": {...}} or {\"type\": \"http\", \"url\": ..., \"headers\": {...}}}}."
  :type '(repeat file))

(defcustom sly-agent-q-mcp-servers nil
  "MCP servers the agent may use, besides those in `sly-agent-q-mcp-server-files'.
An alist of (NAME . PLIST), PLIST as in .mcp.json: (:command
\"npx\" :args [\"-y\" \"some-server\"]) or (:type \"http\" :url URL)."
  :type '(alist :key-type string :value-type plist))

(defcustom sly-agent-q-mcp-server-levels nil
  "Trust level per MCP server name: safe, cautious or dangerous.
A server not named here is dangerous: each call of its tools asks."
  :type '(alist :key-type string
                :value-type (choice (const safe) (const cautious) (const dangerous))))

(defvar sly-agent-q-mcp--url nil
  "The URL MCP is served on, or nil when it is not.")

;;;; The log

(defun sly-agent-q-mcp-log-buffer ()
  "The buffer showing every MCP call and every MCP server's status."
  (interactive)
  (let ((buf (get-buffer-create "*sly-agent-q MCP*")))
    (when (called-interactively-p 'interactive) (display-buffer buf))
    buf))

(defun sly-agent-q-mcp--log (format-string &rest args)
  "Append FORMAT-STRING with ARGS, time-stamped, to the MCP log buffer.
ARGS come from MCP clients and servers: each string is drawn as one
line of data (`sly-agent-q-display-line')."
  (with-current-buffer (sly-agent-q-mcp-log-buffer)
    (let ((inhibit-read-only t))
      (save-excursion
        (goto-char (point-max))
        ;; One line, its continuations in a narrow window framed: a client's
        ;; or server's text wrapped cannot start a line that reads as an entry.
        (insert (sly-agent-q-display-keep-frame
                 (concat (format-time-string "%H:%M:%S ")
                         (apply #'format format-string
                                (mapcar (lambda (a) (if (stringp a) (sly-agent-q-display-line a) a)) args))
                         "\n")
                 (concat "         " (propertize sly-agent-q-display-outside-frame
                                               'face 'sly-agent-q-display-frame-face))))))))

(cl-defmethod sly-agent-q-handle-notification (_conn (_method (eql mcp/call)) params)
  "Log the MCP call PARAMS (an mcp/call notification)."
  (cl-destructuring-bind (&key phase client tool arguments success ((:safetyLevel level)) summary
                              &allow-other-keys)
      (sly-agent-q-redact params)
    ;; The client's name is its own word: quoted, so that it cannot read
    ;; as the start of another entry ("x calls write_file ...").
    (setq client (sly-agent-q-display-name (or client "")))
    ;; So is the tool's name (an unknown one is logged as asked): quoted
    ;; unless it is a plain name.
    (unless (and (stringp tool) (string-match-p "\\`[[:alnum:]_.-]+\\'" tool))
      (setq tool (sly-agent-q-display-name (or tool ""))))
    (if (equal phase "start")
        (sly-agent-q-mcp--log "%s calls %s %s" client tool
                              (json-encode (or arguments '(:x nil))))
      (sly-agent-q-mcp--log "%s %s %s (%s): %s" client tool
                            (if (eq success t) "ok" "FAILED")
                            level
                            (or summary "")))))

(cl-defmethod sly-agent-q-handle-notification (_conn (_method (eql mcp/serverStatus)) params)
  "Report the status PARAMS of an MCP server used by the agent."
  (cl-destructuring-bind (&key name status ((:message msg)) &allow-other-keys) params
    (sly-agent-q-mcp--log "MCP server %s: %s%s" name status
                          (if msg (format " (%s)" msg) ""))
    ;; Connected with a message: some of its tools were renamed or refused.
    (cond ((not (equal status "connected"))
           (message "sly-agent-q: %s" (sly-agent-q-display-line
                                       (or msg (format "MCP server %s %s" name status)))))
          (msg (message "sly-agent-q: MCP server %s: %s"
                        (sly-agent-q-display-line name 64) (sly-agent-q-display-line msg))))))


;;;; Serving

;;;###autoload
(defun sly-agent-q-mcp-start ()
  "Serve the agent's tools over MCP on 127.0.0.1 (starting the server if needed)."
  (interactive)
  (sly-agent-q-server-request
   'mcp/start
   (list :stateFile (expand-file-name sly-agent-q-mcp-state-file)
         :port sly-agent-q-mcp-port
         :approvalTimeoutMs (round (* 1000 sly-agent-q-mcp-approval-timeout))
         :maxSessions sly-agent-q-mcp-max-sessions
         :sessionIdleTimeoutMs (round (* 1000 sly-agent-q-mcp-session-idle-timeout)))
   (lambda (result)
     (setq sly-agent-q-mcp--url (plist-get result :url))
     (sly-agent-q-mcp--log "serving MCP on %s" sly-agent-q-mcp--url)
     (message "sly-agent-q: MCP on %s (URL and token in %s; M-x sly-agent-q-mcp-config for clients)"
              sly-agent-q-mcp--url (abbreviate-file-name sly-agent-q-mcp-state-file)))
   (lambda (msg) (message "sly-agent-q: MCP could not start: %s" (sly-agent-q-display-line msg)))))

(defun sly-agent-q-mcp-stop ()
  "Stop serving MCP; the state file is removed."
  (interactive)
  (if (not (sly-agent-q-connection-ready-p))
      (message "sly-agent-q: the server is not running")
    (sly-agent-q-server-request
     'mcp/stop nil
     (lambda (_)
       (setq sly-agent-q-mcp--url nil)
       (sly-agent-q-mcp--log "stopped serving MCP")
       (message "sly-agent-q: MCP stopped")))))

(defun sly-agent-q-mcp--stdio-args ()
  "The arguments of the stdio entry point.
The server file, --mcp-stdio, and the state file when not the default."
  (append (list (expand-file-name (sly-agent-q-locate-server)) "--mcp-stdio")
          (unless (equal (expand-file-name sly-agent-q-mcp-state-file)
                         (sly-agent-q-mcp-default-state-file))
            (list "--mcp-state" (expand-file-name sly-agent-q-mcp-state-file)))))

(defun sly-agent-q-mcp-claude-entry ()
  "The mcpServers entry of .mcp.json for Claude Code, as an alist.
It runs the stdio entry point, which reads the URL and token from the
state file at each start: no secret is written into .mcp.json."
  `((sly-agent-q . ((command . ,sly-agent-q-node-program)
                    (args . ,(vconcat (sly-agent-q-mcp--stdio-args)))))))

(defun sly-agent-q-mcp-codex-entry ()
  "The [mcp_servers] entry of Codex's ~/.codex/config.toml, as a string."
  (format "[mcp_servers.sly-agent-q]\ncommand = %s\nargs = [%s]\n"
          (json-encode sly-agent-q-node-program)
          (mapconcat #'json-encode (sly-agent-q-mcp--stdio-args) ", ")))

(defun sly-agent-q-mcp--project-file ()
  "The .mcp.json at the root of the project the agent works in."
  (expand-file-name ".mcp.json" (sly-agent-q-files-project-root)))

(defun sly-agent-q-mcp-write-claude-config (file)
  "Add the sly-agent-q entry to the mcpServers of the .mcp.json FILE.
Other entries are kept; FILE is created when missing.  A link or a
file that is not a regular one (a FIFO...) is refused: a cloned project
may plant one to have another file of the user's rewritten."
  (when (file-symlink-p file)
    (user-error "%s is a link; write the entry there yourself" file))
  (when (and (file-exists-p file) (not (file-regular-p file)))
    (user-error "%s is not a regular file; write the entry there yourself" file))
  (let* ((json-object-type 'alist) (json-key-type 'symbol) (json-array-type 'vector)
         (old (and (file-exists-p file)
                   (with-temp-buffer (insert-file-contents file) (json-read))))
         (servers (assq-delete-all 'sly-agent-q (copy-alist (alist-get 'mcpServers old))))
         (new (cons (cons 'mcpServers (append servers (sly-agent-q-mcp-claude-entry)))
                    (assq-delete-all 'mcpServers (copy-alist old)))))
    (with-temp-file file
      (insert (let ((json-encoding-pretty-print t)) (json-encode new)) "\n"))
    file))

(defun sly-agent-q-mcp-config (&optional write)
  "Show how to connect Claude Code and Codex to this Emacs's image.
With prefix argument WRITE, also add the entry to the project's .mcp.json."
  (interactive "P")
  (let ((written (and write (sly-agent-q-mcp-write-claude-config (sly-agent-q-mcp--project-file)))))
    (with-help-window "*sly-agent-q MCP config*"
      (princ (format "MCP is %s.\n\n" (if sly-agent-q-mcp--url
                                          (format "served on %s" sly-agent-q-mcp--url)
                                        "not served now: M-x sly-agent-q-mcp-start")))
      (princ "Claude Code: in the project's .mcp.json (or `claude mcp add-json sly-agent-q '...'`):\n\n")
      (princ (let ((json-encoding-pretty-print t))
               (json-encode `((mcpServers . ,(sly-agent-q-mcp-claude-entry))))))
      (princ "\n\nCodex: in ~/.codex/config.toml:\n\n")
      (princ (sly-agent-q-mcp-codex-entry))
      (princ (format "\nBoth run the stdio entry point, which reads the URL and token from\n%s\n(yours alone); clients that speak HTTP can use that URL with the header\nAuthorization: Bearer TOKEN.\n"
                     (abbreviate-file-name sly-agent-q-mcp-state-file)))
      (when written (princ (format "\nWritten to %s.\n" written))))))

;;;; Using MCP servers

(defun sly-agent-q-mcp-client-configuration ()
  "The mcp/clientConfigure params: the files, the inline servers, the levels.
The server reads the files itself, so that secrets in them (env
values, headers) never pass through Emacs's events buffer."
  (let ((servers (make-hash-table :test #'equal))
        (levels (make-hash-table :test #'equal)))
    (dolist (s sly-agent-q-mcp-servers)
      (puthash (car s) (cdr s) servers))
    (dolist (l sly-agent-q-mcp-server-levels)
      (puthash (car l) (format "%s" (cdr l)) levels))
    (list :files (vconcat (mapcar #'expand-file-name sly-agent-q-mcp-server-files))
          :servers servers :levels levels)))

(defun sly-agent-q-mcp-connect-servers ()
  "Connect the configured MCP servers (again), offering their tools to the agent."
  (interactive)
  (sly-agent-q-server-request
   'mcp/clientConfigure (sly-agent-q-mcp-client-configuration)
   (lambda (result)
     (let ((servers (append (plist-get result :servers) nil)))
       (dolist (s servers)
         (sly-agent-q-mcp--log "MCP server %s: %s" (plist-get s :name)
                               (if (eq (plist-get s :ok) t)
                                   (format "%d tools" (length (plist-get s :tools)))
                                 (plist-get s :error))))
       (when (called-interactively-p 'any)
         (message "sly-agent-q: %d MCP server(s) configured" (length servers)))))))

(defun sly-agent-q-mcp--on-server-started (_conn)
  "Serve MCP and connect MCP servers as configured, once the server started."
  (setq sly-agent-q-mcp--url nil)
  (when sly-agent-q-mcp-start-with-server (sly-agent-q-mcp-start))
  (when (or sly-agent-q-mcp-server-files sly-agent-q-mcp-servers)
    (sly-agent-q-mcp-connect-servers)))

(add-hook 'sly-agent-q-connection-started-functions #'sly-agent-q-mcp--on-server-started)

;; Options that widen what the agent may do (or what runs, where data
;; goes) are marked risky, so that a .dir-locals.el planted in a cloned
;; repository cannot set them silently, nor be marked safe for good.
;; Autoloaded: a .dir-locals.el visited before the package loads is
;; asked about as risky too (package.el loads the autoloads at start).
;;;###autoload
(dolist (option '(sly-agent-q-mcp-start-with-server
                  sly-agent-q-mcp-port
                  sly-agent-q-mcp-state-file
                  sly-agent-q-mcp-approval-timeout
                  sly-agent-q-mcp-server-files
                  sly-agent-q-mcp-servers
                  sly-agent-q-mcp-server-levels))
  (put option 'risky-local-variable t)
  ;; A value marked safe for good (`!') before the option was known to
  ;; be risky would be applied without a question: it is forgotten.
  (setq safe-local-variable-values
        (assq-delete-all option safe-local-variable-values)))

(provide 'sly-agent-q-mcp)
;;; sly-agent-q-mcp.el ends here
