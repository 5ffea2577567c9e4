;;; sly-agent-q-protocol-test.el --- Emacs and the server agree on the protocol  -*- lexical-binding: t; -*-

;;; Commentary:

;; The server describes its protocol (server/protocol.ts) with --protocol;
;; sly-agent-q-protocol.el is Emacs's half.  These tests fail when the two
;; disagree, when the server may send a notification or an emacs/call kind
;; that Emacs has no method for, or when Emacs has a method for one the
;; server does not declare.  (The server's test/server/protocol.test.ts
;; checks that every method Emacs may send has a server handler.)

;;; Code:

(require 'ert)
(require 'cl-lib)
(require 'sly-agent-q-test-helper)
(require 'sly-agent-q)

(defun sly-agent-q-protocol-test--server ()
  "The server's protocol description, parsed from the bundle's --protocol."
  (sly-agent-q-test-bundle-json "--protocol" 'alist))

(defun sly-agent-q-protocol-test--kebab (name)
  "NAME (a camelCase string) in kebab case, as a symbol."
  (let ((case-fold-search nil))
    (intern (downcase (replace-regexp-in-string "\\([a-z]\\)\\([A-Z]\\)" "\\1-\\2" name)))))

(defun sly-agent-q-protocol-test--sorted (list)
  "LIST sorted by its elements' printed forms."
  (sort (copy-sequence list) (lambda (a b) (string< (format "%S" a) (format "%S" b)))))

(defun sly-agent-q-protocol-test--eql-methods (generic position)
  "The values the methods of GENERIC specialize with eql at argument POSITION."
  ;; cl-generic offers no public way to list a generic's methods.
  (delq nil (mapcar (lambda (m)
                      (let ((spec (nth position (cl--generic-method-specializers m))))
                        (and (eq (car-safe spec) 'eql)
                             ;; Emacs 28 spells it (eql VALUE); later ones (eql 'VALUE).
                             (let ((v (cadr spec))) (if (eq (car-safe v) 'quote) (cadr v) v)))))
                    (cl--generic-method-table (cl--generic generic)))))

(ert-deftest sly-agent-q-protocol-matches-the-server ()
  "Every method, direction and kind, the call kinds and the error codes agree."
  (let ((server (sly-agent-q-protocol-test--server)))
    (should (eql (alist-get 'version server) sly-agent-q-protocol-table-version))
    (should (equal (sly-agent-q-protocol-test--sorted
                    (mapcar (lambda (m)
                              (list (intern (alist-get 'method m))
                                    (intern (alist-get 'direction m))
                                    (intern (alist-get 'kind m))))
                            (alist-get 'methods server)))
                   (sly-agent-q-protocol-test--sorted sly-agent-q-protocol-table-methods)))
    (should (equal (sly-agent-q-protocol-test--sorted (mapcar #'intern (alist-get 'emacsCallKinds server)))
                   (sly-agent-q-protocol-test--sorted sly-agent-q-protocol-table-call-kinds)))
    (should (equal (sly-agent-q-protocol-test--sorted
                    (mapcar (lambda (c) (cons (sly-agent-q-protocol-test--kebab (symbol-name (car c))) (cdr c)))
                            (alist-get 'errorCodes server)))
                   (sly-agent-q-protocol-test--sorted sly-agent-q-protocol-table-error-codes)))))

(ert-deftest sly-agent-q-protocol-every-notification-has-a-method ()
  "Each notification the server may send has its method, and each method a notification."
  (let ((sent (cl-loop for (method direction kind) in sly-agent-q-protocol-table-methods
                       when (and (eq direction 'server->emacs) (eq kind 'notification))
                       collect method))
        (handled (sly-agent-q-protocol-test--eql-methods 'sly-agent-q-handle-notification 1)))
    (dolist (method sent)
      (should (cons method (cl-find-method #'sly-agent-q-handle-notification nil
                                           `(t (eql ,method) t)))))
    (should (equal (sly-agent-q-protocol-test--sorted handled)
                   (sly-agent-q-protocol-test--sorted sent)))))

(ert-deftest sly-agent-q-protocol-every-call-kind-has-a-method ()
  "Each kind of emacs/call has its method, and no method answers another kind."
  (should (equal (sly-agent-q-protocol-test--sorted
                  (sly-agent-q-protocol-test--eql-methods 'sly-agent-q-handle-call 0))
                 (sly-agent-q-protocol-test--sorted sly-agent-q-protocol-table-call-kinds))))

(ert-deftest sly-agent-q-protocol-undeclared-methods-are-refused ()
  "Emacs sends no method the protocol lacks, and ignores one it receives."
  (should-error (sly-agent-q-server-request 'chat/sendd nil #'ignore))
  (should-error (sly-agent-q-server-notify 'context/changed nil))
  ;; A request must not go as a notification, nor the reverse.
  (should-error (sly-agent-q-server-notify 'chat/send nil))
  (should-error (sly-agent-q-server-async-request nil 'emacs/reply nil))
  (let ((calls 0))
    (cl-letf (((symbol-function 'sly-agent-q-handle-notification)
               (lambda (&rest _) (cl-incf calls))))
      (sly-agent-q-dispatch-notification nil 'chat/bogus '(:text "x"))
      (should (= calls 0))
      (sly-agent-q-dispatch-notification nil 'chat/textDelta '(:text "x"))
      (should (= calls 1)))))

(ert-deftest sly-agent-q-protocol-shapes-are-the-servers ()
  "The generated shapes are those the server describes (--protocol's shapes)."
  (let ((server (sly-agent-q-protocol-test--server)))
    (should (equal (sort (mapcar (lambda (s) (symbol-name (car s))) (alist-get 'shapes server)) #'string<)
                   (sort (mapcar #'car sly-agent-q-protocol-table-shapes) #'string<)))))

(ert-deftest sly-agent-q-protocol-renamed-key-fails ()
  "The configuration Emacs writes out is in shape; renamed in the description, a key fails the check."
  (let* ((sly-agent-q-model "claude-sonnet-4-5")
         (params (list :configuration (sly-agent-q-configuration-for-server)))
         (renamed nil))
    (should (plist-get (plist-get params :configuration) :model))
    (should-not (sly-agent-q-protocol-check "configuration/change" :params params))
    ;; The description with "model" renamed: the same message no longer passes.
    (let ((types (copy-tree sly-agent-q-protocol-table-shape-types)))
      (setcar (assoc "model" (cdr (assoc "Configuration" types))) "modelRenamed")
      (setq renamed types))
    (let ((sly-agent-q-protocol-table-shape-types renamed))
      (should (member "configuration/change :params.configuration: unknown key model"
                      (sly-agent-q-protocol-check "configuration/change" :params params))))
    ;; And a key Emacs would misspell is caught against the real description.
    (should (member "chat/send :params: unknown key txt"
                    (sly-agent-q-protocol-check "chat/send" :params '(:txt "hi"))))))

(provide 'sly-agent-q-protocol-test)
;;; sly-agent-q-protocol-test.el ends here
