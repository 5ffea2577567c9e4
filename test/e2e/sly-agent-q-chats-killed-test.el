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
             (chats-test--kill-unheard chat-a)
             ;; Whatever is current is beta's: a call run there lands in beta's image.
             (chats-test-make-current lisp-b)
             (with-current-buffer chat-b
               ,@body))
         (let ((kill-buffer-query-functions nil))
           (dolist (chat (sly-agent-q-chats-list)) (kill-buffer chat)))
         ;; Beta's image gone for good, so that the next test starts its own
         ;; (the Lisp mode asks before starting one beside a live one).
         (let ((inferior (ignore-errors (funcall (sly-agent-q-bridge-adapter-inferior (car lisp-b)) (cdr lisp-b)))))
           (when (process-live-p inferior)
             (kill-process inferior)
             (sly-agent-q-test-wait (lambda () (not (process-live-p inferior))) 20 "beta's image to end"))
           (when (and (processp inferior) (buffer-live-p (process-buffer inferior)))
             (let ((kill-buffer-query-functions nil))
               (kill-buffer (process-buffer inferior)))))
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

(provide 'sly-agent-q-chats-killed-test)
;;; sly-agent-q-chats-killed-test.el ends here
