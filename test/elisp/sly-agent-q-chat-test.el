;;; sly-agent-q-chat-test.el --- Chat, approvals, cancel and crashes against the real server  -*- lexical-binding: t; -*-

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

;; Every test here runs the real bundled server (dist/sly-agent-q-server.js)
;; spawned by the package's own connection code, and the scripted mock LLM.

;;; Code:

(require 'sly-agent-q-test-helper
         (expand-file-name "sly-agent-q-test-helper"
                           (file-name-directory (or load-file-name buffer-file-name))))
;; The approvals drawn are found the way a user scanning the buffer would.
(require 'text-property-search)

(defun sly-agent-q-test--text (text &rest more)
  "A text content block of TEXT (and MORE concatenated)."
  `((type . "text") (text . ,(apply #'concat text more))))

(defun sly-agent-q-test--tool (name input)
  "A tool_use content block calling NAME with INPUT (an alist)."
  `((type . "tool_use") (name . ,name) (input . ,(or input (make-hash-table)))))

(defun sly-agent-q-test--step (&rest content)
  "A script step answering with CONTENT."
  `((content . ,(vconcat content))))

(defun sly-agent-q-test--script (&rest steps)
  "A mock script of STEPS."
  `((steps . ,(vconcat steps))))

;; The public names the chat's split into files renamed (issue 46): a
;; user's init or key binding may name them.
(defconst sly-agent-q-chat-test--renamed
  '((sly-agent-q-chat-toggle-entry . sly-agent-q-entry-toggle)
    (sly-agent-q-chat-open-entry . sly-agent-q-entry-open)
    (sly-agent-q-chat-toggle-details . sly-agent-q-transcript-toggle-details)
    (sly-agent-q-chat-toggle-thinking . sly-agent-q-stream-toggle-thinking)
    (sly-agent-q-chat-notice . sly-agent-q-transcript-notice)
    (sly-agent-q-chat-error-notice . sly-agent-q-transcript-error-notice)
    (sly-agent-q-chat-compacted-notice . sly-agent-q-transcript-compacted-notice)
    (sly-agent-q-chat-repaired-notice . sly-agent-q-transcript-repaired-notice)
    (sly-agent-q-chat-entry . sly-agent-q-entry-of)
    (sly-agent-q-chat-insert . sly-agent-q-transcript-insert)
    (sly-agent-q-chat-insert-section . sly-agent-q-transcript-insert-section)
    (sly-agent-q-chat-redraw-section . sly-agent-q-transcript-redraw-section)
    (sly-agent-q-chat-json . sly-agent-q-entry-json))
  "Old function name to new.")

(defconst sly-agent-q-chat-test--renamed-variables
  '((sly-agent-q-chat-entry-map . sly-agent-q-entry-map)
    (sly-agent-q-chat-details-map . sly-agent-q-transcript-details-map)
    (sly-agent-q-chat-thinking-map . sly-agent-q-stream-thinking-map)
    (sly-agent-q-chat-entry-note-functions . sly-agent-q-entry-note-functions)
    (sly-agent-q-chat-matching-input-history . sly-agent-q-input-matching-history)
    (sly-agent-q-chat-turn-transitions . sly-agent-q-turn-transitions))
  "Old variable name to new.")

