;;; sly-agent-q-security-e2e-test.el --- Secrets never leave a real image  -*- lexical-binding: t; -*-

;;; Commentary:

;; Attack 9, the Emacs part: a real SBCL under SLIME (or SLY, with
;; SLY_AGENT_Q_E2E_LISP=sly and SLY_DIR), the real bundled server and
;; the mock LLM.  The model evaluates forms that return the API key
;; found in the image's environment and the key handed to the server;
;; neither may show in the chat, the events buffer or what the model
;; receives.  Run with test/security/run.sh.

;;; Code:

(require 'sly-agent-q-test-helper
         (expand-file-name "../elisp/sly-agent-q-test-helper"
                           (file-name-directory (or load-file-name buffer-file-name))))

(declare-function slime-start "ext:slime")
(declare-function slime-connected-p "ext:slime")
(declare-function sly-start "ext:sly")
(declare-function sly-connected-p "ext:sly")

(defconst sly-agent-q-security-e2e-lisp (intern (or (getenv "SLY_AGENT_Q_E2E_LISP") "slime"))
  "Which Lisp mode these tests drive: `slime' or `sly'.")

(defconst sly-agent-q-security-e2e-env-key "sk-ant-env-FAKE-abcdef9876543210"
  "A fake key exported in the environment the image inherits.")

(defvar sly-agent-q-security-e2e--ready nil "Set when the Lisp mode has connected.")

(defun sly-agent-q-security-e2e--set-ready ()
  "Note that the Lisp mode has finished connecting."
  (setq sly-agent-q-security-e2e--ready t))

(defun sly-agent-q-security-e2e--connected-p ()
  "Non-nil when the Lisp mode under test is connected."
  (if (eq sly-agent-q-security-e2e-lisp 'sly) (sly-connected-p) (slime-connected-p)))

(defun sly-agent-q-security-e2e--connect ()
  "Start SBCL under the Lisp mode under test, the fake key in its environment."
  (unless (executable-find "sbcl") (ert-skip "sbcl is not installed"))
  (unless (if (eq sly-agent-q-security-e2e-lisp 'sly)
              (sly-agent-q-dev-require-sly)
            (sly-agent-q-dev-require-slime))
    (ert-skip (format "%s is not available" sly-agent-q-security-e2e-lisp)))
  ;; Exported as the README's quick start says: the image inherits it.
  (setenv "ANTHROPIC_API_KEY" sly-agent-q-security-e2e-env-key)
  (unless (sly-agent-q-security-e2e--connected-p)
    (add-hook (if (eq sly-agent-q-security-e2e-lisp 'sly) 'sly-connected-hook 'slime-connected-hook)
              #'sly-agent-q-security-e2e--set-ready)
    (if (eq sly-agent-q-security-e2e-lisp 'sly)
        (sly-start :program "sbcl" :program-args '("--noinform" "--no-userinit"))
      (slime-start :program "sbcl" :program-args '("--noinform" "--no-userinit")))
    (sly-agent-q-test-wait (lambda () (and sly-agent-q-security-e2e--ready
                                           (sly-agent-q-security-e2e--connected-p)))
                           120 "the Lisp to connect")))

(defun sly-agent-q-security-e2e--eval-step (form)
  "A mock step in which the model calls eval_form on FORM."
  `((content . [((type . "tool_use") (name . "eval_form")
                 (input . ((form . ,form) (package . "CL-USER"))))])
    (stop_reason . "tool_use")))

(defun sly-agent-q-security-e2e--count (needle haystack)
  "How many times NEEDLE occurs in HAYSTACK, or nil for none.
A failing assertion then shows a count, not a whole buffer."
  (let ((n (length (split-string haystack (regexp-quote needle)))))
    (and (> n 1) (1- n))))

(ert-deftest sly-agent-q-security-secrets-redacted-from-image-results ()
  "Attack 9: keys returned by the image reach neither the chat, the events log nor the model."
  (sly-agent-q-security-e2e--connect)
  (let ((root (file-name-as-directory (make-temp-file "saq-sec-e2e" t))))
    (unwind-protect
        (let ((sly-agent-q-project-root root))
          (sly-agent-q-test-with-server
              `((steps . [,(sly-agent-q-security-e2e--eval-step
                            "(sb-ext:posix-getenv \"ANTHROPIC_API_KEY\")")
                          ;; The key handed to the server, built so the form does not hold it.
                          ,(sly-agent-q-security-e2e--eval-step
                            "(concatenate 'string \"sk-ant-test-\" \"SECRET-0123456789\")")
                          ((content . [((type . "text")
                                        (text . "The last result: {{last_tool_result}}"))]))]))
            (let ((outcome (sly-agent-q-test-send "Show me the key" 60)))
              (should (eq (plist-get outcome :status) 'finished)))
            (let ((chat (sly-agent-q-test-chat-text))
                  (events (with-current-buffer (jsonrpc-events-buffer (sly-agent-q-server-connection))
                            (buffer-substring-no-properties (point-min) (point-max))))
                  ;; The bodies: the key rightly travels in the request's headers.
                  (requests (json-encode (mapcar (lambda (r) (alist-get 'body r))
                                                 (sly-agent-q-test-mock-requests)))))
              (dolist (key (list sly-agent-q-security-e2e-env-key sly-agent-q-test-api-key))
                (should-not (sly-agent-q-security-e2e--count key chat))
                (should-not (sly-agent-q-security-e2e--count key events))
                (should-not (sly-agent-q-security-e2e--count key requests)))
              ;; The results did come back, with the marker in place of each key.
              (should (sly-agent-q-security-e2e--count "[secret ANTHROPIC_API_KEY redacted]" requests))
              (should (sly-agent-q-security-e2e--count "[secret ANTHROPIC_API_KEY redacted]" chat)))))
      (delete-directory root t))))

(provide 'sly-agent-q-security-e2e-test)
;;; sly-agent-q-security-e2e-test.el ends here
