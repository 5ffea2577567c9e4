;;; sly-agent-q-chats-killed-test.el --- The late calls of a killed chat  -*- lexical-binding: t; -*-

;;; Commentary:

;; Run in an Emacs of its own (test/e2e/run.sh), after the two-chat test's
;; images are gone.  A chat buffer killed while the server still runs its
;; conversation: a call the server sent before it saw the cancel must run
;; nowhere (not in whichever Lisp is current), and an approval it asks
;; for must be refused, never shown in another chat.
;;
;; The race is made deterministic: the chat is killed while Emacs has no
;; server connection to send the cancel on, and the server is then asked
;; to go on with that conversation, as a turn under way would.

;;; Code:

(require 'sly-agent-q-chats-test
         (expand-file-name "sly-agent-q-chats-test"
                           (file-name-directory (or load-file-name buffer-file-name))))

(defconst chats-test--killed-script
  `((steps . [;; 0, alpha's first turn: its conversation exists.
              ((content . [((type . "text") (text . "Hello from alpha."))]))
              ;; 1-2, the late turn of the killed chat's conversation: an
              ;; evaluation and a debugger question.
              ((content . [((type . "tool_use") (name . "eval_form")
                            (input . ((form . "(progn (defparameter cl-user::*late* 1) :late)")
                                      (package . "CL-USER"))))
                           ((type . "tool_use") (name . "debugger_state") (input . ((frames . 3))))]))
              ((content . [((type . "text") (text . "Late: {{last_tool_result}}"))]))
              ;; 3-4, a conversation no chat ever held (as an MCP client's).
              ((content . [((type . "tool_use") (name . "eval_form")
                            (input . ((form . "(progn (defparameter cl-user::*unheld* 2) :unheld)")
                                      (package . "CL-USER"))))]))
              ((content . [((type . "text") (text . "Unheld: {{last_tool_result}}"))]))])))

(defun chats-test--end-image (lisp)
  "End the image of LISP for good, its buffer too.
So that the next test starts its own (the Lisp mode asks before
starting one beside a live one)."
  (let ((inferior (ignore-errors (funcall (sly-agent-q-bridge-adapter-inferior (car lisp)) (cdr lisp)))))
    (when (process-live-p inferior)
      (kill-process inferior)
      (sly-agent-q-test-wait (lambda () (not (process-live-p inferior))) 20 "the second image to end"))
    (when (and (processp inferior) (buffer-live-p (process-buffer inferior)))
      (let ((kill-buffer-query-functions nil))
        (kill-buffer (process-buffer inferior))))))

(defun chats-test--kill-unheard (chat)
  "Kill CHAT without the server hearing of it (its cancel not sent yet)."
  (let ((sly-agent-q-current-connection nil)
        (kill-buffer-query-functions nil))
    (kill-buffer chat)))

(defun chats-test--late-turn (conversation-id)
  "Ask the server to run a turn of CONVERSATION-ID, as one under way would.
CONVERSATION-ID nil: a new conversation, which no chat holds."
  (let (sent)
    (sly-agent-q-server-request 'chat/send (sly-agent-q-configuration-plist-compact
                                            (list :conversationId conversation-id :text "Set it late"))
                                (lambda (r) (setq sent (list :ok r)))
                                (lambda (e) (setq sent (list :error e))))
    (sly-agent-q-test-wait (lambda () sent) 20 "the late chat/send's answer")
    (should (eq (car sent) :ok))))

(defun chats-test--new-conversation-unheard (chat)
  "Start a new conversation in CHAT without the server hearing of it."
  (let ((sly-agent-q-current-connection nil))
    (with-current-buffer chat (sly-agent-q-new-conversation))))

(defvar chats-test--leave #'chats-test--kill-unheard
  "How alpha's chat leaves its conversation in `chats-test--with-killed-alpha'.")

(defmacro chats-test--with-killed-alpha (&rest body)
  "Run BODY with alpha's chat killed unheard, beta's chat and image current.
Bound in BODY: LISP-A, LISP-B, CHAT-B, ID-A (the killed chat's conversation)."
  (declare (indent 0) (debug t))
  `(progn
     (sly-agent-q-test-connect-lisp)
     (let* ((lisp-a (sly-agent-q-bridge-current))
            (lisp-b (chats-test-second-image))
            (alpha (file-name-as-directory (make-temp-file "alpha" t)))
            (beta (file-name-as-directory (make-temp-file "beta" t)))
            (sly-agent-q-project-root nil)
            chat-a chat-b id-a)
       (ignore lisp-a lisp-b chat-b id-a)
       (unwind-protect
           (sly-agent-q-test-with-server chats-test--killed-script
             (setq chat-a (sly-agent-q-chats-create alpha lisp-a)
                   chat-b (sly-agent-q-chats-create beta lisp-b))
             (dolist (lisp (list lisp-a lisp-b))
               (dolist (name '("*LATE*" "*UNHELD*"))
                 (chats-test-eval lisp `(cl:makunbound (cl:intern ,name "COMMON-LISP-USER")))))
             (let ((a (chats-test-send chat-a "Hello")))
               (sly-agent-q-test-wait a 30 "alpha's first turn")
               (should (eq (plist-get (funcall a) :status) 'finished)))
             (setq id-a (sly-agent-q-chat-conversation-id chat-a))
             (should (stringp id-a))
             (funcall chats-test--leave chat-a)
             ;; Whatever is current is beta's: a call run there lands in beta's image.
             (chats-test-make-current lisp-b)
             (with-current-buffer chat-b
               ,@body))
         (let ((kill-buffer-query-functions nil))
           (dolist (chat (sly-agent-q-chats-list)) (kill-buffer chat)))
         (chats-test--end-image lisp-b)
         ;; The next test starts from alpha's image, current again.
         (chats-test-make-current lisp-a)
         (delete-directory alpha t)
         (delete-directory beta t)))))

