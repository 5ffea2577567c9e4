;;; sly-agent-q-approval-test.el --- What an approval offers, by the real route  -*- lexical-binding: t; -*-

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
;; An approval as the server sends it (emacs/call of kind approval): the
;; request Emacs builds from its params keeps the reason it asked (kind
;; "rule" or "outside"), so the chat offers only the answers the server
;; honours.  The edit buffer, reused from one approval to the next, keeps
;; nothing of the last one.

;;; Code:

(require 'sly-agent-q-test-helper
         (expand-file-name "sly-agent-q-test-helper"
                           (file-name-directory (or load-file-name buffer-file-name))))

(ert-deftest sly-agent-q-approval-outside-read-offers-no-always-nor-edit ()
  "An emacs/call approval for a read outside the project, as the server sends it."
  (let* ((sly-agent-q-project-root (make-temp-file "agent-q-root" t))
         (sly-agent-q-chat-buffer-name "*sly-agent-q approval test*")
         (replies nil))
    (unwind-protect
        (cl-letf (((symbol-function 'sly-agent-q-call-reply)
                   (lambda (_call result) (push result replies))))
          (with-current-buffer (sly-agent-q-chat-buffer)
            (dolist (case '(("outside" (:kind "outside" :path "/usr/share/common-lisp/source/alexandria/lists.lisp"))
                            ("rule" (:kind "rule" :rule (:action "ask" :tool "read_definition")))))
              (sly-agent-q-approval--start
               (sly-agent-q-dispatch--make-call
                :id (car case) :kind "approval"
                :params (list :tool "read_definition" :capability "read_definition" :review "arguments"
                              :arguments '(:symbol "alexandria:flatten")
                              :safetyLevel "safe" :callId (car case)
                              :reason (nth 1 case))))
              (let* ((a (save-excursion (goto-char (point-max))
                                        (search-backward "needs your approval")
                                        (get-text-property (point) 'sly-agent-q-approval)))
                     (request (sly-agent-q-approval-request a))
                     (keys (mapcar #'car (sly-agent-q-approval--choices request)))
                     (shown (buffer-substring-no-properties
                             (save-excursion (goto-char (point-max)) (search-backward "needs your approval"))
                             (point-max))))
                ;; The request keeps what made the call ask.
                (should (equal (plist-get (plist-get request :reason) :kind) (car case)))
                (should-not (memq ?a keys))
                (should-not (string-match-p "\\[Always allow" shown))
                (when (equal (car case) "outside")
                  (should-not (memq ?e keys))
                  (should-not (string-match-p "\\[Edit arguments\\]" shown)))
                (sly-agent-q-deny a "no")))))
      (when (get-buffer sly-agent-q-chat-buffer-name) (kill-buffer sly-agent-q-chat-buffer-name))
      (delete-directory sly-agent-q-project-root t))))



(ert-deftest sly-agent-q-approval-command-line-as-a-shell-reads-it ()
  "A command's line is drawn as the shell line it is, not as a JSON string;
a long argument cut short says how many arguments follow it."
  (let* ((request (sly-agent-q-approval--request
                   (list :tool "run_command" :safetyLevel "dangerous" :callId "c1" :alwaysCommand t
                         :arguments (list :argv (vector "echo" (make-string 1000 ?A) "rm" "-rf" "x")
                                          :command_line "printf 'a\\b' \"q\""
                                          :program "/usr/bin/printf"))
                   nil))
         (summary (substring-no-properties (sly-agent-q-approval--summary request))))
    ;; One backslash, and the line's own quotes, as a shell reads it.
    (should (string-search "command_line: printf 'a\\b' \"q\"\n" summary))
    (should-not (string-search "\\\\" summary))
    (should (string-match-p "argv: .*3 more arguments follow" summary))
    ;; The line, cut in a long quoted word, counts the words after it too.
    (let ((line (sly-agent-q-approval--summary
                 (sly-agent-q-approval--request
                  (list :tool "run_command" :safetyLevel "dangerous" :callId "c2" :alwaysCommand t
                        :arguments (list :command_line (concat "echo 'a b" (make-string 1000 ?A) "'\\'' x' $'\\' y' rm -rf x")))
                  nil))))
      (should (string-match-p "command_line: .*4 more arguments follow" line)))))

(ert-deftest sly-agent-q-approval-edit-buffer-undo-keeps-no-other-calls-arguments ()
  "The edit buffer is buried and reused: an undo (C-/) in the buffer just opened\nfor call B never brings back call A's arguments for C-c C-c to send as B's."
  (let* ((sly-agent-q-project-root (make-temp-file "agent-q-root" t))
         (sly-agent-q-chat-buffer-name "*sly-agent-q approval undo test*")
         (decisions nil))
    (unwind-protect
        (with-current-buffer (sly-agent-q-chat-buffer)
          (sly-agent-q-approval--ask (sly-agent-q-dispatch--make-call :id "A" :kind "approval")
                                     '(:tool "write_file" :arguments (:path "secret-a.txt" :content "first call")
                                             :safetyLevel "dangerous" :callId "A")
                                     (lambda (d) (push (cons "A" d) decisions)))
          (sly-agent-q-approval--ask (sly-agent-q-dispatch--make-call :id "B" :kind "approval")
                                     '(:tool "write_file" :arguments (:path "b.txt" :content "second call")
                                             :safetyLevel "dangerous" :callId "B")
                                     (lambda (d) (push (cons "B" d) decisions)))
          (let ((pending (sly-agent-q-approval--pending (current-buffer))))
            ;; A: edited, then left with C-c C-k (buried); A approved from the chat.
            (sly-agent-q-edit-arguments (nth 0 pending))
            (with-current-buffer "*sly-agent-q arguments*"
              (undo-boundary)
              (sly-agent-q-edit-arguments-abort))
            (sly-agent-q-approve (nth 0 pending))
            ;; B: its edit buffer opens; the user presses C-/ once, then C-c C-c.
            (sly-agent-q-edit-arguments (nth 1 pending))
            (with-current-buffer "*sly-agent-q arguments*"
              (undo-boundary)
              (should (string-match-p "b.txt" (buffer-string)))
              ;; Nothing to undo: the buffer opened with B's arguments.
              (should-error (let ((last-command nil)) (undo 1)) :type 'user-error)
              ;; B's buffer must not hold A's arguments.
              (should-not (string-match-p "secret-a.txt" (buffer-string)))
              (sly-agent-q-edit-arguments-finish))
            (should-not (equal (plist-get (plist-get (cdr (assoc "B" decisions)) :arguments) :path)
                               "secret-a.txt"))))
      (when (get-buffer sly-agent-q-chat-buffer-name) (kill-buffer sly-agent-q-chat-buffer-name))
      (when (get-buffer "*sly-agent-q arguments*") (kill-buffer "*sly-agent-q arguments*"))
      (delete-directory sly-agent-q-project-root t))))

(ert-deftest sly-agent-q-approval-edit-offers-no-shown-only-argument ()
  "A command's edit buffer offers argv and directory, not the line and program it only shows;
left unchanged it approves the call as it was, edited it sends the edited argv."
  (let* ((sly-agent-q-project-root (make-temp-file "agent-q-root" t))
         (sly-agent-q-chat-buffer-name "*sly-agent-q approval shown-only test*")
         (decisions nil)
         (params '(:tool "run_command" :safetyLevel "dangerous" :callId "R"
                         :arguments (:argv ["make" "test"] :command_line "make test"
                                           :program "/usr/bin/make" :directory "/p")
                         :shownOnly ["command_line" "program"])))
    (unwind-protect
        (with-current-buffer (sly-agent-q-chat-buffer)
          (dolist (edit '(nil t))
            (sly-agent-q-approval--ask (sly-agent-q-dispatch--make-call :id "R" :kind "approval") params
                                       (lambda (d) (push d decisions)))
            (sly-agent-q-edit-arguments (car (sly-agent-q-approval--pending (current-buffer))))
            (with-current-buffer "*sly-agent-q arguments*"
              (should (string-search "\"argv\"" (buffer-string)))
              (should (string-search "\"directory\"" (buffer-string)))
              (should-not (string-search "command_line" (buffer-string)))
              (should-not (string-search "/usr/bin/make" (buffer-string)))
              (when edit
                (goto-char (point-min))
                (search-forward "\"test\"")
                (replace-match "\"check\""))
              (sly-agent-q-edit-arguments-finish)))
          (should (equal (plist-get (nth 1 decisions) :decision) "approved"))
          (should (equal (plist-get (nth 0 decisions) :decision) "modified"))
          (should (equal (plist-get (plist-get (nth 0 decisions) :arguments) :argv) ["make" "check"]))
          (should-not (plist-member (plist-get (nth 0 decisions) :arguments) :command_line)))
      (when (get-buffer sly-agent-q-chat-buffer-name) (kill-buffer sly-agent-q-chat-buffer-name))
      (when (get-buffer "*sly-agent-q arguments*") (kill-buffer "*sly-agent-q arguments*"))
      (delete-directory sly-agent-q-project-root t))))

;;;; The one request

(defun sly-agent-q-approval-test--decide (params approver)
  "Put the approval of PARAMS, as the server sends it, to APPROVER; return the reply.
The call goes the real route (`sly-agent-q-approval--start'); the
reply is what Emacs would send the server."
  (let ((reply nil)
        (sly-agent-q-approval-function approver))
    (cl-letf (((symbol-function 'sly-agent-q-call-reply)
               (lambda (_call result) (setq reply result))))
      (sly-agent-q-approval--start
       (sly-agent-q-dispatch--make-call :id (plist-get params :callId) :kind "approval" :params params))
      (sly-agent-q-test-wait (lambda () reply) 20 "the approval's reply"))
    reply))

(ert-deftest sly-agent-q-approval-request-of-an-evaluation ()
  "An evaluation is put to an approval function as the documented request:
the server's keys, no target, no diff, no hunks; a decision given as
a symbol is sent as the protocol's string."
  (let* ((sly-agent-q-project-root (make-temp-file "agent-q-root" t))
         (request nil)
         (reply (sly-agent-q-approval-test--decide
                 (list :tool "eval_form" :capability "eval_form" :review "arguments"
                       :arguments '(:form "(delete-file \"x\")" :package "CL-USER")
                       :lispArguments ["form"] :safetyLevel "cautious"
                       :description "Evaluate forms in the image." :callId "E1"
                       :reason '(:kind "level"))
                 (lambda (r callback) (setq request r) (funcall callback '(:decision approved))))))
    (unwind-protect
        (progn
          (should (equal request
                         '(:tool "eval_form" :arguments (:form "(delete-file \"x\")" :package "CL-USER")
                                 :safetyLevel "cautious" :description "Evaluate forms in the image."
                                 :callId "E1" :reason (:kind "level") :lispArguments ["form"])))
          (should (equal (plist-get reply :decision) "approved")))
      (delete-directory sly-agent-q-project-root t))))

(ert-deftest sly-agent-q-approval-pending-kept-in-a-list ()
  "The approvals waiting are the chat's list, oldest first: answered or
withdrawn, one leaves it; the chat buffer killed denies those left."
  (let* ((sly-agent-q-project-root (make-temp-file "agent-q-root" t))
         (sly-agent-q-chat-buffer-name "*sly-agent-q approval list test*")
         (decisions nil)
         (calls (mapcar (lambda (id) (sly-agent-q-dispatch--make-call :id id :kind "approval"))
                        '("A" "B" "C"))))
    (unwind-protect
        (let ((buffer (sly-agent-q-chat-buffer)))
          (dolist (call calls)
            (let ((id (sly-agent-q-call-id call)))
              (sly-agent-q-approval--ask call (list :tool "write_file" :arguments (list :path id)
                                                    :safetyLevel "dangerous" :callId id)
                                         (lambda (d) (push (cons id d) decisions)))))
          (should (equal (mapcar (lambda (a) (plist-get (sly-agent-q-approval-request a) :callId))
                                 (sly-agent-q-approval--pending buffer))
                         '("A" "B" "C")))
          ;; C-c C-r and y answer the oldest.
          (with-current-buffer buffer
            (goto-char (point-max))
            (sly-agent-q-approve))
          (should (equal (cdr (assoc "A" decisions)) '(:decision "approved")))
          ;; The server withdraws B.
          (sly-agent-q-call-drop (nth 1 calls) "timeout")
          (should (equal (mapcar (lambda (a) (plist-get (sly-agent-q-approval-request a) :callId))
                                 (sly-agent-q-approval--pending buffer))
                         '("C")))
          (kill-buffer buffer)
          (should (equal (cdr (assoc "C" decisions))
                         '(:decision "denied" :reason "the user closed the chat buffer")))
          (should-not (assoc "B" decisions)))
      (when (get-buffer sly-agent-q-chat-buffer-name) (kill-buffer sly-agent-q-chat-buffer-name))
      (delete-directory sly-agent-q-project-root t))))

(provide 'sly-agent-q-approval-test)
;;; sly-agent-q-approval-test.el ends here
