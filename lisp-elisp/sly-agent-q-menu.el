;;; sly-agent-q-menu.el --- The chat's menu of commands and settings (transient)  -*- lexical-binding: t; -*-

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

;; `sly-agent-q-menu' (C-c C-m in the chat) is one transient menu, as
;; gptel's `gptel-menu' is, for what a chat user changes or does now and
;; then: the model, the provider, the most dangerous tool level offered,
;; a permission rule; new, resume, rewind, export, compact, cancel; the
;; context attached; the MCP servers.  Each setting shows its value and
;; is sent to the running server when changed.

;;; Code:

(require 'cl-lib)
(require 'subr-x)
(require 'transient)
(require 'sly-agent-q-server)
(require 'sly-agent-q-chat)
(require 'sly-agent-q-chats)
(require 'sly-agent-q-sessions)
(require 'sly-agent-q-mcp)
(require 'sly-agent-q-display)

(defun sly-agent-q-menu--set (variable value)
  "Set VARIABLE to VALUE for this session and send the configuration to the server."
  (customize-set-variable variable value)
  (sly-agent-q-server-reconfigure)
  (message "sly-agent-q: %s is now %s" variable (or value "the default")))

(defun sly-agent-q-set-model (model)
  "Use MODEL from the next request on; empty for the server's default."
  (interactive (list (read-string "Model (empty for the server's default): " sly-agent-q-model)))
  (sly-agent-q-menu--set 'sly-agent-q-model (if (string-empty-p (string-trim model)) nil (string-trim model))))

(defun sly-agent-q-set-provider (provider)
  "Talk to PROVIDER, \"anthropic\" or \"openai\" (any OpenAI-compatible endpoint)."
  (interactive (list (completing-read "Provider: " '("anthropic" "openai") nil t nil nil
                                      sly-agent-q-provider)))
  (sly-agent-q-menu--set 'sly-agent-q-provider provider))

(defun sly-agent-q-menu--thinking-model ()
  "The model the menu's thinking setting is for.
The chosen one, else the one last used, else any (\"*\")."
  (or sly-agent-q-model
      (let ((chat (sly-agent-q-chat-buffer t)))
        (and chat (plist-get (sly-agent-q-chat-spending chat) :model)))
      "*"))

(defun sly-agent-q-menu--thinking ()
  "The setting of `sly-agent-q-thinking' in force for the menu's model.
As the server reads it: the longest key that starts the model's name."
  (let ((model (sly-agent-q-menu--thinking-model)) (best 'auto) (length -1))
    (dolist (e sly-agent-q-thinking best)
      (let ((key (if (equal (car e) "*") "" (format "%s" (car e)))))
        (when (and (string-prefix-p key model) (> (length key) length))
          (setq best (cdr e) length (length key)))))))

(defun sly-agent-q-set-thinking (model setting)
  "Make MODEL (a model name, its start, or \"*\") think as SETTING.
SETTING is `off', `auto', an effort level (`low' to `max') or a budget
in tokens; it applies from the next turn.  See `sly-agent-q-thinking'."
  (interactive
   (let ((model (read-string "Thinking of the model (a name, its start, or *): "
                             (sly-agent-q-menu--thinking-model))))
     (list model
           (let ((s (completing-read (format "Thinking of %s (or a budget in tokens): " model)
                                     '("auto" "off" "low" "medium" "high" "xhigh" "max"))))
             (if (string-match-p "\\`[0-9]+\\'" s) (string-to-number s) (intern s))))))
  (unless (or (and (integerp setting) (>= setting 1024))
              (memq setting '(off auto low medium high xhigh max)))
    (user-error "Thinking is off, auto, low, medium, high, xhigh, max or a budget of at least 1024 tokens, not %s" setting))
  (sly-agent-q-menu--set 'sly-agent-q-thinking
                         (append (cl-remove model sly-agent-q-thinking :key #'car :test #'equal)
                                 (list (cons model setting)))))

(defun sly-agent-q-menu--model-thinking ()
  "What the server said of the configured model's thinking, or nil.
A plist (:model NAME :thinks \"yes\", \"no\" or \"if-set\" :how TEXT)."
  (and sly-agent-q-current-connection
       (sly-agent-q-connection-model-thinking sly-agent-q-current-connection)))

(defun sly-agent-q-menu--thinking-description ()
  "The menu's thinking entry: the setting, and a word when the model cannot think."
  (let ((known (sly-agent-q-menu--model-thinking)))
    (concat "Thinking " (sly-agent-q-menu--value (sly-agent-q-menu--thinking))
            (pcase (plist-get known :thinks)
              ("no" (propertize (format " (%s does not think)"
                                        (sly-agent-q-display-line (plist-get known :model)))
                                'face 'warning))
              ("if-set" " (only if its server reasons)")
              (_ "")))))

(defun sly-agent-q-menu-thinking ()
  "Set how the model in use thinks, or say why it cannot.
When the server says the configured model takes no thinking setting (an
older Claude, an OpenAI model that does not reason), say so and why,
and change nothing: a setting that would never be sent is not set in
silence.  Else as `sly-agent-q-set-thinking', saying first how the
model thinks."
  (interactive)
  (let ((known (sly-agent-q-menu--model-thinking)))
    (if (equal (plist-get known :thinks) "no")
        (message "sly-agent-q: %s" (sly-agent-q-display-line (plist-get known :how)))
      (call-interactively #'sly-agent-q-set-thinking))))

(defun sly-agent-q-set-tool-level (level)
  "Offer the model tools up to LEVEL: `safe', `cautious' or `dangerous'."
  (interactive (list (intern (completing-read "Offer tools up to: " '("safe" "cautious" "dangerous")
                                              nil t nil nil
                                              (symbol-name sly-agent-q-max-safety-level)))))
  (sly-agent-q-menu--set 'sly-agent-q-max-safety-level level))

(defun sly-agent-q-set-permission (name level)
  "Give tool or category NAME the trust LEVEL (`safe', `cautious', `dangerous').
Nil LEVEL removes the rule, so NAME's own level applies again."
  (interactive
   (let ((name (completing-read "Tool or category: "
                                (append (mapcar #'car sly-agent-q-trust-levels)
                                        sly-agent-q-tool-categories))))
     (list name
           (let ((level (completing-read (format "Trust level of %s: " name)
                                         '("safe" "cautious" "dangerous" "remove the rule") nil t)))
             (unless (equal level "remove the rule") (intern level))))))
  (let ((rules (cl-remove name sly-agent-q-trust-levels :key #'car :test #'equal)))
    (sly-agent-q-menu--set 'sly-agent-q-trust-levels
                           (if level (append rules (list (cons name level))) rules))))

(defun sly-agent-q-set-permission-rule (action name &optional argument pattern)
  "Make ACTION (`allow', `ask' or `deny') the permission rule for NAME.
NAME is a tool or a category.  With ARGUMENT and PATTERN (a JavaScript
regular expression), the rule matches only the calls whose ARGUMENT matches
PATTERN.  A rule on the same NAME and ARGUMENT is replaced; ACTION
`remove' takes it away.  See `sly-agent-q-permission-rules'."
  (interactive
   (let* ((action (intern (completing-read "Action: " '("allow" "ask" "deny" "remove") nil t)))
          (name (completing-read "Tool or category: " sly-agent-q-tool-categories))
          (argument (unless (eq action 'remove)
                      (read-string "Only when this argument matches (empty for every call): "))))
     (list action name
           (and argument (not (string-empty-p argument)) argument)
           (and argument (not (string-empty-p argument))
                (read-string (format "Pattern %s must match (a JavaScript regexp): " argument))))))
  (let* ((key (if (member name sly-agent-q-tool-categories) :category :tool))
         (same (lambda (rule) (and (equal (plist-get rule key) name)
                                   (equal (plist-get rule :argument) argument))))
         (rules (cl-remove-if same sly-agent-q-permission-rules)))
    (sly-agent-q-menu--set
     'sly-agent-q-permission-rules
     (if (eq action 'remove)
         rules
       (append rules (list (append (list :action action key name)
                                   (and argument (list :argument argument :pattern (or pattern ""))))))))))

(defun sly-agent-q-menu--value (value)
  "Return VALUE, a setting's value, as the menu draws it."
  (propertize (if value (format "%s" value) "default") 'face 'transient-value))

(defun sly-agent-q-menu--model ()
  "The model as the menu draws it: the one chosen, else the server's.
With none chosen, the one the chat's last answer came from is named,
so that the menu and the header line say the same."
  (if sly-agent-q-model
      (sly-agent-q-menu--value sly-agent-q-model)
    (let* ((chat (sly-agent-q-chat-buffer t))
           (used (and chat (plist-get (sly-agent-q-chat-spending chat) :model))))
      (propertize (if used (format "default (%s)" (sly-agent-q-display-line used)) "default")
                  'face 'transient-value))))

(transient-define-prefix sly-agent-q-menu ()
  "The chat's commands and settings in one menu."
  [["Model"
    ("m" sly-agent-q-set-model
     :description (lambda () (concat "Model " (sly-agent-q-menu--model))))
    ("p" sly-agent-q-set-provider
     :description (lambda () (concat "Provider " (sly-agent-q-menu--value sly-agent-q-provider))))
    ("h" sly-agent-q-menu-thinking
     :description sly-agent-q-menu--thinking-description)
    ("l" sly-agent-q-set-tool-level
     :description (lambda () (concat "Tool level " (sly-agent-q-menu--value sly-agent-q-max-safety-level))))
    ("t" sly-agent-q-set-permission
     :description (lambda () (format "Trust levels (%d)" (length sly-agent-q-trust-levels))))
    ("R" sly-agent-q-set-permission-rule
     :description (lambda () (format "Permission rules (%d)" (length sly-agent-q-permission-rules))))]
   ["Conversation"
    ("n" "New" sly-agent-q-new-conversation)
    ("r" "Resume a saved one" sly-agent-q-resume)
    ("w" "Rewind files to a turn" sly-agent-q-rewind)
    ("e" "Export (.org, .md)" sly-agent-q-export)
    ("c" "Compact the history" sly-agent-q-compact)
    ("k" "Cancel the running turn" sly-agent-q-cancel)]]
  ;; Two groups a row: four side by side were wider than 80 columns.
  [["Context"
    ("f" "Attach a file" sly-agent-q-attach-file)
    ("b" "Attach a buffer" sly-agent-q-attach-buffer)
    ("x" "Clear the attachments" sly-agent-q-clear-attachments)
    ("L" sly-agent-q-chats-choose-lisp
     :description (lambda () (concat "Lisp of this chat: "
                                     (let ((lisp (sly-agent-q-chats-lisp)))
                                       (if lisp (sly-agent-q-bridge-lisp-name lisp) "none")))))]
   ["MCP servers"
    ("M c" "Connect the configured" sly-agent-q-mcp-connect-servers)
    ("M s" "Start one" sly-agent-q-mcp-start)
    ("M k" "Stop one" sly-agent-q-mcp-stop)
    ("M l" "Their log" sly-agent-q-mcp-log-buffer)]])

(provide 'sly-agent-q-menu)
;;; sly-agent-q-menu.el ends here
