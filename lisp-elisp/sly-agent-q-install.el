;;; sly-agent-q-install.el --- Install the sly-agent-q server with npm  -*- lexical-binding: t; -*-

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

;; The Node server is an npm package (sly-agent-q, whose bin is
;; sly-agent-q-server: one bundled file, no dependencies).  A package
;; built from the git tree (MELPA) carries no server, so
;; M-x sly-agent-q-install-server installs the exact version this Elisp
;; speaks to, `sly-agent-q-install-server-version', with npm into
;; `sly-agent-q-install-directory' (under `user-emacs-directory'), the
;; way copilot.el installs its server.  npm runs asynchronously; its
;; output goes to the buffer *sly-agent-q install*.
;;
;; With a prefix argument the command asks for the npm package spec to
;; install instead (a tarball made by `npm pack', a directory, or
;; another registry spec); `sly-agent-q-server-package-spec' sets it
;; for good (an offline install, a private registry).

;;; Code:

(require 'cl-lib)
(require 'json)
(require 'subr-x)

;; Obsolete names (issue 46): these were named sly-agent-q-server-* before
;; sly-agent-q-server.el was split; kept for users who call them.
(define-obsolete-variable-alias 'sly-agent-q-server-version
  'sly-agent-q-install-server-version "0.2.0")

(defconst sly-agent-q-install-server-version "0.1.0"
  "The version of the server this Elisp speaks to.
The server reports its version when it is initialized; a different one
is reported to the user with what to run.  `sly-agent-q-install-server'
installs exactly this version.")

(defconst sly-agent-q-install-npm-name "sly-agent-q"
  "The name of the server's npm package.")

(defcustom sly-agent-q-install-directory (locate-user-emacs-file "sly-agent-q/")
  "Where `sly-agent-q-install-server' installs the server (npm's prefix)."
  :type 'directory
  :group 'sly-agent-q)

(defcustom sly-agent-q-npm-program "npm"
  "The npm executable that installs the server."
  :type 'string
  :group 'sly-agent-q)

(defcustom sly-agent-q-server-package-spec nil
  "What `sly-agent-q-install-server' gives npm to install.
nil means the registry's sly-agent-q at `sly-agent-q-install-server-version'.
A string is any npm package spec: a tarball made by `npm pack', a
directory, or NAME@VERSION from another registry."
  :type '(choice (const :tag "The registry's, at the version this package needs" nil)
                 (string :tag "npm package spec"))
  :group 'sly-agent-q)

(defvar sly-agent-q-node-program)       ; sly-agent-q-server.el, when loaded

(defconst sly-agent-q-install-buffer-name "*sly-agent-q install*"
  "The buffer showing the progress of `sly-agent-q-install-server'.")

(defvar sly-agent-q-install--process nil
  "The running install step (node --version or npm), or nil.")

(defvar sly-agent-q-install-finished-functions nil
  "Functions called with nil or an error message when an install ends.
Whatever said the server is missing (the chat) says what is true now.")

;;;; Where the installed server is

(defun sly-agent-q-install--recover (dir)
  "Put back the install an Emacs killed while replacing it left beside DIR.
`sly-agent-q-install--replace' moves the old install aside (DIR.old-*)
just before it moves the new one in; a kill between the two leaves DIR
missing and the whole old install aside."
  (let ((dir (directory-file-name (expand-file-name dir))))
    (unless (file-exists-p dir)
      (let ((aside (car (sort (file-expand-wildcards (concat dir ".old-*"))
                              #'file-newer-than-file-p))))
        (when (and aside (file-directory-p aside))
          (ignore-errors (rename-file aside dir)))))))

(defconst sly-agent-q-install--stale-seconds 3600
  "Age after which a staging directory beside the install is a killed install's.")

(defun sly-agent-q-install--sweep (dir)
  "Remove what an install killed part way left beside DIR.
A staging directory (DIR.installing-*) more than an hour old is a
killed install's; a newer one may be another Emacs's install under way."
  (let ((dir (directory-file-name (expand-file-name dir))))
    (sly-agent-q-install--recover dir)
    (dolist (staging (file-expand-wildcards (concat dir ".installing-*")))
      (when (and (file-directory-p staging)
                 (> (float-time (time-subtract nil (file-attribute-modification-time
                                                     (file-attributes staging))))
                    sly-agent-q-install--stale-seconds))
        (ignore-errors (delete-directory staging t))))))

(defun sly-agent-q-install--package-directory ()
  "The installed npm package's directory, or nil when it is not installed."
  (sly-agent-q-install--recover sly-agent-q-install-directory)
  (cl-loop for rel in (list (concat "lib/node_modules/" sly-agent-q-install-npm-name)
                            ;; npm on Windows puts a global prefix's packages here.
                            (concat "node_modules/" sly-agent-q-install-npm-name))
           for dir = (expand-file-name rel sly-agent-q-install-directory)
           when (file-readable-p (expand-file-name "dist/sly-agent-q-server.js" dir))
           return dir))

(defun sly-agent-q-install-server-file ()
  "The installed server's script, or nil when none is installed."
  (let ((dir (sly-agent-q-install--package-directory)))
    (and dir (expand-file-name "dist/sly-agent-q-server.js" dir))))

(defun sly-agent-q-install-installed-version ()
  "The version of the installed server (from its package.json), or nil."
  (let ((dir (sly-agent-q-install--package-directory)))
    (when dir
      (ignore-errors
        (with-temp-buffer
          (insert-file-contents (expand-file-name "package.json" dir))
          (let ((v (gethash "version" (json-parse-buffer))))
            (and (stringp v) v)))))))

;;;; Installing

(defun sly-agent-q-install--spec ()
  "The npm package spec installed by default."
  (or sly-agent-q-server-package-spec
      (format "%s@%s" sly-agent-q-install-npm-name sly-agent-q-install-server-version)))

(defun sly-agent-q-install--log (format-string &rest args)
  "Append a line made of FORMAT-STRING and ARGS to the install buffer."
  (with-current-buffer (get-buffer-create sly-agent-q-install-buffer-name)
    (let ((inhibit-read-only t))
      (goto-char (point-max))
      (insert (apply #'format format-string args) "\n"))))

(defun sly-agent-q-install--finish (callback error)
  "Report the end of an install: ERROR (a message) or success; call CALLBACK."
  (setq sly-agent-q-install--process nil)
  (if error
      (progn (sly-agent-q-install--log "\nFailed: %s" error)
             (message "sly-agent-q: %s" error))
    (let ((msg (format "server %s installed in %s; M-x sly-agent-q-restart-server uses it if one is running"
                       (or (sly-agent-q-install-installed-version) "?")
                       (abbreviate-file-name sly-agent-q-install-directory))))
      (sly-agent-q-install--log "\nDone: %s" msg)
      (message "sly-agent-q: %s" msg)))
  (dolist (fn sly-agent-q-install-finished-functions)
    (condition-case err
        (funcall fn error)
      (error (message "sly-agent-q: %s" (error-message-string err)))))
  (when callback
    (condition-case err
        (funcall callback error)
      (error (message "sly-agent-q: %s" (error-message-string err))))))

(defun sly-agent-q-install--failure (spec status output)
  "The message for npm's failure (exit STATUS, OUTPUT) to install SPEC.
It says what went wrong when npm's output tells (the registry has no
such version, or could not be reached) and names every other way to
install the server."
  (concat
   (cond ((string-match-p "\\bE404\\b\\|404 Not Found" output)
          (format "The npm registry has no %s (404)" spec))
         ;; The package is there, this version is not (yet).
         ((string-match-p "\\bETARGET\\b\\|No matching version found" output)
          (format "The npm registry has no %s (no such version: ETARGET)" spec))
         ((string-match-p "\\b\\(ENOTFOUND\\|ECONNREFUSED\\|ECONNRESET\\|ETIMEDOUT\\|EAI_AGAIN\\)\\b" output)
          (format "The npm registry could not be reached to install %s" spec))
         (t (format "npm install %s failed (exit %s)" spec status)))
   (format "; npm's output is in %s.  Other ways: C-u M-x sly-agent-q-install-server \
with a tarball made by `npm pack' (or `make package') in a checkout of sly-agent-q, \
or set `sly-agent-q-server-package-spec' to a tarball, a directory or another registry's spec"
           sly-agent-q-install-buffer-name)))

(defun sly-agent-q-install--replace (staging dir)
  "Put the install made in STAGING in place of DIR's, atomically enough.
The old install is moved aside first and deleted only once the new one
is in place, so a failure leaves one complete install, never half of one."
  (let ((old (and (file-directory-p dir)
                  (make-temp-name (concat (directory-file-name dir) ".old-")))))
    (when old (rename-file (directory-file-name dir) old))
    (condition-case err
        (rename-file (directory-file-name staging) (directory-file-name dir))
      (error (when old (rename-file old (directory-file-name dir)))
             (signal (car err) (cdr err))))
    (when old (delete-directory old t))))

(defun sly-agent-q-install--run (name command then)
  "Run COMMAND (a list) as process NAME, its output in the install buffer.
Call THEN with the exit status and the output once it ends; never waits."
  (sly-agent-q-install--log "$ %s" (mapconcat #'shell-quote-argument command " "))
  ;; A position, not a marker: process output is inserted before markers.
  (let ((start (with-current-buffer (get-buffer-create sly-agent-q-install-buffer-name)
                 (point-max))))
    (setq sly-agent-q-install--process
          (make-process
           :name name
           :buffer (get-buffer sly-agent-q-install-buffer-name)
           :command command
           :connection-type 'pipe
           :noquery t
           :file-handler nil
           :sentinel
           (lambda (proc _event)
             (unless (process-live-p proc)
               ;; The user may have killed the install buffer (which ends npm).
               (let ((out (let ((buf (process-buffer proc)))
                            (if (buffer-live-p buf)
                                (with-current-buffer buf
                                  (buffer-substring-no-properties start (point-max)))
                              ""))))
                 (funcall then (process-exit-status proc) out))))))))

(defun sly-agent-q-install--node-problem (program status output)
  "Return why PROGRAM is not Node.js 20+, or nil.
STATUS and OUTPUT are the exit status and output of PROGRAM --version."
  (cond ((not (eq status 0))
         (format "Running %s --version failed (exit %s); the server needs Node.js 20 or newer"
                 program status))
        ((not (string-match "^v?\\([0-9]+\\)\\.[0-9.]+" output))
         (format "The output of %s --version has no version; the server needs Node.js 20 or newer"
                 program))
        ((< (string-to-number (match-string 1 output)) 20)
         (format "Node.js %s (%s) is too old: the server needs Node.js 20 or newer \
\(install it, or set `sly-agent-q-node-program')"
                 (match-string 0 output) program))))

;;;###autoload
(defun sly-agent-q-install-server (&optional spec callback)
  "Install the sly-agent-q server with npm into `sly-agent-q-install-directory'.
It installs the version this package needs,
`sly-agent-q-install-server-version', from the npm registry, or SPEC
when given (interactively, with a prefix argument): any npm package
spec, such as a tarball made by `npm pack'.
Runs asynchronously, showing npm's output in *sly-agent-q install*;
CALLBACK, when non-nil, is called at the end with nil or an error
message.  Return the process."
  (interactive
   (list (and current-prefix-arg
              (read-string "npm package spec to install: " (sly-agent-q-install--spec)))))
  (when (process-live-p sly-agent-q-install--process)
    (user-error "An install of the sly-agent-q server is already running (see %s)"
                sly-agent-q-install-buffer-name))
  (sly-agent-q-install--sweep sly-agent-q-install-directory)
  (let* ((node-program (if (boundp 'sly-agent-q-node-program) sly-agent-q-node-program "node"))
         (node (or (executable-find node-program)
                   (user-error "Cannot find Node.js (`sly-agent-q-node-program' is %S): \
install Node.js 20 or newer, or set that option to its full path" node-program)))
         (npm (or (executable-find sly-agent-q-npm-program)
                  (user-error "Cannot find npm (`sly-agent-q-npm-program' is %S): \
install npm (it comes with Node.js), or set that option to its full path"
                              sly-agent-q-npm-program)))
         (spec (if (and spec (not (string-empty-p spec))) spec (sly-agent-q-install--spec)))
         ;; A local tarball or directory is named by its absolute path: npm runs elsewhere.
         (spec (if (file-exists-p spec) (expand-file-name spec) spec))
         (dir (expand-file-name sly-agent-q-install-directory))
         ;; npm installs beside DIR; DIR changes only once that install is whole.
         (staging (condition-case err
                      (progn (make-directory (file-name-directory (directory-file-name dir)) t)
                             (make-temp-file (concat (directory-file-name dir) ".installing-") t))
                    (file-error
                     (user-error "Cannot install the server beside %s (%s): make its parent \
directory writable, or set `sly-agent-q-install-directory' to a directory you can write"
                                 (abbreviate-file-name dir) (error-message-string err)))))
         ;; npm must not stop to ask, nor look for updates of itself, nor audit.
         (env (append '("npm_config_update_notifier=false"
                        "npm_config_fund=false" "npm_config_audit=false"
                        "npm_config_yes=true")
                      process-environment))
         (process-environment env)
         (cwd (file-name-as-directory temporary-file-directory))
         (default-directory cwd))
    (with-current-buffer (get-buffer-create sly-agent-q-install-buffer-name)
      (let ((inhibit-read-only t)) (erase-buffer))
      (special-mode))
    (sly-agent-q-install--log "Installing the sly-agent-q server %s (%s) into %s\n"
                              sly-agent-q-install-server-version spec dir)
    (display-buffer sly-agent-q-install-buffer-name)
    (sly-agent-q-install--run
     "sly-agent-q-node-version" (list node "--version")
     (lambda (status output)
       (let ((problem (sly-agent-q-install--node-problem node-program status output))
             ;; The sentinel runs after this function's bindings are gone.
             (process-environment env)
             (default-directory cwd))
         (if problem
             (progn (delete-directory staging t)
                    (sly-agent-q-install--finish callback problem))
           (sly-agent-q-install--run
            "sly-agent-q-npm-install"
            ;; "--": a spec that starts with a dash is a spec, never an npm option.
            (list npm "install" "--global" "--prefix" staging "--no-audit" "--no-fund" "--" spec)
            (lambda (status output)
              (let ((error
                     (cond ((not (eq status 0))
                            (sly-agent-q-install--failure spec status output))
                           ((not (let ((sly-agent-q-install-directory staging))
                                   (sly-agent-q-install-server-file)))
                            (format "npm installed %s, but it holds no sly-agent-q server" spec))
                           (t (condition-case err
                                  (progn (sly-agent-q-install--replace staging dir) nil)
                                (file-error (format "Putting the new server in place of %s failed: %s"
                                                    dir (error-message-string err))))))))
                (when (file-directory-p staging) (delete-directory staging t))
                (sly-agent-q-install--finish callback error))))))))
    sly-agent-q-install--process))

;; Options that widen what the agent may do (or what runs, where data
;; goes) are marked risky, so that a .dir-locals.el planted in a cloned
;; repository cannot set them silently, nor be marked safe for good.
;; Autoloaded: a .dir-locals.el visited before the package loads is
;; asked about as risky too (package.el loads the autoloads at start).
;;;###autoload
(dolist (option '(sly-agent-q-install-directory
                  sly-agent-q-npm-program
                  sly-agent-q-server-package-spec))
  (put option 'risky-local-variable t)
  ;; A value marked safe for good (`!') before the option was known to
  ;; be risky would be applied without a question: it is forgotten.
  (setq safe-local-variable-values
        (assq-delete-all option safe-local-variable-values)))

(provide 'sly-agent-q-install)
;;; sly-agent-q-install.el ends here
