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
           (conn (sly-agent-q-connection-current))
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
        (sly-agent-q-locate--node-checked nil))
    (let ((err (should-error (sly-agent-q-locate-node) :type 'user-error)))
      (should (string-match-p "cannot find Node.js" (cadr err)))
      (should (string-match-p "20 or newer" (cadr err))))))

(ert-deftest sly-agent-q-server-node-too-old ()
  "A node older than 20 gives a clear message."
  (let* ((dir (make-temp-file "agent-q-node" t))
         (fake (expand-file-name "node" dir))
         (sly-agent-q-locate--node-checked nil))
    (with-temp-file fake (insert "#!/bin/sh\necho v18.19.0\n"))
    (set-file-modes fake #o755)
    (let ((sly-agent-q-node-program fake))
      (let ((err (should-error (sly-agent-q-locate-node) :type 'user-error)))
        (should (string-match-p "Node.js v18.19.0; version 20 or newer is needed" (cadr err)))))
    ;; And the error reaches a sender instead of escaping.
    (let ((sly-agent-q-node-program fake) (sly-agent-q-current-connection nil) got)
      (sly-agent-q-server-ensure (lambda (conn msg) (setq got (list conn msg))))
      (should (null (car got)))
      (should (string-match-p "version 20 or newer" (cadr got))))))

(ert-deftest sly-agent-q-server-file-lookup ()
  "The server script is found in a checkout and in installed layouts."
  (let ((sly-agent-q-server-file nil))
    ;; Source checkout: lisp-elisp/../dist/.
    (should (equal (sly-agent-q-locate-server)
                   (expand-file-name "dist/sly-agent-q-server.js" sly-agent-q-test-root)))
    ;; Installed package: at the root, or in server/.
    (dolist (rel '("sly-agent-q-server.js" "server/sly-agent-q-server.js"))
      (let* ((pkg (file-name-as-directory (make-temp-file "agent-q-pkg" t)))
             (sly-agent-q-locate--lisp-directory pkg))
        (make-directory (file-name-directory (expand-file-name rel pkg)) t)
        (write-region "" nil (expand-file-name rel pkg))
        (should (equal (sly-agent-q-locate-server) (expand-file-name rel pkg)))))
    (let* ((empty (file-name-as-directory (make-temp-file "agent-q-empty" t)))
           (sly-agent-q-locate--lisp-directory (expand-file-name "sub/" empty)))
      (should-error (sly-agent-q-locate-server) :type 'user-error)))
  (let ((sly-agent-q-server-file "/nonexistent/server.js"))
    (should-error (sly-agent-q-locate-server) :type 'user-error)))

;;;; Configuration and the key

(ert-deftest sly-agent-q-configuration-for-server ()
  "The options become the protocol's configuration, without the key."
  (let* ((sly-agent-q-provider "openai")
         (sly-agent-q-model "gpt-x")
         (sly-agent-q-base-url "http://127.0.0.1:9/v1")
         (sly-agent-q-max-steps 7)
         (sly-agent-q-trust-levels '(("eval_form" . dangerous) ("write_file" . cautious)))
         (sly-agent-q-max-safety-level 'cautious)
         (sly-agent-q-project-root "/tmp/proj/")
         (sly-agent-q-extra-configuration '(:temperature 0.5 :apiKey "sk-no-way"))
         (config (sly-agent-q-configuration-for-server)))
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

(ert-deftest sly-agent-q-server-configuration-every-category-is-a-category-level ()
  "A trust level on any category the catalog has is sent as that category's level.
\"systems\", \"debugger\", \"threads\" and \"tools\" were sent as levels of
tools of those names, which nothing took: system_info still ran unasked."
  (let* ((sly-agent-q-trust-levels (mapcar (lambda (c) (cons c 'dangerous)) sly-agent-q-protocol-table-tool-categories))
         (config (sly-agent-q-configuration-for-server)))
    (should (member "systems" sly-agent-q-protocol-table-tool-categories))
    (dolist (c sly-agent-q-protocol-table-tool-categories)
      (should (equal (gethash c (plist-get config :categoryLevels)) "dangerous"))
      (should-not (gethash c (plist-get config :safetyOverrides))))))

(ert-deftest sly-agent-q-server-option-set-reaches-the-running-server ()
  "An option the configuration reads, set with `setq' or Customize, is sent again.
Neither a `let' binding nor a buffer-local value sends anything."
  (let ((sent 0)
        (old sly-agent-q-ask-before-evaluating))
    (unwind-protect
        (cl-letf (((symbol-function 'sly-agent-q-server-reconfigure) (lambda (&rest _) (cl-incf sent))))
          (customize-set-variable 'sly-agent-q-ask-before-evaluating (not old))
          (setq sly-agent-q-ask-before-evaluating old)
          (should (= sent 0))             ; sent from a timer, once for both
          (sit-for 0.05)
          (should (= sent 1))
          (let ((sly-agent-q-ask-before-evaluating (not old))) (ignore sly-agent-q-ask-before-evaluating))
          (with-temp-buffer (setq-local sly-agent-q-trust-levels '(("eval_form" . safe))))
          (sit-for 0.05)
          (should (= sent 1)))
      (set-default 'sly-agent-q-ask-before-evaluating old))))

(ert-deftest sly-agent-q-server-api-key-sources ()
  "The key comes from the option, the environment or auth-source."
  (let ((process-environment (cl-remove-if (lambda (e) (string-prefix-p "ANTHROPIC_API_KEY=" e))
                                           process-environment))
        (sly-agent-q-provider "anthropic")
        (sly-agent-q-base-url nil))
    (let ((sly-agent-q-api-key "sk-direct")) (should (equal (sly-agent-q-configuration-api-key) "sk-direct")))
    (let ((sly-agent-q-api-key (lambda () "sk-fn"))) (should (equal (sly-agent-q-configuration-api-key) "sk-fn")))
    (let* ((file (make-temp-file "agent-q-authinfo" nil nil
                                 "machine api.anthropic.com login apikey password sk-from-authinfo\n"))
           (auth-sources (list file))
           (sly-agent-q-api-key nil))
      (require 'auth-source)
      (auth-source-forget-all-cached)
      (should (equal (sly-agent-q-configuration-api-key) "sk-from-authinfo"))
      ;; The environment wins: nothing to add to the server's environment.
      (let ((process-environment (cons "ANTHROPIC_API_KEY=sk-env" process-environment)))
        (should (null (sly-agent-q-configuration-api-key)))))))

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
    (sly-agent-q-transcript-insert "Some transcript text\n")
    (goto-char (point-min))
    (should-error (insert "x") :type 'text-read-only)
    (goto-char (sly-agent-q-transcript-end))
    (should-error (insert "x") :type 'text-read-only)
    (goto-char (point-max))
    (insert "my question")
    (should (equal (sly-agent-q-input-text) "my question"))
    ;; More transcript goes above the prompt; the input stays.
    (sly-agent-q-transcript-notice "a notice")
    (should (equal (sly-agent-q-input-text) "my question"))
    (should (string-match-p "a notice\n> my question\\'" (buffer-string)))))

(ert-deftest sly-agent-q-chat-input-history ()
  "M-p and M-n walk the messages sent, keeping the draft."
  (sly-agent-q-test--with-chat
    (setf (sly-agent-q-input-history sly-agent-q-input--state) '("third" "second" "first"))
    (goto-char (point-max))
    (insert "draft")
    (sly-agent-q-chat-previous-input)
    (should (equal (sly-agent-q-input-text) "third"))
    (sly-agent-q-chat-previous-input)
    (should (equal (sly-agent-q-input-text) "second"))
    (sly-agent-q-chat-next-input)
    (sly-agent-q-chat-next-input)
    (should (equal (sly-agent-q-input-text) "draft"))
    (should (eq (key-binding (kbd "M-p")) #'sly-agent-q-chat-previous-input))
    (should (eq (key-binding (kbd "RET")) #'sly-agent-q-chat-return))
    (should (eq (key-binding (kbd "C-c C-c")) #'sly-agent-q-chat-send-input))
    (should (eq (key-binding (kbd "C-j")) #'newline))
    (should (eq (key-binding (kbd "C-c C-k")) #'sly-agent-q-cancel))))

(ert-deftest sly-agent-q-chat-send-input-starts-a-turn ()
  "RET in the input starts a turn with the text and empties the input."
  (sly-agent-q-test--with-chat
    (let (sent)
      (cl-letf (((symbol-function 'sly-agent-q-turn-send)
                 (lambda (text cb) (setq sent (list text cb)))))
        (goto-char (point-max))
        (should-error (sly-agent-q-chat-return) :type 'user-error)
        (insert "  explain this  ")
        (sly-agent-q-chat-return)
        (should (equal sent '("explain this" nil)))
        (should (equal (sly-agent-q-input-text) ""))
        (should (equal (car (sly-agent-q-input-history sly-agent-q-input--state)) "explain this"))))))

(ert-deftest sly-agent-q-chat-streaming-is-coalesced ()
  "Many deltas are inserted together on the timer, not one by one."
  (sly-agent-q-test--with-chat
    (let ((inserts 0)
          (sly-agent-q-stream-flush-interval 0.05))
      (setf (sly-agent-q-turn-chat-running sly-agent-q-turn--chat) (sly-agent-q-turn-create :id "t1" :state 'running))
      (cl-letf* ((orig (symbol-function 'sly-agent-q-transcript-insert))
                 ((symbol-function 'sly-agent-q-transcript-insert)
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
    (setf (sly-agent-q-turn-chat-running sly-agent-q-turn--chat) (sly-agent-q-turn-create :id "t1" :state 'running))
    (sly-agent-q-handle-notification nil 'chat/textDelta
     '(:turnId "t1" :text "Try:\n```lisp\n(defun square (x) \"Square X.\" (* x x))\n```\nDone."))
    (sly-agent-q-handle-notification nil 'chat/turnFinished '(:turnId "t1" :text "x" :stopReason "end_turn"))
    (goto-char (point-min))
    (search-forward "defun")
    ;; The token's face first, the block's band under it.
    (should (equal (get-text-property (match-beginning 0) 'face)
                   '(font-lock-keyword-face sly-agent-q-code-block-face)))
    (search-forward "\"Square")
    (should (memq (car (get-text-property (match-beginning 0) 'face))
                  '(font-lock-doc-face font-lock-string-face)))
    (goto-char (point-min))
    (search-forward "```lisp")
    (should (equal (get-text-property (match-beginning 0) 'face)
                   '(sly-agent-q-code-fence-face sly-agent-q-code-block-face)))))

(ert-deftest sly-agent-q-chat-huge-results-stay-out-of-the-window ()
  "A 1 MB one-line result and a 50,000-line one: the expanded entry shows a bounded preview; o opens the whole."
  (sly-agent-q-test--with-chat
    (setf (sly-agent-q-turn-chat-running sly-agent-q-turn--chat) (sly-agent-q-turn-create :id "t1" :state 'running))
    (let ((one-line (make-string 1000000 ?x))
          (many-lines (mapconcat (lambda (i) (format "line %d" i)) (number-sequence 1 50000) "\n")))
      (pcase-dolist (`(,id ,content) (list (list "c1" one-line) (list "c2" many-lines)))
        (sly-agent-q-handle-notification nil 'chat/toolCall (list :turnId "t1" :callId id :name "read_file"
                                                                   :arguments (list :path "big.txt") :safetyLevel "safe"))
        (sly-agent-q-handle-notification nil 'chat/toolResult (list :turnId "t1" :callId id :name "read_file"
                                                                     :success t :content content :executionTimeMs 3)))
      ;; Collapsed: nothing of either result is in the buffer.
      (should (< (buffer-size) 2000))
      (dolist (id '("c1" "c2"))
        (let ((entry (sly-agent-q-entry-of id)))
          (goto-char (point-min))
          (search-forward (concat "read_file") nil t (if (equal id "c1") 1 2))
          (sly-agent-q-entry-toggle)
          (should (sly-agent-q-entry-expanded entry))))
      (let ((text (buffer-string)))
        (should (< (length text) (+ 2000 (* 2 (+ 250 (* 20 210))))))
        (should (string-match-p "1,000,000 characters in all, long lines cut" text))
        (should (string-match-p "line 20$" text))
        (should-not (string-match-p "line 21$" text))
        (should (string-match-p "more after these lines" text))
        ;; No line of the buffer is longer than a preview line and its indentation.
        (should (< (cl-loop for l in (split-string text "\n") maximize (length l)) 300)))
      ;; o on the first entry: the whole result, in a buffer of its own.
      (goto-char (point-min))
      (search-forward "read_file")
      (let ((full (sly-agent-q-entry-open)))
        (unwind-protect
            (with-current-buffer full
              ;; Framed as outside text, as in the chat.
              (should (string-search (concat "\n╎ " (make-string 1000000 ?x) "\n") (buffer-string)))
              (should truncate-lines))
          (kill-buffer full))))))

(ert-deftest sly-agent-q-chat-fontifies-bounded-code-blocks ()
  "A code block over `sly-agent-q-fontify-max-chars' is left plain; a small one is fontified."
  (sly-agent-q-test--with-chat
    (let ((sly-agent-q-fontify-max-chars 500))
      (setf (sly-agent-q-turn-chat-running sly-agent-q-turn--chat) (sly-agent-q-turn-create :id "t1" :state 'running))
      (sly-agent-q-handle-notification
       nil 'chat/textDelta
       (list :turnId "t1"
             :text (concat "```lisp\n(defun small (x) x)\n```\n```lisp\n(defun big (x) x)\n"
                           (mapconcat (lambda (i) (format "(defun f%d () %d)" i i)) (number-sequence 1 100) "\n")
                           "\n```\n")))
      (sly-agent-q-handle-notification nil 'chat/turnFinished '(:turnId "t1" :text "x" :stopReason "end_turn"))
      ;; A long answer is rendered in steps.
      (sly-agent-q-test-wait (lambda () (sly-agent-q-stream-rendered-p)) 10 "the rendering")
      (goto-char (point-min))
      (search-forward "(defun small")
      (should (eq (car (get-text-property (1+ (match-beginning 0)) 'face)) 'font-lock-keyword-face))
      (search-forward "(defun big")
      ;; Not fontified by its language's mode (the Markdown code face may be there).
      (should-not (memq 'font-lock-keyword-face
                        (ensure-list (get-text-property (1+ (match-beginning 0)) 'face)))))))

(ert-deftest sly-agent-q-chat-header-line-refreshes-a-few-times-a-second ()
  "A burst of state changes recomputes the header line once per interval, and it ends up current."
  (sly-agent-q-test--with-chat
    (let ((sly-agent-q-header-refresh-interval 0.2)
          (computed 0))
      (setf (sly-agent-q-turn-chat-running sly-agent-q-turn--chat) (sly-agent-q-turn-create :id "t1" :state 'running))
      (cl-letf* ((orig (symbol-function 'sly-agent-q-chat--header-line))
                 ((symbol-function 'sly-agent-q-chat--header-line)
                  (lambda () (cl-incf computed) (funcall orig))))
        (let ((previous nil))
          (dotimes (_ 100)
            (dolist (state '("requesting" "streaming"))
              (sly-agent-q-handle-notification nil 'chat/turnState
                                               (list :turnId "t1" :state state :previous previous))
              (setq previous state))))
        (should (= computed 0))
        (sly-agent-q-test-wait (lambda () (> computed 0)) 2 "the header refresh")
        (sly-agent-q-test-sleep 0.3)
        (should (= computed 1))
        (should (eq (car header-line-format) :eval))
        (should (string-match-p "answering" (eval (cadr header-line-format) t)))))))

(ert-deftest sly-agent-q-chat-turn-finished-hook ()
  "The hook and the callback get the outcome once."
  (sly-agent-q-test--with-chat
    (let* ((seen nil)
           (sly-agent-q-turn-finished-hook (list (lambda (p) (push (cons 'hook p) seen))))
           (turn (sly-agent-q-turn-create :id "t9" :state 'running
                                         :callback (lambda (p) (push (cons 'cb p) seen)))))
      (setf (sly-agent-q-turn-chat-running sly-agent-q-turn--chat) turn)
      (sly-agent-q-handle-notification nil 'chat/turnFailed '(:turnId "t9" :kind "provider" :message "rate limited"
                                         :usage (:inputTokens 1 :outputTokens 0)))
      (sly-agent-q-handle-notification nil 'chat/turnFailed '(:turnId "t9" :kind "provider" :message "again"))
      (should (= 2 (length seen)))
      (should (eq (plist-get (cdr (assq 'hook seen)) :status) 'failed))
      (should (equal (plist-get (cdr (assq 'cb seen)) :message) "rate limited"))
      (should (string-match-p "Error: rate limited" (buffer-string)))
      (should-not (sly-agent-q-turn-running)))))

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
            (should (= 2 (sly-agent-q-input-attachment-count)))
            (let ((text (sly-agent-q-input-attachment-text)))
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
     (let* ((call (sly-agent-q-dispatch--make-call :id "e1" :kind "approval"))
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

(ert-deftest sly-agent-q-approval-offers-only-what-the-server-honours ()
  "A permission rule asks each time: no \"always allow\"; a read outside the project neither that
nor an edit of its arguments; the tool's level both.  Asked for anyway, they say why, deciding nothing."
  (sly-agent-q-test--with-chat
    (dolist (case '(("level" (:kind "level" :level "dangerous") t t)
                    ("rule" (:kind "rule" :rule (:action "ask" :tool "write_file")) t nil)
                    ("outside" (:kind "outside" :path "/usr/share/lib/a.lisp") nil nil)
                    ("protected" (:kind "protected" :path ".envrc" :why "direnv runs it") nil nil)))
      (let ((decision nil)
            (request (list :tool "write_file" :arguments '(:path "a.lisp" :content "x")
                           :safetyLevel "dangerous" :callId (car case) :reason (nth 1 case))))
        (sly-agent-q-approval--ask (sly-agent-q-dispatch--make-call :id (car case) :kind "approval") request
                                   (lambda (d) (setq decision d)))
        (let* ((a (save-excursion (goto-char (point-max)) (search-backward "needs your approval")
                                  (get-text-property (point) 'sly-agent-q-approval)))
               (keys (mapcar #'car (sly-agent-q-approval--choices (sly-agent-q-approval-request a))))
               (shown (buffer-substring-no-properties
                       (save-excursion (goto-char (point-max)) (search-backward "needs your approval"))
                       (point-max))))
          (should (eq (and (memq ?e keys) t) (nth 2 case)))
          (should (eq (and (memq ?a keys) t) (nth 3 case)))
          (should (eq (and (string-match-p "\\[Edit arguments\\]" shown) t) (nth 2 case)))
          (should (eq (and (string-match-p "\\[Always allow" shown) t) (nth 3 case)))
          (unless (nth 3 case)
            (should-error (sly-agent-q-approve-always a) :type 'user-error))
          (unless (nth 2 case)
            (should-error (sly-agent-q-edit-arguments a) :type 'user-error))
          (should-not decision)
          (sly-agent-q-approve a)
          (should (equal decision '(:decision "approved"))))))))

(ert-deftest sly-agent-q-approval-edit-arguments-buffer-outlives-its-requests ()
  "A reply that comes for the edit buffer after C-c C-c (SLIME's autodoc asked as the user typed)
still finds its buffer: SLIME selects the buffer that asked, and a killed one is an error in
its process filter."
  (let (decision late)
    (sly-agent-q-test--with-approval a decision
      (save-window-excursion
        (sly-agent-q-edit-arguments a)
        (with-current-buffer "*sly-agent-q arguments*"
          ;; As `slime-eval-async' does: the continuation selects the buffer that asked.
          (let ((asked (current-buffer)))
            (run-with-timer 0.05 nil (lambda ()
                                       (setq late (condition-case err (progn (set-buffer asked) 'selected)
                                                    (error err))))))
          (sly-agent-q-edit-arguments-finish)))
      (sly-agent-q-test-wait (lambda () late) 5 "the late reply")
      (should (eq late 'selected))
      (should (equal (plist-get decision :decision) "approved"))
      ;; The buffer kept edits nothing: C-c C-c there again decides nothing.
      (with-current-buffer "*sly-agent-q arguments*"
        (should-error (sly-agent-q-edit-arguments-finish) :type 'user-error)))))

(ert-deftest sly-agent-q-approval-edit-lisp-buffer-left-edits-nothing ()
  "A Lisp form's edit buffer, left with C-c C-k, says it edits nothing at C-c C-c."
  (sly-agent-q-test--with-chat
    (let (decision)
      (sly-agent-q-approval--ask (sly-agent-q-dispatch--make-call :id "e1" :kind "approval")
                                 '(:tool "eval_form" :arguments (:form "(+ 1 2)")
                                   :safetyLevel "cautious" :callId "c1")
                                 (lambda (d) (setq decision d)))
      (let ((a (save-excursion (goto-char (point-min)) (search-forward "needs your approval")
                               (get-text-property (point) 'sly-agent-q-approval))))
        (save-window-excursion
          ;; The server's catalog says which arguments are Lisp; here, the form.
          (cl-letf (((symbol-function 'sly-agent-q-approval--lisp-p) (lambda (_request key) (eq key :form))))
            (sly-agent-q-edit-arguments a))
          (with-current-buffer "*sly-agent-q arguments*"
            (should (equal (string-trim (buffer-string)) "(+ 1 2)"))
            (sly-agent-q-edit-arguments-abort)
            (should-error (sly-agent-q-edit-arguments-finish) :type 'user-error))))
      (should-not decision))))

(ert-deftest sly-agent-q-approval-redraws-alone ()
  "Answering an approval redraws it alone: the entry before it and the text after it are not touched."
  (let (decision)
    (sly-agent-q-test--with-chat
      (setf (sly-agent-q-turn-chat-running sly-agent-q-turn--chat) (sly-agent-q-turn-create :id "t1" :state 'running))
      (sly-agent-q-handle-notification nil 'chat/toolCall '(:turnId "t1" :callId "c1" :name "write_file"
                                                            :arguments (:path "a.lisp") :safetyLevel "dangerous"))
      (sly-agent-q-approval--ask (sly-agent-q-dispatch--make-call :id "e1" :kind "approval")
                                 '(:tool "write_file" :arguments (:path "a.lisp")
                                   :safetyLevel "dangerous" :callId "c1")
                                 (lambda (d) (setq decision d)))
      (sly-agent-q-transcript-notice "after")
      (let* ((entry-line (buffer-substring-no-properties
                          (car (sly-agent-q-test--line-bounds "▸ write_file"))
                          (cdr (sly-agent-q-test--line-bounds "▸ write_file"))))
             (start (car (sly-agent-q-test--line-bounds "needs your approval")))
             (end (car (sly-agent-q-test--line-bounds "after")))
             (approval (save-excursion (goto-char start) (search-forward "needs your approval")
                                       (get-text-property (point) 'sly-agent-q-approval)))
             (changes (sly-agent-q-test--changes-during (lambda () (sly-agent-q-approve approval)))))
        (should (equal decision '(:decision "approved")))
        (should changes)
        (dolist (c changes)
          (should (<= start (car c) (cdr c) end)))
        (should (string-match-p (concat "\\`" (regexp-quote entry-line) "  ✓ approved write_file\nafter\n> \\'")
                                (buffer-substring-no-properties
                                 (car (sly-agent-q-test--line-bounds "▸ write_file")) (point-max))))))))

;; An approval asked of the user: what the echo area says, and the prompt C-c C-r gives.
(defun sly-agent-q-test--ask-approval (request)
  "Show REQUEST as an approval in the current chat; return (MESSAGES . DECISION-CELL)."
  (let ((said nil) (cell (list nil)))
    (cl-letf (((symbol-function 'message)
               (lambda (fmt &rest r) (when fmt (push (apply #'format fmt r) said)))))
      (sly-agent-q-approval--ask (sly-agent-q-dispatch--make-call :id "e1" :kind "approval")
                                 request (lambda (d) (setcar cell d))))
    (cons said cell)))

(ert-deftest sly-agent-q-approval-answered-from-the-input ()
  "With point in the input, where y inserts a y, C-c C-r answers the approval.
Its prompt owns the keyboard and offers only what applies: no diff for
a restart, which writes nothing."
  (sly-agent-q-test--with-chat
    (let* ((asked (sly-agent-q-test--ask-approval
                   '(:tool "debugger_invoke_restart" :arguments (:restart 1 :thread 1)
                     :safetyLevel "dangerous" :detail "restart 1: ABORT" :callId "c1")))
           (said (car asked)) (cell (cdr asked)) (offered nil))
      ;; The echo area names the key that works anywhere, and no diff.
      (should (cl-some (lambda (m) (string-match-p "C-c C-r" m)) said))
      (should-not (cl-some (lambda (m) (string-match-p "diff" m)) said))
      (should-not (string-match-p "\\[Show diff\\]\\|/ d /" (buffer-string)))
      ;; Point in the input: y would be typed, C-c C-r asks.
      (goto-char (point-max))
      (should-not (eq (key-binding "y") #'sly-agent-q-approve))
      (cl-letf (((symbol-function 'read-multiple-choice)
                 (lambda (_prompt choices &rest _)
                   (setq offered (mapcar #'car choices))
                   (assq ?y choices))))
        (call-interactively (key-binding (kbd "C-c C-r"))))
      (should (memq ?y offered))
      (should (memq ?n offered))
      (should-not (memq ?d offered))
      (should (equal (car cell) '(:decision "approved")))
      (should (string-match-p "✓ approved debugger_invoke_restart" (buffer-string))))))

(ert-deftest sly-agent-q-approval-prompt-says-which-of-several ()
  "With two approvals waiting, C-c C-r from the input says which one it answers: its call, and
that another waits.  (Its prompt said only \"eval_form needs your approval\", so a user reading the
newest approval, near the input, approved the oldest one, perhaps scrolled away.)"
  (sly-agent-q-test--with-chat
    (let* ((first (cdr (sly-agent-q-test--ask-approval
                        '(:tool "eval_form" :arguments (:form "(delete-the-first)" :package "CL-USER")
                          :safetyLevel "dangerous" :lispArguments ["form"] :callId "c1"))))
           (second (cdr (sly-agent-q-test--ask-approval
                         '(:tool "eval_form" :arguments (:form "(print 'second)" :package "CL-USER")
                           :safetyLevel "dangerous" :lispArguments ["form"] :callId "c2"))))
           (prompt nil))
      (goto-char (point-max))
      (cl-letf (((symbol-function 'read-multiple-choice)
                 (lambda (p choices &rest _) (setq prompt p) (assq ?y choices))))
        (call-interactively (key-binding (kbd "C-c C-r"))))
      ;; The oldest is answered, and the prompt said so: its form, and one more waiting.
      (should (equal (car first) '(:decision "approved")))
      (should-not (car second))
      (should (string-match-p "(delete-the-first)" prompt))
      (should (string-match-p "1 of 2" prompt)))))

(ert-deftest sly-agent-q-approval-prompt-offers-the-diff-when-there-is-one ()
  "A call that writes has a diff: the echo area and the prompt offer it."
  (sly-agent-q-test--with-chat
    (let* ((asked (sly-agent-q-test--ask-approval
                   '(:tool "write_file" :arguments (:path "a.lisp" :content "x")
                     :safetyLevel "dangerous" :path "a.lisp" :diff "--- a/a.lisp\n+++ b/a.lisp\n@@ -0,0 +1 @@\n+x\n"
                     :callId "c1")))
           (offered nil))
      (should (cl-some (lambda (m) (string-match-p "diff" m)) (car asked)))
      (goto-char (point-max))
      (cl-letf (((symbol-function 'read-multiple-choice)
                 (lambda (_prompt choices &rest _)
                   (setq offered (mapcar #'car choices))
                   (assq ?n choices)))
                ((symbol-function 'read-string) (lambda (&rest _) "no")))
        (call-interactively (key-binding (kbd "C-c C-r"))))
      (should (memq ?d offered))
      (should (equal (car (cdr asked)) '(:decision "denied" :reason "no"))))))

(ert-deftest sly-agent-q-approval-lisp-left-as-it-was-is-approved-as-it-was ()
  "Editing a Lisp form and changing nothing approves the model's form as it was, not \"edited\".
The editing buffer indents the form when it opens; that indentation is
not the user's edit (the chat said \"approved with edited arguments\"
and the model was told its form was modified)."
  (sly-agent-q-test--with-chat
    (let* ((form "(let ((x 1))\n(+ x 1))\n")
           (cell (cdr (sly-agent-q-test--ask-approval
                       `(:tool "eval_form" :arguments (:form ,form :package "CL-USER")
                         :safetyLevel "dangerous" :lispArguments ["form"] :callId "c1"))))
           (a (progn (goto-char (point-min)) (search-forward "needs your approval")
                     (get-text-property (point) 'sly-agent-q-approval))))
      (save-window-excursion
        (sly-agent-q-edit-arguments a)
        (with-current-buffer "*sly-agent-q arguments*"
          (sly-agent-q-edit-arguments-finish)))
      (should (equal (car cell) '(:decision "approved")))
      (should-not (string-match-p "edited arguments" (buffer-string))))))

(ert-deftest sly-agent-q-approval-lisp-shown-and-edited-as-lisp ()
  "A Lisp argument is shown as Lisp, not a JSON string, and edited in `lisp-mode'.
An unbalanced edit is refused, the approval still waiting; a balanced
one runs with the other arguments as they were."
  (sly-agent-q-test--with-chat
    (let* ((asked (sly-agent-q-test--ask-approval
                   '(:tool "eval_form" :arguments (:form "(let ((x 1)) (+ x \"a\\\"b\"))" :package "CL-USER")
                     :safetyLevel "dangerous" :lispArguments ["form"] :callId "c1")))
           (cell (cdr asked))
           (a (progn (goto-char (point-min)) (search-forward "needs your approval")
                     (get-text-property (point) 'sly-agent-q-approval))))
      ;; As Lisp: the form's own text, its string's quote unescaped; no JSON quoting around it.
      (should (string-match-p "form:\n.*(let ((x 1)) (\\+ x \"a\\\\\"b\"))$" (buffer-string)))
      (should-not (string-match-p "form: \"(let" (buffer-string)))
      (save-window-excursion
        (sly-agent-q-edit-arguments a)
        (with-current-buffer "*sly-agent-q arguments*"
          (should (derived-mode-p 'lisp-mode))
          (should (equal (string-trim (buffer-string)) "(let ((x 1)) (+ x \"a\\\"b\"))"))
          ;; Unbalanced: refused, nothing sent.
          (goto-char (point-max))
          (skip-chars-backward "\n")
          (delete-char -1)
          (should-error (sly-agent-q-edit-arguments-finish) :type 'user-error)
          (should (null (car cell)))
          (erase-buffer)
          (insert "(let ((x 40))\n(+ x 2))")
          (sly-agent-q-edit-arguments-finish)))
      (should (equal (plist-get (car cell) :decision) "modified"))
      (let ((args (plist-get (car cell) :arguments)))
        ;; Indented as Lisp when accepted; the package kept.
        (should (equal (plist-get args :form) "(let ((x 40))\n  (+ x 2))"))
        (should (equal (plist-get args :package) "CL-USER"))))))

(ert-deftest sly-agent-q-approval-lisp-edit-unterminated-comment-or-string-refused ()
  "A Lisp edit ending inside a #| comment or a |symbol| is refused, the approval still waiting.
The balance check passed them: the reader of the image would take the
rest of the text into the comment (to an end-of-file error) or read a
different symbol than the user meant."
  (sly-agent-q-test--with-chat
    (let* ((asked (sly-agent-q-test--ask-approval
                   '(:tool "eval_form" :arguments (:form "(+ 1 2)" :package "CL-USER")
                     :safetyLevel "dangerous" :lispArguments ["form"] :callId "c1")))
           (cell (cdr asked))
           (a (progn (goto-char (point-min)) (search-forward "needs your approval")
                     (get-text-property (point) 'sly-agent-q-approval))))
      (save-window-excursion
        (sly-agent-q-edit-arguments a)
        (with-current-buffer "*sly-agent-q arguments*"
          (dolist (text '("(+ 1 2) #| (delete-everything)" "(+ 1 2) |open symbol"))
            (erase-buffer)
            (insert text)
            (should-error (sly-agent-q-edit-arguments-finish) :type 'user-error)
            (should (null (car cell))))
          (erase-buffer)
          ;; A ; comment ends with the text, as the reader reads it.
          (insert "(+ 1 2) #| a comment |# ; and a last one")
          (sly-agent-q-edit-arguments-finish)))
      (should (equal (plist-get (car cell) :decision) "modified"))
      (should (equal (plist-get (plist-get (car cell) :arguments) :form)
                     "(+ 1 2) #| a comment |# ; and a last one")))))

(ert-deftest sly-agent-q-approval-lisp-edit-keys-win-over-slime ()
  "With SLIME set up as users have it, C-c C-c in the Lisp form's editing
buffer runs the edited form, not SLIME's compile (`slime-mode' is turned
on by `lisp-mode-hook' and binds the same key)."
  (unless (sly-agent-q-dev-require-slime) (ert-skip "SLIME cannot be found"))
  (let ((lisp-mode-hook (cons #'slime-lisp-mode-hook lisp-mode-hook)))
    (sly-agent-q-test--with-chat
      (sly-agent-q-test--ask-approval
       '(:tool "eval_form" :arguments (:form "(+ 1 2)") :safetyLevel "dangerous"
         :lispArguments ["form"] :callId "c1"))
      (let ((a (progn (goto-char (point-min)) (search-forward "needs your approval")
                      (get-text-property (point) 'sly-agent-q-approval))))
        (save-window-excursion
          (sly-agent-q-edit-arguments a)
          (with-current-buffer "*sly-agent-q arguments*"
            (should (bound-and-true-p slime-mode))
            (should (eq (key-binding (kbd "C-c C-c")) #'sly-agent-q-edit-arguments-finish))
            (should (eq (key-binding (kbd "C-c C-k")) #'sly-agent-q-edit-arguments-abort))
            (sly-agent-q-edit-arguments-abort)))))))

(ert-deftest sly-agent-q-approval-withdrawn ()
  "An approval the server cancels is marked withdrawn and cannot be answered."
  (let (decision)
    (sly-agent-q-test--with-approval a decision
      (sly-agent-q-call-drop call "cancelled")
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

(ert-deftest sly-agent-q-chat-entry-shows-run-time-wait-and-edited-arguments ()
  "A tool entry shows the run time, the approval's wait apart, and the arguments that ran."
  (sly-agent-q-test--with-chat
    (setf (sly-agent-q-turn-chat-running sly-agent-q-turn--chat) (sly-agent-q-turn-create :id "t1" :state 'running))
    (sly-agent-q-handle-notification nil 'chat/toolCall '(:turnId "t1" :callId "c1" :name "eval_form"
                                      :arguments (:form "(delete-file \"x\")") :safetyLevel "dangerous"))
    (sly-agent-q-handle-notification nil 'chat/toolResult
                                     '(:turnId "t1" :callId "c1" :name "eval_form" :success t :content "NIL"
                                       :executionTimeMs 3.2 :approvalWaitMs 4200.5
                                       :arguments (:form "(probe-file \"x\")") :approved t))
    (let ((line (buffer-substring-no-properties
                 (car (sly-agent-q-test--line-bounds "▸ eval_form"))
                 (cdr (sly-agent-q-test--line-bounds "▸ eval_form")))))
      ;; What ran, marked as edited; not the model's form.
      (should (string-match-p "probe-file" line))
      (should-not (string-match-p "delete-file" line))
      (should (string-match-p "edited" line))
      ;; Its own time, and the wait apart.
      (should (string-match-p "✓ 3 ms" line))
      (should (string-match-p "4\\.2 s for approval" line)))
    ;; Expanded, both argument sets are there, each named.
    (goto-char (point-min))
    (search-forward "▸ eval_form")
    (sly-agent-q-entry-toggle)
    (should (string-match-p "arguments that ran (edited by the user):\n[^:]*:[^:]*probe-file" (buffer-string)))
    (should (string-match-p "the model's arguments:\n[^:]*:[^:]*delete-file" (buffer-string)))))

(ert-deftest sly-agent-q-chat-resumed-entry-shows-how-the-call-ran ()
  "A resumed conversation's tool entry shows its time, the approval's wait and the edited arguments, as live."
  (let ((sly-agent-q-chat-buffer-name "*sly-agent-q test*"))
    (when (get-buffer sly-agent-q-chat-buffer-name) (kill-buffer sly-agent-q-chat-buffer-name))
    (unwind-protect
        (with-current-buffer
            (sly-agent-q-chat-show-history
             "c1" "a title"
             [(:role "user" :content [(:type "text" :text "go")])
              (:role "assistant" :content [(:type "tool_use" :id "tu1" :name "eval_form"
                                            :input (:form "(delete-file \"x\")"))])
              (:role "user" :content [(:type "tool_result" :toolUseId "tu1" :content "NIL" :isError :json-false)])]
             :calls '(:tu1 (:executionTimeMs 3.2 :approvalWaitMs 4200 :arguments (:form "(probe-file \"x\")"))))
          (let ((line (buffer-substring-no-properties
                       (car (sly-agent-q-test--line-bounds "▸ eval_form"))
                       (cdr (sly-agent-q-test--line-bounds "▸ eval_form")))))
            (should (string-match-p "✎ edited: form=\"(probe-file" line))
            (should (string-match-p "✓ 3 ms · waited 4\\.2 s for approval" line))))
      (kill-buffer sly-agent-q-chat-buffer-name))))

;; What a live turn shows and what its saved record gives back on resuming.
(defconst sly-agent-q-test--saved-turns
  [(:role "user" :content [(:type "text" :text "go")])
   (:role "assistant" :content [(:type "text" :text "Looking.")
                                (:type "tool_use" :id "tu1" :name "describe_symbol" :input (:symbol "car"))])
   (:role "user" :content [(:type "tool_result" :toolUseId "tu1" :content "CAR names a function" :isError :json-false)])
   (:role "assistant" :content [(:type "text" :text "CAR is a function.")])
   (:role "user" :content [(:type "text" :text "and cdr?") (:type "text" :text "well?")])
   (:role "assistant" :content [(:type "text" :text "CDR too.")])]
  "A saved history: a turn with a tool call, a cancelled one, one that finished.")

(defun sly-agent-q-test--transcript ()
  "The chat's transcript from its first \"You:\" to the prompt, without text properties."
  (let ((text (buffer-substring-no-properties (point-min) (sly-agent-q-transcript-end))))
    (substring text (string-match "^You:" text))))

(ert-deftest sly-agent-q-chat-resumed-conversation-looks-as-live ()
  "A resumed conversation shows what the live one did: entries' trust levels and times, footers, cancellations."
  (let (live)
    (sly-agent-q-test--with-chat
      (let ((usage1 '(:inputTokens 1200 :outputTokens 80)) (usage2 '(:inputTokens 300 :outputTokens 5)))
        (sly-agent-q-transcript-user-message "go")
        (setf (sly-agent-q-turn-chat-running sly-agent-q-turn--chat) (sly-agent-q-turn-create :id "t1" :state 'running))
        (sly-agent-q-handle-notification nil 'chat/textDelta '(:turnId "t1" :text "Looking."))
        (sly-agent-q-handle-notification nil 'chat/toolCall '(:turnId "t1" :callId "tu1" :name "describe_symbol"
                                                              :arguments (:symbol "car") :safetyLevel "safe"))
        (sly-agent-q-handle-notification nil 'chat/toolResult '(:turnId "t1" :callId "tu1" :name "describe_symbol" :success t
                                                                :content "CAR names a function" :executionTimeMs 3.2 :approved t))
        (sly-agent-q-handle-notification nil 'chat/textDelta '(:turnId "t1" :text "CAR is a function."))
        (sly-agent-q-handle-notification nil 'chat/turnFinished
                                         `(:turnId "t1" :stopReason "end_turn" :steps 1 :usage ,usage1 :costUsd 0.0123))
        (sly-agent-q-transcript-user-message "and cdr?")
        (setf (sly-agent-q-turn-chat-running sly-agent-q-turn--chat) (sly-agent-q-turn-create :id "t2" :state 'running))
        (sly-agent-q-handle-notification nil 'chat/turnFailed '(:turnId "t2" :kind "cancelled" :message "cancelled by the user"))
        (sly-agent-q-transcript-user-message "well?")
        (setf (sly-agent-q-turn-chat-running sly-agent-q-turn--chat) (sly-agent-q-turn-create :id "t3" :state 'running))
        (sly-agent-q-handle-notification nil 'chat/textDelta '(:turnId "t3" :text "CDR too."))
        (sly-agent-q-handle-notification nil 'chat/turnFinished
                                         `(:turnId "t3" :stopReason "max_tokens" :steps 0 :usage ,usage2 :costUsd 0.001))
        (setq live (sly-agent-q-test--transcript))
        (sly-agent-q-chat-show-history
         "c1" "go" sly-agent-q-test--saved-turns
         :calls '(:tu1 (:executionTimeMs 3.2 :safetyLevel "safe" :approved t))
         :turn-ends `[(:afterMessage 4 :usage ,usage1 :costUsd 0.0123 :steps 1 :stopReason "end_turn")
                      (:afterMessage 5 :afterBlocks 1 :usage (:inputTokens 0 :outputTokens 0) :costUsd 0
                       :failed (:kind "cancelled" :message "cancelled by the user"))
                      (:afterMessage 6 :usage ,usage2 :costUsd 0.001 :steps 0 :stopReason "max_tokens")])
        (should (string-match-p "describe_symbol (safe) symbol=\"car\"  ✓ 3 ms" live))
        (should (string-match-p "(1 tool step · 1,200 in / 80 out · \\$0.0123)" live))
        (should (equal (sly-agent-q-test--transcript) live))))))

(ert-deftest sly-agent-q-chat-resumed-thinking-looks-as-live ()
  "The model's reasoning, resumed, is folded above its answer as it was live, redacted too."
  (let (live)
    (sly-agent-q-test--with-chat
      (sly-agent-q-transcript-user-message "go")
      (setf (sly-agent-q-turn-chat-running sly-agent-q-turn--chat) (sly-agent-q-turn-create :id "t1" :state 'running))
      (sly-agent-q-handle-notification nil 'chat/thinkingDelta '(:turnId "t1" :text "Which frame? "))
      (sly-agent-q-handle-notification nil 'chat/thinkingDelta '(:turnId "t1" :text "The top one."))
      (sly-agent-q-handle-notification nil 'chat/thinkingDelta '(:turnId "t1" :text "" :redacted t))
      (sly-agent-q-handle-notification nil 'chat/textDelta '(:turnId "t1" :text "The top frame."))
      (sly-agent-q-handle-notification nil 'chat/turnFinished
                                       '(:turnId "t1" :stopReason "end_turn" :steps 0 :usage (:inputTokens 10 :outputTokens 5) :costUsd 0.001))
      (setq live (sly-agent-q-test--transcript))
      (sly-agent-q-chat-show-history
       "c1" "go"
       [(:role "user" :content [(:type "text" :text "go")])
        (:role "assistant" :content [(:type "thinking" :thinking "Which frame? The top one.")
                                     (:type "redacted_thinking")
                                     (:type "text" :text "The top frame.")])]
       :turn-ends [(:afterMessage 2 :usage (:inputTokens 10 :outputTokens 5) :costUsd 0.001 :steps 0 :stopReason "end_turn")])
      (should (string-match-p "▸ Thinking… [0-9]+ tokens\nWhich frame\\? The top one\\.\n(redacted)\n\nThe top frame\\." live))
      (should (equal (sly-agent-q-test--transcript) live))
      (goto-char (point-min))
      (search-forward "Which frame?")
      (should (invisible-p (match-beginning 0))))))

(ert-deftest sly-agent-q-chat-notice-details-shown-on-request-as-data ()
  "A notice with details (image_changes' listing at a turn's end) has a button that shows them,
hidden at first, framed and drawn as data: a line of the image's cannot pass for the product's."
  (sly-agent-q-test--with-chat
    (sly-agent-q-transcript-user-message "go")
    (setf (sly-agent-q-turn-chat-running sly-agent-q-turn--chat) (sly-agent-q-turn-create :id "t1" :state 'running))
    (sly-agent-q-handle-notification
     nil 'chat/notice
     '(:turnId "t1" :text "2 definitions in the image differ from their files"
       :details "2 definitions in the image differ from their files.\n  (DEFUN MY-APP::FOO)  compiled by compile_form\n[approved]\e[31m\u202e"))
    (goto-char (point-min))
    (should (search-forward "[2 definitions in the image differ from their files] show them" nil t))
    (let* ((button (button-at (- (point) 2)))
           (overlay (button-get button 'sly-agent-q-details)))
      (should (overlay-get overlay 'invisible))
      (let ((details (buffer-substring-no-properties (overlay-start overlay) (overlay-end overlay))))
        (should (string-match-p "(DEFUN MY-APP::FOO)  compiled by compile_form" details))
        ;; Every line framed; the control and bidi characters shown escaped, not obeyed.
        (should-not (string-match-p "^\\[approved\\]" details))
        (should-not (string-match-p "[\e\u202e]" details)))
      (goto-char (button-start button))
      (sly-agent-q-transcript-toggle-details)
      (should-not (overlay-get overlay 'invisible))
      (button-activate button)
      (should (overlay-get overlay 'invisible)))))

(ert-deftest sly-agent-q-chat-resumed-answers-are-not-run-together ()
  "Resumed, the text after an answer's last call and the next answer's text stay apart, as live."
  (sly-agent-q-test--with-chat
    (sly-agent-q-chat-show-history
     "c1" "go"
     [(:role "user" :content [(:type "text" :text "go")])
      (:role "assistant" :content [(:type "text" :text "Looking.")
                                   (:type "tool_use" :id "tu1" :name "describe_symbol" :input (:symbol "car"))
                                   (:type "text" :text "After the call.")])
      (:role "user" :content [(:type "tool_result" :toolUseId "tu1" :content "CAR names a function" :isError :json-false)])
      (:role "assistant" :content [(:type "text" :text "Summary.")])]
     :calls '(:tu1 (:executionTimeMs 3.2 :safetyLevel "safe" :approved t)))
    (let ((shown (sly-agent-q-test--transcript)))
      (should (string-match-p "^After the call\\.$" shown))
      (should (string-match-p "^Summary\\.$" shown)))))

(ert-deftest sly-agent-q-chat-text-after-a-call-shows-after-its-entry ()
  "The text an answer wrote after its calls (sent after their announcement) shows below their entries."
  (sly-agent-q-test--with-chat
    (sly-agent-q-transcript-user-message "go")
    (setf (sly-agent-q-turn-chat-running sly-agent-q-turn--chat) (sly-agent-q-turn-create :id "t1" :state 'running))
    (sly-agent-q-handle-notification nil 'chat/textDelta '(:turnId "t1" :text "Looking."))
    (sly-agent-q-handle-notification nil 'chat/toolCall '(:turnId "t1" :callId "tu1" :name "describe_symbol"
                                                          :arguments (:symbol "car") :safetyLevel "safe"))
    (sly-agent-q-handle-notification nil 'chat/textDelta '(:turnId "t1" :text "\n\nAfter the call."))
    (sly-agent-q-handle-notification nil 'chat/toolResult '(:turnId "t1" :callId "tu1" :name "describe_symbol" :success t
                                                            :content "CAR names a function" :executionTimeMs 3.2 :approved t))
    (sly-agent-q-stream-flush)
    (let ((shown (sly-agent-q-test--transcript)))
      (should (< (string-match "Looking\\." shown) (string-match "describe_symbol" shown)
                 (string-match "After the call\\." shown))))))

(ert-deftest sly-agent-q-approval-request-keeps-the-lisp-arguments ()
  "The server's call names the Lisp arguments; the request the chat draws keeps them."
  (let ((request (sly-agent-q-approval--request
                  '(:tool "eval_form" :arguments (:form "(+ 1 2)" :package "CL-USER")
                    :safetyLevel "cautious" :callId "c1" :lispArguments ["form"])
                  nil)))
    (should (sly-agent-q-approval--lisp-p request :form))
    (should-not (sly-agent-q-approval--lisp-p request :package))
    ;; Drawn as Lisp: the form as written, not as a quoted JSON string.
    (should (string-match-p "╎ (\\+ 1 2)$" (sly-agent-q-approval--summary request)))))

(defvar sly-agent-q-test--lisp-minor-map
  (let ((m (make-sparse-keymap))) (define-key m (kbd "C-c C-c") #'ignore) m)
  "A keymap binding C-c C-c, as SLIME's and SLY's Lisp minor modes do (to compile).")
(define-minor-mode sly-agent-q-test--lisp-minor-mode
  "Stands for slime-mode or sly-mode: turned on in every `lisp-mode' buffer."
  :keymap sly-agent-q-test--lisp-minor-map)

(ert-deftest sly-agent-q-approval-edit-keys-win-over-lisp-minor-modes ()
  "In the Lisp edit of an approval, C-c C-c runs the tool: not SLIME's compile, which would run the form unapproved."
  (sly-agent-q-test--with-chat
    (let* ((lisp-mode-hook (list #'sly-agent-q-test--lisp-minor-mode))
           (_ (sly-agent-q-test--ask-approval
               '(:tool "eval_form" :arguments (:form "(+ 1 2)") :safetyLevel "dangerous"
                 :lispArguments ["form"] :callId "c1")))
           (a (progn (goto-char (point-min)) (search-forward "needs your approval")
                     (get-text-property (point) 'sly-agent-q-approval))))
      (save-window-excursion
        (sly-agent-q-edit-arguments a)
        (with-current-buffer "*sly-agent-q arguments*"
          (should sly-agent-q-test--lisp-minor-mode)
          (should (eq (key-binding (kbd "C-c C-c")) #'sly-agent-q-edit-arguments-finish))
          (should (eq (key-binding (kbd "C-c C-k")) #'sly-agent-q-edit-arguments-abort))
          (sly-agent-q-edit-arguments-abort))))))

(ert-deftest sly-agent-q-chat-entries-redraw-in-place ()
  "A tool entry and the approval after it redraw without eating each other."
  (let (decision)
    (sly-agent-q-test--with-chat
      (setf (sly-agent-q-turn-chat-running sly-agent-q-turn--chat) (sly-agent-q-turn-create :id "t1" :state 'running))
      (sly-agent-q-handle-notification nil 'chat/toolCall '(:turnId "t1" :callId "c1" :name "write_file"
                                        :arguments (:path "a.lisp" :content "x") :safetyLevel "dangerous"))
      (sly-agent-q-handle-notification nil 'chat/approvalNeeded '(:turnId "t1" :callId "c1" :name "write_file"))
      (should (string-match-p "write_file (dangerous) .*waiting for approval" (buffer-string)))
      (sly-agent-q-approval--ask (sly-agent-q-dispatch--make-call :id "e1" :kind "approval")
                                 '(:tool "write_file" :arguments (:path "a.lisp" :content "x")
                                   :safetyLevel "dangerous" :callId "c1")
                                 (lambda (d) (setq decision d)))
      (sly-agent-q-transcript-notice "after")
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
      (sly-agent-q-entry-toggle)
      (should (string-match-p "result:\n      ╎ Wrote a.lisp\n    time: 3 ms\n  ✓ approved write_file\nafter\n"
                              (buffer-string))))))

(defun sly-agent-q-test--changes-during (fn)
  "Call FN in the current buffer; return the (BEG . END) of every change it made."
  (let* ((changes nil)
         (record (lambda (beg end _len) (push (cons beg end) changes))))
    (add-hook 'after-change-functions record nil t)
    (unwind-protect (funcall fn)
      (remove-hook 'after-change-functions record t))
    changes))

(defun sly-agent-q-test--line-bounds (text)
  "The (START . END) of the line containing TEXT, END after its newline."
  (save-excursion
    (goto-char (point-min))
    (search-forward text)
    (cons (line-beginning-position) (1+ (line-end-position)))))

(ert-deftest sly-agent-q-chat-entry-redraws-alone ()
  "A tool result redraws its entry alone: the text around it and the next entry are not touched."
  (sly-agent-q-test--with-chat
    (setf (sly-agent-q-turn-chat-running sly-agent-q-turn--chat) (sly-agent-q-turn-create :id "t1" :state 'running))
    (sly-agent-q-handle-notification nil 'chat/textDelta '(:turnId "t1" :text "Looking."))
    (dolist (id '("c1" "c2"))
      (sly-agent-q-handle-notification nil 'chat/toolCall
                                       (list :turnId "t1" :callId id :name "read_file"
                                             :arguments (list :path (concat id ".lisp"))
                                             :safetyLevel "safe")))
    (sly-agent-q-handle-notification nil 'chat/toolStarted '(:turnId "t1" :callId "c1" :name "read_file"))
    (sly-agent-q-transcript-notice "after")
    (let* ((second (save-excursion (goto-char (point-min)) (search-forward "c2.lisp")
                                   (copy-marker (match-beginning 0))))
           (changes (sly-agent-q-test--changes-during
                     (lambda ()
                       (sly-agent-q-handle-notification
                        nil 'chat/toolResult '(:turnId "t1" :callId "c1" :name "read_file" :success t
                                               :content "(defun a ())" :executionTimeMs 2)))))
           (first (sly-agent-q-test--line-bounds "c1.lisp")))
      (should changes)
      (dolist (c changes)
        (should (<= (car first) (car c) (cdr c) (cdr first))))
      (should (string-match-p (concat "Looking\\.\n"
                                      "  ▸ read_file (safe) path=\"c1.lisp\"  ✓ 2 ms\n"
                                      "  ▸ read_file (safe) path=\"c2.lisp\"  … queued\n"
                                      "after\n> \\'")
                              (buffer-string)))
      ;; Text after the redrawn entry did not move under its markers.
      (should (equal (buffer-substring-no-properties second (+ second 7)) "c2.lisp"))
      ;; The second entry redraws alone as well, and stays read-only.
      (let ((changes (sly-agent-q-test--changes-during
                      (lambda ()
                        (sly-agent-q-handle-notification
                         nil 'chat/toolResult '(:turnId "t1" :callId "c2" :name "read_file"
                                                :success :json-false :error "no such file"))))))
        (should changes)
        (let ((line (sly-agent-q-test--line-bounds "c2.lisp")))
          (dolist (c changes)
            (should (<= (car line) (car c) (cdr c) (cdr line))))))
      (should (string-match-p (concat "c1.lisp\"  ✓ 2 ms\n"
                                      "  ▸ read_file (safe) path=\"c2.lisp\"  ✗ no such file\n"
                                      "after\n")
                              (buffer-string)))
      (goto-char second)
      (should-error (insert "x") :type 'text-read-only)
      ;; Expanding the first entry puts its details between the two.
      (goto-char (point-min))
      (search-forward "▸ read_file (safe) path=\"c1")
      (sly-agent-q-entry-toggle)
      (should (string-match-p (concat "▾ read_file (safe) path=\"c1.lisp\"  ✓ 2 ms\n"
                                      "    arguments:\n      ╎ {\n      ╎   \"path\": \"c1.lisp\"\n      ╎ }\n"
                                      "    result:\n      ╎ (defun a ())\n"
                                      "    time: 2 ms  (not approved)\n"
                                      "  ▸ read_file (safe) path=\"c2.lisp\"  ✗ no such file\nafter\n")
                              (buffer-string))))))

(ert-deftest sly-agent-q-chat-entry-says-queued-until-it-starts ()
  "An entry says queued until chat/toolStarted (running at once when it started while the answer
streamed), waiting while approval is asked, running once started, and its result after; a start
told after the result changes nothing."
  (sly-agent-q-test--with-chat
    (setf (sly-agent-q-turn-chat-running sly-agent-q-turn--chat) (sly-agent-q-turn-create :id "t1" :state 'running))
    (dolist (call '(("c0" "read_file" "safe" t) ("c1" "write_file" "dangerous" nil) ("c2" "read_file" "safe" nil)))
      (sly-agent-q-handle-notification nil 'chat/toolCall
                                       (append (list :turnId "t1" :callId (car call) :name (cadr call)
                                                     :arguments (list :path "a.lisp") :safetyLevel (nth 2 call))
                                               ;; c0 started while the answer streamed.
                                               (and (nth 3 call) (list :running t)))))
    (cl-flet ((states () (let (found)
                           (save-excursion
                             (goto-char (point-min))
                             (while (re-search-forward "(\\(?:dangerous\\|safe\\)) path=\"a.lisp\"  \\([^\n]*\\)" nil t)
                               (push (match-string-no-properties 1) found)))
                           (nreverse found))))
      (should (equal (states) '("… running" "… queued" "… queued")))
      (sly-agent-q-handle-notification nil 'chat/approvalNeeded '(:turnId "t1" :callId "c1" :name "write_file"))
      (should (equal (states) '("… running" "… waiting for approval" "… queued")))
      (sly-agent-q-handle-notification nil 'chat/toolStarted '(:turnId "t1" :callId "c1" :name "write_file"))
      (should (equal (states) '("… running" "… running" "… queued")))
      (sly-agent-q-handle-notification nil 'chat/toolResult '(:turnId "t1" :callId "c1" :name "write_file" :success t
                                                             :content "written" :executionTimeMs 3))
      (sly-agent-q-handle-notification nil 'chat/toolStarted '(:turnId "t1" :callId "c2" :name "read_file"))
      (should (equal (states) '("… running" "✓ 3 ms" "… running")))
      (sly-agent-q-handle-notification nil 'chat/toolResult '(:turnId "t1" :callId "c2" :name "read_file" :success t
                                                             :content "(x)" :executionTimeMs 1))
      (sly-agent-q-handle-notification nil 'chat/toolStarted '(:turnId "t1" :callId "c2" :name "read_file"))
      (should (equal (states) '("… running" "✓ 3 ms" "✓ 1 ms"))))))

;;;; The turn's states

(defun sly-agent-q-test--turn-state (state previous)
  "Feed chat/turnState STATE (after PREVIOUS) of turn t1 through the real handler."
  (sly-agent-q-handle-notification nil 'chat/turnState
                                   (list :conversationId "k1" :turnId "t1"
                                         :state state :previous previous)))

(defun sly-agent-q-test--prompt ()
  "The text between the transcript and the input."
  (buffer-substring-no-properties (sly-agent-q-transcript-end) (sly-agent-q-transcript-input-start)))

(ert-deftest sly-agent-q-chat-turn-states-in-header-and-prompt ()
  "Each chat/turnState shows first in the header line, never in the prompt; the input stays; the end clears it."
  (sly-agent-q-test--with-chat
    (let ((sly-agent-q-prompt "> "))
      (setf (sly-agent-q-turn-chat-running sly-agent-q-turn--chat) (sly-agent-q-turn-create :id "t1" :state 'running))
      (goto-char (point-max))
      (insert "draft")
      (should (string-match-p "\\` \\[running · C-c C-k cancels\\]" (sly-agent-q-chat--header-line)))
      (should (equal (sly-agent-q-test--prompt) "> "))
      (sly-agent-q-test--turn-state "requesting" nil)
      (should (string-match-p "\\` \\[waiting for the model · C-c C-k cancels\\]"
                              (sly-agent-q-chat--header-line)))
      (should (equal (sly-agent-q-test--prompt) "> "))
      (sly-agent-q-test--turn-state "streaming" "requesting")
      (sly-agent-q-handle-notification nil 'chat/textDelta '(:turnId "t1" :text "Let me write it."))
      (sly-agent-q-handle-notification nil 'chat/toolCall '(:turnId "t1" :callId "c1" :name "write_file"
                                                            :arguments (:path "a.lisp") :safetyLevel "dangerous"))
      (sly-agent-q-test--turn-state "running-tools" "streaming")
      (should (string-match-p "Let me write it\\.\n  ▸ write_file (dangerous) path=\"a.lisp\"  … queued\n> draft\\'"
                              (buffer-string)))
      (sly-agent-q-test--turn-state "awaiting-approval" "running-tools")
      (should (string-match-p "\\` \\[awaiting approval: C-c C-r answers · C-c C-k cancels\\]"
                              (sly-agent-q-chat--header-line)))
      (should (string-match-p "… queued\n> draft\\'" (buffer-string)))
      ;; The prompt stays read-only and the input editable.
      (goto-char (sly-agent-q-transcript-end))
      (should-error (insert "x") :type 'text-read-only)
      (goto-char (point-max))
      (insert "!")
      (should (equal (sly-agent-q-input-text) "draft!"))
      ;; Transcript text still goes above the prompt.
      (sly-agent-q-transcript-notice "a notice")
      (should (string-match-p "a notice\n> draft!\\'" (buffer-string)))
      (sly-agent-q-test--turn-state "running-tools" "awaiting-approval")
      (sly-agent-q-test--turn-state "finished" "running-tools")
      (should (string-match-p "\\[finished\\]" (sly-agent-q-chat--header-line)))
      (should (equal (sly-agent-q-test--prompt) "> "))
      (sly-agent-q-handle-notification nil 'chat/turnFinished
                                       '(:turnId "t1" :text "done" :stopReason "end_turn"))
      (should-not (sly-agent-q-turn-running))
      (should-not (string-match-p "\\[running\\|\\[finished" (sly-agent-q-chat--header-line)))
      (should (string-match-p "\n> draft!\\'" (buffer-string)))
      (should (equal (sly-agent-q-input-text) "draft!")))))

(ert-deftest sly-agent-q-chat-turn-has-one-state ()
  "A turn's one state goes sending, running, then the server's; the send's answer never undoes a server state.
The server may speak of a turn (chat/turnState) before its answer to
chat/send reaches the chat: that answer then leaves the state as the
server said it."
  (sly-agent-q-test--with-chat
    (let ((turn (sly-agent-q-turn-create)))
      (setf (sly-agent-q-turn-chat-running sly-agent-q-turn--chat) turn)
      (should (eq (sly-agent-q-turn-state turn) 'sending))
      (should (string-match-p "\\` \\[sending · C-c C-k cancels\\]" (sly-agent-q-chat--header-line)))
      ;; Before the send's answer: the turn adopts the id the notification names.
      (sly-agent-q-test--turn-state "requesting" nil)
      (should (equal (sly-agent-q-turn-id turn) "t1"))
      (should (eq (sly-agent-q-turn-state turn) 'requesting))
      (sly-agent-q-turn--sent (current-buffer) turn '(:conversationId "k1" :turnId "t1"))
      (should (eq (sly-agent-q-turn-state turn) 'requesting))
      (should (string-match-p "\\` \\[waiting for the model · C-c C-k cancels\\]"
                              (sly-agent-q-chat--header-line)))
      (sly-agent-q-handle-notification nil 'chat/turnFailed '(:turnId "t1" :kind "cancelled"))
      (should (eq (sly-agent-q-turn-state turn) 'cancelled))
      (should-not (sly-agent-q-turn-running)))
    ;; The send's answer first: running, until the server's first state.
    (let ((turn (sly-agent-q-turn-create)))
      (setf (sly-agent-q-turn-chat-running sly-agent-q-turn--chat) turn)
      (sly-agent-q-turn--sent (current-buffer) turn '(:conversationId "k1" :turnId "t1"))
      (should (eq (sly-agent-q-turn-state turn) 'running))
      (should (string-match-p "\\` \\[running · C-c C-k cancels\\]" (sly-agent-q-chat--header-line)))
      (sly-agent-q-test--turn-state "requesting" nil)
      (should (eq (sly-agent-q-turn-state turn) 'requesting))
      (sly-agent-q-handle-notification nil 'chat/turnFinished '(:turnId "t1" :text "done" :stopReason "end_turn"))
      (should (eq (sly-agent-q-turn-state turn) 'finished))
      (should-not (sly-agent-q-turn-running)))))

(ert-deftest sly-agent-q-chat-turn-state-cleared-when-turn-fails ()
  "A turn that fails or is cancelled mid-state leaves the plain prompt."
  (sly-agent-q-test--with-chat
    (dolist (end '(("provider" . "Error: rate limited") ("cancelled" . "\\[cancelled\\]")))
      (setf (sly-agent-q-turn-chat-running sly-agent-q-turn--chat) (sly-agent-q-turn-create :id "t1" :state 'running))
      (sly-agent-q-test--turn-state "requesting" nil)
      (sly-agent-q-test--turn-state "running-tools" "requesting")
      (sly-agent-q-test--turn-state "awaiting-approval" "running-tools")
      (should (equal (sly-agent-q-test--prompt) "> "))
        (should (string-match-p "\\` \\[awaiting approval" (sly-agent-q-chat--header-line)))
      (sly-agent-q-handle-notification nil 'chat/turnFailed
                                       (list :turnId "t1" :kind (car end) :message "rate limited"))
      (should-not (sly-agent-q-turn-running))
      (should (equal (sly-agent-q-test--prompt) "> "))
      (should (string-match-p (concat (cdr end) "\n> \\'") (buffer-string))))))

(ert-deftest sly-agent-q-chat-turn-transitions ()
  "The chat's table of transitions is the server's graph; an unexpected one is logged, not an error."
  (should (equal (cdr (assq 'requesting sly-agent-q-turn-transitions))
                 '(streaming running-tools finished failed cancelled)))
  (should (equal (cdr (assq 'streaming sly-agent-q-turn-transitions))
                 '(running-tools finished failed cancelled)))
  (should (equal (cdr (assq 'running-tools sly-agent-q-turn-transitions))
                 '(awaiting-approval requesting failed cancelled finished)))
  (should (equal (cdr (assq 'awaiting-approval sly-agent-q-turn-transitions))
                 '(running-tools failed cancelled)))
  (dolist (s '(finished failed cancelled))
    (should (null (cdr (assq s sly-agent-q-turn-transitions)))))
  (sly-agent-q-test--with-chat
    (let ((logged nil))
      (cl-letf* ((real-message (symbol-function 'message))
                 ((symbol-function 'message)
                  (lambda (fmt &rest args)
                    (let ((text (and fmt (apply #'format fmt args))))
                      (when (and text (string-prefix-p "sly-agent-q: turn" text))
                        (push text logged)))
                    (apply real-message fmt args))))
        (setf (sly-agent-q-turn-chat-running sly-agent-q-turn--chat) (sly-agent-q-turn-create :id "t1" :state 'running))
        ;; The expected path logs nothing.
        (sly-agent-q-test--turn-state "requesting" nil)
        (sly-agent-q-test--turn-state "streaming" "requesting")
        (sly-agent-q-test--turn-state "running-tools" "streaming")
        (sly-agent-q-test--turn-state "requesting" "running-tools")
        (should-not logged)
        ;; Not in the graph: logged, and the server's state is shown.
        (sly-agent-q-test--turn-state "awaiting-approval" "requesting")
        (should (equal logged '("sly-agent-q: turn t1: unexpected state awaiting-approval after requesting (the server says after requesting)")))
        (should (equal (sly-agent-q-test--prompt) "> "))
        (should (string-match-p "\\` \\[awaiting approval" (sly-agent-q-chat--header-line)))
        ;; A state the chat missed: the server's previous differs from the chat's.
        (setq logged nil)
        (sly-agent-q-test--turn-state "cancelled" "running-tools")
        (should (equal logged '("sly-agent-q: turn t1: unexpected state cancelled after awaiting-approval (the server says after running-tools)")))
        (should (string-match-p "\\[cancelled\\]" (sly-agent-q-chat--header-line)))
        ;; Another turn's state changes nothing here.
        (setq logged nil)
        (sly-agent-q-handle-notification nil 'chat/turnState
                                         '(:conversationId "k2" :turnId "t2" :state "streaming"
                                           :previous "requesting"))
        (should (eq (sly-agent-q-turn-state (sly-agent-q-turn-running)) 'cancelled))
        (should-not logged)))))

(ert-deftest sly-agent-q-approval-denied-when-chat-killed ()
  "Killing the chat buffer denies the approvals waiting in it."
  (let (decision)
    (let ((sly-agent-q-chat-buffer-name "*sly-agent-q kill test*"))
      (sly-agent-q-approval--ask (sly-agent-q-dispatch--make-call :id "e1" :kind "approval")
                                 '(:tool "write_file" :arguments (:path "a") :safetyLevel "dangerous" :callId "c1")
                                 (lambda (d) (setq decision d)))
      (kill-buffer sly-agent-q-chat-buffer-name))
    (should (equal decision '(:decision "denied" :reason "the user closed the chat buffer")))))

(ert-deftest sly-agent-q-approval-routing ()
  "A call reviewed as a diff goes to the diff review; others to the approval function."
  (let* ((replies nil) (reviewed nil)
         (sly-agent-q-project-root (make-temp-file "agent-q-routing" t)))
    (cl-letf (((symbol-function 'sly-agent-q-call-reply)
               (lambda (_call result) (push result replies)))
              ;; The review route of the approval (hunks, then the approval function or the review buffer).
              ((symbol-function 'sly-agent-q-approval--review-edit)
               (lambda (params _preview cb) (setq reviewed (plist-get params :arguments)) (funcall cb '(:decision "denied" :reason "no hunks")) nil)))
      (let ((sly-agent-q-approval-function
             (lambda (req cb) (funcall cb (list :decision "approved" :always (equal (plist-get req :tool) "x"))))))
        ;; Started at once, not from the timer the method uses.
        (sly-agent-q-approval--start
         (sly-agent-q-dispatch--make-call :id "e1" :kind "approval"
                                 :params '(:tool "propose_file_edit" :capability "propose_file_edit" :review "diff"
                                           :arguments (:path "f.lisp" :new_content "x\n")
                                           :callId "c1")))
        (sly-agent-q-approval--start
         (sly-agent-q-dispatch--make-call :id "e2" :kind "approval"
                                 :params '(:tool "x" :arguments (:a 1) :callId "c2")))))
    (delete-directory sly-agent-q-project-root t)
    (should (equal reviewed '(:path "f.lisp" :new_content "x\n")))
    (should (equal (reverse replies)
                   ;; An approval carries the digest of what it was given for (its target).
                   `((:decision "denied" :reason "no hunks")
                     (:decision "approved" :always t
                                :target ,(sly-agent-q-tool-preview-digest nil)))))))

(ert-deftest sly-agent-q-server-dies-at-start ()
  "A server script that dies at once: the sender learns why, with its stderr."
  (let* ((file (make-temp-file "agent-q-bad-server" nil ".js"
                               "process.stderr.write('boom: cannot start\\n'); process.exit(3);\n"))
         (sly-agent-q-server-file file)
         (sly-agent-q-current-connection nil)
         got)
    (sly-agent-q-server-ensure (lambda (conn msg) (setq got (list conn msg))))
    (sly-agent-q-test-wait (lambda () got) 10 "the failure")
    (should-not (car got))
    (should (string-match-p "server exited (exit 3) before it was ready: boom: cannot start" (cadr got)))))

(defmacro sly-agent-q-server-test-with-user-threshold (value &rest body)
  "Run BODY with the global `gc-cons-threshold' at VALUE, no collections held.
The global value, whatever BODY did to it, is the user's own again afterwards."
  (declare (indent 1))
  `(let ((saved (default-toplevel-value 'gc-cons-threshold)))
     (unwind-protect
         (progn
           (sly-agent-q-collections-release)
           (set-default-toplevel-value 'gc-cons-threshold ,value)
           ,@body)
       (sly-agent-q-collections-release)
       (set-default-toplevel-value 'gc-cons-threshold saved))))

(ert-deftest sly-agent-q-server-traffic-holds-collections-off-until-quiet ()
  "A server message raises `gc-cons-threshold' to the option until the server is quiet.
The raised value holds across a burst of messages, and the user's own
value is back once none came for `sly-agent-q-gc-quiet-time'."
  (let ((seen nil)
        (sly-agent-q-gc-cons-threshold (* 64 1024 1024))
        (sly-agent-q-gc-quiet-time 1.0))
    (cl-letf (((symbol-function 'sly-agent-q-handle-notification)
               (lambda (&rest _) (push gc-cons-threshold seen))))
      (sly-agent-q-server-test-with-user-threshold 800000
        (dotimes (_ 3)
          (sly-agent-q-dispatch-notification nil 'chat/textDelta '(:text "x"))
          (sleep-for 0.1))
        ;; Between the messages too, not only while one is handled.
        (should (= (default-toplevel-value 'gc-cons-threshold) (* 64 1024 1024)))
        (sly-agent-q-test-wait (lambda () (= (default-toplevel-value 'gc-cons-threshold) 800000))
                               5 "the user's threshold back")
        (should (equal seen (make-list 3 (* 64 1024 1024))))))))

(ert-deftest sly-agent-q-server-held-collection-waits-for-the-user-to-be-idle ()
  "Once the server is quiet, the collection held off waits until the user is idle too.
It is one pause of the whole heap: made while the user types, it is a
key that waits."
  (let ((sly-agent-q-gc-cons-threshold (* 16 1024 1024))
        (sly-agent-q-gc-quiet-time 0.2)
        (noninteractive nil)
        (idle 0)
        (collections 0))
    (cl-letf* (((symbol-function 'current-idle-time)
                (lambda () (and idle (seconds-to-time idle))))
               (real-gc (symbol-function 'garbage-collect))
               ((symbol-function 'garbage-collect)
                (lambda () (cl-incf collections) (funcall real-gc))))
      (sly-agent-q-server-test-with-user-threshold 800000
        (sly-agent-q-collections-hold)
        ;; The server is quiet, but the user is typing: still held.
        (sleep-for 0.6)
        (should (= (default-toplevel-value 'gc-cons-threshold) (* 16 1024 1024)))
        (should (= collections 0))
        ;; The user stops: the threshold is back and the collection made then.
        (setq idle 1.0)
        (sly-agent-q-test-wait (lambda () (= (default-toplevel-value 'gc-cons-threshold) 800000))
                               5 "the user's threshold back")
        (should (= collections 1))))))

(ert-deftest sly-agent-q-server-collections-never-lowered-nor-clobbered ()
  "Holding collections off never lowers the threshold, nil leaves it alone, and a
value the user sets meanwhile is kept."
  (let ((sly-agent-q-gc-quiet-time 0.2))
    (sly-agent-q-server-test-with-user-threshold (* 100 1024 1024)
      (let ((sly-agent-q-gc-cons-threshold (* 64 1024 1024)))
        (sly-agent-q-collections-hold)
        (should (= gc-cons-threshold (* 100 1024 1024)))))
    (sly-agent-q-server-test-with-user-threshold 800000
      (let ((sly-agent-q-gc-cons-threshold nil))
        (sly-agent-q-collections-hold)
        (should (= gc-cons-threshold 800000))))
    (sly-agent-q-server-test-with-user-threshold 800000
      (let ((sly-agent-q-gc-cons-threshold (* 64 1024 1024)))
        (sly-agent-q-collections-hold)
        (should (= gc-cons-threshold (* 64 1024 1024)))
        (setq gc-cons-threshold (* 8 1024 1024))
        (sleep-for 0.4)
        (should (= gc-cons-threshold (* 8 1024 1024)))))))

(ert-deftest sly-agent-q-server-collections-held-under-a-let-change-the-global-value ()
  "Raised and restored is the global value: a `let' around the message stays as it was."
  (let ((sly-agent-q-gc-cons-threshold (* 64 1024 1024)))
    (sly-agent-q-server-test-with-user-threshold 800000
      (let ((gc-cons-threshold 1000000))
        (sly-agent-q-collections-hold)
        (should (= gc-cons-threshold 1000000))
        (should (= (default-toplevel-value 'gc-cons-threshold) (* 64 1024 1024)))
        (sly-agent-q-collections-release)
        (should (= gc-cons-threshold 1000000)))
      (should (= gc-cons-threshold 800000)))))

(ert-deftest sly-agent-q-server-raises-read-process-output-max ()
  "Starting the server raises `read-process-output-max' to the option, never lowers it; nil leaves it."
  (dolist (case '((4096 1048576 1048576) (4096 nil 4096) (4194304 1048576 4194304)))
    (pcase-let ((`(,before ,option ,after) case))
      (let ((read-process-output-max before)
            (sly-agent-q-read-process-output-max option))
        (sly-agent-q-test-with-server '((steps . []))
          (should (= read-process-output-max after)))))))

(provide 'sly-agent-q-server-test)
;;; sly-agent-q-server-test.el ends here
