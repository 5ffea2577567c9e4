;;; sly-agent-q-server-test.el --- Connection setup, configuration and the chat UI without a server  -*- lexical-binding: t; -*-

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

;; Finding Node and the server script, the configuration and the API key,
;; and the chat buffer's and approval UI's behaviour driven directly.

;;; Code:

(require 'sly-agent-q-test-helper
         (expand-file-name "sly-agent-q-test-helper"
                           (file-name-directory (or load-file-name buffer-file-name))))

;;;; Node and the server script

(ert-deftest sly-agent-q-server-events-log-toggles-on-the-running-server ()
  "The events log is off by default; the command turns it on and off for the running server."
  (should (equal (default-value 'sly-agent-q-events-buffer-size) 0))
  (sly-agent-q-test-with-server '((steps . []))
    (let* ((sly-agent-q-events-buffer-size 0)
           (conn (sly-agent-q-server-connection))
           (size (lambda () (with-current-buffer (jsonrpc-events-buffer conn) (buffer-size))))
           (ask (lambda () (jsonrpc-request conn 'tools/list '(:all :json-false) :timeout 10))))
      (sly-agent-q-toggle-events-log)
      (should (equal sly-agent-q-events-buffer-size sly-agent-q-events-log-on-size))
      (let ((before (funcall size)))
        (funcall ask)
        (should (> (funcall size) before)))
      (sly-agent-q-toggle-events-log)
      (should (equal sly-agent-q-events-buffer-size 0))
      (let ((before (funcall size)))
        (funcall ask)
        (should (= (funcall size) before))))))

(ert-deftest sly-agent-q-server-node-missing ()
  "A missing node gives a clear message."
  (let ((sly-agent-q-node-program "/nonexistent/node-xyz")
        (sly-agent-q--node-checked nil))
    (let ((err (should-error (sly-agent-q--check-node) :type 'user-error)))
      (should (string-match-p "cannot find Node.js" (cadr err)))
      (should (string-match-p "20 or newer" (cadr err))))))

(ert-deftest sly-agent-q-server-node-too-old ()
  "A node older than 20 gives a clear message."
  (let* ((dir (make-temp-file "agent-q-node" t))
         (fake (expand-file-name "node" dir))
         (sly-agent-q--node-checked nil))
    (with-temp-file fake (insert "#!/bin/sh\necho v18.19.0\n"))
    (set-file-modes fake #o755)
    (let ((sly-agent-q-node-program fake))
      (let ((err (should-error (sly-agent-q--check-node) :type 'user-error)))
        (should (string-match-p "Node.js v18.19.0; version 20 or newer is needed" (cadr err)))))
    ;; And the error reaches a sender instead of escaping.
    (let ((sly-agent-q-node-program fake) (sly-agent-q--connection nil) got)
      (sly-agent-q-server-ensure (lambda (conn msg) (setq got (list conn msg))))
      (should (null (car got)))
      (should (string-match-p "version 20 or newer" (cadr got))))))

(ert-deftest sly-agent-q-server-file-lookup ()
  "The server script is found in a checkout and in installed layouts."
  (let ((sly-agent-q-server-file nil))
    ;; Source checkout: lisp-elisp/../dist/.
    (should (equal (sly-agent-q-server-locate)
                   (expand-file-name "dist/sly-agent-q-server.js" sly-agent-q-test-root)))
    ;; Installed package: at the root, or in server/.
    (dolist (rel '("sly-agent-q-server.js" "server/sly-agent-q-server.js"))
      (let* ((pkg (file-name-as-directory (make-temp-file "agent-q-pkg" t)))
             (sly-agent-q--lisp-directory pkg))
        (make-directory (file-name-directory (expand-file-name rel pkg)) t)
        (write-region "" nil (expand-file-name rel pkg))
        (should (equal (sly-agent-q-server-locate) (expand-file-name rel pkg)))))
    (let* ((empty (file-name-as-directory (make-temp-file "agent-q-empty" t)))
           (sly-agent-q--lisp-directory (expand-file-name "sub/" empty)))
      (should-error (sly-agent-q-server-locate) :type 'user-error)))
  (let ((sly-agent-q-server-file "/nonexistent/server.js"))
    (should-error (sly-agent-q-server-locate) :type 'user-error)))

;;;; Configuration and the key

(ert-deftest sly-agent-q-server-configuration ()
  "The options become the protocol's configuration, without the key."
  (let* ((sly-agent-q-provider "openai")
         (sly-agent-q-model "gpt-x")
         (sly-agent-q-base-url "http://127.0.0.1:9/v1")
         (sly-agent-q-max-steps 7)
         (sly-agent-q-trust-levels '(("eval_form" . dangerous) ("write_file" . cautious)))
         (sly-agent-q-max-safety-level 'cautious)
         (sly-agent-q-project-root "/tmp/proj/")
         (sly-agent-q-extra-configuration '(:temperature 0.5 :apiKey "sk-no-way"))
         (config (sly-agent-q-server-configuration)))
    (should (equal (plist-get config :provider) "openai"))
    (should (equal (plist-get config :model) "gpt-x"))
    (should (equal (plist-get config :baseUrl) "http://127.0.0.1:9/v1"))
    (should (equal (plist-get config :maxSteps) 7))
    (should (equal (plist-get config :maxSafetyLevel) "cautious"))
    (should (equal (plist-get config :projectRoot) "/tmp/proj"))
    (should (equal (plist-get config :temperature) 0.5))
    (should-not (plist-member config :apiKey))
    (should-not (plist-member config :maxTokens))
    (let ((json (json-serialize config)))
      (should (string-match-p "\"safetyOverrides\":{[^}]*\"eval_form\":\"dangerous\"" json))
      (should-not (string-match-p "sk-no-way" json)))))

(ert-deftest sly-agent-q-server-api-key-sources ()
  "The key comes from the option, the environment or auth-source."
  (let ((process-environment (cl-remove-if (lambda (e) (string-prefix-p "ANTHROPIC_API_KEY=" e))
                                           process-environment))
        (sly-agent-q-provider "anthropic")
        (sly-agent-q-base-url nil))
    (let ((sly-agent-q-api-key "sk-direct")) (should (equal (sly-agent-q--api-key) "sk-direct")))
    (let ((sly-agent-q-api-key (lambda () "sk-fn"))) (should (equal (sly-agent-q--api-key) "sk-fn")))
    (let* ((file (make-temp-file "agent-q-authinfo" nil nil
                                 "machine api.anthropic.com login apikey password sk-from-authinfo\n"))
           (auth-sources (list file))
           (sly-agent-q-api-key nil))
      (require 'auth-source)
      (auth-source-forget-all-cached)
      (should (equal (sly-agent-q--api-key) "sk-from-authinfo"))
      ;; The environment wins: nothing to add to the server's environment.
      (let ((process-environment (cons "ANTHROPIC_API_KEY=sk-env" process-environment)))
        (should (null (sly-agent-q--api-key)))))))

;;;; The chat buffer without a server

(defmacro sly-agent-q-test--with-chat (&rest body)
  "Run BODY in a fresh chat buffer."
  (declare (indent 0))
  `(let ((sly-agent-q-chat-buffer-name "*sly-agent-q test*"))
     (when (get-buffer sly-agent-q-chat-buffer-name) (kill-buffer sly-agent-q-chat-buffer-name))
     (unwind-protect
         (with-current-buffer (sly-agent-q-chat-buffer)
           ,@body)
       (kill-buffer sly-agent-q-chat-buffer-name))))

(ert-deftest sly-agent-q-chat-transcript-read-only ()
  "The transcript and prompt are read-only; the input is not."
  (sly-agent-q-test--with-chat
    (sly-agent-q-chat-insert "Some transcript text\n")
    (goto-char (point-min))
    (should-error (insert "x") :type 'text-read-only)
    (goto-char sly-agent-q-chat--output)
    (should-error (insert "x") :type 'text-read-only)
    (goto-char (point-max))
    (insert "my question")
    (should (equal (sly-agent-q-chat--input-text) "my question"))
    ;; More transcript goes above the prompt; the input stays.
    (sly-agent-q-chat-notice "a notice")
    (should (equal (sly-agent-q-chat--input-text) "my question"))
    (should (string-match-p "a notice\n> my question\\'" (buffer-string)))))

(ert-deftest sly-agent-q-chat-input-history ()
  "M-p and M-n walk the messages sent, keeping the draft."
  (sly-agent-q-test--with-chat
    (setq sly-agent-q-chat--history '("third" "second" "first"))
    (goto-char (point-max))
    (insert "draft")
    (sly-agent-q-chat-previous-input)
    (should (equal (sly-agent-q-chat--input-text) "third"))
    (sly-agent-q-chat-previous-input)
    (should (equal (sly-agent-q-chat--input-text) "second"))
    (sly-agent-q-chat-next-input)
    (sly-agent-q-chat-next-input)
    (should (equal (sly-agent-q-chat--input-text) "draft"))
    (should (eq (key-binding (kbd "M-p")) #'sly-agent-q-chat-previous-input))
    (should (eq (key-binding (kbd "RET")) #'sly-agent-q-chat-return))
    (should (eq (key-binding (kbd "C-c C-c")) #'sly-agent-q-chat-send-input))
    (should (eq (key-binding (kbd "C-j")) #'newline))
    (should (eq (key-binding (kbd "C-c C-k")) #'sly-agent-q-cancel))))

(ert-deftest sly-agent-q-chat-send-input-starts-a-turn ()
  "RET in the input starts a turn with the text and empties the input."
  (sly-agent-q-test--with-chat
    (let (sent)
      (cl-letf (((symbol-function 'sly-agent-q-chat--start-turn)
                 (lambda (text cb) (setq sent (list text cb)))))
        (goto-char (point-max))
        (should-error (sly-agent-q-chat-return) :type 'user-error)
        (insert "  explain this  ")
        (sly-agent-q-chat-return)
        (should (equal sent '("explain this" nil)))
        (should (equal (sly-agent-q-chat--input-text) ""))
        (should (equal (car sly-agent-q-chat--history) "explain this"))))))

(ert-deftest sly-agent-q-chat-streaming-is-coalesced ()
  "Many deltas are inserted together on the timer, not one by one."
  (sly-agent-q-test--with-chat
    (let ((inserts 0)
          (sly-agent-q-stream-flush-interval 0.05))
      (setq sly-agent-q-chat--turn (sly-agent-q--make-turn :id "t1" :status 'running))
      (cl-letf* ((orig (symbol-function 'sly-agent-q-chat-insert))
                 ((symbol-function 'sly-agent-q-chat-insert)
                  (lambda (&rest s) (cl-incf inserts) (apply orig s))))
        (dotimes (i 200)
          (sly-agent-q-handle-notification nil 'chat/textDelta (list :turnId "t1" :text (format "w%d " i))))
        (should (= inserts 0))
        (sly-agent-q-test-wait (lambda () (string-match-p "w199 " (buffer-string))) 2 "the flush")
        (should (<= inserts 2))
        (should (string-match-p "w0 w1 w2 " (buffer-string)))))))

(ert-deftest sly-agent-q-chat-code-blocks-fontified ()
  "Code blocks in an answer are fontified as Lisp."
  (sly-agent-q-test--with-chat
    (setq sly-agent-q-chat--turn (sly-agent-q--make-turn :id "t1" :status 'running))
    (sly-agent-q-handle-notification nil 'chat/textDelta
     '(:turnId "t1" :text "Try:\n```lisp\n(defun square (x) \"Square X.\" (* x x))\n```\nDone."))
    (sly-agent-q-handle-notification nil 'chat/turnFinished '(:turnId "t1" :text "x" :stopReason "end_turn"))
    (goto-char (point-min))
    (search-forward "defun")
    (should (eq (get-text-property (match-beginning 0) 'face) 'font-lock-keyword-face))
    (search-forward "\"Square")
    (should (memq (get-text-property (match-beginning 0) 'face)
                  '(font-lock-doc-face font-lock-string-face)))
    (goto-char (point-min))
    (search-forward "```lisp")
    (should (eq (get-text-property (match-beginning 0) 'face) 'sly-agent-q-code-fence-face))))

(ert-deftest sly-agent-q-chat-turn-finished-hook ()
  "The hook and the callback get the outcome once."
  (sly-agent-q-test--with-chat
    (let* ((seen nil)
           (sly-agent-q-turn-finished-hook (list (lambda (p) (push (cons 'hook p) seen))))
           (turn (sly-agent-q--make-turn :id "t9" :status 'running
                                         :callback (lambda (p) (push (cons 'cb p) seen)))))
      (setq sly-agent-q-chat--turn turn)
      (sly-agent-q-handle-notification nil 'chat/turnFailed '(:turnId "t9" :kind "provider" :message "rate limited"
                                         :usage (:inputTokens 1 :outputTokens 0)))
      (sly-agent-q-handle-notification nil 'chat/turnFailed '(:turnId "t9" :kind "provider" :message "again"))
      (should (= 2 (length seen)))
      (should (eq (plist-get (cdr (assq 'hook seen)) :status) 'failed))
      (should (equal (plist-get (cdr (assq 'cb seen)) :message) "rate limited"))
      (should (string-match-p "Error: rate limited" (buffer-string)))
      (should-not sly-agent-q-chat--turn))))

(ert-deftest sly-agent-q-chat-attachments ()
  "Attached regions, defuns and files go before the next message."
  (let ((sly-agent-q-chat-buffer-name "*sly-agent-q attach test*"))
    (unwind-protect
        (progn
          (with-temp-buffer
            (lisp-mode)
            (insert "(defun a () 1)\n\n(defun b ()\n  2)\n")
            (goto-char (point-max))
            (forward-line -1)
            (sly-agent-q-attach-defun)
            (sly-agent-q-attach-region (point-min) (+ (point-min) 14)))
          (with-current-buffer (sly-agent-q-chat-buffer)
            (should (= 2 (length sly-agent-q-chat--attachments)))
            (let ((text (sly-agent-q-chat--attachment-text)))
              (should (string-match-p "Attached the form at line 3 of .*:\n```lisp\n(defun b ()\n  2)\n```" text))
              (should (string-match-p "Attached the region of .* (lines 1-1):\n```lisp\n(defun a () 1)\n```" text)))
            (should (string-match-p "\\[2 attached\\]" (sly-agent-q-chat--header-line)))))
      (kill-buffer sly-agent-q-chat-buffer-name)))
  (with-temp-buffer
    ;; The package binds no C-c letter; this is the user's binding the README suggests.
    (use-local-map (let ((m (make-sparse-keymap)))
                     (define-key m (kbd "C-c q") 'sly-agent-q-command-map)
                     m))
    (should (eq (key-binding (kbd "C-c q r")) #'sly-agent-q-attach-region))
    (should (eq (key-binding (kbd "C-c q d")) #'sly-agent-q-attach-defun))
    (should (eq (key-binding (kbd "C-c q q")) #'sly-agent-q))))

;;;; The approval UI, driven directly

(defmacro sly-agent-q-test--with-approval (var decision &rest body)
  "Show an approval (VAR bound to it) in a fresh chat; DECISION gets the answer."
  (declare (indent 2))
  `(sly-agent-q-test--with-chat
     (let* ((call (sly-agent-q--make-call :id "e1" :kind "approval"))
            (request '(:tool "write_file" :arguments (:path "a.lisp" :content "(+ 1 2)")
                             :safetyLevel "dangerous" :description "Write" :callId "c1")))
       (sly-agent-q-approval--ask call request (lambda (d) (setq ,decision d)))
       (let ((,var (progn (goto-char (point-min))
                          (search-forward "needs your approval")
                          (get-text-property (point) 'sly-agent-q-approval))))
         (ignore ,var call)
         ,@body))))

(ert-deftest sly-agent-q-approval-deny-with-reason ()
  "n denies with the reason typed."
  (let (decision)
    (sly-agent-q-test--with-approval a decision
      (should (string-match-p "content: \"(\\+ 1 2)\"" (buffer-string)))
      (cl-letf (((symbol-function 'read-string) (lambda (&rest _) "use a buffer instead")))
        (call-interactively (lookup-key (get-text-property (point) 'keymap) "n")))
      (should (equal decision '(:decision "denied" :reason "use a buffer instead")))
      (should (string-match-p "✗ denied write_file: use a buffer instead" (buffer-string)))
      (should-error (sly-agent-q-approve a) :type 'user-error))))

(ert-deftest sly-agent-q-approval-edit-arguments ()
  "e opens the arguments as JSON; C-c C-c sends them as a modification."
  (let (decision)
    (sly-agent-q-test--with-approval a decision
      (save-window-excursion
        (sly-agent-q-edit-arguments a)
        (with-current-buffer "*sly-agent-q arguments*"
          (goto-char (point-min))
          (should (search-forward "(+ 1 2)" nil t))
          (replace-match "(+ 40 2)" t t)
          (sly-agent-q-edit-arguments-finish)))
      (should (equal (plist-get decision :decision) "modified"))
      (should (equal (plist-get (plist-get decision :arguments) :content) "(+ 40 2)"))
      (should (string-match-p "approved with edited arguments" (buffer-string))))))

(ert-deftest sly-agent-q-approval-withdrawn ()
  "An approval the server cancels is marked withdrawn and cannot be answered."
  (let (decision)
    (sly-agent-q-test--with-approval a decision
      (sly-agent-q--call-drop call "cancelled")
      (should (string-match-p "approval withdrawn write_file: cancelled" (buffer-string)))
      (should-error (sly-agent-q-approve a) :type 'user-error)
      (should-not decision))))

(ert-deftest sly-agent-q-approval-normalize ()
  "Decisions from user functions are normalized for the protocol."
  (should (equal (sly-agent-q-approval--normalize '(:decision approved :always t))
                 '(:decision "approved" :always t)))
  (should (equal (sly-agent-q-approval--normalize '(:decision "denied"))
                 '(:decision "denied")))
  (should (equal (sly-agent-q-approval--normalize '(:decision "denied" :reason "not there"))
                 '(:decision "denied" :reason "not there")))
  (should (hash-table-p (plist-get (sly-agent-q-approval--normalize '(:decision "modified")) :arguments)))
  (should (equal (plist-get (sly-agent-q-approval--normalize '(:decision "maybe")) :decision) "denied")))

(ert-deftest sly-agent-q-chat-entries-redraw-in-place ()
  "A tool entry and the approval after it redraw without eating each other."
  (let (decision)
    (sly-agent-q-test--with-chat
      (setq sly-agent-q-chat--turn (sly-agent-q--make-turn :id "t1" :status 'running))
      (sly-agent-q-handle-notification nil 'chat/toolCall '(:turnId "t1" :callId "c1" :name "write_file"
                                        :arguments (:path "a.lisp" :content "x") :safetyLevel "dangerous"))
      (sly-agent-q-handle-notification nil 'chat/approvalNeeded '(:turnId "t1" :callId "c1" :name "write_file"))
      (should (string-match-p "write_file (dangerous) .*waiting for approval" (buffer-string)))
      (sly-agent-q-approval--ask (sly-agent-q--make-call :id "e1" :kind "approval")
                                 '(:tool "write_file" :arguments (:path "a.lisp" :content "x")
                                   :safetyLevel "dangerous" :callId "c1")
                                 (lambda (d) (setq decision d)))
      (sly-agent-q-chat-notice "after")
      (sly-agent-q-approve (progn (goto-char (point-min)) (search-forward "needs your approval")
                                  (get-text-property (point) 'sly-agent-q-approval)))
      (should (equal decision '(:decision "approved")))
      (sly-agent-q-handle-notification nil 'chat/toolResult '(:turnId "t1" :callId "c1" :name "write_file" :success t
                                          :content "Wrote a.lisp" :executionTimeMs 3.2 :approved t))
      (should (string-match-p
               "▸ write_file (dangerous) path=\"a.lisp\" content=\"x\"  ✓ 3 ms\n  ✓ approved write_file\nafter\n"
               (buffer-string)))
      ;; Expanding the entry keeps the approval line after it.
      (goto-char (point-min))
      (search-forward "▸ write_file")
      (sly-agent-q-chat-toggle-entry)
      (should (string-match-p "result:\n      Wrote a.lisp\n    time: 3 ms\n  ✓ approved write_file\nafter\n"
                              (buffer-string))))))

(ert-deftest sly-agent-q-approval-denied-when-chat-killed ()
  "Killing the chat buffer denies the approvals waiting in it."
  (let (decision)
    (let ((sly-agent-q-chat-buffer-name "*sly-agent-q kill test*"))
      (sly-agent-q-approval--ask (sly-agent-q--make-call :id "e1" :kind "approval")
                                 '(:tool "write_file" :arguments (:path "a") :safetyLevel "dangerous" :callId "c1")
                                 (lambda (d) (setq decision d)))
      (kill-buffer sly-agent-q-chat-buffer-name))
    (should (equal decision '(:decision "denied" :reason "the user closed the chat buffer")))))

(ert-deftest sly-agent-q-approval-routing ()
  "propose_file_edit goes to the diff review; others to the approval function."
  (let* ((replies nil) (reviewed nil)
         (sly-agent-q-project-root (make-temp-file "agent-q-routing" t)))
    (cl-letf (((symbol-function 'sly-agent-q-call-reply)
               (lambda (_call result) (push result replies)))
              ((symbol-function 'sly-agent-q-diff-review)
               (lambda (args cb) (setq reviewed args) (funcall cb '(:decision "denied" :reason "no hunks")) nil)))
      (let ((sly-agent-q-approval-function
             (lambda (req cb) (funcall cb (list :decision "approved" :always (equal (plist-get req :tool) "x"))))))
        (sly-agent-q-handle-call 'approval
         (sly-agent-q--make-call :id "e1" :kind "approval"
                                 :params '(:tool "propose_file_edit" :arguments (:path "f.lisp" :new_content "x\n")
                                           :callId "c1")))
        (sly-agent-q-handle-call 'approval
         (sly-agent-q--make-call :id "e2" :kind "approval"
                                 :params '(:tool "x" :arguments (:a 1) :callId "c2")))))
    (delete-directory sly-agent-q-project-root t)
    (should (equal reviewed '(:path "f.lisp" :new_content "x\n")))
    (should (equal (reverse replies) '((:decision "denied" :reason "no hunks")
                                       (:decision "approved" :always t))))))

(ert-deftest sly-agent-q-server-dies-at-start ()
  "A server script that dies at once: the sender learns why, with its stderr."
  (let* ((file (make-temp-file "agent-q-bad-server" nil ".js"
                               "process.stderr.write('boom: cannot start\\n'); process.exit(3);\n"))
         (sly-agent-q-server-file file)
         (sly-agent-q--connection nil)
         got)
    (sly-agent-q-server-ensure (lambda (conn msg) (setq got (list conn msg))))
    (sly-agent-q-test-wait (lambda () got) 10 "the failure")
    (should-not (car got))
    (should (string-match-p "server exited (exit 3) before it was ready: boom: cannot start" (cadr got)))))

(provide 'sly-agent-q-server-test)
;;; sly-agent-q-server-test.el ends here
