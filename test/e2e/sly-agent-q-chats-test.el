;;; sly-agent-q-chats-test.el --- Two chats, two projects, two Lisp images  -*- lexical-binding: t; -*-

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

;; Several chats at once, end to end: the real server, the mock model,
;; two SBCL images under SLIME or SLY (SLY_AGENT_Q_E2E_LISP), two
;; chats on two project roots, each talking to its own image.  The
;; current connection is the other chat's image throughout: a call run
;; in whichever connection is current would land in the wrong image.
;;
;; - both chats evaluate at once; C-c C-k in one stops its own
;;   evaluation (its image never finishes it) while the other's result
;;   arrives;
;; - an approval appears in the chat that asked, and the write lands in
;;   that chat's project;
;; - the debugger's "ask the agent" of one image goes to that image's chat,
;;   and that chat's debugger tools look at that image;
;; - the server killed while both turns run is said in both chats, and
;;   both go on after the restart.
;;
;; Found by a red team, with one image: a chat's file edit is reviewed
;; and written in the chat's root while the user's buffer is in another
;; project; a chat killed while its approval waits asks the model
;; nothing more.

;;; Code:

(require 'sly-agent-q-test-helper
         (expand-file-name "../elisp/sly-agent-q-test-helper"
                           (file-name-directory (or load-file-name buffer-file-name))))
