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

(defconst sly-agent-q-security-e2e-lisp sly-agent-q-test-lisp
  "Which Lisp mode these tests drive: `slime' or `sly'.")

(defconst sly-agent-q-security-e2e-env-key "sk-ant-env-FAKE-abcdef9876543210"
  "A fake key exported in the environment the image inherits.")

(defun sly-agent-q-security-e2e--connect ()
  "Start SBCL under the Lisp mode under test, the fake key in its environment."
  ;; Exported as the README's quick start says: the image inherits it.
  (setenv "ANTHROPIC_API_KEY" sly-agent-q-security-e2e-env-key)
  (sly-agent-q-test-connect-lisp))

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
                  (events (with-current-buffer (jsonrpc-events-buffer (sly-agent-q-connection-current))
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

;;;; The programmer's loop's edits

(declare-function slime-eval "ext:slime")
(declare-function sly-eval "ext:sly")

(defun sly-agent-q-security-e2e--eval (form)
  "Evaluate FORM in the image, synchronously (tests only)."
  (if (eq sly-agent-q-security-e2e-lisp 'sly) (sly-eval form) (slime-eval form)))

(defun sly-agent-q-security-e2e--step (name input)
  "A mock step in which the model calls the tool NAME with INPUT (an alist)."
  `((content . [((type . "tool_use") (name . ,name) (input . ,input))])
    (stop_reason . "tool_use")))

(ert-deftest sly-agent-q-security-definition-edits-stay-in-the-project ()
  "A hostile model cannot edit or compile, through the definition tools, a file outside the project root.
replace_definition and insert_form on a definition whose file is outside
are refused before anyone is asked; the internal steps (compile_file_form,
definition_edit) cannot be called; the file and the image are unchanged."
  (sly-agent-q-security-e2e--connect)
  (let* ((root (file-name-as-directory (make-temp-file "saq-sec-root" t)))
         (outside-dir (file-name-as-directory (make-temp-file "saq-sec-outside" t)))
         (outside (expand-file-name "outside.lisp" outside-dir))
         (original "(in-package :cl-user)\n\n(defun saq-outside-definition ()\n  :original)\n")
         (asked nil))
    (unwind-protect
        (progn
          (with-temp-file outside (insert original))
          (should (eq (sly-agent-q-security-e2e--eval
                       `(cl:progn (cl:load (cl:compile-file ,outside)) (cl:funcall 'cl-user::saq-outside-definition)))
                      :original))
          (let ((sly-agent-q-project-root root)
                (sly-agent-q-approval-function
                 (lambda (request callback)
                   (push request asked)
                   (funcall callback '(:decision "approved")))))
            (sly-agent-q-test-with-server
                `((steps . [,(sly-agent-q-security-e2e--step
                              "replace_definition"
                              '((symbol . "cl-user::saq-outside-definition")
                                (new_text . "(defun saq-outside-definition () :hacked)")))
                            ,(sly-agent-q-security-e2e--step
                              "insert_form"
                              '((after . "cl-user::saq-outside-definition")
                                (text . "(defun saq-outside-extra () :hacked)")))
                            ,(sly-agent-q-security-e2e--step
                              "insert_form"
                              `((path . ,outside) (text . "(defun saq-outside-extra () :hacked)")))
                            ,(sly-agent-q-security-e2e--step
                              "compile_file_form"
                              `((path . ,outside) (text . "(defun saq-outside-definition ()\n  :original)")))
                            ,(sly-agent-q-security-e2e--step
                              "definition_edit"
                              '((symbol . "cl-user::saq-outside-definition")
                                (text . "(defun x () #.(cl-user::saq-outside-definition))")))
                            ((content . [((type . "text") (text . "done"))]))]))
              (should (eq (plist-get (sly-agent-q-test-send "Edit it" 90) :status) 'finished))
              (let ((results (mapcar #'car (sly-agent-q-test-tool-results))))
                (should (= (length results) 5))
                (let ((text (mapconcat #'identity results "\n")))
                  (should (= 3 (cl-count-if (lambda (c) (string-match-p "outside the project" c))
                                            results)))
                  (should (string-match-p "outside the project" text))
                  (should (string-match-p "compile_file_form is not available" text))
                  (should (string-match-p "definition_edit is not available" text)))))
            (should-not asked))
          (should (equal (with-temp-buffer (insert-file-contents outside) (buffer-string)) original))
          (should (eq (sly-agent-q-security-e2e--eval '(cl:funcall 'cl-user::saq-outside-definition))
                      :original))
          (should-not (sly-agent-q-security-e2e--eval '(cl:fboundp 'cl-user::saq-outside-extra))))
      (delete-directory root t)
      (delete-directory outside-dir t))))

;;;; read_definition outside the project root: the user's rule

(ert-deftest sly-agent-q-security-read-definition-outside-follows-the-rule ()
  "A definition loaded from a file outside the project: asked (denied: nothing read), denied, or allowed."
  (sly-agent-q-security-e2e--connect)
  (let* ((root (file-name-as-directory (make-temp-file "saq-sec-root" t)))
         (outside-dir (file-name-as-directory (make-temp-file "saq-sec-library" t)))
         (outside (expand-file-name "library.lisp" outside-dir)))
    (unwind-protect
        (progn
          (with-temp-file outside
            (insert "(in-package :cl-user)\n\n(defun saq-library-definition ()\n  :library-source-text)\n"))
          (sly-agent-q-security-e2e--eval `(cl:load (cl:compile-file ,outside)))
          (dolist (rule '(ask deny allow))
            (let ((sly-agent-q-project-root root)
                  (sly-agent-q-read-outside-project rule)
                  (asked nil))
              (sly-agent-q-test-with-server
                  `((steps . [,(sly-agent-q-security-e2e--step
                                "read_definition" '((symbol . "cl-user::saq-library-definition")))
                              ((content . [((type . "text") (text . "done"))]))]))
                ;; Bound here: the server macro binds it to nil around its body.
                (let ((sly-agent-q-approval-function
                       (lambda (request callback)
                         (push request asked)
                         (funcall callback '(:decision "denied" :reason "not the library")))))
                  (should (eq (plist-get (sly-agent-q-test-send "Read it" 90) :status) 'finished))
                  (let ((result (car (sly-agent-q-test-tool-results))))
                    (pcase rule
                      ('allow
                       (should-not asked)
                       (should-not (cdr result))
                       (should (string-match-p ":library-source-text" (car result))))
                      ('deny
                       (should-not asked)
                       (should (cdr result))
                       (should (string-match-p "outside the project root, and reading there is denied" (car result)))
                       (should-not (string-match-p ":library-source-text" (car result))))
                      ('ask
                       (should (= 1 (length asked)))
                       (should (equal (plist-get (plist-get (car asked) :arguments) :file_outside_the_project)
                                      (file-truename outside)))
                       (should (cdr result))
                       (should (string-match-p "the user did not allow it (not the library)" (car result)))
                       (should-not (string-match-p ":library-source-text" (car result)))))))))))
      (delete-directory root t)
      (delete-directory outside-dir t))))

(provide 'sly-agent-q-security-e2e-test)
;;; sly-agent-q-security-e2e-test.el ends here
