;;; sly-agent-q-menu-test.el --- The chat's menu, its keys and C-h m  -*- lexical-binding: t; -*-

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

;; The menu (a transient) carries what a chat user changes or does now
;; and then; C-h m names every key of the chat; M-r searches the input
;; history as comint's does.

;;; Code:

(require 'sly-agent-q-test-helper
         (expand-file-name "sly-agent-q-test-helper"
                           (file-name-directory (or load-file-name buffer-file-name))))
(require 'sly-agent-q)

(defmacro sly-agent-q-menu-test--with-chat (&rest body)
  "Run BODY in a fresh chat buffer."
  (declare (indent 0) (debug t))
  `(let ((sly-agent-q-chat-buffer-name "*sly-agent-q menu test*"))
     (when (get-buffer sly-agent-q-chat-buffer-name) (kill-buffer sly-agent-q-chat-buffer-name))
     (unwind-protect
         (with-current-buffer (sly-agent-q-chat-buffer) ,@body)
       (kill-buffer sly-agent-q-chat-buffer-name))))

(defun sly-agent-q-menu-test--commands (layout)
  "Every command in the transient LAYOUT."
  (let (out)
    (cl-labels ((walk (x)
                  (cond ((and (consp x) (plist-member x :command)) (push (plist-get x :command) out)
                         (walk (cdr x)))
                        ((consp x) (walk (car x)) (walk (cdr x)))
                        ((vectorp x) (mapc #'walk x)))))
      (walk layout))
    out))

(ert-deftest sly-agent-q-menu-offers-what-a-chat-user-needs ()
  "C-c C-m in the chat opens the menu; it has model, provider, tool level, permission rules,
resume, rewind, export, MCP and cancel."
  (sly-agent-q-menu-test--with-chat
    (should (eq (key-binding (kbd "C-c C-m")) #'sly-agent-q-menu))
    (should (get 'sly-agent-q-menu 'transient--prefix))
    (let ((commands (sly-agent-q-menu-test--commands (get 'sly-agent-q-menu 'transient--layout))))
      (dolist (c '(sly-agent-q-set-model sly-agent-q-set-provider sly-agent-q-set-tool-level
                   sly-agent-q-set-permission sly-agent-q-resume sly-agent-q-rewind sly-agent-q-export
                   sly-agent-q-mcp-connect-servers sly-agent-q-cancel))
        (should (memq c commands))
        (should (commandp c))))))

(defun sly-agent-q-menu-test--description (command)
  "What the menu shows for COMMAND's suffix."
  (let (found)
    (cl-labels ((walk (x)
                  (cond (found)
                        ((and (consp x) (eq (plist-get x :command) command))
                         (setq found (plist-get x :description)))
                        ((and (consp x) (plist-member x :command)) (walk (cdr x)))
                        ((consp x) (walk (car x)) (walk (cdr x)))
                        ((vectorp x) (mapc #'walk x)))))
      (walk (get 'sly-agent-q-menu 'transient--layout)))
    (substring-no-properties (if (functionp found) (funcall found) found))))

(ert-deftest sly-agent-q-menu-says-what-is-in-use ()
  "With no model chosen the menu names the one the server uses, and what `t' sets is called
what it is: trust levels."
  (sly-agent-q-menu-test--with-chat
    (let ((sly-agent-q-model nil) (sly-agent-q-trust-levels '(("eval_form" . safe))))
      (sly-agent-q-chat-show-history "menu-test" "Menu test" [] :model "claude-menu-test")
      (should (string-match-p "claude-menu-test" (sly-agent-q-menu-test--description 'sly-agent-q-set-model)))
      (should (equal (sly-agent-q-menu-test--description 'sly-agent-q-set-permission) "Trust levels (1)")))))

(ert-deftest sly-agent-q-menu-edits-permission-rules ()
  "The menu adds and removes permission rules (allow, ask, deny), sent to the server."
  (let ((sly-agent-q-permission-rules nil))
    (should (memq 'sly-agent-q-set-permission-rule
                  (sly-agent-q-menu-test--commands (get 'sly-agent-q-menu 'transient--layout))))
    (sly-agent-q-set-permission-rule 'deny "write_file" "path" "\\.asd$")
    (sly-agent-q-set-permission-rule 'ask "evaluation")
    (should (equal sly-agent-q-permission-rules
                   '((:action deny :tool "write_file" :argument "path" :pattern "\\.asd$")
                     (:action ask :category "evaluation"))))
    (should (equal (sly-agent-q-menu-test--description 'sly-agent-q-set-permission-rule)
                   "Permission rules (2)"))
    (let ((sent (plist-get (sly-agent-q-configuration-for-server) :permissionRules)))
      (should (= (length sent) 2)))
    ;; The same tool, category and argument again replaces the rule; remove takes it away.
    (sly-agent-q-set-permission-rule 'remove "evaluation")
    (should (equal (length sly-agent-q-permission-rules) 1))))

(ert-deftest sly-agent-q-menu-settings-take-effect ()
  "The menu's settings change the options the server is configured from; a rule can be removed."
  (let ((sly-agent-q-model nil) (sly-agent-q-provider "anthropic")
        (sly-agent-q-max-safety-level 'dangerous) (sly-agent-q-trust-levels nil))
    (sly-agent-q-set-model "claude-opus-4-1")
    (sly-agent-q-set-provider "openai")
    (sly-agent-q-set-tool-level 'cautious)
    (sly-agent-q-set-permission "evaluation" 'dangerous)
    (sly-agent-q-set-permission "write_file" 'cautious)
    (let ((config (sly-agent-q-configuration-for-server)))
      (should (equal (plist-get config :model) "claude-opus-4-1"))
      (should (equal (plist-get config :provider) "openai")))
    (should (eq sly-agent-q-max-safety-level 'cautious))
    (should (equal sly-agent-q-trust-levels '(("evaluation" . dangerous) ("write_file" . cautious))))
    (sly-agent-q-set-permission "evaluation" nil)
    (should (equal sly-agent-q-trust-levels '(("write_file" . cautious))))
    (sly-agent-q-set-model "")
    (should-not sly-agent-q-model)))

(ert-deftest sly-agent-q-menu-sets-thinking-per-model ()
  "Thinking is set per model from the menu, shown as in force, and sent to the server."
  (let ((sly-agent-q-model "claude-opus-4-7") (sly-agent-q-thinking '(("*" . low))))
    (should (string-match-p "Thinking low" (sly-agent-q-menu-test--description 'sly-agent-q-menu-thinking)))
    (sly-agent-q-set-thinking "claude-opus" 'high)
    (sly-agent-q-set-thinking "claude-sonnet-4-5" 8000)
    (should (equal sly-agent-q-thinking '(("*" . low) ("claude-opus" . high) ("claude-sonnet-4-5" . 8000))))
    (should (string-match-p "Thinking high" (sly-agent-q-menu-test--description 'sly-agent-q-menu-thinking)))
    (let ((sent (plist-get (sly-agent-q-configuration-for-server) :thinking)))
      (should (equal (gethash "claude-opus" sent) "high"))
      (should (equal (gethash "claude-sonnet-4-5" sent) 8000)))
    (should-error (sly-agent-q-set-thinking "claude-opus" 'lots) :type 'user-error)
    (should-error (sly-agent-q-set-thinking "claude-opus" 100) :type 'user-error)))

;; The real server says what the configured model thinks; the menu's `h'
;; says why when it cannot, instead of setting what would never be sent.
(ert-deftest sly-agent-q-menu-thinking-says-why-a-model-cannot-think ()
  "`h' on a model that takes no thinking setting says why and sets nothing; on one that does, it asks."
  (let ((sly-agent-q-thinking nil) (prompts nil))
    (sly-agent-q-test-with-server '((steps . []))
      (cl-letf (((symbol-function 'read-string) (lambda (prompt &rest _) (push prompt prompts) "claude-sonnet-4-5"))
                ((symbol-function 'completing-read) (lambda (prompt &rest _) (push prompt prompts) "high")))
        (cl-flet ((use (provider model)
                    (setq sly-agent-q-provider provider sly-agent-q-model model)
                    (sly-agent-q-server-reconfigure)
                    (sly-agent-q-test-wait (lambda () (equal (plist-get (sly-agent-q-menu--model-thinking) :model) model))
                                           10 (format "the server to say what %s thinks" model))))
          ;; An older Claude, and an OpenAI model that does not reason: said why, nothing asked or set.
          (dolist (case '(("anthropic" "claude-3-5-haiku-20241022" "does not think: the API takes no thinking setting for it")
                          ("openai" "gpt-4.1" "does not reason: OpenAI refuses a reasoning effort for it")))
            (use (nth 0 case) (nth 1 case))
            (should (string-match-p (format "(%s does not think)" (regexp-quote (nth 1 case)))
                                    (sly-agent-q-menu-test--description 'sly-agent-q-menu-thinking)))
            (let ((said (let ((inhibit-message t)) (call-interactively #'sly-agent-q-menu-thinking))))
              (should (string-match-p (regexp-quote (nth 2 case)) said)))
            (should-not prompts)
            (should-not sly-agent-q-thinking))
          ;; A compatible server's model: asked, with a word that only a reasoning server takes it.
          (use "openai" "qwen3-32b")
          (should (string-match-p "only if its server reasons" (sly-agent-q-menu-test--description 'sly-agent-q-menu-thinking)))
          ;; A model that thinks: asked, and set.
          (use "anthropic" "claude-sonnet-4-5")
          (should-not (string-match-p "does not think" (sly-agent-q-menu-test--description 'sly-agent-q-menu-thinking)))
          (call-interactively #'sly-agent-q-menu-thinking)
          (should (= (length prompts) 2))
          (should (equal sly-agent-q-thinking '(("claude-sonnet-4-5" . high)))))))))

(ert-deftest sly-agent-q-chat-describe-mode-names-every-key ()
  "C-h m: every command bound in the chat is named in the mode's own words, not only in the key table."
  (let* ((raw (documentation 'sly-agent-q-chat-mode t))
         (prose (substring raw 0 (string-match-p "\\\\\\\\{" raw)))
         (missing nil))
    (map-keymap (lambda (_key command)
                  (when (and (symbolp command) (commandp command)
                             (not (string-match-p (regexp-quote (format "\\[%s]" command)) prose)))
                    (push command missing)))
                sly-agent-q-chat-mode-map)
    (should-not missing)))

(ert-deftest sly-agent-q-chat-history-search-as-in-comint ()
  "M-r finds the previous message matching a regexp; again goes further back; none left says so."
  (sly-agent-q-menu-test--with-chat
    (should (eq (key-binding (kbd "M-r")) #'sly-agent-q-chat-previous-matching-input))
    (setf (sly-agent-q-input-history sly-agent-q-input--state) (list "define bar" "explain mapcar" "define foo"))
    (goto-char (point-max))
    (insert "draft")
    (sly-agent-q-chat-previous-matching-input "^define")
    (should (equal (sly-agent-q-input-text) "define bar"))
    (sly-agent-q-chat-previous-matching-input "^define")
    (should (equal (sly-agent-q-input-text) "define foo"))
    (should-error (sly-agent-q-chat-previous-matching-input "^define") :type 'user-error)
    (should (equal (sly-agent-q-input-text) "define foo"))
    (sly-agent-q-chat-next-matching-input "mapcar")
    (should (equal (sly-agent-q-input-text) "explain mapcar"))
    ;; M-n walks back to the draft.
    (sly-agent-q-chat-next-input)
    (sly-agent-q-chat-next-input)
    (should (equal (sly-agent-q-input-text) "draft"))))

(provide 'sly-agent-q-menu-test)
;;; sly-agent-q-menu-test.el ends here