(require 'text-property-search)

(defvar slime-dispatching-connection)
(defvar sly-dispatching-connection)
(defvar slime-default-connection)
(defvar sly-default-connection)
(defvar slime-buffer-connection)
(defvar sly-buffer-connection)
(declare-function slime-eval-async "ext:slime" (sexp &optional cont package))
(declare-function sly-eval-async "ext:sly" (sexp &optional cont package))
(declare-function slime-start "ext:slime")
(declare-function sly-start "ext:sly")
(declare-function sldb-abort "ext:slime" ())
(declare-function sly-db-abort "ext:sly" ())

(defun chats-test-sly-p ()
  "Non-nil when the Lisp mode under test is SLY."
  (eq sly-agent-q-test-lisp 'sly))

(defun chats-test-eval (lisp form)
  "Evaluate FORM in the image of LISP, (ADAPTER . CONNECTION), and return its value.
Asynchronously, waited for: a synchronous evaluation inside a wait
for another one is refused by the Lisp modes."
  (let (answer)
    (if (chats-test-sly-p)
        (let ((sly-dispatching-connection (cdr lisp)))
          (sly-eval-async form (lambda (v) (setq answer (list v)))))
      (let ((slime-dispatching-connection (cdr lisp)))
        (slime-eval-async form (lambda (v) (setq answer (list v))))))
    (sly-agent-q-test-wait (lambda () answer) 20 (format "the image's answer to %S" form))
    (car answer)))

(defun chats-test-bound-p (lisp name)
  "Non-nil if CL-USER::NAME is bound in the image of LISP."
  (chats-test-eval lisp `(cl:boundp (cl:intern ,name "COMMON-LISP-USER"))))

(defun chats-test-connections ()
  "The open connections of the Lisp mode under test."
  (cl-remove-if-not #'process-live-p
                    (if (chats-test-sly-p) (symbol-value 'sly-net-processes)
                      (symbol-value 'slime-net-processes))))

(defun chats-test-second-image ()
  "Start a second SBCL under the Lisp mode under test; return its Lisp."
  (let ((before (chats-test-connections))
        (program (assoc "sbcl" sly-agent-q-test--lisp-programs)))
    (if (chats-test-sly-p)
        (sly-start :program (car program) :program-args (cdr program)
                   :buffer "*sly-inferior-lisp second*")
      (slime-start :program (car program) :program-args (cdr program)
                   :buffer "*inferior-lisp second*"))
    (sly-agent-q-test-wait (lambda () (cl-set-difference (chats-test-connections) before))
                           120 "the second image to connect")
    (let ((conn (car (cl-set-difference (chats-test-connections) before))))
      ;; Its contribs load after the connection opens: the connected hook says when that is done.
      (should (eq (chats-test-eval (cons nil conn) t) t))
      (cons (car (cl-remove-if-not
                  (lambda (a) (equal (sly-agent-q-bridge-adapter-name a) (if (chats-test-sly-p) "SLY" "SLIME")))
                  sly-agent-q-bridge-adapters))
            conn))))

(defun chats-test-make-current (lisp)
  "Make LISP's connection the Lisp mode's current (default) connection."
  (if (chats-test-sly-p) (setq sly-default-connection (cdr lisp))
    (setq slime-default-connection (cdr lisp))))

(defun chats-test-send (chat text)
  "Send TEXT in CHAT; return a function that returns the turn's outcome, once it ended."
  (let (outcome)
    (with-current-buffer chat (sly-agent-q-send text (lambda (plist) (setq outcome plist))))
    (lambda () outcome)))

(defun chats-test-text (chat)
  "The text of CHAT."
  (with-current-buffer chat (buffer-substring-no-properties (point-min) (point-max))))

(defun chats-test-has-approval-p (chat)
  "Non-nil if CHAT shows an approval."
  (with-current-buffer chat
    (save-excursion
      (goto-char (point-min))
      (text-property-search-forward 'sly-agent-q-approval nil nil))))

(defun chats-test-debugger-of (lisp)
  "The debugger buffer of LISP's connection, or nil."
  (cl-find-if (lambda (b)
                (with-current-buffer b
                  (and (memq major-mode '(sldb-mode sly-db-mode))
                       (eq (if (chats-test-sly-p) sly-buffer-connection slime-buffer-connection)
                           (cdr lisp)))))
              (buffer-list)))

(defun chats-test-requests ()
  "How many requests the mock answered."
  (length (sly-agent-q-test-mock-requests)))

(defconst chats-test-script
  `((steps
     . [;; 0, alpha: an evaluation of 6 s, cancelled after 1 s.
        ((content . [((type . "tool_use") (name . "eval_form")
                      (input . ((form . "(progn (defparameter cl-user::*alpha-started* t) (sleep 6) (defparameter cl-user::*alpha-done* t))")
                                (package . "CL-USER"))))]))
        ;; 1, beta: an evaluation of 3 s, at the same time.
        ((content . [((type . "tool_use") (name . "eval_form")
                      (input . ((form . "(progn (sleep 3) (defparameter cl-user::*beta-sum* (+ 40 2)) (+ 40 2))")
                                (package . "CL-USER"))))]))
        ;; 2, beta.
        ((content . [((type . "text") (text . "Beta says {{last_tool_result}}."))]))
        ;; 3-4, beta: a write that asks for approval.
        ((content . [((type . "tool_use") (name . "write_file")
                      (input . ((path . "note.txt") (content . "from beta\n"))))]))
        ((content . [((type . "text") (text . "Written."))]))
        ;; 5-6, alpha: its debugger's state, asked while beta's Lisp is current.
        ((content . [((type . "tool_use") (name . "debugger_state") (input . ((frames . 3))))]))
        ((content . [((type . "text") (text . "Alpha's debugger: {{last_tool_result}}"))]))
        ;; 7-8: an evaluation in each, when the server is killed.
        ((content . [((type . "tool_use") (name . "eval_form")
                      (input . ((form . "(sleep 8)") (package . "CL-USER"))))]))
        ((content . [((type . "tool_use") (name . "eval_form")
                      (input . ((form . "(sleep 8)") (package . "CL-USER"))))]))
        ;; 9-10: after the restart.
        ((content . [((type . "text") (text . "Alpha goes on."))]))
        ((content . [((type . "text") (text . "Beta goes on."))]))]))
  "What the model says, in the order the two chats ask.")

(ert-deftest chats-two-chats-two-images ()
  "Two chats on two projects and two images: cancel, approval, debugger, server death."
  (sly-agent-q-test-connect-lisp)
  (let* ((lisp-a (sly-agent-q-bridge-current))
         (lisp-b (chats-test-second-image))
         (alpha (file-name-as-directory (make-temp-file "alpha" t)))
         (beta (file-name-as-directory (make-temp-file "beta" t)))
         (sly-agent-q-project-root nil)
         (sly-agent-q-image-timeout 60)
         chat-a chat-b)
    (should-not (eq (cdr lisp-a) (cdr lisp-b)))
    (unwind-protect
        (sly-agent-q-test-with-server chats-test-script
          (setq chat-a (sly-agent-q-chats-create alpha lisp-a)
                chat-b (sly-agent-q-chats-create beta lisp-b))
          ;; Each header names its project and its Lisp.
          (with-current-buffer chat-a
            (should (string-match-p (regexp-quote (file-name-nondirectory (directory-file-name alpha)))
                                    (sly-agent-q-chats-label))))
          (should-not (equal (sly-agent-q-chats-label chat-a) (sly-agent-q-chats-label chat-b)))
          ;; The current connection is beta's: alpha's calls must not go there.
          (chats-test-make-current lisp-b)
          ;; Both evaluate at once; C-c C-k in alpha stops alpha's alone.
          (let ((a (chats-test-send chat-a "Sleep in alpha"))
                b started)
            (sly-agent-q-test-wait (lambda () (chats-test-bound-p lisp-a "*ALPHA-STARTED*")) 30
                                   "alpha's evaluation to start in alpha's image")
            (setq started (float-time))
            (should-not (chats-test-bound-p lisp-b "*ALPHA-STARTED*"))
            (setq b (chats-test-send chat-b "Sum in beta"))
            (sly-agent-q-test-wait (lambda () (>= (chats-test-requests) 2)) 30 "beta's request")
            (sly-agent-q-test-sleep 1)
            (with-current-buffer chat-a (call-interactively #'sly-agent-q-cancel))
            (sly-agent-q-test-wait a 20 "alpha's turn to end")
            (should (eq (plist-get (funcall a) :status) 'cancelled))
            (sly-agent-q-test-wait b 30 "beta's turn to end")
            (should (eq (plist-get (funcall b) :status) 'finished))
            (should (string-match-p "42" (plist-get (funcall b) :text)))
            (should (equal (chats-test-eval lisp-b '(cl:symbol-value (cl:intern "*BETA-SUM*" "COMMON-LISP-USER"))) 42))
            (should-not (chats-test-bound-p lisp-a "*BETA-SUM*"))
            ;; Alpha's evaluation was stopped in its image: it never ends.
            (sly-agent-q-test-sleep (max 0 (- (+ started 7) (float-time))))
            (should-not (chats-test-bound-p lisp-a "*ALPHA-DONE*"))
            (should (string-match-p "\\[cancelled\\]" (chats-test-text chat-a)))
            (should-not (string-match-p "\\[cancelled\\]" (chats-test-text chat-b))))
          ;; An approval appears in the chat that asked; the file is written in its project.
          (let ((b (chats-test-send chat-b "Write a note")))
            (sly-agent-q-test-wait (lambda () (chats-test-has-approval-p chat-b)) 20 "beta's approval")
            (should-not (chats-test-has-approval-p chat-a))
            (with-current-buffer chat-b (sly-agent-q-approve))
            (sly-agent-q-test-wait b 20 "beta's write")
            (should (eq (plist-get (funcall b) :status) 'finished))
            (should (file-exists-p (expand-file-name "note.txt" beta)))
            (should-not (file-exists-p (expand-file-name "note.txt" alpha))))
          ;; The debugger of alpha's image asks alpha's chat.
          (if (chats-test-sly-p)
              (let ((sly-dispatching-connection (cdr lisp-a)))
                (sly-eval-async '(cl:error "Boom in alpha's image")))
            (let ((slime-dispatching-connection (cdr lisp-a)))
              (slime-eval-async '(cl:error "Boom in alpha's image"))))
          (sly-agent-q-test-wait (lambda () (chats-test-debugger-of lisp-a)) 20 "alpha's debugger")
          (let ((debugger (chats-test-debugger-of lisp-a)))
            (unwind-protect
                (progn
                  (sly-agent-q-test-sleep 1)
                  (with-current-buffer debugger (sly-agent-q-debugger-ask))
                  (should (string-match-p "Boom in alpha" (with-current-buffer chat-a (sly-agent-q-chat-input-text))))
                  (should (equal (with-current-buffer chat-b (sly-agent-q-chat-input-text)) ""))
                  ;; Alpha's debugger tools look at alpha's image, though beta's is current.
                  (with-current-buffer chat-a (sly-agent-q-chat-set-input ""))
                  (let ((a (chats-test-send chat-a "What does the debugger say?")))
                    (sly-agent-q-test-wait a 30 "alpha's debugger turn")
                    (should (eq (plist-get (funcall a) :status) 'finished))
                    (should (string-match-p "Boom in alpha" (plist-get (funcall a) :text)))))
              (with-current-buffer chat-a (sly-agent-q-chat-set-input ""))
              (when (buffer-live-p debugger)
                (with-current-buffer debugger (if (chats-test-sly-p) (sly-db-abort) (sldb-abort))))))
          ;; The server killed while both chats' turns run: said in both; both go on.
          (let* ((asked (chats-test-requests))
                 (a (chats-test-send chat-a "Sleep again"))
                 (b nil))
            (sly-agent-q-test-wait (lambda () (>= (chats-test-requests) (+ asked 1))) 20 "alpha's request")
            (setq b (chats-test-send chat-b "Sleep again"))
            (sly-agent-q-test-wait (lambda () (>= (chats-test-requests) (+ asked 2))) 20 "beta's request")
            (sly-agent-q-test-sleep 1)
            (signal-process (jsonrpc--process (sly-agent-q-connection-current)) 'kill)
            (sly-agent-q-test-wait (lambda () (and (funcall a) (funcall b))) 20 "both turns to end")
            (should (eq (plist-get (funcall a) :status) 'failed))
            (should (eq (plist-get (funcall b) :status) 'failed))
            (dolist (chat (list chat-a chat-b))
              (should (string-match-p "goes on from its saved copy" (chats-test-text chat)))))
          (let ((a (chats-test-send chat-a "Go on")))
            (sly-agent-q-test-wait a 30 "alpha after the restart")
            (should (eq (plist-get (funcall a) :status) 'finished))
            (should (string-match-p "Alpha goes on" (chats-test-text chat-a))))
          (let ((b (chats-test-send chat-b "Go on")))
            (sly-agent-q-test-wait b 30 "beta after the restart")
            (should (eq (plist-get (funcall b) :status) 'finished))
            (should (string-match-p "Beta goes on" (chats-test-text chat-b)))))
      (let ((kill-buffer-query-functions nil))
        (dolist (chat (sly-agent-q-chats-list)) (kill-buffer chat)))
      (let ((inferior (ignore-errors (funcall (sly-agent-q-bridge-adapter-inferior (car lisp-b)) (cdr lisp-b)))))
        (when (process-live-p inferior) (kill-process inferior)))
      (delete-directory alpha t)
      (delete-directory beta t))))

;;;; Found by a red team

(defun chats-test-file-text (file)
  "The text of FILE on disk."
  (with-temp-buffer (insert-file-contents file) (buffer-string)))

(defun chats-test-review-buffer ()
  "The review buffer of a proposed edit shown now, or nil."
  (cl-find-if (lambda (b) (string-prefix-p "*sly-agent-q-diff" (buffer-name b))) (buffer-list)))

(defconst chats-test--review-script
  `((steps . [((content . [((type . "tool_use") (name . "propose_file_edit")
                            (input . ((path . "a.txt") (old_text . "alpha one") (new_text . "EDITED"))))]))
              ((content . [((type . "tool_use") (name . "propose_file_edit")
                            (input . ((path . "only-alpha.txt") (old_text . "first") (new_text . "EDITED"))))]))
              ;; Rejected by the user.
              ((content . [((type . "tool_use") (name . "propose_file_edit")
                            (input . ((path . "a.txt") (old_text . "alpha two") (new_text . "REJECTED"))))]))
              ((content . [((type . "text") (text . "Result: {{last_tool_result}}"))]))])))

(defun chats-test--review-and-accept (what &optional reject)
  "Wait for the review of WHAT, accept it whole (REJECT non-nil: reject it).
Return what it showed: (TEXT . ITS-DEFAULT-DIRECTORY)."
  (let (review)
    (sly-agent-q-test-wait (lambda () (setq review (chats-test-review-buffer))) 20 (format "the review of %s" what))
    ;; Its hunks come from the server: the review is drawn once they are there.
    (sly-agent-q-test-wait (lambda () (sly-agent-q-diff-review-showing-p review)) 20 (format "the hunks of %s" what))
    (with-current-buffer review
      (prog1 (cons (buffer-substring-no-properties (point-min) (point-max)) default-directory)
        (if reject
            (sly-agent-q-diff-review-abort)
          (sly-agent-q-diff-review-accept-all)
          (sly-agent-q-diff-review-finish))))))

(ert-deftest chats-a-chats-edit-is-reviewed-and-written-in-its-own-root ()
  "A chat on alpha proposes an edit of a.txt while the user's buffer visits beta's a.txt.
The review must show alpha's a.txt, the one written; beta's is left
alone; a review rejected is forgotten, the one of alpha's a.txt.  Before: the review was drawn from beta's a.txt (the user's
current project) while alpha's was written; and an edit of a file
beta lacks showed no review and was not applied."
  (sly-agent-q-test-connect-lisp)
  (let* ((lisp-a (sly-agent-q-bridge-current))
         (alpha (file-name-as-directory (make-temp-file "alpha" t)))
         (beta (file-name-as-directory (make-temp-file "beta" t)))
         (sly-agent-q-project-root nil)
         (user-buffer (progn (with-temp-file (expand-file-name "a.txt" beta)
                               (insert "alpha one\nBETA-PRIVATE line\n"))
                             (find-file-noselect (expand-file-name "a.txt" beta))))
         ;; The user works in beta.
         (sly-agent-q-files-default-buffer-function (lambda () user-buffer))
         (sly-agent-q-diff-review-display-function #'ignore))
    (with-temp-file (expand-file-name "a.txt" alpha) (insert "alpha one\nalpha two\n"))
    (with-temp-file (expand-file-name "only-alpha.txt" alpha) (insert "first\nsecond\n"))
    (unwind-protect
        (sly-agent-q-test-with-server chats-test--review-script
          (let* ((chat (sly-agent-q-chats-create alpha lisp-a))
                 (turn (chats-test-send chat "Edit a.txt and only-alpha.txt")))
            (let ((shown (chats-test--review-and-accept "a.txt")))
              (should-not (string-match-p "BETA-PRIVATE" (car shown)))
              (should (string-match-p "alpha two" (car shown)))
              (should (equal (cdr shown) alpha)))
            (let ((shown (chats-test--review-and-accept "only-alpha.txt")))
              (should (string-match-p "second" (car shown)))
              (should (equal (cdr shown) alpha)))
            (should (string-match-p "REJECTED" (car (chats-test--review-and-accept "a.txt again" t))))
            (sly-agent-q-test-wait turn 30 "the turn")
            (should (eq (plist-get (funcall turn) :status) 'finished))
            (should (equal (chats-test-file-text (expand-file-name "a.txt" alpha)) "EDITED\nalpha two\n"))
            (should (equal (chats-test-file-text (expand-file-name "only-alpha.txt" alpha)) "EDITED\nsecond\n"))
            (should (equal (chats-test-file-text (expand-file-name "a.txt" beta)) "alpha one\nBETA-PRIVATE line\n"))
            (should (equal (with-current-buffer user-buffer (buffer-string)) "alpha one\nBETA-PRIVATE line\n"))
            (should-not (file-exists-p (expand-file-name "only-alpha.txt" beta)))
            (should (equal (mapcar #'cdr (sly-agent-q-test-tool-results)) '(nil nil t)))
            ;; The rejected review was forgotten: the one of alpha's a.txt.
            (should (zerop (hash-table-count sly-agent-q-diff--reviews)))))
      (let ((kill-buffer-query-functions nil))
        (dolist (chat (sly-agent-q-chats-list)) (kill-buffer chat))
        (kill-buffer user-buffer))
      (delete-directory alpha t)
      (delete-directory beta t))))

(defconst chats-test--kill-while-approval-script
  `((steps . [((content . [((type . "text") (text . "Hello."))]))
              ((content . [((type . "tool_use") (name . "write_file")
                            (input . ((path . "note.txt") (content . "never\n"))))]))
              ;; What the model would do next, given the denial: paid for, and run.
              ((content . [((type . "tool_use") (name . "eval_form")
                            (input . ((form . "(defparameter cl-user::*after-kill* t)") (package . "CL-USER"))))]))
              ((content . [((type . "text") (text . "Went on: {{last_tool_result}}"))]))])))

(ert-deftest chats-a-chat-killed-while-its-approval-waits-asks-the-model-nothing-more ()
  "A chat is killed while its write waits for approval: its turn ends there.
No request more to the model, nothing run in the image, nothing
written.  Before: the approval's denial reached the server before the
chat's cancel, and the turn went on to the model."
  (sly-agent-q-test-connect-lisp)
  (let* ((lisp-a (sly-agent-q-bridge-current))
         (alpha (file-name-as-directory (make-temp-file "alpha" t)))
         (sly-agent-q-project-root nil))
    (unwind-protect
        (sly-agent-q-test-with-server chats-test--kill-while-approval-script
          (chats-test-eval lisp-a '(cl:makunbound (cl:intern "*AFTER-KILL*" "COMMON-LISP-USER")))
          (let ((chat (sly-agent-q-chats-create alpha lisp-a)))
            (let ((turn (chats-test-send chat "Hello")))
              (sly-agent-q-test-wait turn 30 "the first turn"))
            (chats-test-send chat "Write a note")
            (sly-agent-q-test-wait (lambda () (chats-test-has-approval-p chat)) 20 "the approval")
            (should (= (chats-test-requests) 2))
            (let ((kill-buffer-query-functions nil))
              (kill-buffer chat))
            ;; The extra request came at once (well under a second): wait past it.
            (sly-agent-q-test-sleep 3)
            (should (= (chats-test-requests) 2))
            (should-not (chats-test-bound-p lisp-a "*AFTER-KILL*"))
            (should-not (file-exists-p (expand-file-name "note.txt" alpha)))))
      (let ((kill-buffer-query-functions nil))
        (dolist (chat (sly-agent-q-chats-list)) (kill-buffer chat)))
      (delete-directory alpha t))))

(provide 'sly-agent-q-chats-test)
;;; sly-agent-q-chats-test.el ends here
