;;; sly-agent-q-locate.el --- Finding Node.js and the sly-agent-q server  -*- lexical-binding: t; -*-

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

;; Where the server script is (the user's setting, a bundle shipped
;; with the package or a checkout's build, or the installed one), what
;; to tell the user when its version is not the one needed, and the
;; Node.js program that runs it.

;;; Code:

(require 'cl-lib)
(require 'sly-agent-q-install)
(require 'sly-agent-q-options)

;; Obsolete names (issue 46): these were named sly-agent-q-server-* before
;; sly-agent-q-server.el was split; kept for users who call them.
(define-obsolete-function-alias 'sly-agent-q-server-find
  #'sly-agent-q-locate-find-server "0.2.0")
(define-obsolete-function-alias 'sly-agent-q-server-locate
  #'sly-agent-q-locate-server "0.2.0")
(define-obsolete-function-alias 'sly-agent-q-server-package-candidates
  #'sly-agent-q-locate-package-files "0.2.0")
(define-obsolete-function-alias 'sly-agent-q-server-version-advice
  #'sly-agent-q-locate-version-advice "0.2.0")


;;;; Locating things

(defconst sly-agent-q-locate--lisp-directory
  (file-name-directory (or load-file-name buffer-file-name default-directory))
  "The directory this file was loaded from.")

(defun sly-agent-q-locate-package-files (&rest relatives)
  "Existing files among RELATIVES, tried from the package directory and its parent."
  (cl-loop for base in (list sly-agent-q-locate--lisp-directory
                             (file-name-directory
                              (directory-file-name sly-agent-q-locate--lisp-directory)))
           append (cl-loop for rel in relatives
                           for f = (expand-file-name rel base)
                           when (file-exists-p f) collect f)))

(defun sly-agent-q-locate-find-server ()
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
    (let ((bundled (car (sly-agent-q-locate-package-files
                         "sly-agent-q-server.js" "server/sly-agent-q-server.js"
                         "dist/sly-agent-q-server.js")))
          (installed (sly-agent-q-install-server-file)))
      (cond (bundled (cons bundled 'package))
            (installed (cons installed 'installed))))))

(defun sly-agent-q-locate-server ()
  "Return the server script to run, or signal a `user-error' saying why not."
  (or (car (sly-agent-q-locate-find-server))
      (user-error "The sly-agent-q server is not installed: M-x sly-agent-q-install-server \
installs it with npm (version %s, into %s); in a source checkout `make build' builds it"
                  sly-agent-q-install-server-version
                  (abbreviate-file-name sly-agent-q-install-directory))))

(defun sly-agent-q-locate-version-advice (version found)
  "What to tell the user when the server is VERSION, not the one needed.
FOUND is the server's (FILE . SOURCE) from `sly-agent-q-locate-find-server'.
Return nil when VERSION is the needed one."
  (unless (equal version sly-agent-q-install-server-version)
    (let ((head (format "The sly-agent-q server %s is version %s, but this sly-agent-q needs %s."
                        (abbreviate-file-name (or (car found) "?"))
                        (or version "unknown") sly-agent-q-install-server-version)))
      (concat
       head " "
       (pcase (cdr found)
         ('installed
          (format "Run M-x sly-agent-q-install-server to install %s, then M-x sly-agent-q-restart-server."
                  sly-agent-q-install-server-version))
         ('setting
          (format "Point `sly-agent-q-server-file' at a %s server, or set it to nil and run \
M-x sly-agent-q-install-server, then M-x sly-agent-q-restart-server."
                  sly-agent-q-install-server-version))
         (_
          "In a source checkout run `make build'; otherwise reinstall the sly-agent-q package, \
or delete that file and run M-x sly-agent-q-install-server; then M-x sly-agent-q-restart-server."))))))

(defvar sly-agent-q-locate--node-checked nil
  "Cons (PROGRAM . PATH) of the last Node program found good enough.")

(defun sly-agent-q-locate-node ()
  "Return the full path of a Node.js 20+ executable, or signal a `user-error'."
  (let ((path (executable-find sly-agent-q-node-program)))
    (unless path
      (user-error "Cannot find Node.js for sly-agent-q (`sly-agent-q-node-program' is %S); \
install Node.js 20 or newer, or set that option to its full path"
                  sly-agent-q-node-program))
    (unless (equal sly-agent-q-locate--node-checked (cons sly-agent-q-node-program path))
      (let* ((out (condition-case err
                      (car (process-lines path "--version"))
                    (error (user-error "Running %s --version failed: %s"
                                       path (error-message-string err)))))
             (major (and out (string-match "\\`v?\\([0-9]+\\)\\." out)
                         (string-to-number (match-string 1 out)))))
        (unless (and major (>= major 20))
          (user-error "The Node.js program %s is Node.js %s; version 20 or newer is needed"
                      path (or out "of an unknown version")))
        (setq sly-agent-q-locate--node-checked (cons sly-agent-q-node-program path))))
    path))

(provide 'sly-agent-q-locate)
;;; sly-agent-q-locate.el ends here