(defun chats-test--late-refused (lisp-a lisp-b)
  "Check the late calls ran in neither image and the model got the refusals.
LISP-A and LISP-B are the two images."
  (let ((results (last (sly-agent-q-test-tool-results) 2)))
    (should (= (length results) 2))
    (dolist (result results)
      (should (cdr result))
      (should (string-match-p "\\`Error: The chat \\*sly-agent-q[^*]*\\* of this conversation was killed: its calls are refused, and this one did not run\\.\\'"
                              (car result)))))
  (should-not (chats-test-bound-p lisp-a "*LATE*"))
  (should-not (chats-test-bound-p lisp-b "*LATE*")))

(ert-deftest chats-zz-killed-a-killed-chats-late-image-call-runs-nowhere ()
  "Alpha's chat is killed; its conversation's late eval_form must run in no image.
Before: no chat held the conversation, and the call ran in the Lisp
current (beta's)."
  (chats-test--with-killed-alpha
    (chats-test--late-turn id-a)
    (sly-agent-q-test-wait (lambda () (>= (chats-test-requests) 3)) 30 "the late calls' results to reach the model")
    (chats-test--late-refused lisp-a lisp-b)
    ;; A conversation no chat ever held runs as before: in the Lisp current.
    (chats-test--late-turn nil)
    (sly-agent-q-test-wait (lambda () (>= (chats-test-requests) 5)) 30 "the unheld call's result to reach the model")
    (should (string-match-p ":UNHELD" (car (car (last (sly-agent-q-test-tool-results))))))
    (should (chats-test-bound-p lisp-b "*UNHELD*"))
    (should-not (chats-test-bound-p lisp-a "*UNHELD*"))))

(ert-deftest chats-zz-killed-a-killed-chats-approval-is-refused ()
  "Alpha's chat is killed; its conversation's approval must be refused, not shown in beta's chat."
  (let ((sly-agent-q-ask-before-evaluating t))
    (chats-test--with-killed-alpha
      (chats-test--late-turn id-a)
      (sly-agent-q-test-wait (lambda () (or (>= (chats-test-requests) 3) (chats-test-has-approval-p chat-b)))
                             30 "the late approval's outcome")
      (should-not (chats-test-has-approval-p chat-b))
      (chats-test--late-refused lisp-a lisp-b))))

(ert-deftest chats-zz-killed-a-conversation-left-for-a-new-one-runs-nowhere ()
  "Alpha's chat starts a new conversation; the old one's late eval_form must run in no image.
Before: no chat held the old conversation any more, and the call ran in
the Lisp current (beta's)."
  (let ((chats-test--leave #'chats-test--new-conversation-unheard))
    (chats-test--with-killed-alpha
      (chats-test--late-turn id-a)
      (sly-agent-q-test-wait (lambda () (>= (chats-test-requests) 3)) 30 "the late calls' results to reach the model")
      (let ((results (last (sly-agent-q-test-tool-results) 2)))
        (should (= (length results) 2))
        (dolist (result results)
          (should (string-match-p "\\`Error: The chat \\*sly-agent-q[^*]*\\* has left this conversation for a new one: its calls are refused, and this one did not run\\.\\'"
                                  (car result)))))
      (should-not (chats-test-bound-p lisp-a "*LATE*"))
      (should-not (chats-test-bound-p lisp-b "*LATE*")))))

;; A chat killed while its first message is on its way: its conversation's
;; id is not known when it is killed, only when the server's answer comes.
(defconst chats-test--in-flight-script
  `((steps . [;; 0, the killed chat's first turn: an evaluation, streamed
              ;; slowly so that the answer to its send comes first.
              ((content . [((type . "tool_use") (name . "eval_form")
                            (input . ((form . "(progn (defparameter cl-user::*late* 1) :late)")
                                      (package . "CL-USER"))))])
               (chunk_delay_ms . 300))
              ((content . [((type . "text") (text . "Late: {{last_tool_result}}"))]))])))

(defun chats-test--conversations ()
  "The conversations the server holds now."
  (let (answer)
    (sly-agent-q-server-request 'conversation/list nil
                                (lambda (r) (setq answer (list :ok r)))
                                (lambda (e) (setq answer (list :error e))))
    (sly-agent-q-test-wait (lambda () answer) 20 "conversation/list's answer")
    (should (eq (car answer) :ok))
    (append (plist-get (cadr answer) :conversations) nil)))

(ert-deftest chats-zz-killed-a-chat-killed-while-its-first-message-is-sent ()
  "A chat killed before the answer to its first chat/send: its turn runs nowhere.
Before: the kill knew no conversation to free or cancel, and the turn's
evaluation ran in the Lisp current (beta's)."
  (sly-agent-q-test-connect-lisp)
  (let* ((lisp-a (sly-agent-q-bridge-current))
         (lisp-b (chats-test-second-image))
         (alpha (file-name-as-directory (make-temp-file "alpha" t)))
         (beta (file-name-as-directory (make-temp-file "beta" t)))
         (sly-agent-q-project-root nil))
    (unwind-protect
        (sly-agent-q-test-with-server chats-test--in-flight-script
          (let ((chat-a (sly-agent-q-chats-create alpha lisp-a))
                (chat-b (sly-agent-q-chats-create beta lisp-b)))
            (ignore chat-b)
            (dolist (lisp (list lisp-a lisp-b))
              (chats-test-eval lisp '(cl:makunbound (cl:intern "*LATE*" "COMMON-LISP-USER"))))
            (chats-test-make-current lisp-b)
            ;; Sent, and killed before the answer is read.
            (chats-test-send chat-a "Set it")
            (let ((kill-buffer-query-functions nil))
              (kill-buffer chat-a))
            ;; The server frees the conversation (its turn cancelled) once the answer tells its id.
            (sly-agent-q-test-wait (lambda () (null (chats-test--conversations))) 20
                                   "the killed chat's conversation to be freed")
            ;; Past the slow stream's end: nothing ran anywhere.
            (sleep-for 2)
            (should-not (chats-test-bound-p lisp-a "*LATE*"))
            (should-not (chats-test-bound-p lisp-b "*LATE*"))))
      (let ((kill-buffer-query-functions nil))
        (dolist (chat (sly-agent-q-chats-list)) (kill-buffer chat)))
      (chats-test--end-image lisp-b)
      (chats-test-make-current lisp-a)
      (delete-directory alpha t)
      (delete-directory beta t))))

(provide 'sly-agent-q-chats-killed-test)
;;; sly-agent-q-chats-killed-test.el ends here