(ert-deftest sly-agent-q-chat-old-names-still-work ()
  "The chat's public names renamed by its split are obsolete aliases of the new ones.
A user's binding of `sly-agent-q-chat-open-entry' in
`sly-agent-q-chat-entry-map' and a hook added to
`sly-agent-q-chat-entry-note-functions' keep working."
  (pcase-dolist (`(,old . ,new) sly-agent-q-chat-test--renamed)
    (should (fboundp new))
    (should (eq (indirect-function old) (indirect-function new)))
    (should (get old 'byte-obsolete-info))
    (should (eq (commandp old) (commandp new))))
  (pcase-dolist (`(,old . ,new) sly-agent-q-chat-test--renamed-variables)
    (should (boundp new))
    (should (eq (indirect-variable old) new))
    (should (get old 'byte-obsolete-variable)))
  (should (eq (symbol-value 'sly-agent-q-chat-entry-map) sly-agent-q-entry-map)))

(ert-deftest sly-agent-q-chat-streams-and-runs-a-tool ()
  "A turn streams text, runs a tool in Emacs and finishes with the final text."
  (let* ((tools (fboundp 'sly-agent-q-tool-call-run))
         (tool (if tools "current_directory" "describe_symbol"))
         (root (make-temp-file "agent-q-root" t))
         (sly-agent-q-project-root root))
    (sly-agent-q-test-with-server
        (sly-agent-q-test--script
         (append (sly-agent-q-test--step
                  (sly-agent-q-test--text "Let me look at the project. ")
                  (sly-agent-q-test--tool tool (if tools nil '((symbol . "process-data")))))
                 '((stop_reason . "tool_use") (chunk_delay_ms . 5)))
         (append (sly-agent-q-test--step
                  (sly-agent-q-test--text "The answer: {{last_tool_result}}\n```lisp\n(defun foo (x) \"doc\" x)\n```\n"))
                 '((chunk_delay_ms . 5))))
      (let ((outcome (sly-agent-q-test-send "Where am I?")))
        (should (eq (plist-get outcome :status) 'finished))
        (should (string-match-p "The answer:" (plist-get outcome :text)))
        (let ((chat (sly-agent-q-test-chat-text)))
          (should (string-match-p "You: Where am I\\?" chat))
          (should (string-match-p "Let me look at the project\\." chat))
          (should (string-match-p (concat "▸ " tool " (safe)") chat))
          (if tools
              (progn (should (string-match-p "✓ [0-9]+ ms" chat))
                     (should (string-match-p (regexp-quote (file-name-nondirectory root)) chat)))
            (should (string-match-p "No Lisp is connected" chat))))
        (with-current-buffer (sly-agent-q-chat-buffer)
          ;; The code block is fontified as Lisp.
          (goto-char (point-min))
          (should (search-forward "defun" nil t))
          (should (eq (car (get-text-property (match-beginning 0) 'face)) 'font-lock-keyword-face))
          ;; The header line shows the model, tokens and cost.
          (let ((header (sly-agent-q-chat--header-line)))
            (should (string-match-p "claude-sonnet-4-5" header))
            (should (string-match-p "tokens [0-9,]+ in / [0-9,]+ out" header))
            (should (string-match-p "\\$[0-9.]+" header)))
          ;; The tool entry expands with TAB.
          (goto-char (point-min))
          (search-forward (concat "▸ " tool))
          (let ((entry (get-text-property (point) 'sly-agent-q-entry)))
            (should entry)
            (funcall (lookup-key (get-text-property (point) 'keymap) (kbd "TAB")))
            (should (sly-agent-q-entry-expanded entry))
            (should (string-match-p "arguments:" (sly-agent-q-test-chat-text)))
            (should (string-match-p (if tools "result:" "error:") (sly-agent-q-test-chat-text)))))))))

(ert-deftest sly-agent-q-chat-shows-thinking-folded ()
  "The model's reasoning streams into a folded section above its answer; TAB opens it."
  (sly-agent-q-test-with-server
      (sly-agent-q-test--script
       (sly-agent-q-test--step '((type . "thinking") (thinking . "Which frame first? The \e[31mtop\e[0m one."))
                               '((type . "redacted_thinking"))
                               (sly-agent-q-test--text "The top frame.")))
    (let ((outcome (sly-agent-q-test-send "Which frame?")))
      (should (eq (plist-get outcome :status) 'finished))
      (with-current-buffer (sly-agent-q-chat-buffer)
        (goto-char (point-min))
        (should (re-search-forward "▸ Thinking… \\([0-9]+\\) tokens" nil t))
        (let ((header (match-beginning 0))
              (tokens (string-to-number (match-string 1)))
              (overlay (button-get (button-at (match-beginning 0)) 'sly-agent-q-thinking)))
          ;; The count is the reasoning's (about four characters a token), however the header changed.
          (should (= tokens (/ (+ (- (overlay-end overlay) (overlay-start overlay)) 3) 4)))
          (should (> tokens 8))
          ;; Folded: the reasoning is there, hidden, drawn as data (the escape is shown, not obeyed).
          (should (search-forward "Which frame first?" nil t))
          (should (invisible-p (match-beginning 0)))
          ;; Folded, no frame: the line the hidden text starts would draw it before
          ;; whatever follows (the answer, framed as outside text on the screen).
          (should-not (overlay-get overlay 'line-prefix))
          (should-not (overlay-get overlay 'wrap-prefix))
          (should (search-forward "(redacted)" nil t))
          (should-not (string-match-p "\e" (buffer-substring-no-properties header (point))))
          ;; Above the answer it leads to, which is shown.
          (should (search-forward "The top frame." nil t))
          (should-not (invisible-p (match-beginning 0)))
          (goto-char header)
          (funcall (lookup-key (get-text-property (point) 'keymap) (kbd "TAB")))
          (goto-char (point-min))
          (should (search-forward "▾ Thinking… " nil t))
          (should (search-forward "Which frame first?" nil t))
          (should-not (invisible-p (match-beginning 0)))
          ;; Each of its lines is drawn after the frame of text from outside, as an
          ;; argument's value is: on a terminal without colours it cannot pass for chat.
          (dolist (pos (list (match-beginning 0) (progn (search-forward "(redacted)") (match-beginning 0))))
            (should (equal (substring-no-properties (or (get-char-property pos 'line-prefix) ""))
                           sly-agent-q-display-outside-frame))
            (should (equal (substring-no-properties (or (get-char-property pos 'wrap-prefix) ""))
                           sly-agent-q-display-outside-frame)))
          ;; The answer after it is not framed.
          (search-forward "The top frame.")
          (should-not (get-char-property (match-beginning 0) 'line-prefix)))))))

(defun sly-agent-q-test--write-script (path content)
  "A script: write CONTENT to PATH, then report the tool result."
  (sly-agent-q-test--script
   (sly-agent-q-test--step (sly-agent-q-test--text "Writing it.")
                           (sly-agent-q-test--tool "write_file" `((path . ,path) (content . ,content))))
   (sly-agent-q-test--step (sly-agent-q-test--text "Result: {{last_tool_result}}"))))

(defmacro sly-agent-q-test--with-root (var &rest body)
  "Run BODY with VAR bound to a fresh project root, `sly-agent-q-project-root' too."
  (declare (indent 1))
  `(let* ((,var (file-name-as-directory (make-temp-file "agent-q-root" t)))
          (sly-agent-q-project-root ,var))
     (unless (fboundp 'sly-agent-q-tool-call-run)
       (ert-skip "sly-agent-q-tools.el is not there"))
     ,@body))

(ert-deftest sly-agent-q-chat-approval-function-approves ()
  "An approval function approving write_file: the file is written."
  (sly-agent-q-test--with-root root
    (let (requests)
      (sly-agent-q-test-with-server (sly-agent-q-test--write-script "notes.txt" "hello")
        (let* ((sly-agent-q-approval-function
                (lambda (request callback)
                  (push request requests)
                  (funcall callback '(:decision "approved"))))
               (outcome (sly-agent-q-test-send "write it")))
          (should (eq (plist-get outcome :status) 'finished))
          (should (= 1 (length requests)))
          (let ((r (car requests)))
            (should (equal (plist-get r :tool) "write_file"))
            (should (equal (plist-get r :safetyLevel) "dangerous"))
            (should (stringp (plist-get r :callId)))
            (should (stringp (plist-get r :description)))
            (should (equal (plist-get (plist-get r :arguments) :content) "hello")))
          (should (equal (with-temp-buffer
                           (insert-file-contents (expand-file-name "notes.txt" root))
                           (buffer-string))
                         "hello")))))))

;; An approval is prepared from a timer, after the filter that read it:
;; the server's cancel may be read in that same filter, and a call it
;; cancelled is then never put to anyone.
(defun sly-agent-q-chat-test--approval-call (conn id)
  "Hand CONN's Emacs the approval call ID of a propose_file_edit, as the server sends it."
  (sly-agent-q-handle-notification
   conn 'emacs/call
   (list :id id :kind "approval"
         :params (list :callId id :tool "propose_file_edit" :capability "propose_file_edit"
                       :arguments '(:path "notes.txt" :new_content "hello"
                                    :description "Write notes.txt")
                       :review "diff" :safetyLevel "dangerous"
                       :description "Write notes.txt" :categories []
                       :reason '(:kind "level")))))

(defmacro sly-agent-q-chat-test--with-approvals (root asked conn call &rest body)
  "Run BODY with the real server, in a fresh project ROOT, answering approvals itself.
ASKED collects the path of each approval asked (each is denied), CONN
is the connection, CALL a function of an id handing Emacs that
approval call (`sly-agent-q-chat-test--approval-call')."
  (declare (indent 4))
  `(sly-agent-q-test--with-root ,root
     (sly-agent-q-test-with-server '((steps . []))
       (let* ((,asked nil)
              (sly-agent-q-approval-function
               (lambda (request callback)
                 (push (plist-get request :path) ,asked)
                 (funcall callback '(:decision "denied" :reason "test"))))
              (,conn sly-agent-q-current-connection)
              (,call (lambda (id) (sly-agent-q-chat-test--approval-call ,conn id))))
         ,@body))))

(ert-deftest sly-agent-q-chat-approval-cancelled-before-it-started ()
  "An approval cancelled in the batch that brought it is asked of no one."
  (sly-agent-q-chat-test--with-approvals root asked conn call
        ;; One call cancelled at once, as if both came in one read.
        (funcall call "cancelled-1")
        (sly-agent-q-handle-notification conn 'emacs/cancel '(:id "cancelled-1" :reason "turn cancelled"))
        ;; The other, left alone, shows the approval is asked at all.
        (funcall call "asked-2")
        (sly-agent-q-test-wait (lambda () asked) 10 "the second approval")
        (sly-agent-q-test-sleep 0.2)
        (should (= (length asked) 1))
        (should-not (sly-agent-q-call-pending "approval"))
        (should-not (file-exists-p (expand-file-name "notes.txt" root)))))

(ert-deftest sly-agent-q-chat-approval-resent-under-its-id-then-cancelled ()
  "An approval sent twice under one id, then cancelled, is asked of no one.
The second call under an id took the first's place in the calls
pending: the cancel reached the second only, and the first, prepared
after the read, was put to the user, where no cancel nor the server's
end could reach it again."
  (sly-agent-q-chat-test--with-approvals root asked conn call
        ;; As if all came in one read: the call, again under its id, its cancel.
        (funcall call "twice-1")
        (funcall call "twice-1")
        (sly-agent-q-handle-notification conn 'emacs/cancel '(:id "twice-1" :reason "turn cancelled"))
        ;; Another, left alone, shows the approvals are asked at all.
        (funcall call "asked-2")
        (sly-agent-q-test-wait (lambda () asked) 10 "the other approval")
        (sly-agent-q-test-sleep 0.2)
        (should (= (length asked) 1))
        (should-not (sly-agent-q-call-pending "approval"))))

(ert-deftest sly-agent-q-chat-approval-function-denies ()
  "A denial: nothing is written and the model learns the reason."
  (sly-agent-q-test--with-root root
    (sly-agent-q-test-with-server (sly-agent-q-test--write-script "notes.txt" "hello")
      (let* ((sly-agent-q-approval-function
              (lambda (_request callback)
                (run-with-timer 0.1 nil callback '(:decision "denied" :reason "not in this file"))))
             (outcome (sly-agent-q-test-send "write it")))
        (should (eq (plist-get outcome :status) 'finished))
        (should-not (file-exists-p (expand-file-name "notes.txt" root)))
        (should (string-match-p "not in this file" (plist-get outcome :text)))
        (should (string-match-p "✗ .*not in this file" (sly-agent-q-test-chat-text)))))))

(ert-deftest sly-agent-q-chat-denial-reads-as-sentences ()
  "What the model reads of a denial: the reason ends its sentence; no reason, no stand-in."
  (sly-agent-q-test--with-root root
    (dolist (case '(((:decision "denied" :reason "not in this file")
                     . "The user denied write_file: not in this file\\. It was not run\\.")
                    ((:decision "denied")
                     . "The user denied write_file\\. It was not run\\.")))
      (sly-agent-q-test-with-server (sly-agent-q-test--write-script "notes.txt" "hello")
        (let* ((sly-agent-q-approval-function
                (lambda (_request callback) (run-with-timer 0.1 nil callback (car case))))
               (outcome (sly-agent-q-test-send "write it")))
          (should (string-match-p (cdr case) (plist-get outcome :text)))
          (should-not (string-match-p "denied by the user" (plist-get outcome :text))))))))

(ert-deftest sly-agent-q-chat-approval-function-modifies ()
  "A modification: the tool runs with the new arguments."
  (sly-agent-q-test--with-root root
    (sly-agent-q-test-with-server (sly-agent-q-test--write-script "notes.txt" "hello")
      (let* ((sly-agent-q-approval-function
              (lambda (request callback)
                (let ((args (copy-sequence (plist-get request :arguments))))
                  (funcall callback (list :decision "modified"
                                          :arguments (plist-put args :content "bonjour"))))))
             (outcome (sly-agent-q-test-send "write it")))
        (should (eq (plist-get outcome :status) 'finished))
        (should (equal (with-temp-buffer
                         (insert-file-contents (expand-file-name "notes.txt" root))
                         (buffer-string))
                       "bonjour"))))))

(ert-deftest sly-agent-q-chat-approval-interactive ()
  "The inline approval: y approves, and a for always skips the next approval."
  (sly-agent-q-test--with-root root
    (sly-agent-q-test-with-server
        (sly-agent-q-test--script
         (sly-agent-q-test--step (sly-agent-q-test--tool "write_file" '((path . "a.txt") (content . "A"))))
         (sly-agent-q-test--step (sly-agent-q-test--tool "write_file" '((path . "b.txt") (content . "B"))))
         (sly-agent-q-test--step (sly-agent-q-test--tool "write_file" '((path . "c.txt") (content . "C"))))
         (sly-agent-q-test--step (sly-agent-q-test--text "All written.")))
      (let (outcome)
        (sly-agent-q-send "write three files" (lambda (p) (setq outcome p)))
        (with-current-buffer (sly-agent-q-chat-buffer)
          ;; First: y on the approval.
          (sly-agent-q-test-wait (lambda () (string-match-p "needs your approval" (sly-agent-q-test-chat-text)))
                                 10 "the first approval")
          (goto-char (point-min))
          (search-forward "needs your approval")
          (should (string-match-p "\\[Approve\\] \\[Deny\\] \\[Edit arguments\\] \\[Always allow write_file\\]"
                                  (sly-agent-q-test-chat-text)))
          (call-interactively (lookup-key (get-text-property (point) 'keymap) "y"))
          (sly-agent-q-test-wait (lambda () (file-exists-p (expand-file-name "a.txt" root))) 10 "a.txt")
          ;; Second: the Always button.
          (sly-agent-q-test-wait (lambda () (save-excursion
                                               (goto-char (point-min))
                                               (text-property-search-forward
                                                'sly-agent-q-approval nil
                                                (lambda (_ a) (and a (eq (sly-agent-q-approval-status a) 'pending))))))
                                 10 "the second approval")
          (goto-char (point-min))
          (search-forward "[Always allow write_file]")
          (push-button (1- (point)))
          ;; Third runs without asking.
          (sly-agent-q-test-wait (lambda () outcome) 15 "the turn to end")
          (should (eq (plist-get outcome :status) 'finished))
          (should (file-exists-p (expand-file-name "b.txt" root)))
          (should (file-exists-p (expand-file-name "c.txt" root)))
          (let ((text (sly-agent-q-test-chat-text)))
            (should (string-match-p "✓ approved write_file" text))
            (should (string-match-p "✓ approved (and from now on in this session) write_file" text))
            (should (= 2 (cl-count-if (lambda (l) (string-match-p "✓ approved" l))
                                      (split-string text "\n"))))))))))

(ert-deftest sly-agent-q-chat-cancel ()
  "C-c C-k during a hanging response ends the turn as cancelled."
  (sly-agent-q-test-with-server
      (sly-agent-q-test--script
       (append (sly-agent-q-test--step (sly-agent-q-test--text "Thinking very hard about this question"))
               '((chunk_delay_ms . 20) (hang_after_chunks . 5)))
       (sly-agent-q-test--step (sly-agent-q-test--text "Second answer.")))
    (let (outcome)
      (sly-agent-q-send "think" (lambda (p) (setq outcome p)))
      (sly-agent-q-test-wait (lambda () (string-match-p "Thinking" (sly-agent-q-test-chat-text))) 10 "streamed text")
      (should-not outcome)
      (with-current-buffer (sly-agent-q-chat-buffer)
        ;; The server's chat/turnState came before the text; the state comes first.
        (should (string-match-p "\\` \\[answering · C-c C-k cancels\\]" (sly-agent-q-chat--header-line)))
        (call-interactively (key-binding (kbd "C-c C-k"))))
      (sly-agent-q-test-wait (lambda () outcome) 10 "the cancellation")
      (should (eq (plist-get outcome :status) 'cancelled))
      (should (string-match-p "\\[cancelled\\]" (sly-agent-q-test-chat-text)))
      ;; The conversation goes on.
      (should (eq (plist-get (sly-agent-q-test-send "again") :status) 'finished))
      (should (string-match-p "Second answer\\." (sly-agent-q-test-chat-text))))))

(defun sly-agent-q-chat-test--cancel-while-stopped (first-step then)
  "Play FIRST-STEP, stop the server (SIGSTOP) once its text shows, press C-c C-k.
The chat must say the cancel was not sent.  Then call THEN with the
server's process and a function returning the turn's outcome (nil
while it runs); the server is let go on (SIGCONT) in the end whatever
happens.  The chat's periodic check of the turn is off throughout."
  (let ((sly-agent-q-turn-check-interval 3600)
        (proc nil))
    (sly-agent-q-test-with-server
        (sly-agent-q-test--script first-step (sly-agent-q-test--step (sly-agent-q-test--text "Second answer.")))
      (unwind-protect
          (let (outcome)
            (sly-agent-q-send "think" (lambda (p) (setq outcome p)))
            (sly-agent-q-test-wait (lambda () (string-match-p "Thinking" (sly-agent-q-test-chat-text))) 10 "streamed text")
            (setq proc (jsonrpc--process (sly-agent-q-connection-current)))
            (signal-process proc 'STOP)
            (sly-agent-q-test-wait (lambda () (eq (process-status proc) 'stop)) 5 "the stopped server")
            (with-current-buffer (sly-agent-q-chat-buffer)
              (call-interactively (key-binding (kbd "C-c C-k"))))
            (should (string-match-p "cancel could not be sent ([^\n]*); it is sent again" (sly-agent-q-test-chat-text)))
            (funcall then proc (lambda () outcome)))
        (when (process-live-p proc) (signal-process proc 'CONT))))))

(ert-deftest sly-agent-q-chat-cancel-to-a-stopped-server-is-sent-again ()
  "C-c C-k while the server is stopped (SIGSTOP) signals nothing, says the cancel was not sent,
and sends it again once the server runs: the turn ends cancelled before the rest of its answer
comes, without waiting for the chat's periodic check."
  (sly-agent-q-chat-test--cancel-while-stopped
   (append (sly-agent-q-test--step (sly-agent-q-test--text
                                    (concat "Thinking very hard about this question" (make-string 100 ?.) "THE-END")))
           '((chunk_delay_ms . 40) (text_delta_chars . 2)))
   (lambda (proc outcome)
     (accept-process-output nil 1)
     (should-not (funcall outcome))
     (signal-process proc 'CONT)
     (sly-agent-q-test-wait outcome 10 "the cancellation sent again")
     (should (eq (plist-get (funcall outcome) :status) 'cancelled))
     ;; Cancelled long before its answer's end.
     (should-not (string-match-p "THE-END" (sly-agent-q-test-chat-text)))
     (should (eq (plist-get (sly-agent-q-test-send "again") :status) 'finished)))))

(ert-deftest sly-agent-q-chat-cancel-to-a-stopped-server-that-stays-quiet ()
  "C-c C-k while the server is stopped, then SIGCONT while its model still thinks (nothing comes
from the server): the cancel is sent again within seconds, not at the turn's periodic check."
  (sly-agent-q-chat-test--cancel-while-stopped
   (append (sly-agent-q-test--step (sly-agent-q-test--text "Thinking very hard about this question"))
           '((chunk_delay_ms . 20) (hang_after_chunks . 5)))
   (lambda (proc outcome)
     (signal-process proc 'CONT)
     (sly-agent-q-test-wait outcome 5 "the cancellation sent again")
     (should (eq (plist-get (funcall outcome) :status) 'cancelled)))))

(ert-deftest sly-agent-q-chat-follows-the-server-turn-states ()
  "A tool-using turn from the real server: the chat sees each state once, in order, none unexpected."
  (let ((sly-agent-q-project-root (make-temp-file "agent-q-root" t))
        (seen nil) (unexpected nil))
    (sly-agent-q-test-with-server
        (sly-agent-q-test--script
         (sly-agent-q-test--step (sly-agent-q-test--text "Looking. ")
                                 (sly-agent-q-test--tool "current_directory" nil))
         (sly-agent-q-test--step (sly-agent-q-test--text "Done.")))
      (cl-letf* ((enter (symbol-function 'sly-agent-q-turn--enter-state))
                 ((symbol-function 'sly-agent-q-turn--enter-state)
                  (lambda (turn state previous)
                    (push state seen)
                    (funcall enter turn state previous)))
                 (log (symbol-function 'sly-agent-q-turn--log-unexpected))
                 ((symbol-function 'sly-agent-q-turn--log-unexpected)
                  (lambda (&rest args) (push args unexpected) (apply log args))))
        (should (eq (plist-get (sly-agent-q-test-send "where?") :status) 'finished)))
      (should (equal (nreverse seen) '(requesting streaming running-tools requesting streaming finished)))
      (should-not unexpected)
      ;; The turn is over: no state tag is left in the prompt or the header line.
      (with-current-buffer (sly-agent-q-chat-buffer)
        (should (string-match-p "claude" (sly-agent-q-chat--header-line)))
        (should-not (string-match-p "answering\\|running" (sly-agent-q-chat--header-line)))
        (should (string-match-p "\\` \\[ready\\]" (sly-agent-q-chat--header-line)))))))

(ert-deftest sly-agent-q-chat-server-crash-and-restart ()
  "Killing the server mid-turn fails the turn, keeps the transcript, restarts it."
  (sly-agent-q-test-with-server
      (sly-agent-q-test--script
       (append (sly-agent-q-test--step (sly-agent-q-test--text "Partial answer before the crash"))
               '((chunk_delay_ms . 20) (hang_after_chunks . 5)))
       (sly-agent-q-test--step (sly-agent-q-test--text "Back again.")))
    (let ((old (sly-agent-q-connection-current))
          outcome)
      (sly-agent-q-send "go" (lambda (p) (setq outcome p)))
      (sly-agent-q-test-wait (lambda () (string-match-p "Partial" (sly-agent-q-test-chat-text))) 10 "streamed text")
      (kill-process (jsonrpc--process old))
      (sly-agent-q-test-wait (lambda () outcome) 10 "the failed turn")
      (should (eq (plist-get outcome :status) 'failed))
      (should (string-match-p "exited" (plist-get outcome :message)))
      (let ((text (sly-agent-q-test-chat-text)))
        (should (string-match-p "You: go" text))
        (should (string-match-p "Partial answer" text))
        (should (string-match-p "server exited .*restarting it" text))
        ;; Said once: not again as the turn's error.
        (should (= 1 (cl-count-if (lambda (line) (string-match-p "server exited" line))
                                  (split-string text "\n"))))
        (should-not (string-match-p "^Error: .*exited" text)))
      (sly-agent-q-test-wait (lambda () (and (sly-agent-q-connection-ready-p)
                                             (not (eq old (sly-agent-q-connection-current)))))
                             20 "the restarted server")
      (should (eq (plist-get (sly-agent-q-test-send "again") :status) 'finished))
      (should (string-match-p "Back again\\." (sly-agent-q-test-chat-text))))))

(ert-deftest sly-agent-q-chat-no-lisp-connected ()
  "An image tool with no Lisp connected gives the model a clear error."
  (cl-letf (((symbol-function 'sly-agent-q-bridge-current) #'ignore))
    (sly-agent-q-test-with-server
        (sly-agent-q-test--script
         (sly-agent-q-test--step (sly-agent-q-test--tool "describe_symbol" '((symbol . "car"))))
         (sly-agent-q-test--step (sly-agent-q-test--text "Tool said: {{last_tool_result}}")))
      (let ((outcome (sly-agent-q-test-send "describe car")))
        (should (eq (plist-get outcome :status) 'finished))
        (should (string-match-p "No Lisp is connected; start one with M-x sly (or M-x slime)"
                                (plist-get outcome :text)))
        (should (string-match-p "describe_symbol (safe).*✗ No Lisp is connected"
                                (sly-agent-q-test-chat-text)))))))

(ert-deftest sly-agent-q-chat-tool-entry-shows-lisp-forms-as-lisp ()
  "A tool entry's line shows a Lisp form argument as Lisp: its text, not a JSON string.
Cut to its first line, drawn as data; other strings stay quoted."
  (cl-letf (((symbol-function 'sly-agent-q-bridge-current) #'ignore))
    (sly-agent-q-test-with-server
        (sly-agent-q-test--script
         (sly-agent-q-test--step
          (sly-agent-q-test--tool "eval_form" '((form . "(format nil \"~a\" \"x\e[31m\")\n(+ 1 2)")))
          (sly-agent-q-test--tool "describe_symbol" '((symbol . "car"))))
         (sly-agent-q-test--step (sly-agent-q-test--text "Done.")))
      (let ((outcome (sly-agent-q-test-send "evaluate")))
        (should (eq (plist-get outcome :status) 'finished))
        (let* ((chat (sly-agent-q-test-chat-text))
               (line (seq-find (lambda (l) (string-search "eval_form (" l)) (split-string chat "\n"))))
          (should line)
          (should (string-match-p "eval_form ([a-z]+) form=(format nil \"~a\" \"x.*\")…" line))
          (should-not (string-match-p "\\\\\"\\|\\\\n\\|(\\+ 1 2)\\|\e" line))
          (should (string-match-p "describe_symbol (safe) symbol=\"car\"" chat)))))))

(defun sly-agent-q-chat-test--render (&rest slots)
  "The text of a tool entry made of SLOTS, as the chat draws it."
  (with-temp-buffer
    (sly-agent-q-entry--render
     ;; SLOTS first: the first value of a keyword is the one taken.
     (apply #'sly-agent-q-entry-create
            (append slots
                    (list :call-id "c1" :name "run_command" :arguments '(:argv ["make" "test"])
                          :safety "dangerous" :approved t :time-ms 12))))
    (buffer-string)))

(ert-deftest sly-agent-q-chat-command-entry-marks-how-it-ended ()
  "A command that failed, timed out or was killed is not drawn with the success mark.
Its answer is a successful tool call: the mark comes from its status line."
  (let ((result (lambda (status)
                  (format "$ make test\nin /p\n%s; 0.1 s; 5 bytes of output (stdout and stderr together; no standard input).\n\nexit status 0\n" status))))
    (let ((text (sly-agent-q-chat-test--render :status 'ok :content (funcall result "exit status 2"))))
      (should (string-match-p "✗ exit 2" text))
      (should-not (string-search "✓" text))
      (should (memq 'sly-agent-q-error-face
                    (ensure-list (get-text-property (string-search "✗" text) 'face text)))))
    (should (string-match-p "✗ timed out"
                            (sly-agent-q-chat-test--render
                             :status 'ok :content (funcall result "timed out after 120 s (the user's sly-agent-q-command-timeout): its process group was stopped; killed by signal SIGTERM (15)"))))
    (should (string-match-p "✗ killed by SIGKILL"
                            (sly-agent-q-chat-test--render :status 'ok :content (funcall result "killed by signal SIGKILL (9)"))))
    ;; Exit 0, whatever the output says after its status line, keeps the success mark.
    (should (string-match-p "✓" (sly-agent-q-chat-test--render :status 'ok :content (funcall result "exit status 0"))))
    ;; A result without a command's header (another tool's) is never read for a status.
    (should (string-match-p "✓" (sly-agent-q-chat-test--render :name "read_file" :status 'ok
                                                               :content (concat "notes.txt, 3 lines:\n"
                                                                                (funcall result "exit status 2")))))))

(ert-deftest sly-agent-q-chat-command-entry-keeps-cancelled-tail ()
  "A command stopped before its answer keeps the last lines it showed live."
  (let ((text (sly-agent-q-chat-test--render
               :status 'error :error "run_command was cancelled by the user; its output so far follows.\n..."
               :output "line-1\nline-2\nlast-line-before-cancel\n" :output-bytes 40)))
    (should (string-match-p "last-line-before-cancel" text))
    (should (string-match-p "output before it stopped" text))))

(ert-deftest sly-agent-q-chat-key-never-shown ()
  "The API key reaches the server through its environment, never a buffer."
  (sly-agent-q-test-with-server
      (sly-agent-q-test--script (sly-agent-q-test--step (sly-agent-q-test--text "hi")))
    (should (eq (plist-get (sly-agent-q-test-send "hello") :status) 'finished))
    (let ((events (with-current-buffer (jsonrpc-events-buffer (sly-agent-q-connection-current))
                    (buffer-string))))
      (should (string-match-p "initialize" events))
      (should (string-match-p "chat/textDelta" events)))
    ;; Looked for before the test asks the mock for the requests it got (which hold the key, and
    ;; pass through Emacs's own decoding buffer on their way to the test).
    (dolist (buf (buffer-list))
      (with-current-buffer buf
        (save-excursion
          (goto-char (point-min))
          (should-not (search-forward sly-agent-q-test-api-key nil t)))))
    (should-not (string-match-p (regexp-quote sly-agent-q-test-api-key)
                                (format "%S" (sly-agent-q-configuration-for-server))))
    ;; The mock saw the key, so it travelled.
    (let ((req (aref (sly-agent-q-test-mock-requests) 0)))
      (should (string-match-p (regexp-quote sly-agent-q-test-api-key)
                              (format "%s %s"
                                      (cdr (assq 'x-api-key (cdr (assq 'headers req))))
                                      (cdr (assq 'authorization (cdr (assq 'headers req))))))))))

(ert-deftest sly-agent-q-chat-clean-shutdown ()
  "Shutting down (as on kill-emacs) ends the server with exit status 0."
  (sly-agent-q-test-with-server (sly-agent-q-test--script)
    (let ((proc (jsonrpc--process (sly-agent-q-connection-current))))
      (sly-agent-q-server--kill-emacs)
      (sly-agent-q-test-wait (lambda () (not (process-live-p proc))) 5 "the server to exit")
      (should (eq (process-status proc) 'exit))
      (should (= 0 (process-exit-status proc)))
      (should-not (sly-agent-q-connection-live-p)))))

(ert-deftest sly-agent-q-chat-ret-sends-and-conversation-continues ()
  "M-x sly-agent-q, then RET in the input: two turns of one conversation."
  (sly-agent-q-test-with-server
      (sly-agent-q-test--script
       (sly-agent-q-test--step (sly-agent-q-test--text "First reply."))
       (sly-agent-q-test--step (sly-agent-q-test--text "Second reply.")))
    (let* ((outcomes nil)
           (sly-agent-q-turn-finished-hook (list (lambda (p) (push p outcomes))))
           (buf (save-window-excursion (call-interactively #'sly-agent-q))))
      (with-current-buffer buf
        (should (eq major-mode 'sly-agent-q-chat-mode))
        (goto-char (point-max))
        (insert "first question")
        (call-interactively (key-binding (kbd "RET")))
        (sly-agent-q-test-wait (lambda () outcomes) 20 "the first turn")
        (should (equal (sly-agent-q-input-text) ""))
        (goto-char (point-max))
        (insert "second question")
        (call-interactively (key-binding (kbd "C-c C-c")))
        (sly-agent-q-test-wait (lambda () (= 2 (length outcomes))) 20 "the second turn")
        (should (equal (mapcar (lambda (p) (plist-get p :text)) outcomes)
                       '("Second reply." "First reply.")))
        (should (equal (plist-get (car outcomes) :conversationId)
                       (plist-get (cadr outcomes) :conversationId)))
        (should (string-match-p "\n([0-9,]+ in / [0-9,]+ out · \\$[0-9.]+)\n" (buffer-string)))
        (call-interactively (key-binding (kbd "M-p")))
        (should (equal (sly-agent-q-input-text) "second question"))))
    ;; The second request carried the first exchange.
    (let* ((reqs (sly-agent-q-test-mock-requests))
           (messages (cdr (assq 'messages (cdr (assq 'body (aref reqs 1)))))))
      (should (= 2 (length reqs)))
      (should (>= (length messages) 3)))))

;; Freeing conversations

(defun sly-agent-q-test--server-conversations ()
  "The ids of the conversations the server holds (a synchronous request: tests only)."
  (mapcar (lambda (c) (plist-get c :conversationId))
          (plist-get (jsonrpc-request (sly-agent-q-connection-current) 'conversation/list nil)
                     :conversations)))

(ert-deftest sly-agent-q-chat-frees-conversations ()
  "C-c C-n and killing the chat buffer (its turn running) free the conversation on the server."
  (sly-agent-q-test-with-server
      (sly-agent-q-test--script
       (sly-agent-q-test--step (sly-agent-q-test--text "One."))
       (append (sly-agent-q-test--step (sly-agent-q-test--text "Two, thinking for a long time"))
               '((hang_after_chunks . 5))))
    (should (eq (plist-get (sly-agent-q-test-send "one") :status) 'finished))
    (let ((first (sly-agent-q-chat-conversation-id (sly-agent-q-chat-buffer))))
      (should (stringp first))
      (should (equal (sly-agent-q-test--server-conversations) (list first)))
      (with-current-buffer (sly-agent-q-chat-buffer)
        (call-interactively (key-binding (kbd "C-c C-n"))))
      (sly-agent-q-test-wait (lambda () (null (sly-agent-q-test--server-conversations)))
                             10 "C-c C-n to free the conversation"))
    (sly-agent-q-send "two" #'ignore)
    (sly-agent-q-test-wait (lambda () (string-match-p "thinking" (sly-agent-q-test-chat-text)))
                           10 "streamed text")
    (should (= 1 (length (sly-agent-q-test--server-conversations))))
    (let ((kill-buffer-query-functions nil))
      (kill-buffer (sly-agent-q-chat-buffer)))
    (sly-agent-q-test-wait (lambda () (null (sly-agent-q-test--server-conversations)))
                           10 "killing the buffer to free the conversation")
    (should (sly-agent-q-connection-live-p))))

(ert-deftest sly-agent-q-chat-no-key-says-how-to-give-one ()
  "With no key anywhere, the chat names the option, the variable, auth-source and the restart."
  (unless (sly-agent-q-test-mock-available-p) (ert-skip "the bundled server is missing"))
  (let ((process-environment (cl-remove-if (lambda (e) (string-match-p "\\`\\(ANTHROPIC\\|OPENAI\\)_" e))
                                           process-environment))
        (auth-sources nil)
        (sly-agent-q-provider "anthropic")
        (sly-agent-q-api-key nil)
        (sly-agent-q-base-url nil)
        (sly-agent-q-chat-buffer-name "*sly-agent-q no key*")
        outcome)
    (unwind-protect
        (progn
          (sly-agent-q-send "hello" (lambda (p) (setq outcome p)))
          (sly-agent-q-test-wait (lambda () outcome) 20 "the failure")
          (should (eq (plist-get outcome :status) 'failed))
          (let ((text (with-current-buffer (sly-agent-q-chat-buffer) (buffer-string))))
            (should (string-match-p "sly-agent-q-api-key" text))
            (should (string-match-p "ANTHROPIC_API_KEY" text))
            (should (string-match-p "machine api\\.anthropic\\.com password KEY" text))
            (should (string-match-p "~/\\.authinfo\\.gpg" text))
            (should (string-match-p "M-x sly-agent-q-restart-server" text))
            (should-not (string-match-p "server's environment\\|sly-agent-q's configuration" text))))
      (sly-agent-q-server-stop)
      (let ((kill-buffer-query-functions nil))
        (kill-buffer sly-agent-q-chat-buffer-name)))))

;; The answer to a command comes in a callback

(ert-deftest sly-agent-q-chat-reconfigure-says-so ()
  "M-x sly-agent-q-server-reconfigure says in the echo area that the server took the options."
  (sly-agent-q-test-with-server (sly-agent-q-test--script)
    (let ((messages nil))
      (cl-letf* ((real-message (symbol-function 'message))
                 ((symbol-function 'message)
                  (lambda (fmt &rest args)
                    (when fmt (push (apply #'format fmt args) messages))
                    (apply real-message fmt args))))
        (call-interactively #'sly-agent-q-server-reconfigure)
        (sly-agent-q-test-wait (lambda () (member "sly-agent-q: configuration sent" messages))
                               10 "the echo-area message")
        (setq messages nil)
        ;; Called from Lisp, it stays quiet.
        (let ((answered nil))
          (sly-agent-q-server-reconfigure)
          (sly-agent-q-server-request 'conversation/list nil (lambda (_) (setq answered t)))
          (sly-agent-q-test-wait (lambda () answered) 10 "the server")
          (should-not (member "sly-agent-q: configuration sent" messages)))))))

;; Starting and stopping the jsonrpc way

(ert-deftest sly-agent-q-chat-events-buffer-initargs ()
  "The events buffer is configured with what the running jsonrpc.el knows."
  (let ((slots (mapcar #'eieio-slot-descriptor-name (eieio-class-slots 'jsonrpc-connection))))
    (should (equal (sly-agent-q-server--events-buffer-initargs 1000)
                   (if (memq '-events-buffer-config slots)
                       '(:events-buffer-config (:size 1000 :format full))
                     '(:events-buffer-scrollback-size 1000)))))
  ;; No warning at start (newer jsonrpc warns about the old initarg).
  (sly-agent-q-test-with-server (sly-agent-q-test--script)
    (should-not (and (get-buffer "*Warnings*")
                     (with-current-buffer "*Warnings*"
                       (string-match-p "events-buffer" (buffer-string)))))))

(ert-deftest sly-agent-q-chat-stop-is-clean ()
  "M-x sly-agent-q-server-stop: the server exits with status 0 and the connection is cleaned up."
  (sly-agent-q-test-with-server (sly-agent-q-test--script)
    (let* ((conn (sly-agent-q-connection-current))
           (proc (jsonrpc--process conn))
           (died nil)
           (sly-agent-q-connection-died-functions (list (lambda (m) (setq died m)))))
      (sly-agent-q-server-stop)
      (should-not (process-live-p proc))
      (should (eq (process-status proc) 'exit))
      (should (= 0 (process-exit-status proc)))
      (should (process-get proc 'jsonrpc-sentinel-cleanup-started))
      (should-not (sly-agent-q-connection-current))
      (should-not died))))

;; How a turn ends, in words

(ert-deftest sly-agent-q-chat-step-limit-in-words ()
  "A turn stopped at the step limit says so in words, naming the option, not the protocol's code."
  (let ((sly-agent-q-max-steps 1))
    (sly-agent-q-test-with-server
        (sly-agent-q-test--script
         (sly-agent-q-test--step (sly-agent-q-test--tool "read_buffer" '((buffer . "*scratch*")))))
      (should (eq (plist-get (sly-agent-q-test-send "read it") :status) 'finished))
      (let ((text (sly-agent-q-test-chat-text)))
        (should (string-match-p "\\[stopped at the step limit, `sly-agent-q-max-steps'" text))
        (should-not (string-match-p "step_limit" text))))))

;; A stalled answer

(ert-deftest sly-agent-q-chat-stream-idle-timeout ()
  "`sly-agent-q-stream-idle-timeout' reaches the server: a stall after text fails the turn saying so."
  (should (equal (plist-get (sly-agent-q-configuration-for-server) :streamIdleTimeoutMs)
                 (round (* 1000 sly-agent-q-stream-idle-timeout))))
  ;; Long enough that the answer's first bytes always come before it: a stall before any text is
  ;; retried, and under load 0.3 s ran out before the first chunk (the script then ran out).
  (let ((sly-agent-q-stream-idle-timeout 2))
    (sly-agent-q-test-with-server
        (sly-agent-q-test--script
         (append (sly-agent-q-test--step (sly-agent-q-test--text "Partly there and then"))
                 '((hang_after_chunks . 4))))
      (let ((outcome (sly-agent-q-test-send "go" 20)))
        (should (eq (plist-get outcome :status) 'failed))
        (should (string-match-p "Error: The model's stream sent nothing for 2 s after part of its answer was shown"
                                (sly-agent-q-test-chat-text)))))))

(ert-deftest sly-agent-q-chat-bad-configuration ()
  "A configuration the server refuses gives a clear error; fixing it works."
  (unless (sly-agent-q-test-mock-available-p) (ert-skip "the bundled server is missing"))
  (let ((sly-agent-q-trust-levels '(("eval_form" . super)))
        (sly-agent-q-api-key sly-agent-q-test-api-key)
        (sly-agent-q-chat-buffer-name "*sly-agent-q bad config*")
        outcome)
    (unwind-protect
        (progn
          (sly-agent-q-send "hello" (lambda (p) (setq outcome p)))
          (sly-agent-q-test-wait (lambda () outcome) 20 "the failure")
          (should (eq (plist-get outcome :status) 'failed))
          (should (string-match-p "failed to initialize: Unknown safety level for eval_form: super"
                                  (plist-get outcome :message)))
          (should (string-match-p "Error: The server failed to initialize"
                                  (with-current-buffer (sly-agent-q-chat-buffer) (buffer-string))))
          (let ((sly-agent-q-trust-levels '(("eval_form" . dangerous))) ready)
            (sly-agent-q-server-ensure (lambda (conn err) (setq ready (or conn err))))
            (sly-agent-q-test-wait (lambda () ready) 20 "the restarted server")
            (should (sly-agent-q-connection-ready-p))))
      (sly-agent-q-server-stop)
      (kill-buffer sly-agent-q-chat-buffer-name))))

(ert-deftest sly-agent-q-chat-list-tools ()
  "M-x sly-agent-q-list-tools shows the tools with their levels in force."
  (let ((sly-agent-q-trust-levels '(("eval_form" . dangerous))))
    (sly-agent-q-test-with-server (sly-agent-q-test--script)
      (when (get-buffer "*sly-agent-q tools*") (kill-buffer "*sly-agent-q tools*"))
      (save-window-excursion (sly-agent-q-list-tools))
      (sly-agent-q-test-wait (lambda () (get-buffer "*sly-agent-q tools*")) 10 "the tools buffer")
      (with-current-buffer "*sly-agent-q tools*"
        (should (string-match-p "^eval_form +cautious +dangerous +image " (buffer-string)))
        (should (string-match-p "^describe_symbol +safe +safe +image " (buffer-string)))))))

(provide 'sly-agent-q-chat-test)
;;; sly-agent-q-chat-test.el ends here
