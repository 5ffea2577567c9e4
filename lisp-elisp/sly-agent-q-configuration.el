;;; sly-agent-q-configuration.el --- The configuration sent to the sly-agent-q server  -*- lexical-binding: t; -*-

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

;; The server's configuration, made from the customization options
;; (never with the API key), and the API key itself, which goes into
;; the server's process environment instead of a message.

;;; Code:

(require 'cl-lib)
(require 'sly-agent-q-options)

;; Obsolete names (issue 46): these were named sly-agent-q-server-* before
;; sly-agent-q-server.el was split; kept for users who call them.
(define-obsolete-function-alias 'sly-agent-q-server-configuration
  #'sly-agent-q-configuration-for-server "0.2.0")
(define-obsolete-function-alias 'sly-agent-q-server-conversation-directory
  #'sly-agent-q-configuration-conversation-directory "0.2.0")
(define-obsolete-function-alias 'sly-agent-q-server-plist-compact
  #'sly-agent-q-configuration-plist-compact "0.2.0")
(define-obsolete-function-alias 'sly-agent-q-server-project-root
  #'sly-agent-q-configuration-project-root "0.2.0")

(declare-function sly-agent-q-files-project-root "sly-agent-q-files" ())
(declare-function auth-source-search "auth-source" (&rest spec))
(declare-function url-host "url-parse" (cl-x))
(declare-function url-generic-parse-url "url-parse" (url))

(defun sly-agent-q-configuration--provider-host ()
  "Return the host of the `auth-source' entry with the API key."
  (or (and sly-agent-q-base-url
           (progn (require 'url-parse)
                  (url-host (url-generic-parse-url sly-agent-q-base-url))))
      (if (equal sly-agent-q-provider "openai") "api.openai.com" "api.anthropic.com")))

(defun sly-agent-q-configuration-key-variable ()
  "Return the environment variable with the API key for the server."
  (if (equal sly-agent-q-provider "openai") "OPENAI_API_KEY" "ANTHROPIC_API_KEY"))

(defun sly-agent-q-configuration-api-key ()
  "The API key to give the server, or nil to leave its environment alone."
  (cond ((stringp sly-agent-q-api-key) sly-agent-q-api-key)
        ((functionp sly-agent-q-api-key) (funcall sly-agent-q-api-key))
        ((getenv (sly-agent-q-configuration-key-variable)) nil)
        (t (require 'auth-source)
           (let* ((found (car (auth-source-search :host (sly-agent-q-configuration--provider-host)
                                                  :max 1)))
                  (secret (plist-get found :secret)))
             (if (functionp secret) (funcall secret) secret)))))

(defun sly-agent-q-configuration-project-root ()
  "The project root to tell the server about.
The root the file tools confine to (`sly-agent-q-files-project-root'):
one lookup, so that the server and the tools never disagree."
  (let ((root (or (and (fboundp 'sly-agent-q-files-project-root)
                       (ignore-errors (sly-agent-q-files-project-root)))
                  default-directory)))
    (directory-file-name (expand-file-name root))))

(defun sly-agent-q-configuration-plist-compact (plist)
  "PLIST without the properties whose value is nil."
  (cl-loop for (k v) on plist by #'cddr when v append (list k v)))

(defun sly-agent-q-configuration--levels-table (categories)
  "The trust levels of `sly-agent-q-trust-levels' as a hash table.
CATEGORIES non-nil: the entries naming a category, else the others."
  (let ((h (make-hash-table :test #'equal)))
    (dolist (e sly-agent-q-trust-levels h)
      (let ((name (format "%s" (car e))))
        (when (eq (and (member name sly-agent-q-tool-categories) t)
                  (and categories t))
          (puthash name (format "%s" (cdr e)) h))))))

(defun sly-agent-q-configuration--thinking-table ()
  "The settings of `sly-agent-q-thinking' as a hash table of model to setting."
  (let ((h (make-hash-table :test #'equal)))
    (dolist (e sly-agent-q-thinking h)
      (puthash (format "%s" (car e)) (if (numberp (cdr e)) (cdr e) (format "%s" (cdr e))) h))))

(defun sly-agent-q-configuration--permission-rules ()
  "The permission rules to send, a vector of plists with string values."
  (vconcat
   (mapcar (lambda (rule)
             (cl-loop for key in '(:action :tool :category :argument :pattern :command)
                      for value = (plist-get rule key)
                      when value append (list key (format "%s" value))))
           (append sly-agent-q-permission-rules
                   (and sly-agent-q-ask-before-evaluating
                        (list (list :action 'ask :category "evaluation")))))))

(defun sly-agent-q-configuration-conversation-directory ()
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

(defun sly-agent-q-configuration-for-server ()
  "The configuration sent to the server, from the customization options.
Never contains the API key.  The trust settings are always sent,
empty when unset: the server replaces its configuration, and a
setting left out would keep an old one in force."
  (append
   (sly-agent-q-configuration-plist-compact
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
          :allowShellCommands (and sly-agent-q-allow-shell-commands t)
          :commandTimeoutMs (and sly-agent-q-command-timeout
                                 (round (* 1000 sly-agent-q-command-timeout)))
          :projectRoot (sly-agent-q-configuration-project-root)
          :conversationDirectory (sly-agent-q-configuration-conversation-directory)
          :contextWindow sly-agent-q-context-window
          :logLevel sly-agent-q-server-log-level))
   (list :safetyOverrides (sly-agent-q-configuration--levels-table nil)
         :categoryLevels (sly-agent-q-configuration--levels-table t)
         :permissionRules (sly-agent-q-configuration--permission-rules)
         :thinking (sly-agent-q-configuration--thinking-table))
   ;; Defined in sly-agent-q-files.el, loaded with the tools.
   (and (fboundp 'sly-agent-q-files-private-patterns)
        (funcall 'sly-agent-q-files-private-patterns))
   (cl-loop for (k v) on sly-agent-q-extra-configuration by #'cddr
            unless (eq k :apiKey) append (list k v))))

(defconst sly-agent-q-configuration-options
  '(sly-agent-q-provider sly-agent-q-model sly-agent-q-base-url sly-agent-q-max-steps
    sly-agent-q-max-tokens sly-agent-q-thinking sly-agent-q-turn-timeout sly-agent-q-stream-idle-timeout
    sly-agent-q-trust-levels sly-agent-q-permission-rules sly-agent-q-ask-before-evaluating
    sly-agent-q-max-safety-level sly-agent-q-read-outside-project sly-agent-q-server-log-level
    sly-agent-q-extra-configuration sly-agent-q-conversation-directory sly-agent-q-context-window
    sly-agent-q-image-timeout sly-agent-q-helpers-load-timeout
    sly-agent-q-allow-shell-commands sly-agent-q-command-timeout
    sly-agent-q-private-file-regexps)
  "The options `sly-agent-q-configuration-for-server' reads, kept beside it.
Setting one sends the configuration to a running server again.")

(provide 'sly-agent-q-configuration)
;;; sly-agent-q-configuration.el ends here
