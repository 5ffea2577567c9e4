;;; sly-agent-q-chats-closed-test.el --- A chat whose Lisp closed  -*- lexical-binding: t; -*-

;;; Commentary:

;; Run in an Emacs of its own (test/e2e/run.sh), after the two-chat test's
;; images are gone: it kills one of its two images.

;;; Code:

(require 'sly-agent-q-chats-test
         (expand-file-name "sly-agent-q-chats-test"
                           (file-name-directory (or load-file-name buffer-file-name))))

;;;; Found by a red team

(defconst chats-test--closed-lisp-script
  `((steps . [((content . [((type . "tool_use") (name . "debugger_state") (input . ((frames . 3))))]))
              ((content . [((type . "text") (text . "Alpha sees: {{last_tool_result}}"))]))])))

(ert-deftest chats-zz-a-chat-whose-lisp-closed-never-reads-anothers-debugger ()
  "Chat A's Lisp is closed; B's image sits in its debugger.  A's debugger_state
must fail naming A's closed connection, never read B's debugger."
  (sly-agent-q-test-connect-lisp)
  (let* ((lisp-a (sly-agent-q-bridge-current))
         (lisp-b (chats-test-second-image))
         (alpha (file-name-as-directory (make-temp-file "alpha" t)))
         (beta (file-name-as-directory (make-temp-file "beta" t)))
         (sly-agent-q-project-root nil)
         chat-a chat-b)
    (sly-agent-q-test-with-server chats-test--closed-lisp-script
      (setq chat-a (sly-agent-q-chats-create alpha lisp-a)
            chat-b (sly-agent-q-chats-create beta lisp-b))
      (chats-test-make-current lisp-b)
      (if (chats-test-sly-p)
          (let ((sly-dispatching-connection (cdr lisp-b))) (sly-eval-async '(cl:error "Boom in beta's image")))
        (let ((slime-dispatching-connection (cdr lisp-b))) (slime-eval-async '(cl:error "Boom in beta's image"))))
      (sly-agent-q-test-wait (lambda () (chats-test-debugger-of lisp-b)) 20 "beta's debugger")
      ;; Close alpha's Lisp.
      (let ((inferior (funcall (sly-agent-q-bridge-adapter-inferior (car lisp-a)) (cdr lisp-a))))
        (kill-process inferior))
      (sly-agent-q-test-wait (lambda () (not (process-live-p (cdr lisp-a)))) 20 "alpha's connection to close")
      (let ((a (chats-test-send chat-a "What does my debugger say?")))
        (sly-agent-q-test-wait a 30 "alpha's turn")
        (should-not (string-match-p "Boom in beta" (chats-test-text chat-a)))
        ;; The call failed, naming the chat's closed Lisp.
        (should (string-match-p "is closed" (chats-test-text chat-a)))))))


(provide 'sly-agent-q-chats-closed-test)
;;; sly-agent-q-chats-closed-test.el ends here
