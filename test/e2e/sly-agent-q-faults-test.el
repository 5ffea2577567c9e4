;;; sly-agent-q-faults-test.el --- Kill anything at any message: the conversation goes on  -*- lexical-binding: t; -*-

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

;; The fault-injection suite.  A scripted conversation of three turns
;; and a compaction (a streamed answer, two calls in one message, one
;; of them an evaluation in the image that takes a second, a write
;; that asks for approval, an edit reviewed as a diff, the summary) is
;; run once with the real server, the mock model, this Emacs and a real
;; SBCL under SLIME, counting the JSON-RPC messages between Emacs and
;; the server.  Then it is run again once per message index N, the
;; server killed (SIGKILL) right after message N went by; and for a
;; sample of points the image killed instead, or the Emacs side lost
;; (its chat gone and the server's input closed, as when Emacs dies),
;; after which a new chat resumes the conversation from the list.
;; Each run then sends one more turn, which must finish, and the saved
;; conversation must hold every answer and tool result the user saw.
;; The table of points tried, conversations that could not continue
;; and messages lost is printed; both counts must be 0.
;;
;; With thinking on, three faults more: the server killed while the
;; model's thinking streams, a turn cancelled then, and a conversation
;; with thinking resumed after its Emacs was lost mid-loop; each time
;; the next tool loop, thinking, must finish on a history the mock (as
;; the API) accepts, and the chat shows the thinking sections.

;;; Code:

(require 'sly-agent-q-test-helper
         (expand-file-name "../elisp/sly-agent-q-test-helper"
                           (file-name-directory (or load-file-name buffer-file-name))))
(require 'sly-agent-q-sessions)

(declare-function slime-start "ext:slime")
(declare-function slime-connected-p "ext:slime")
(declare-function slime-eval "ext:slime")
(declare-function slime-inferior-process "ext:slime")
(declare-function slime-disconnect "ext:slime")

;;;; The image

(defun faults-connect ()
  "Make sure SBCL is connected through SLIME."
  (let ((sly-agent-q-test-lisp 'slime))
    (sly-agent-q-test-connect-lisp)))

(defun faults-kill-image ()
  "Kill the SBCL process under SLIME."
  (let ((proc (ignore-errors (slime-inferior-process (sly-agent-q-bridge-current-connection)))))
    (when (process-live-p proc) (signal-process proc 'kill))))

;;;; The scripted conversation

(defconst faults-script
  `((steps
     . [;; Turn 1: a streamed text and two calls in one message, one of them a second in the image.
        ((content . [((type . "text") (text . "Let me look at both of them, one after the other."))
                     ((type . "tool_use") (name . "describe_symbol") (input . ((symbol . "cl:car"))))
                     ((type . "tool_use") (name . "eval_form")
                      (input . ((form . "(progn (sleep 1) (+ 1 2))") (package . "CL-USER"))))])
         (text_delta_chars . 8) (chunk_delay_ms . 5))
        ((content . [((type . "text") (text . "The sum is {{last_tool_result}}."))]))
        ;; Turn 2: a write that asks for approval, then an edit reviewed as a diff.
        ((content . [((type . "tool_use") (name . "write_file")
                      (input . ((path . "notes.lisp") (content . "(defvar *x* 1)\n"))))]))
        ((content . [((type . "tool_use") (name . "propose_file_edit")
                      (input . ((path . "notes.lisp") (description . "Raise it")
                                (new_content . "(defvar *x* 2)\n"))))]))
        ((content . [((type . "text") (text . "Written and raised."))]))
        ;; Turn 3.
        ((content . [((type . "text") (text . "Nothing more to do."))]))
        ;; The compaction's summary.
        ((content . [((type . "text") (text . "They looked at CAR, summed, wrote notes.lisp."))]))]))
  "What the model says in the conversation, step by step.")

(defconst faults-turns '("Look at CAR and sum" "Write the notes" "Anything else?")
  "The user's texts of the conversation's turns.")

(defun faults-set-script (script)
  "Make the mock play SCRIPT from its first step."
  (let ((url-request-method "POST")
        (url-request-extra-headers '(("Content-Type" . "application/json")))
        (url-request-data (encode-coding-string (json-encode script) 'utf-8)))
    (kill-buffer (url-retrieve-synchronously (concat sly-agent-q-test-mock-url "/_script") t t 5))))

;;;; Counting the protocol's messages, and killing after one

(defvar faults--count 0 "JSON-RPC messages between Emacs and the server in this run.")
(defvar faults--kill nil "(N . TARGET): kill TARGET right after message N, or nil.")
(defvar faults--killed nil "Non-nil once this run's fault was injected.")
(defvar faults--seen nil "What the user was shown this run: answers' texts and tool results.")
(defvar faults--victim nil "The server process this run's fault ended, if any.")

(defun faults--server-process ()
  "The server's process."
  (let ((conn (sly-agent-q-connection-current)))
    (and conn (jsonrpc--process conn))))

(defvar faults--in-text nil "Non-nil once this answer's streamed text was counted.")

(defun faults--counted-p (message)
  "Non-nil when MESSAGE, a received plist or nil for a sent one, counts as a message.
Streamed text comes in batches of 30 ms, so how many notifications an
answer's text takes, and where a call that started early falls among
them, depend on the machine's load: an answer's text counts as one
message, the point after its first batch (the next chat/turnState
begins another answer), so that every run of the conversation has the
same count and each point is the same step in each.  Killing after a
later batch is killing mid-stream too."
  (let ((method (plist-get message :method)))
    (cond ((equal method "chat/textDelta") (prog1 (not faults--in-text) (setq faults--in-text t)))
          ((equal method "chat/turnState") (setq faults--in-text nil) t)
          (t t))))

(defun faults--message (_conn &rest args)
  "Count one message, ARGS of a send or a received message; inject the fault when it is the one."
  (when (faults--counted-p (and (= (length args) 1) (car args)))
    (cl-incf faults--count))
  (when (and faults--kill (not faults--killed) (= faults--count (car faults--kill)))
    (setq faults--killed t)
    (pcase (cdr faults--kill)
      ('server (let ((p (faults--server-process)))
                 (setq faults--victim p)
                 (when (process-live-p p) (signal-process p 'kill))))
      ('emacs (let ((p (faults--server-process)))
                (setq faults--victim p)
                ;; Emacs dying closes the server's input: that is what the server sees.
                (when (process-live-p p) (ignore-errors (process-send-eof p)))))
      ('image (faults-kill-image)))))

(defun faults--received (_conn message)
  "Note what MESSAGE from the server shows the user."
  (let ((method (plist-get message :method))
        (params (plist-get message :params)))
    (pcase method
      ("chat/toolResult" (push (plist-get params :content) faults--seen))
      ("chat/turnFinished" (let ((text (plist-get params :text)))
                             (unless (string-empty-p text) (push text faults--seen)))))))

(defun faults--install ()
  "Watch every message sent and received."
  (advice-add 'jsonrpc-connection-send :after #'faults--message)
  (advice-add 'jsonrpc-connection-receive :after #'faults--message)
  (advice-add 'jsonrpc-connection-receive :before #'faults--received))

(defun faults--uninstall ()
  "Stop watching."
  (advice-remove 'jsonrpc-connection-send #'faults--message)
  (advice-remove 'jsonrpc-connection-receive #'faults--message)
  (advice-remove 'jsonrpc-connection-receive #'faults--received))

;;;; One run

(defun faults--wait (pred seconds)
  "Wait up to SECONDS for PRED; return its value, or nil."
  (let ((deadline (+ (float-time) seconds)) value)
    (while (and (not (setq value (funcall pred))) (< (float-time) deadline))
      (accept-process-output nil 0.02))
    value))

(defun faults--ensure-server ()
  "Start the server unless it runs; return non-nil once it is ready."
  (let (ready err)
    (sly-agent-q-server-ensure (lambda (conn e) (setq ready conn err e)))
    (and (faults--wait (lambda () (or ready err)) 20) (not err))))

(defun faults--send (text)
  "Send TEXT in the chat; return its outcome plist, or nil when it never ends.
A turn that never ends is cancelled, and the chat shown in the log."
  (let (outcome)
    (sly-agent-q-send text (lambda (o) (setq outcome o)))
    (or (faults--wait (lambda () outcome) 60)
        (progn
          (message "faults: the turn %S never ended; the chat:\n%s" text (sly-agent-q-test-chat-text))
          (with-current-buffer (sly-agent-q-chat-buffer) (ignore-errors (sly-agent-q-cancel)))
          (faults--wait (lambda () outcome) 10)
          nil))))

(defun faults--compact (id)
  "Compact conversation ID; return non-nil once the server answered, whatever it answered."
  (let (done)
    (sly-agent-q-server-request 'conversation/compact (list :conversationId id)
                                (lambda (_) (setq done t)) (lambda (_) (setq done t)))
    (faults--wait (lambda () done) 30)))

(defun faults--conversation ()
  "Play the conversation, up to its end or the fault that stops it."
  (cl-block nil
    (dolist (text faults-turns)
      (let ((outcome (faults--send text)))
        (when (or faults--killed (not (eq (plist-get outcome :status) 'finished)))
          (cl-return))))
    (let ((id (sly-agent-q-chat-conversation-id (sly-agent-q-chat-buffer))))
      (when id (faults--compact id)))))

(defun faults--saved-texts (id)
  "Every text and tool result of saved conversation ID's history, or :unreadable."
  (let (result err)
    (sly-agent-q-server-request 'conversation/resume (list :conversationId id)
                                (lambda (r) (setq result r)) (lambda (e) (setq err (or e t))))
    (faults--wait (lambda () (or result err)) 10)
    (if (not result) :unreadable
      (cl-loop for m across (plist-get result :messages)
               append (cl-loop for b across (plist-get m :content)
                               collect (or (plist-get b :text) (plist-get b :content)))))))

(defun faults--fresh-chat ()
  "Forget the chat buffer, as a new Emacs would not have it."
  (when (get-buffer sly-agent-q-chat-buffer-name)
    (let ((kill-buffer-query-functions nil))
      (kill-buffer sly-agent-q-chat-buffer-name))))

(defun faults-run (kill)
  "Run the conversation with fault KILL, (N . TARGET) or nil; recover; judge.
Return a plist: :messages counted, :continued, :lost (the texts the
user saw that the saved conversation lacks)."
  (faults-connect)
  (faults--fresh-chat)
  (unless (sly-agent-q-connection-ready-p) (faults--ensure-server))
  (faults-set-script faults-script)
  ;; Each run writes notes.lisp afresh, so each run's diffs are those of the last.
  (let ((notes (expand-file-name "notes.lisp" sly-agent-q-project-root)))
    (when (file-exists-p notes) (delete-file notes)))
  (setq faults--count 0 faults--in-text nil faults--kill kill faults--killed nil faults--seen nil
        faults--victim nil)
  (faults--conversation)
  (let ((counted faults--count)
        (id (sly-agent-q-chat-conversation-id (sly-agent-q-chat-buffer))))
    (setq faults--kill nil)
    ;; The user goes on once the chat said the server died (its sentinel ran).
    (when faults--victim
      (faults--wait (lambda () (and (not (process-live-p faults--victim))
                                    (not (sly-agent-q-connection-ready-p))))
                    10))
    ;; After the fault: a server again, and for a lost Emacs a new chat resumed from its file.
    (when (eq (cdr kill) 'emacs)
      (sly-agent-q-server-stop)
      (faults--fresh-chat))
    (unless (sly-agent-q-connection-ready-p) (faults--ensure-server))
    (when (and id (eq (cdr kill) 'emacs))
      (let (shown)
        (sly-agent-q-sessions-resume id (lambda (b) (setq shown b)))
        (faults--wait (lambda () shown) 10)))
    (faults-set-script `((steps . [((content . [((type . "text") (text . "Recovered."))]))])))
    (let* ((outcome (faults--send "One more turn"))
           (continued (eq (plist-get outcome :status) 'finished))
           (now (sly-agent-q-chat-conversation-id (sly-agent-q-chat-buffer)))
           (saved (and id (equal now id) (faults--saved-texts id)))
           (lost (cond ((null id) nil)
                       ((not (equal now id)) faults--seen)
                       ((eq saved :unreadable) faults--seen)
                       (t (cl-remove-if (lambda (s) (member s saved)) faults--seen)))))
      (message "faults: %s: %d messages, %s, %d shown, %d lost" (or kill "clean") counted
               (if continued "continued" "NOT continued") (length faults--seen) (length lost))
      (list :messages counted :continued continued :lost lost :injected faults--killed
            :detail (unless continued (or (plist-get outcome :message) "no outcome"))))))

;;;; A real Emacs, killed

(ert-deftest faults-emacs-process-killed-while-an-approval-waits ()
  "A real Emacs (a child `emacs --batch' running the chat) is killed with SIGKILL while a
write_file approval waits; its server goes with it.  A new Emacs (this one) lists the
conversation as interrupted, resumes it and finishes a turn; the call got a result saying it
was not run, and nothing was written."
  (let* ((dir (file-name-as-directory (make-temp-file "agent-q-killed" t)))
         (conversations (file-name-as-directory (expand-file-name "conversations" dir)))
         (project (file-name-as-directory (expand-file-name "project" dir)))
         (marker (expand-file-name "asked" dir))
         (script (expand-file-name "child.el" dir))
         (url (sly-agent-q-test-start-mock
               `((steps . [((content . [((type . "text") (text . "I will write the notes."))
                                        ((type . "tool_use") (name . "write_file")
                                         (input . ((path . "notes.txt") (content . "Notes\n"))))]))
                           ((content . [((type . "text") (text . "Recovered after the crash."))]))]))))
         (child nil))
    (make-directory project t)
    (with-temp-file script
      (prin1 `(progn
                (setq sly-agent-q-conversation-directory ,conversations)
                (require 'sly-agent-q)
                (setq sly-agent-q-provider "anthropic" sly-agent-q-base-url ,url
                      sly-agent-q-api-key "test-key" sly-agent-q-project-root ,project
                      ;; The user is asked and has not answered yet when Emacs dies.
                      sly-agent-q-approval-function
                      (lambda (_request _callback) (write-region "asked" nil ,marker)))
                (sly-agent-q)
                (sly-agent-q-send "Write the notes" #'ignore)
                (while t (accept-process-output nil 0.1)))
             (current-buffer)))
    (unwind-protect
        (progn
          (setq child (make-process :name "saq-child-emacs" :buffer (generate-new-buffer " *child*")
                                    :noquery t
                                    :command (list (expand-file-name invocation-name invocation-directory)
                                                   "-Q" "--batch" "-L" (expand-file-name "lisp-elisp" sly-agent-q-test-root)
                                                   "-l" script)))
          (sly-agent-q-test-wait (lambda () (file-exists-p marker)) 60 "the child Emacs to ask for approval")
          (let ((servers (cl-remove-if-not
                          (lambda (pid) (eql (cdr (assq 'ppid (process-attributes pid))) (process-id child)))
                          (list-system-processes)))
                (t0 (float-time)))
            (should servers)
            (signal-process child 'kill)
            ;; Its server sees its input close and ends.
            (sly-agent-q-test-wait (lambda () (not (cl-some #'process-attributes servers)))
                                   20 "the dead Emacs's server to end")
            (message "faults: the server ended %.2f s after its Emacs" (- (float-time) t0)))
          (let ((sly-agent-q-conversation-directory conversations)
                (sly-agent-q-project-root project)
                (sly-agent-q-base-url url) (sly-agent-q-provider "anthropic") (sly-agent-q-api-key "test-key")
                saved shown outcome)
            (faults--fresh-chat)
            (when (sly-agent-q-connection-ready-p) (sly-agent-q-server-stop))
            (should (faults--ensure-server))
            (sly-agent-q-server-request 'conversation/saved nil (lambda (r) (setq saved r)) (lambda (_) (setq saved :error)))
            (sly-agent-q-test-wait (lambda () saved) 10 "the saved list")
            (let ((entry (aref (plist-get saved :conversations) 0)))
              (should (plist-get entry :interrupted))
              (should (member "write_file" (append (plist-get (plist-get entry :interrupted) :calls) nil)))
              (sly-agent-q-sessions-resume (plist-get entry :conversationId) (lambda (b) (setq shown b))))
            (sly-agent-q-test-wait (lambda () shown) 10 "the resume")
            (sly-agent-q-send "Go on" (lambda (o) (setq outcome o)))
            (sly-agent-q-test-wait (lambda () outcome) 60 "the turn after the crash")
            (should (eq (plist-get outcome :status) 'finished))
            (should-not (file-exists-p (expand-file-name "notes.txt" project)))
            ;; The model was told the call never ran (it waited for approval), in a history the
            ;; API accepts.
            (should (cl-some (lambda (r) (string-match-p "write_file was not run: the server stopped before it started"
                                                         (car r)))
                             (sly-agent-q-test-tool-results)))))
      (when (process-live-p child) (delete-process child))
      ;; The server this test started holds its temporary configuration: the next test starts its own.
      (when (sly-agent-q-connection-ready-p) (sly-agent-q-server-stop))
      (sly-agent-q-test-stop-mock)
      (faults--fresh-chat)
      (delete-directory dir t))))

;;;; Thinking: faults while the model reasons

;; With thinking on (claude-sonnet-4-5 thinks with a budget between
;; tool calls), the history must stay one the API accepts whatever
;; stops a turn: the mock refuses, with a 400, a history whose thinking
;; blocks are missing, changed, unsigned or out of place, so a turn that
;; finishes after the fault is a history that stayed valid.  No image:
;; the tools are Emacs's.

(defconst faults-thinking-text
  (concat "Which file holds the definition?  The notes mention notes.txt; reading it first "
          "tells me whether the value was raised already, and then I can answer without guessing.")
  "What the model thinks before its call.")

(defun faults--thinking-step (thinking &rest blocks)
  "A mock step whose answer thinks THINKING, then has BLOCKS, slowly streamed."
  `((content . [((type . "thinking") (thinking . ,thinking)) ,@blocks])
    (text_delta_chars . 6) (chunk_delay_ms . 15)))

(defun faults--read-notes ()
  "A tool_use block reading notes.txt."
  '((type . "tool_use") (name . "read_file") (input . ((path . "notes.txt")))))

(defun faults--text (text)
  "A text block saying TEXT."
  `((type . "text") (text . ,text)))

(defvar faults--on-thinking nil
  "A function run once, at the first chat/thinkingDelta received, then forgotten.")

(defun faults--watch-thinking (_conn message)
  "Run `faults--on-thinking' at the first thinking MESSAGE from the server."
  (when (and faults--on-thinking (equal (plist-get message :method) "chat/thinkingDelta"))
    (let ((f faults--on-thinking))
      (setq faults--on-thinking nil)
      (run-at-time 0 nil f))))

(defmacro faults--with-thinking-project (&rest body)
  "Run BODY in a fresh project holding notes.txt, the server started with thinking on."
  (declare (indent 0) (debug t))
  `(let* ((sly-agent-q-project-root (file-name-as-directory (make-temp-file "agent-q-thinking" t)))
          (sly-agent-q-server-auto-restart nil)
          (sly-agent-q-turn-check-interval 3600)
          ;; Thinking asked for explicitly: what auto gives this model, said in the test.
          (sly-agent-q-thinking '(("claude-sonnet-4-5" . medium))))
     (with-temp-file (expand-file-name "notes.txt" sly-agent-q-project-root) (insert "(defvar *x* 1)\n"))
     (advice-add 'jsonrpc-connection-receive :before #'faults--watch-thinking)
     (unwind-protect
         (sly-agent-q-test-with-server '((steps . []))
           (setq sly-agent-q-approval-function #'faults--approve)
           ,@body)
       (setq faults--on-thinking nil)
       (advice-remove 'jsonrpc-connection-receive #'faults--watch-thinking)
       (delete-directory sly-agent-q-project-root t))))

(defun faults--thinking-sections ()
  "How many folded thinking sections the chat shows."
  (let ((text (sly-agent-q-test-chat-text)) (n 0) (start 0))
    (while (string-match "Thinking… " text start)
      (setq n (1+ n) start (match-end 0)))
    n))

(defun faults--last-request-thinks-p ()
  "Non-nil when the mock's last request asked for thinking and was answered."
  (let ((last (car (last (append (sly-agent-q-test-mock-requests) nil)))))
    (and (eql (alist-get 'status last) 200)
         (alist-get 'thinking (alist-get 'body last)))))

(ert-deftest faults-thinking-server-killed-mid-thinking ()
  "The server killed while the model's thinking streams: the next turn, a tool loop that thinks, finishes.
The cut answer's unsigned thinking never reaches the history (the mock
would refuse it); the chat shows the new thinking section."
  (faults--with-thinking-project
    (faults-set-script `((steps . [,(faults--thinking-step faults-thinking-text (faults--read-notes))])))
    (let ((victim (faults--server-process)) outcome)
      (setq faults--on-thinking (lambda () (signal-process victim 'kill)))
      (sly-agent-q-send "Is *x* raised?" (lambda (o) (setq outcome o)))
      (should (faults--wait (lambda () (not (process-live-p victim))) 30))
      (faults--wait (lambda () (not (sly-agent-q-connection-ready-p))) 10))
    (should (faults--ensure-server))
    (faults-set-script `((steps . [,(faults--thinking-step "Read it now." (faults--read-notes))
                                   ,(faults--thinking-step "It says 1." (faults--text "*x* is 1, not raised."))])))
    (let ((before (faults--thinking-sections))
          (outcome (faults--send "Look again")))
      (should (eq (plist-get outcome :status) 'finished))
      (should (faults--last-request-thinks-p))
      (should (> (faults--thinking-sections) before))
      (should (string-match-p "\\*x\\* is 1, not raised" (sly-agent-q-test-chat-text)))
      (should (string-match-p "(defvar \\*x\\* 1)" (car (car (last (sly-agent-q-test-tool-results)))))))))

(ert-deftest faults-thinking-cancelled-mid-thinking ()
  "A turn cancelled while its thinking streams: the next turn, a tool loop that thinks, finishes."
  (faults--with-thinking-project
    (faults-set-script
     `((steps . [((content . [((type . "thinking") (thinking . ,faults-thinking-text)) ,(faults--read-notes)])
                  (text_delta_chars . 6) (hang_after_chunks . 8))
                 ,(faults--thinking-step "Read it." (faults--read-notes))
                 ,(faults--thinking-step "Done." (faults--text "It is 1."))])))
    (let (outcome)
      (setq faults--on-thinking (lambda () (with-current-buffer (sly-agent-q-chat-buffer) (sly-agent-q-cancel))))
      (sly-agent-q-send "Is *x* raised?" (lambda (o) (setq outcome o)))
      (should (faults--wait (lambda () outcome) 30))
      (should (eq (plist-get outcome :status) 'cancelled)))
    ;; What streamed before the cancel stays shown, folded.
    (should (>= (faults--thinking-sections) 1))
    (let ((outcome (faults--send "Try again")))
      (should (eq (plist-get outcome :status) 'finished))
      (should (faults--last-request-thinks-p))
      (should (>= (faults--thinking-sections) 2))
      (should (string-match-p "It is 1\\." (sly-agent-q-test-chat-text))))))

(ert-deftest faults-thinking-resumed-then-tool-loop ()
  "A conversation with thinking, its Emacs lost while a call waits for approval, resumed from the list:
the resumed chat shows the thinking sections, and a new tool loop that
thinks finishes on the history the file kept (signatures intact)."
  (faults--with-thinking-project
    (faults-set-script `((steps . [,(faults--thinking-step faults-thinking-text (faults--read-notes))
                                   ,(faults--thinking-step "It says 1." (faults--text "It is 1."))
                                   ,(faults--thinking-step "Raise it."
                                                           '((type . "tool_use") (name . "write_file")
                                                             (input . ((path . "notes.txt") (content . "(defvar *x* 2)\n")))))])))
    (should (eq (plist-get (faults--send "Is *x* raised?") :status) 'finished))
    (let ((id (sly-agent-q-chat-conversation-id (sly-agent-q-chat-buffer)))
          (victim (faults--server-process))
          outcome)
      ;; The approval never comes: Emacs is lost meanwhile (the server's input closes).
      (setq sly-agent-q-approval-function (lambda (_request _callback)
                                            (when (process-live-p victim) (process-send-eof victim))))
      (sly-agent-q-send "Raise it" (lambda (o) (setq outcome o)))
      (should (faults--wait (lambda () (not (process-live-p victim))) 30))
      (faults--wait (lambda () (not (sly-agent-q-connection-ready-p))) 10)
      (sly-agent-q-server-stop)
      (faults--fresh-chat)
      (setq sly-agent-q-approval-function #'faults--approve)
      (should (faults--ensure-server))
      (let (shown)
        (sly-agent-q-sessions-resume id (lambda (b) (setq shown b)))
        (should (faults--wait (lambda () shown) 10)))
      ;; Each answer that thought shows its section again, folded.
      (should (>= (faults--thinking-sections) 3))
      (faults-set-script `((steps . [,(faults--thinking-step "Read it again." (faults--read-notes))
                                     ,(faults--thinking-step "Still 1." (faults--text "Still 1: the write never ran."))])))
      (let ((outcome (faults--send "Go on")))
        (should (eq (plist-get outcome :status) 'finished))
        (should (faults--last-request-thinks-p))
        (should (string-match-p "Still 1: the write never ran" (sly-agent-q-test-chat-text)))
        (should (cl-some (lambda (r) (string-match-p "write_file was not run" (car r)))
                         (sly-agent-q-test-tool-results)))
        (should (equal (with-temp-buffer
                         (insert-file-contents (expand-file-name "notes.txt" sly-agent-q-project-root))
                         (buffer-string))
                       "(defvar *x* 1)\n"))))))

;;;; The suite

(defun faults--points (count)
  "The faults to try for a conversation of COUNT messages.
SLY_AGENT_Q_FAULTS_EVERY=K tries the server's every Kth message only
\(while working on the suite)."
  (append (mapcar (lambda (n) (cons n 'server))
                  (number-sequence 1 count (max 1 (string-to-number (or (getenv "SLY_AGENT_Q_FAULTS_EVERY") "1")))))
          ;; A sample: the image at its call and around it, Emacs at a few points.
          (mapcar (lambda (n) (cons n 'image)) (list 2 (/ count 4) (/ count 3)))
          (mapcar (lambda (n) (cons n 'emacs)) (list (/ count 4) (/ count 2) (- count 3)))))

(defun faults--approve (request callback)
  "Approve REQUEST, or accept all its hunks when it is a diff review, through CALLBACK."
  (funcall callback (if (plist-get request :hunks)
                        (list :accepted_hunks (vconcat (mapcar (lambda (h) (plist-get h :index))
                                                               (plist-get request :hunks))))
                      '(:decision "approved"))))

(defun faults--table (count rows seconds)
  "Print the table of ROWS for a conversation of COUNT messages, run in SECONDS.
It goes to the file SLY_AGENT_Q_FAULTS_TABLE names too, for the
suite's runner to show."
  (let ((lines
         (append
          (list (format "faults: the conversation has %d protocol messages; %d fault points tried in %.0f s"
                        count (length rows) seconds)
                (format "faults: %-8s %6s %14s %14s" "killed" "points" "not continued" "messages lost"))
          (mapcar (lambda (target)
                    (let ((mine (if (eq target 'all) rows
                                  (cl-remove-if-not (lambda (row) (eq (cdar row) target)) rows))))
                      (format "faults: %-8s %6d %14d %14d" target (length mine)
                              (cl-count-if-not (lambda (row) (plist-get (cdr row) :continued)) mine)
                              (apply #'+ (mapcar (lambda (row) (length (plist-get (cdr row) :lost))) mine)))))
                  '(server image emacs all))))
        (file (getenv "SLY_AGENT_Q_FAULTS_TABLE")))
    (dolist (line lines) (message "%s" line))
    (when (and file (not (string-empty-p file)))
      (write-region (concat (mapconcat #'identity lines "\n") "\n") nil file))))

(ert-deftest faults-kill-after-every-message ()
  "Kill the server after each protocol message (and the image or Emacs at some): every conversation goes on."
  (faults-connect)
  (let* ((sly-agent-q-project-root (file-name-as-directory (make-temp-file "agent-q-faults" t)))
         (sly-agent-q-server-auto-restart nil)
         ;; The chat's check that a long turn still runs adds messages to a slow run only.
         (sly-agent-q-turn-check-interval 3600)
         (start (float-time)))
    (sly-agent-q-test-with-server '((steps . []))
      ;; The user approves the write and accepts every hunk of the review.
      (setq sly-agent-q-approval-function #'faults--approve)
      (faults--install)
      (unwind-protect
          (let* ((clean (progn
                          ;; A first run warms what every later run finds warm (the image's
                          ;; helpers, Emacs's known hunks, a chat to free): the second is the one
                          ;; counted, with the messages each faulty run has up to its fault.
                          (should (plist-get (faults-run nil) :continued))
                          (faults-run nil)))
                 (count (plist-get clean :messages))
                 (rows nil))
            (should (plist-get clean :continued))
            (should (> count 30))
            (dolist (point (faults--points count))
              (let ((r (faults-run point)) (tries 1))
                ;; A run shorter than the point had no fault: it is run again, twice at most.
                (while (and (< tries 3) (not (plist-get r :injected))
                            (< (plist-get r :messages) (car point)))
                  (setq r (faults-run point) tries (1+ tries)))
                (push (cons point r) rows)
                (unless (and (plist-get r :continued) (null (plist-get r :lost)))
                  (message "faults: after message %d, %s killed: %s%s" (car point) (cdr point)
                           (if (plist-get r :continued) "continued" (format "could not continue (%s)" (plist-get r :detail)))
                           (if (plist-get r :lost) (format "; lost %S" (plist-get r :lost)) "")))))
            (let ((broken (cl-count-if-not (lambda (row) (plist-get (cdr row) :continued)) rows))
                  (lost (apply #'+ (mapcar (lambda (row) (length (plist-get (cdr row) :lost))) rows))))
              (faults--table count rows (- (float-time) start))
              ;; Every fault was injected where its message came.  Runs are counted alike (a text's
              ;; batches as one message, the same diffs asked each run), but a run may still end a
              ;; message early: a point past a run's last message is a run without a fault, even
              ;; after its runs again; most points must have one.
              (should (cl-every (lambda (row) (or (plist-get (cdr row) :injected)
                                                  (< (plist-get (cdr row) :messages) (caar row))))
                                rows))
              (should (>= (cl-count-if (lambda (row) (plist-get (cdr row) :injected)) rows)
                          (- (length rows) 5)))
              ;; Each broken point with what became of it: CI's log shows only the
              ;; failure's condition.
              (should-not (delq nil (mapcar (lambda (row)
                                              (let ((r (cdr row)))
                                                (unless (and (plist-get r :continued) (null (plist-get r :lost)))
                                                  (list :after (caar row) :killed (cdar row)
                                                        :detail (plist-get r :detail) :lost (plist-get r :lost)))))
                                            rows)))
              (should (= broken 0))
              (should (= lost 0))))
        (faults--uninstall)
        (delete-directory sly-agent-q-project-root t)))))

(provide 'sly-agent-q-faults-test)
;;; sly-agent-q-faults-test.el ends here
