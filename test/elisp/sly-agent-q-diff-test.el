;;; sly-agent-q-diff-test.el --- Tests of propose_file_edit and its review  -*- lexical-binding: t; -*-

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

;; ERT tests of sly-agent-q-diff.el: the line diff and its hunks, the
;; review (through a scripted `sly-agent-q-approval-function' and
;; through the review buffer's own commands) and the application of
;; the accepted hunks by the propose_file_edit capability.  Run with (from the repository root):
;;
;;   test/elisp/run.sh test/elisp/sly-agent-q-diff-test.el
;;
;; which runs Emacs -Q in batch mode with -L lisp-elisp -L test/elisp.

;;; Code:

(require 'ert)
(require 'cl-lib)
(require 'sly-agent-q-tools)
(require 'sly-agent-q-tools-test)
(require 'sly-agent-q-approval)
(require 'sly-agent-q-test-helper)

;; The helpers come from sly-agent-q-tools-test.el; its tests run from
;; that file, not again from this one.
(dolist (test (ert-select-tests "\\`sly-agent-q-tools-test-" t))
  (ert-delete-test (ert-test-name test)))

(defvar sly-agent-q-approval-function)

(defvar sly-agent-q-diff-test-request nil
  "The last request the scripted approver saw.")

(defun sly-agent-q-diff-test-old ()
  "Return a 30-line text."
  (sly-agent-q-tools-test--lines 30 "(line %d)\n"))

(defun sly-agent-q-diff-test-new ()
  "Return the 30-line text, changed in three places far apart."
  (replace-regexp-in-string
   "(line 28)" "(line 28 changed)"
   (replace-regexp-in-string
    "(line 15)\n" "(line 15)\n(inserted after 15)\n"
    (replace-regexp-in-string "(line 2)\n" "" (sly-agent-q-diff-test-old) t t)
    t t)
   t t))

(defun sly-agent-q-diff-test-expected (hunks)
  "Return the old text with only the hunks HUNKS applied, among 1, 2 and 3."
  (let ((text (sly-agent-q-diff-test-old)))
    (when (memq 1 hunks)
      (setq text (replace-regexp-in-string "(line 2)\n" "" text t t)))
    (when (memq 2 hunks)
      (setq text (replace-regexp-in-string "(line 15)\n" "(line 15)\n(inserted after 15)\n" text t t)))
    (when (memq 3 hunks)
      (setq text (replace-regexp-in-string "(line 28)" "(line 28 changed)" text t t)))
    text))

(defmacro sly-agent-q-diff-test--with-server (&rest body)
  "Run BODY in a fresh project, the real server running to compute hunks."
  (declare (indent 0) (debug t))
  `(sly-agent-q-tools-test--with-project
     (setq sly-agent-q-diff--hunk-cache nil)
     (sly-agent-q-test-with-server '((steps . []))
       ,@body)))

(defun sly-agent-q-diff-test-review (args &optional approver)
  "Review ARGS with APPROVER as the approval function; return the decisions.
Wait for the first: the hunks come from the server."
  (let ((decisions nil)
        (sly-agent-q-approval-function approver))
    (sly-agent-q-approval-review-edit args (lambda (d) (push d decisions)) "propose_file_edit")
    (sly-agent-q-test-wait (lambda () decisions) 20 "the review's decision")
    decisions))

(defun sly-agent-q-diff-test-choose (hunks)
  "Return an approval function accepting HUNKS, saving its request."
  (lambda (request callback)
    (setq sly-agent-q-diff-test-request request)
    (funcall callback
             (list :decision "modified"
                   :arguments (append (plist-get request :arguments)
                                      (list :accepted_hunks (vconcat hunks)))))))

;;;; Applying hunks

(ert-deftest sly-agent-q-diff-test-apply-hunks-by-their-ranges ()
  "Hunks as the server sends them apply by their line ranges, in any subset."
  (let* ((a (sly-agent-q-files-split-lines "a\nb\nc\nd\n"))
         (b (sly-agent-q-files-split-lines "a\nB\nc\nd\nE\n"))
         (hunks (mapcar #'sly-agent-q-diff--from-server
                        (list '(:index 1 :oldStart 0 :oldEnd 3 :newStart 0 :newEnd 3
                                       :changes [[1 2 1 2]] :header "@@ -1,3 +1,3 @@"
                                       :text " a\n-b\n+B\n c\n")
                              '(:index 2 :oldStart 3 :oldEnd 4 :newStart 3 :newEnd 5
                                       :changes [[4 4 4 5]] :header "@@ -4 +4,2 @@"
                                       :text " d\n+E\n")))))
    (should (equal "a\nB\nc\nd\nE\n" (sly-agent-q-diff--apply-hunks a b hunks '(1 2))))
    (should (equal "a\nb\nc\nd\nE\n" (sly-agent-q-diff--apply-hunks a b hunks '(2))))
    (should (equal "a\nb\nc\nd\n" (sly-agent-q-diff--apply-hunks a b hunks '())))))

(ert-deftest sly-agent-q-diff-test-hunks-that-do-not-fit-are-refused ()
  "Hunks are applied only when their ranges lie in the texts and give the new text."
  (let* ((old "a\nb\nc\nd\n") (new "a\nB\nc\nd\nE\n")
         (good (list '(:index 1 :oldStart 0 :oldEnd 3 :newStart 0 :newEnd 3
                              :changes [[1 2 1 2]] :header "@@ -1,3 +1,3 @@" :text " a\n-b\n+B\n c\n")
                     '(:index 2 :oldStart 3 :oldEnd 4 :newStart 3 :newEnd 5
                              :changes [[4 4 4 5]] :header "@@ -4 +4,2 @@" :text " d\n+E\n")))
         (fit (lambda (hunks) (sly-agent-q-diff--hunks-fit-p
                               old new (mapcar #'sly-agent-q-diff--from-server hunks))))
         (with (lambda (n key value)
                 (let ((copy (mapcar #'copy-sequence good)))
                   (setf (nth n copy) (plist-put (nth n copy) key value))
                   copy))))
    (should (funcall fit good))
    ;; Out of the text, out of order, numbered wrong, a change outside its hunk, or not giving the new text.
    (should-not (funcall fit (funcall with 1 :oldEnd 9)))
    (should-not (funcall fit (funcall with 1 :oldStart 1)))
    (should-not (funcall fit (funcall with 1 :index 3)))
    (should-not (funcall fit (funcall with 0 :changes [[1 2 1 2] [0 1 0 1]])))
    (should-not (funcall fit (funcall with 0 :changes [[3 4 1 2]])))
    (should-not (funcall fit (funcall with 1 :changes [])))
    (should-not (funcall fit (list (car good))))
    (should-not (sly-agent-q-diff--hunks-fit-p old new nil))
    (should (sly-agent-q-diff--hunks-fit-p old old nil))))

(ert-deftest sly-agent-q-diff-test-without-hunks-one-replaces-the-whole-text ()
  "When the server gives no hunks, one hunk replaces the whole text: applied, it gives the new text."
  (should-not (sly-agent-q-diff--whole-hunks "same\n" "same\n"))
  (let ((hunks (sly-agent-q-diff--whole-hunks "a\nb" "a\nc\n")))
    (should (equal '("@@ -1,2 +1,2 @@") (mapcar (lambda (h) (plist-get h :header)) hunks)))
    (should (equal "-a\n-b\n\\ No newline at end of file\n+a\n+c\n" (plist-get (car hunks) :text))))
  (should (equal "@@ -0,0 +1 @@" (plist-get (car (sly-agent-q-diff--whole-hunks "" "x\n")) :header)))
  (sly-agent-q-tools-test--with-project
    (setq sly-agent-q-diff--hunk-cache nil)
    (should-not (sly-agent-q-connection-ready-p))
    (sly-agent-q-tools-test--write "a.lisp" (sly-agent-q-diff-test-old))
    (should (equal "Applied all 1 hunk to a.lisp."
                   (sly-agent-q-tools-test--ok "propose_file_edit" :path "a.lisp"
                                               :new_content (sly-agent-q-diff-test-new))))
    (should (equal (sly-agent-q-diff-test-new) (sly-agent-q-tools-test--contents "a.lisp")))))

;;;; Review by a scripted approver, then apply

(ert-deftest sly-agent-q-diff-test-scripted-accept-1-and-3 ()
  (sly-agent-q-diff-test--with-server
    (sly-agent-q-tools-test--write "src/a.lisp" (sly-agent-q-diff-test-old))
    (let* ((args (list :path "src/a.lisp" :new_content (sly-agent-q-diff-test-new)
                       :description "Three changes"))
           (decisions (sly-agent-q-diff-test-review args (sly-agent-q-diff-test-choose '(1 3))))
           (decision (car decisions)))
      (should (= 1 (length decisions)))
      ;; The request carries the hunks.
      (should (equal "propose_file_edit" (plist-get sly-agent-q-diff-test-request :tool)))
      (should (equal "src/a.lisp" (plist-get sly-agent-q-diff-test-request :path)))
      (let ((hunks (plist-get sly-agent-q-diff-test-request :hunks)))
        (should (vectorp hunks))
        (should (= 3 (length hunks)))
        (should (equal '(1 2 3) (mapcar (lambda (h) (plist-get h :index)) hunks)))
        (should (equal "@@ -13,6 +12,7 @@" (plist-get (aref hunks 1) :header)))
        (should (string-match-p "^+(inserted after 15)$" (plist-get (aref hunks 1) :text))))
      (should (equal "modified" (plist-get decision :decision)))
      (should (equal [1 3] (plist-get (plist-get decision :arguments) :accepted_hunks)))
      (should (equal "Three changes" (plist-get (plist-get decision :arguments) :description)))
      ;; Nothing is written by the review.
      (should (equal (sly-agent-q-diff-test-old) (sly-agent-q-tools-test--contents "src/a.lisp")))
      ;; The tool applies exactly hunks 1 and 3.
      (let ((out (apply #'sly-agent-q-tools-test--ok "propose_file_edit" (plist-get decision :arguments))))
        (should (equal "Applied hunks 1, 3 of 3 to src/a.lisp (rejected: 2)." out)))
      (should (equal (sly-agent-q-diff-test-expected '(1 3)) (sly-agent-q-tools-test--contents "src/a.lisp")))
      (should-not (sly-agent-q-tools-test--temp-files)))))

(ert-deftest sly-agent-q-diff-test-request-of-a-file-edit ()
  "A file edit goes the approval's one route to an approval function:
the documented request, the server's keys with :review, :path, :hunks
\(:index :header :text each, nothing else) and the :diff of those
hunks; the accepted hunks come back as the decision the server gets,
bound to what was reviewed."
  (sly-agent-q-diff-test--with-server
    (sly-agent-q-tools-test--write "src/a.lisp" (sly-agent-q-diff-test-old))
    (let* ((arguments (list :path "src/a.lisp" :new_content (sly-agent-q-diff-test-new)
                            :description "Three changes"))
           (request nil) (reply nil)
           (sly-agent-q-approval-function
            (lambda (r callback) (setq request r) (funcall callback '(:accepted_hunks [3 1])))))
      (cl-letf (((symbol-function 'sly-agent-q-call-reply)
                 (lambda (_call result) (setq reply result))))
        (sly-agent-q-approval--start
         (sly-agent-q-dispatch--make-call
          :id "P1" :kind "approval"
          :params (list :tool "propose_file_edit" :capability "propose_file_edit" :review "diff"
                        :arguments arguments :safetyLevel "dangerous"
                        :description "Propose a file change." :callId "P1"
                        :reason '(:kind "level"))))
        (sly-agent-q-test-wait (lambda () reply) 20 "the approval's reply"))
      ;; The keys, in the documented order, and nothing else.
      (should (equal (cl-loop for (key _) on request by #'cddr collect key)
                     '(:tool :arguments :safetyLevel :description :callId :reason :review
                             :path :diff :new-file :hunks)))
      (should (equal (plist-get request :tool) "propose_file_edit"))
      (should (equal (plist-get request :arguments) arguments))
      (should (equal (plist-get request :description) "Propose a file change."))
      (should (equal (plist-get request :review) "diff"))
      (should (equal (plist-get request :path) "src/a.lisp"))
      (should-not (plist-get request :new-file))
      (let ((hunks (plist-get request :hunks)))
        (should (vectorp hunks))
        (should (= 3 (length hunks)))
        (dotimes (i 3)
          (should (equal (cl-loop for (key _) on (aref hunks i) by #'cddr collect key)
                         '(:index :header :text)))
          (should (= (1+ i) (plist-get (aref hunks i) :index)))
          ;; The diff is those hunks.
          (should (string-search (concat (plist-get (aref hunks i) :header) "\n"
                                         (plist-get (aref hunks i) :text))
                                 (plist-get request :diff)))))
      (should (string-prefix-p "--- a/src/a.lisp\n+++ b/src/a.lisp\n" (plist-get request :diff)))
      ;; The answer, normalized: the hunks sorted, on the call's own arguments.
      (should (equal (plist-get reply :decision) "modified"))
      (should (equal (plist-get (plist-get reply :arguments) :accepted_hunks) [1 3]))
      (should (equal (plist-get (plist-get reply :arguments) :description) "Three changes"))
      (should (stringp (plist-get reply :target))))))

(ert-deftest sly-agent-q-diff-test-scripted-short-answers ()
  (sly-agent-q-diff-test--with-server
    (sly-agent-q-tools-test--write "a.lisp" (sly-agent-q-diff-test-old))
    (let ((args (list :path "a.lisp" :new_content (sly-agent-q-diff-test-new))))
      ;; Just the hunk numbers.
      (let ((d (car (sly-agent-q-diff-test-review
                     args (lambda (_r cb) (funcall cb '(:accepted_hunks [2])))))))
        (should (equal [2] (plist-get (plist-get d :arguments) :accepted_hunks))))
      ;; No hunk: denied.
      (let ((d (car (sly-agent-q-diff-test-review
                     args (lambda (_r cb) (funcall cb '(:accepted_hunks [])))))))
        (should (equal '(:decision "denied" :reason "The user rejected every hunk") d)))
      ;; An approver that answers twice is heard once.
      (should (= 1 (length (sly-agent-q-diff-test-review
                            args (lambda (_r cb)
                                   (funcall cb '(:decision "approved"))
                                   (funcall cb '(:decision "denied")))))))
      ;; An approver that signals becomes a denial.
      (let ((d (car (sly-agent-q-diff-test-review args (lambda (_r _cb) (error "Approver broke"))))))
        (should (equal "denied" (plist-get d :decision)))
        (should (string-match-p "Approver broke" (plist-get d :reason)))))))

(ert-deftest sly-agent-q-diff-test-approved-applies-all ()
  (sly-agent-q-diff-test--with-server
    (sly-agent-q-tools-test--write "a.lisp" (sly-agent-q-diff-test-old))
    (should (equal "Applied all 3 hunks to a.lisp."
                   (sly-agent-q-tools-test--ok "propose_file_edit" :path "a.lisp"
                                        :new_content (sly-agent-q-diff-test-new))))
    (should (equal (sly-agent-q-diff-test-new) (sly-agent-q-tools-test--contents "a.lisp")))))

;;;; Review in the review buffer

(defun sly-agent-q-diff-test-open-review (args &optional read-eval)
  "Open the review buffer for ARGS; return (BUFFER . DECISIONS-CELL).
READ-EVAL: the #. forms the edit adds, as a form's edit gives them."
  (let* ((cell (list nil))
         (sly-agent-q-approval-function nil)
         (sly-agent-q-diff-review-display-function #'display-buffer)
         (buffer (sly-agent-q-approval-review-edit
                  (append args (and read-eval (list :read_time_evaluation read-eval)))
                  (lambda (d) (push d (car cell))) "replace_definition")))
    (should (bufferp buffer))
    ;; The review shows once the server's hunks came.
    (sly-agent-q-test-wait (lambda () (and (buffer-local-value 'sly-agent-q-diff-review--current buffer)
                                           (get-buffer-window buffer)))
                           20 "the review to show")
    ;; A large review's hunks are drawn in steps.
    (let ((review (buffer-local-value 'sly-agent-q-diff-review--current buffer)))
      (sly-agent-q-test-wait (lambda () (= (sly-agent-q-diff-review--review-drawn review)
                                           (length (sly-agent-q-diff-review--review-states review))))
                             10 "every hunk drawn"))
    (should (null (car cell)))
    (cons buffer cell)))

(ert-deftest sly-agent-q-diff-test-review-shows-read-time-evaluation ()
  "The #. forms a form's edit adds are shown above the diff as read-time evaluation, each line
indented (a form's line cannot pass for the review's own), and given to an approval function."
  (sly-agent-q-diff-test--with-server
    (sly-agent-q-tools-test--write "src/a.lisp" (sly-agent-q-diff-test-old))
    (let* ((args (list :path "src/a.lisp" :new_content (sly-agent-q-diff-test-new)))
           (forms ["#.(delete-file \"marker\")" "#.(progn\n## Hunk 1 of 3: ACCEPTED\n t)"])
           (opened (sly-agent-q-diff-test-open-review args forms))
           (buffer (car opened)))
      (with-current-buffer buffer
        (should (string-match-p "^READ-TIME EVALUATION: 2 new #\\. forms, code run as the text is read$"
                                (buffer-string)))
        (should (string-match-p "^  #\\.(delete-file \"marker\")$" (buffer-string)))
        (should (string-match-p "^  ## Hunk 1 of 3: ACCEPTED$" (buffer-string)))
        (should-not (string-match-p "^## Hunk 1 of 3: ACCEPTED" (buffer-string))))
      (with-current-buffer buffer (sly-agent-q-diff-abort)))
    ;; Without any, no such line.
    (let* ((opened (sly-agent-q-diff-test-open-review
                    (list :path "src/a.lisp" :new_content (sly-agent-q-diff-test-new))))
           (buffer (car opened)))
      (should-not (string-match-p "READ-TIME" (with-current-buffer buffer (buffer-string))))
      (with-current-buffer buffer (sly-agent-q-diff-abort)))
    (let* ((request nil) (decided nil)
           (sly-agent-q-approval-function
            (lambda (r callback) (setq request r) (funcall callback '(:decision "denied")))))
      (sly-agent-q-approval-review-edit (list :path "src/a.lisp" :new_content (sly-agent-q-diff-test-new)
                                              :read_time_evaluation ["#.(evil)"])
                                        (lambda (d) (setq decided d)) "replace_definition")
      (sly-agent-q-test-wait (lambda () decided) 20 "the decision")
      (should (equal (plist-get request :read_time_evaluation) ["#.(evil)"])))))

(ert-deftest sly-agent-q-diff-test-review-buffer-accept-1-and-3 ()
  (sly-agent-q-diff-test--with-server
    (sly-agent-q-tools-test--write "src/a.lisp" (sly-agent-q-diff-test-old))
    (let* ((args (list :path "src/a.lisp" :new_content (sly-agent-q-diff-test-new)
                       :description "Three changes"))
           (opened (sly-agent-q-diff-test-open-review args))
           (buffer (car opened)) (cell (cdr opened)))
      (with-current-buffer buffer
        (should (derived-mode-p 'diff-mode))
        (should (eq major-mode 'sly-agent-q-diff-review-mode))
        (should buffer-read-only)
        (should (string-match-p "Proposed edit of src/a.lisp: Three changes" (buffer-string)))
        (should (string-match-p "^@@ -13,6 \\+12,7 @@$" (buffer-string)))
        (should (string-match-p "^## Hunk 2 of 3: PENDING" (buffer-string)))
        ;; Point starts on hunk 1; accept it at point: point moves to hunk 2.
        (should (= 1 (get-text-property (point) 'sly-agent-q-diff-hunk)))
        (sly-agent-q-diff-review-accept-hunk)
        (should (= 2 (get-text-property (point) 'sly-agent-q-diff-hunk)))
        (should (string-match-p "^## Hunk 1 of 3: ACCEPTED" (buffer-string)))
        ;; Reject hunk 2 at point, then accept hunk 3 with its key.
        (call-interactively (key-binding "r"))
        (should (= 3 (get-text-property (point) 'sly-agent-q-diff-hunk)))
        (call-interactively (key-binding "a"))
        (should (string-match-p "^## Hunk 2 of 3: REJECTED" (buffer-string)))
        (should (string-match-p "^## Hunk 3 of 3: ACCEPTED" (buffer-string)))
        (should (string-match-p "3 of 3 hunks decided, 2 accepted" (buffer-string)))
        (should (null (car cell)))
        ;; The per-hunk buttons work too: reject then accept hunk 3.
        (goto-char (point-min))
        (re-search-forward "^## Hunk 3 of 3: .*\\[Reject\\]")
        (push-button (- (point) 2))
        (should (string-match-p "^## Hunk 3 of 3: REJECTED" (buffer-string)))
        (goto-char (point-min))
        (re-search-forward "^## Hunk 3 of 3: .*\\(\\[Accept\\]\\)")
        (push-button (match-beginning 1))
        (should (string-match-p "^## Hunk 3 of 3: ACCEPTED" (buffer-string)))
        ;; RET shows the file at the hunk.
        (sly-agent-q-diff-review--goto-hunk 3)
        (forward-line 2)
        (call-interactively (key-binding (kbd "RET")))
        (let ((visiting (find-buffer-visiting (sly-agent-q-tools-test--file "src/a.lisp"))))
          (should visiting)
          (should (= 25 (with-current-buffer visiting (line-number-at-pos)))))
        (sly-agent-q-diff-review-finish))
      (should-not (buffer-live-p buffer))
      (should (= 1 (length (car cell))))
      (let ((decision (caar cell)))
        (should (equal "modified" (plist-get decision :decision)))
        (should (equal [1 3] (plist-get (plist-get decision :arguments) :accepted_hunks)))
        ;; RET above visited the file, so the edit goes through its buffer.
        (should (equal "Applied hunks 1, 3 of 3 to src/a.lisp (through buffer a.lisp, saved) (rejected: 2)."
                       (apply #'sly-agent-q-tools-test--ok "propose_file_edit"
                              (plist-get decision :arguments)))))
      (should (equal (sly-agent-q-diff-test-expected '(1 3)) (sly-agent-q-tools-test--contents "src/a.lisp"))))))

(ert-deftest sly-agent-q-diff-test-review-buffer-denials ()
  (sly-agent-q-diff-test--with-server
    (sly-agent-q-tools-test--write "a.lisp" (sly-agent-q-diff-test-old))
    (let ((args (list :path "a.lisp" :new_content (sly-agent-q-diff-test-new))))
      ;; Reject all, then finish.
      (let* ((opened (sly-agent-q-diff-test-open-review args)))
        (with-current-buffer (car opened)
          (sly-agent-q-diff-review-accept-hunk 2)
          (sly-agent-q-diff-review-reject-all)
          (call-interactively (key-binding (kbd "C-c C-c"))))
        (should (equal '((:decision "denied" :reason "The user rejected every hunk"))
                       (cadr opened))))
      ;; Undecided hunks count as rejected.
      (let* ((opened (sly-agent-q-diff-test-open-review args)))
        (with-current-buffer (car opened)
          (sly-agent-q-diff-review-accept-hunk 3)
          (sly-agent-q-diff-review-finish))
        (should (equal [3] (plist-get (plist-get (car (cadr opened)) :arguments) :accepted_hunks))))
      ;; Accept all, with the header's buttons.
      (let* ((opened (sly-agent-q-diff-test-open-review args)))
        (with-current-buffer (car opened)
          (goto-char (point-min))
          (push-button (1- (search-forward "[Accept all]")))
          (should (string-match-p "3 of 3 hunks decided, 3 accepted" (buffer-string)))
          (goto-char (point-min))
          (push-button (1- (search-forward "[Finish]"))))
        (should-not (buffer-live-p (car opened)))
        (should (equal [1 2 3] (plist-get (plist-get (car (cadr opened)) :arguments) :accepted_hunks))))
      ;; Abort.
      (let* ((opened (sly-agent-q-diff-test-open-review args)))
        (with-current-buffer (car opened)
          (call-interactively (key-binding (kbd "C-c C-k"))))
        (should-not (buffer-live-p (car opened)))
        (should (= 1 (length (cadr opened))))
        (should (equal "denied" (plist-get (car (cadr opened)) :decision)))
        (should (string-match-p "aborted" (plist-get (car (cadr opened)) :reason))))
      ;; Killing the buffer denies, once.
      (let* ((opened (sly-agent-q-diff-test-open-review args)))
        (kill-buffer (car opened))
        (should (= 1 (length (cadr opened))))
        (should (string-match-p "closed" (plist-get (car (cadr opened)) :reason))))
      ;; Cancelled by the server: no answer at all.
      (let* ((opened (sly-agent-q-diff-test-open-review args)))
        (sly-agent-q-diff-review-cancel (car opened))
        (should-not (buffer-live-p (car opened)))
        (should (null (cadr opened))))
      (should (equal (sly-agent-q-diff-test-old) (sly-agent-q-tools-test--contents "a.lisp"))))))

(ert-deftest sly-agent-q-diff-test-q-never-discards-silently ()
  "q with hunks accepted asks before discarding them; declined, the review stays.
Said yes (or with nothing accepted), the echo area says the edit was rejected."
  (sly-agent-q-diff-test--with-server
    (sly-agent-q-tools-test--write "a.lisp" (sly-agent-q-diff-test-old))
    (let ((args (list :path "a.lisp" :new_content (sly-agent-q-diff-test-new)))
          (asked nil) (said nil))
      (cl-letf (((symbol-function 'y-or-n-p) (lambda (prompt) (push prompt asked) nil))
                ((symbol-function 'message)
                 (lambda (fmt &rest r) (when fmt (push (apply #'format fmt r) said)))))
        (let ((opened (sly-agent-q-diff-test-open-review args)))
          (with-current-buffer (car opened)
            (sly-agent-q-diff-review-accept-hunk 1)
            (sly-agent-q-diff-review-accept-hunk 3)
            (call-interactively (key-binding "q")))
          ;; Asked, naming what would be lost; answered no: nothing sent, still open.
          (should (= 1 (length asked)))
          (should (string-match-p "2 accepted hunks" (car asked)))
          (should (buffer-live-p (car opened)))
          (should (null (cadr opened)))
          (with-current-buffer (car opened)
            (should (string-match-p "^## Hunk 1 of 3: ACCEPTED" (buffer-string))))
          ;; Yes this time: denied, and the echo area says so.
          (cl-letf (((symbol-function 'y-or-n-p) (lambda (prompt) (push prompt asked) t)))
            (with-current-buffer (car opened)
              (call-interactively (key-binding "q"))))
          (should-not (buffer-live-p (car opened)))
          (should (equal "denied" (plist-get (car (cadr opened)) :decision)))
          (should (cl-some (lambda (m) (string-match-p "rejected the whole proposed edit of a\\.lisp" m))
                           said)))
        ;; Nothing accepted: q rejects without asking, and says it did.
        (setq asked nil said nil)
        (let ((opened (sly-agent-q-diff-test-open-review args)))
          (with-current-buffer (car opened)
            (call-interactively (key-binding "q")))
          (should (null asked))
          (should (equal "denied" (plist-get (car (cadr opened)) :decision)))
          (should (cl-some (lambda (m) (string-match-p "rejected the whole proposed edit of a\\.lisp" m))
                           said)))))))

(ert-deftest sly-agent-q-diff-test-kill-buffer-never-discards-silently ()
  "Killing the review (C-x k) with hunks accepted asks first, as q does; declined, it stays.
The kill-buffer hook denied the whole edit at once, the accepted hunks
thrown away without a word."
  (sly-agent-q-diff-test--with-server
    (sly-agent-q-tools-test--write "a.lisp" (sly-agent-q-diff-test-old))
    (let ((args (list :path "a.lisp" :new_content (sly-agent-q-diff-test-new)))
          (asked nil) (said nil))
      (cl-letf (((symbol-function 'y-or-n-p) (lambda (prompt) (push prompt asked) nil))
                ((symbol-function 'yes-or-no-p) (lambda (prompt) (push prompt asked) nil))
                ((symbol-function 'message)
                 (lambda (fmt &rest r) (when fmt (push (apply #'format fmt r) said)))))
        (let ((opened (sly-agent-q-diff-test-open-review args)))
          (with-current-buffer (car opened)
            (sly-agent-q-diff-review-accept-hunk 2))
          (kill-buffer (car opened))
          ;; Asked, naming what would be lost; answered no: nothing sent, still open.
          (should (= 1 (length asked)))
          (should (string-match-p "1 accepted hunk" (car asked)))
          (should (buffer-live-p (car opened)))
          (should (null (cadr opened)))
          ;; Yes this time: killed and denied, and the echo area says so.
          (cl-letf (((symbol-function 'y-or-n-p) (lambda (prompt) (push prompt asked) t))
                    ((symbol-function 'yes-or-no-p) (lambda (prompt) (push prompt asked) t)))
            (kill-buffer (car opened)))
          (should-not (buffer-live-p (car opened)))
          (should (equal "denied" (plist-get (car (cadr opened)) :decision)))
          (should (cl-some (lambda (m) (string-match-p "rejected the whole proposed edit of a\\.lisp" m))
                           said)))))))

(ert-deftest sly-agent-q-diff-test-review-header-fits-the-window ()
  "The review's lines above the hunks fit in the window's width: none wraps."
  (sly-agent-q-diff-test--with-server
    (sly-agent-q-tools-test--write "a.lisp" (sly-agent-q-diff-test-old))
    (let* ((args (list :path "a.lisp" :new_content (sly-agent-q-diff-test-new)
                       :description (make-string 200 ?x)))
           (opened (sly-agent-q-diff-test-open-review args))
           (width (window-body-width (get-buffer-window (car opened)))))
      (with-current-buffer (car opened)
        (goto-char (point-min))
        (should (search-forward "C-c C-c" nil t))
        (goto-char (point-min))
        (while (not (looking-at "## Hunk\\|--- a/"))
          (should (< (string-width (buffer-substring (line-beginning-position) (line-end-position)))
                     width))
          (forward-line 1)))
      (kill-buffer (car opened)))))

(defun sly-agent-q-diff-test-hunk-bounds (index)
  "The (START . END) of hunk INDEX's text in the review buffer."
  (save-excursion
    (should (sly-agent-q-diff-review--goto-hunk index))
    (cons (point) (next-single-property-change (point) 'sly-agent-q-diff-hunk nil (point-max)))))

(ert-deftest sly-agent-q-diff-test-review-redraws-one-hunk ()
  "Deciding a hunk redraws that hunk and the count alone; the other hunks are not touched."
  (sly-agent-q-diff-test--with-server
    (sly-agent-q-tools-test--write "a.lisp" (sly-agent-q-diff-test-old))
    (let ((opened (sly-agent-q-diff-test-open-review
                   (list :path "a.lisp" :new_content (sly-agent-q-diff-test-new)))))
      (with-current-buffer (car opened)
        (let* ((text-of (lambda (i) (let ((b (sly-agent-q-diff-test-hunk-bounds i)))
                                      (buffer-substring-no-properties (car b) (cdr b)))))
               (first (funcall text-of 1))
               (third (funcall text-of 3))
               (first-start (car (sly-agent-q-diff-test-hunk-bounds 1)))
               (changes nil)
               (record (lambda (beg end _len) (push (cons beg end) changes))))
          (add-hook 'after-change-functions record nil t)
          (unwind-protect (sly-agent-q-diff-review-accept-hunk 2)
            (remove-hook 'after-change-functions record t))
          (should changes)
          (let ((second (sly-agent-q-diff-test-hunk-bounds 2))
                (summary (cdr (sly-agent-q-diff-test-hunk-bounds 3))))
            (dolist (c changes)
              (should (or (<= (car second) (car c) (cdr c) (cdr second))
                          (<= summary (car c) (cdr c) (point-max))))))
          (should (equal first (funcall text-of 1)))
          (should (equal third (funcall text-of 3)))
          (should (= first-start (car (sly-agent-q-diff-test-hunk-bounds 1))))
          (should (string-match-p "^## Hunk 2 of 3: ACCEPTED" (buffer-string)))
          (should (string-match-p "^## Hunk 3 of 3: PENDING" (buffer-string)))
          (should (string-match-p "\n## 1 of 3 hunks decided, 1 accepted\\.\n\\'" (buffer-string)))
          ;; Point moved on to hunk 3.
          (should (= 3 (get-text-property (point) 'sly-agent-q-diff-hunk)))
          ;; g redraws the whole buffer to the same text, point on the same line.
          (let ((text (buffer-substring-no-properties (point-min) (point-max)))
                (line (line-number-at-pos)))
            (call-interactively (key-binding "g"))
            (should (equal text (buffer-substring-no-properties (point-min) (point-max))))
            (should (= line (line-number-at-pos))))
          ;; Deciding after g still redraws that hunk alone.
          (sly-agent-q-diff-review-reject-hunk 1)
          (should (equal third (funcall text-of 3)))
          (should (string-match-p "^## Hunk 1 of 3: REJECTED" (buffer-string)))
          (should (string-match-p "\n## 2 of 3 hunks decided, 1 accepted\\.\n\\'" (buffer-string))))
        (sly-agent-q-diff-review-finish))
      (should (equal [2] (plist-get (plist-get (car (cadr opened)) :arguments) :accepted_hunks))))))

(ert-deftest sly-agent-q-diff-test-large-review-drawn-in-steps ()
  "A review's hunks are drawn a few at a time, keys acting between the steps.
A large edit's hundreds of hunks, drawn at once, held Emacs.  A decision
taken before a hunk is drawn shows in it once it is, the decision sent
counts every hunk, and g while the hunks are drawn starts again with
none drawn twice."
  (sly-agent-q-diff-test--with-server
    (sly-agent-q-tools-test--write "a.lisp" (sly-agent-q-diff-test-old))
    (let ((sly-agent-q-diff-review--hunks-per-step 1)
          (steps nil))
      (advice-add 'sly-agent-q-diff-review--draw-more :after
                  (lambda (review ewoc)
                    ;; A step of a chain g replaced draws nothing, and is not counted.
                    (when (eq ewoc (sly-agent-q-diff-review--review-ewoc review))
                      (push (sly-agent-q-diff-review--review-drawn review) steps)
                      (pcase (length steps)
                        ;; Keys pressed between the steps.
                        (1 (should (= 1 (how-many "^## Hunk " (point-min) (point-max))))
                           (sly-agent-q-diff-review-accept-all))
                        (2 (should (= 2 (how-many "^## Hunk " (point-min) (point-max))))
                           (sly-agent-q-diff-review-redisplay)))))
                  '((name . record-steps)))
      (unwind-protect
          (let ((opened (sly-agent-q-diff-test-open-review
                         (list :path "a.lisp" :new_content (sly-agent-q-diff-test-new)))))
            (with-current-buffer (car opened)
              (sly-agent-q-test-wait
               (lambda () (= 3 (sly-agent-q-diff-review--review-drawn sly-agent-q-diff-review--current)))
               10 "every hunk drawn")
              ;; The chain g left behind drew nothing more.
              (sly-agent-q-test-sleep 0.1)
              (should (equal '(1 2 1 2 3) (reverse steps)))
              (should (= 3 (how-many "^## Hunk " (point-min) (point-max))))
              (should (= 3 (how-many "^## Hunk [0-9] of 3: ACCEPTED" (point-min) (point-max))))
              (should (string-match-p "\n## 3 of 3 hunks decided, 3 accepted\\.\n\\'" (buffer-string)))
              (sly-agent-q-diff-review-finish))
            (should (equal [1 2 3] (plist-get (plist-get (car (cadr opened)) :arguments)
                                              :accepted_hunks))))
        (advice-remove 'sly-agent-q-diff-review--draw-more 'record-steps)))))

;;;; A broken server's hunks

(defun sly-agent-q-diff-test--lying-text (request method params &optional success &rest rest)
  "Call REQUEST with METHOD and PARAMS; diff/hunks answers SUCCESS with false texts.
Every hunk keeps its ranges and changes (they fit the edit) but says
it adds a harmless line, under a header of other lines."
  (apply request method params
         (if (and (eq method 'diff/hunks) success)
             (lambda (result)
               (funcall success
                        (plist-put (copy-sequence result) :hunks
                                   (vconcat (mapcar (lambda (h)
                                                      (plist-put (plist-put (copy-sequence h)
                                                                            :text "+(harmless)\n")
                                                                 :header "@@ -1,999 +1,999 @@"))
                                                    (plist-get result :hunks))))))
           success)
         rest))

(ert-deftest sly-agent-q-diff-test-review-shows-what-is-applied ()
  "The review shows the lines the hunks apply, not the text the server sent with them.
A server's hunks whose ranges fit the edit but whose text said
something else were shown as sent, and approved, and then other lines
were written."
  (sly-agent-q-diff-test--with-server
    (sly-agent-q-tools-test--write "src/a.lisp" (sly-agent-q-diff-test-old))
    (advice-add 'sly-agent-q-server-request :around #'sly-agent-q-diff-test--lying-text)
    (unwind-protect
        (let* ((args (list :path "src/a.lisp" :new_content (sly-agent-q-diff-test-new)))
               (opened (sly-agent-q-diff-test-open-review args))
               (cell (cdr opened)))
          (with-current-buffer (car opened)
            (should-not (string-match-p "harmless\\|999" (buffer-string)))
            (should (string-match-p "^@@ -1,5 \\+1,4 @@\n (line 1)\n-(line 2)\n (line 3)\n" (buffer-string)))
            (should (string-match-p "^@@ -13,6 \\+12,7 @@$" (buffer-string)))
            (should (string-match-p "^\\+(inserted after 15)$" (buffer-string)))
            (should (string-match-p "^-(line 28)\n\\+(line 28 changed)$" (buffer-string)))
            (sly-agent-q-diff-review-accept-hunk 3)
            (sly-agent-q-diff-review-reject-hunk 1)
            (sly-agent-q-diff-review-reject-hunk 2)
            (sly-agent-q-diff-review-finish))
          ;; What is written is what the review showed of hunk 3.
          (let ((decision (car (car cell))))
            (should (equal [3] (plist-get (plist-get decision :arguments) :accepted_hunks)))
            (apply #'sly-agent-q-tools-test--ok "propose_file_edit" (plist-get decision :arguments)))
          (should (equal (sly-agent-q-diff-test-expected '(3))
                         (sly-agent-q-tools-test--contents "src/a.lisp"))))
      (advice-remove 'sly-agent-q-server-request #'sly-agent-q-diff-test--lying-text))))

;;;; Word refinement

(defun sly-agent-q-diff-test-refined-p (index)
  "Non-nil when hunk INDEX of the review at point's buffer shows its changed words."
  (let ((bounds (sly-agent-q-diff-test-hunk-bounds index)))
    (cl-some (lambda (o) (and (eq (overlay-get o 'diff-mode) 'fine)
                              (memq (overlay-get o 'face) '(diff-refine-added diff-refine-removed))))
             (overlays-in (car bounds) (cdr bounds)))))

(ert-deftest sly-agent-q-diff-test-words-refined-outside-redisplay ()
  "The review refines the hunks in view from timers, one at a time, never in redisplay.
diff-mode's own refinement runs `diff' for every hunk redisplay shows:
a large edit's review held Emacs for the whole screen's hunks at once."
  (sly-agent-q-diff-test--with-server
    (let* ((old (sly-agent-q-tools-test--lines 600 "(defun f%d (x) (list x :old))\n"))
           (new (replace-regexp-in-string "(defun f\\([0-9]*0\\) (x) (list x :old))"
                                          "(defun f\\1 (x) (list x :new))" old)))
      (sly-agent-q-tools-test--write "big.lisp" old)
      (let* ((opened (sly-agent-q-diff-test-open-review (list :path "big.lisp" :new_content new)))
             (buffer (car opened))
             (window (get-buffer-window buffer)))
        (should window)
        (with-current-buffer buffer
          (should (= 60 (length (sly-agent-q-diff-review--review-states sly-agent-q-diff-review--current))))
          ;; Fontifying the whole review, as redisplay would, refines nothing
          ;; (timers may have refined hunks in view while the hunks were drawn).
          (let ((refined (lambda () (cl-loop for i from 1 to 60
                                             collect (and (sly-agent-q-diff-test-refined-p i) t)))))
            (let ((before (funcall refined)))
              (font-lock-ensure)
              (should (equal before (funcall refined)))))
          (should-not (sly-agent-q-diff-test-refined-p 60))
          ;; The hunk in view is refined once timers ran; one far below is not.
          (sly-agent-q-test-wait (lambda () (sly-agent-q-diff-test-refined-p 1)) 10
                                 "hunk 1's words refined")
          (should-not (sly-agent-q-diff-test-refined-p 60))
          ;; Scrolled to, it is.
          (let ((start (car (sly-agent-q-diff-test-hunk-bounds 60))))
            (set-window-start window start)
            (run-hook-with-args 'window-scroll-functions window start))
          (sly-agent-q-test-wait (lambda () (sly-agent-q-diff-test-refined-p 60)) 10
                                 "hunk 60's words refined once in view")
          ;; A hunk redrawn when decided is refined again.
          (set-window-start window (point-min))
          (sly-agent-q-diff-review-accept-hunk 1)
          (should-not (sly-agent-q-diff-test-refined-p 1))
          (sly-agent-q-test-wait (lambda () (sly-agent-q-diff-test-refined-p 1)) 10
                                 "hunk 1 refined again after its redraw")
          (sly-agent-q-diff-review-abort))))))

(ert-deftest sly-agent-q-diff-test-review-without-diff-program ()
  "Without a `diff' program the review shows, decides and refines nothing, silently.
Each hunk in view ran the missing program again and logged its error."
  (sly-agent-q-diff-test--with-server
    (let* ((old (sly-agent-q-tools-test--lines 100 "(defun f%d (x) (list x :old))\n"))
           (new (replace-regexp-in-string "(defun f\\([0-9]*0\\) (x) (list x :old))"
                                          "(defun f\\1 (x) (list x :new))" old))
           (diff-command "sly-agent-q-no-such-diff-program")
           (logged (with-current-buffer (messages-buffer) (point-max))))
      (sly-agent-q-tools-test--write "big.lisp" old)
      (let* ((opened (sly-agent-q-diff-test-open-review (list :path "big.lisp" :new_content new)))
             (buffer (car opened)))
        (with-current-buffer buffer
          ;; The refinement ran over the hunks in view and stopped.
          (sly-agent-q-test-wait (lambda () (and (get-text-property (car (sly-agent-q-diff-test-hunk-bounds 1))
                                                                    'sly-agent-q-diff-refined)
                                                 (not sly-agent-q-diff-review--refine-timer)))
                                 10 "the hunks in view done")
          (should-not (sly-agent-q-diff-test-refined-p 1))
          (sly-agent-q-diff-review-accept-hunk 1)
          (should (string-match-p "^## Hunk 1 of 10: ACCEPTED" (buffer-string)))
          (sly-agent-q-test-wait (lambda () (not sly-agent-q-diff-review--refine-timer)) 10 "the refinement idle")
          (sly-agent-q-diff-review-abort))
        (should-not (string-match-p "diff-program\\|Refining"
                                    (with-current-buffer (messages-buffer)
                                      (buffer-substring logged (point-max)))))))))

(ert-deftest sly-agent-q-diff-test-long-hunk-not-refined ()
  "A hunk too long to refine at once shows its lines, not its words; the others are refined.
Refining one hunk of a long line held Emacs in one timer for seconds
\(a line of 500,000 characters: seventeen)."
  (sly-agent-q-diff-test--with-server
    (let* ((line (mapconcat (lambda (i) (format "w%d" (% i 977))) (number-sequence 1 20000) " "))
           (body (sly-agent-q-tools-test--lines 12 "(line %d)\n"))
           (old (concat "(small :old)\n" body line "\n"))
           (new (concat "(small :new)\n" body (replace-regexp-in-string "w5 " "W5 " line) "\n")))
      (sly-agent-q-tools-test--write "long.lisp" old)
      (let ((buffer (car (sly-agent-q-diff-test-open-review (list :path "long.lisp" :new_content new)))))
        (with-current-buffer buffer
          (should (= 2 (length (sly-agent-q-diff-review--review-states sly-agent-q-diff-review--current))))
          (sly-agent-q-test-wait (lambda () (sly-agent-q-diff-test-refined-p 1)) 10 "hunk 1's words refined")
          (let ((window (get-buffer-window buffer))
                (start (car (sly-agent-q-diff-test-hunk-bounds 2))))
            (set-window-start window start)
            (run-hook-with-args 'window-scroll-functions window start))
          (sly-agent-q-test-wait (lambda () (get-text-property (car (sly-agent-q-diff-test-hunk-bounds 2))
                                                               'sly-agent-q-diff-refined))
                                 60 "hunk 2 done")
          (should-not (sly-agent-q-diff-test-refined-p 2))
          (sly-agent-q-diff-review-abort))))))

(ert-deftest sly-agent-q-diff-test-approval-of-a-dropped-call-not-asked ()
  "A call cancelled while its diff's hunks were on their way is not put to the user.
The approval was asked once the hunks came, for a call already
dropped: it stayed pending in the chat, and nothing could answer it."
  (sly-agent-q-diff-test--with-server
    (sly-agent-q-tools-test--write "a.lisp" (sly-agent-q-diff-test-old))
    (let ((call (sly-agent-q-dispatch--make-call
                 :id "e1" :kind "approval"
                 :params (list :tool "write_file" :capability "write_file" :callId "c1"
                               :arguments (list :path "a.lisp" :content (sly-agent-q-diff-test-new)))))
          (sly-agent-q-approval-function nil)
          (after nil))
      ;; Started at once (the method starts it from a timer).
      (sly-agent-q-approval--start call)
      ;; The turn is cancelled before the server's hunks come.
      (sly-agent-q-call-drop call "cancelled")
      (sly-agent-q-test-wait (lambda () (sly-agent-q-diff--fetched (sly-agent-q-diff-test-old)
                                                                   (sly-agent-q-diff-test-new)))
                             20 "the hunks")
      ;; Timers run in order: once this one ran, what the hunks' answer started did.
      (run-with-timer 0 nil (lambda () (setq after t)))
      (sly-agent-q-test-wait (lambda () after) 10 "the timers")
      (should-not (sly-agent-q-approval--pending (get-buffer sly-agent-q-chat-buffer-name)))
      (should (equal (sly-agent-q-diff-test-old) (sly-agent-q-tools-test--contents "a.lisp"))))))

(defun sly-agent-q-diff-test-colored-p (index)
  "Non-nil when hunk INDEX of the review at point's buffer, fontified, shows its code's colors."
  (let ((bounds (sly-agent-q-diff-test-hunk-bounds index)))
    (font-lock-ensure (car bounds) (min (cdr bounds) (+ (car bounds) 2000)))
    (cl-some (lambda (o) (eq (overlay-get o 'diff-mode) 'syntax))
             (overlays-in (car bounds) (min (cdr bounds) (+ (car bounds) 2000))))))

(ert-deftest sly-agent-q-diff-test-long-hunk-without-code-colors ()
  "A review holding a long hunk shows its lines without their language's colors; a short one with them.
diff-mode colors a hunk by running the language's font-lock on all of
it inside redisplay: a new file of 20,000 lines held the review's
first display for seconds, and again each time the hunk was redrawn."
  (sly-agent-q-diff-test--with-server
    (sly-agent-q-tools-test--write "short.lisp" (sly-agent-q-diff-test-old))
    (let ((buffer (car (sly-agent-q-diff-test-open-review
                        (list :path "short.lisp" :new_content (sly-agent-q-diff-test-new))))))
      (with-current-buffer buffer
        (should (sly-agent-q-diff-test-colored-p 1))
        (sly-agent-q-diff-review-abort)))
    (let ((buffer (car (sly-agent-q-diff-test-open-review
                        (list :path "new.lisp"
                              :new_content (sly-agent-q-tools-test--lines 2000 "(defun f%d (x) (list x))\n"))))))
      (with-current-buffer buffer
        (should (string-match-p "^\\+(defun f1999 (x) (list x))$" (buffer-string)))
        (should-not (sly-agent-q-diff-test-colored-p 1))
        (sly-agent-q-diff-review-abort)))))

;;;; Changes between review and apply

(ert-deftest sly-agent-q-diff-test-file-changed-between-review-and-apply ()
  (sly-agent-q-diff-test--with-server
    (sly-agent-q-tools-test--write "a.lisp" (sly-agent-q-diff-test-old))
    (let* ((args (list :path "a.lisp" :new_content (sly-agent-q-diff-test-new)))
           (decision (car (sly-agent-q-diff-test-review args (sly-agent-q-diff-test-choose '(1 3)))))
           (changed (concat ";; edited by the user\n" (sly-agent-q-diff-test-old))))
      (sly-agent-q-tools-test--write "a.lisp" changed)
      (let ((msg (apply #'sly-agent-q-tools-test--fails "propose_file_edit" (plist-get decision :arguments))))
        (should (string-match-p "a.lisp changed after the user reviewed the proposed edit, so nothing was applied" msg)))
      (should (equal changed (sly-agent-q-tools-test--contents "a.lisp"))))))

(ert-deftest sly-agent-q-diff-test-same-edit-reviewed-twice ()
  "Two reviews of one edit open at once: the second applies what it showed, or nothing.
Both were kept under one record, which applying the first forgot: the
second's hunk numbers were then read against the hunks of the text the
first had written, and a hunk its user had rejected was written."
  (dolist (descriptions '(("one" "two") ("same" "same")))
    (sly-agent-q-diff-test--with-server
      (sly-agent-q-tools-test--write "a.lisp" (sly-agent-q-diff-test-old))
      (let* ((first (sly-agent-q-diff-test-open-review
                     (list :path "a.lisp" :new_content (sly-agent-q-diff-test-new)
                           :description (car descriptions))))
             (second (sly-agent-q-diff-test-open-review
                      (list :path "a.lisp" :new_content (sly-agent-q-diff-test-new)
                            :description (cadr descriptions)))))
        (with-current-buffer (car first)
          (sly-agent-q-diff-review-accept-hunk 1) (sly-agent-q-diff-review-reject-hunk 2) (sly-agent-q-diff-review-reject-hunk 3)
          (sly-agent-q-diff-review-finish))
        (apply #'sly-agent-q-tools-test--ok "propose_file_edit"
               (plist-get (car (car (cdr first))) :arguments))
        (should (equal (sly-agent-q-diff-test-expected '(1)) (sly-agent-q-tools-test--contents "a.lisp")))
        ;; The second review showed hunk 2 as the line inserted after 15.
        (with-current-buffer (car second)
          (sly-agent-q-diff-review-reject-hunk 1) (sly-agent-q-diff-review-accept-hunk 2) (sly-agent-q-diff-review-reject-hunk 3)
          (sly-agent-q-diff-review-finish))
        (let ((msg (apply #'sly-agent-q-tools-test--fails "propose_file_edit"
                          (plist-get (car (car (cdr second))) :arguments))))
          (should (string-match-p "changed after the user reviewed the proposed edit, so nothing was applied" msg)))
        (should (equal (sly-agent-q-diff-test-expected '(1)) (sly-agent-q-tools-test--contents "a.lisp")))))))

(ert-deftest sly-agent-q-diff-test-denied-review-is-forgotten ()
  (sly-agent-q-diff-test--with-server
    (sly-agent-q-tools-test--write "a.lisp" (sly-agent-q-diff-test-old))
    (let ((args (list :path "a.lisp" :new_content (sly-agent-q-diff-test-new))))
      (sly-agent-q-diff-test-review args (lambda (_r cb) (funcall cb '(:decision "denied"))))
      ;; The file changes, then the same edit is approved without review.
      (sly-agent-q-tools-test--write "a.lisp" (concat ";; x\n" (sly-agent-q-diff-test-old)))
      (should (string-match-p "Applied all"
                              (apply #'sly-agent-q-tools-test--ok "propose_file_edit" args))))))

;;;; Buffers, old_text, errors

(ert-deftest sly-agent-q-diff-test-old-text-new-text ()
  (sly-agent-q-diff-test--with-server
    (sly-agent-q-tools-test--write "a.lisp" "(defun f (x)\n  (+ x 1))\n")
    (let* ((args (list :path "a.lisp" :old_text "(+ x 1)" :new_text "(+ x 2)"))
           (d (car (sly-agent-q-diff-test-review args (sly-agent-q-diff-test-choose '(1))))))
      (should (equal 1 (length (plist-get sly-agent-q-diff-test-request :hunks))))
      (should (equal "Applied all 1 hunk to a.lisp."
                     (apply #'sly-agent-q-tools-test--ok "propose_file_edit" (plist-get d :arguments))))
      (should (equal "(defun f (x)\n  (+ x 2))\n" (sly-agent-q-tools-test--contents "a.lisp"))))))

(ert-deftest sly-agent-q-diff-test-through-buffers ()
  (sly-agent-q-diff-test--with-server
    (let ((file (sly-agent-q-tools-test--write "a.lisp" (sly-agent-q-diff-test-old))))
      ;; An unmodified visiting buffer is edited, then saved.
      (with-current-buffer (find-file-noselect file)
        (goto-char (point-max))
        (let ((out (sly-agent-q-tools-test--ok "propose_file_edit" :path "a.lisp"
                                        :new_content (sly-agent-q-diff-test-new)
                                        :accepted_hunks [3])))
          (should (string-match-p "Applied hunk 3 of 3 to a.lisp (through buffer a.lisp, saved) (rejected: 1, 2)." out)))
        (should (equal (sly-agent-q-diff-test-expected '(3)) (buffer-string)))
        (should-not (buffer-modified-p))
        (should (= (point) (point-max)))
        (should (equal (sly-agent-q-diff-test-expected '(3)) (sly-agent-q-tools-test--contents "a.lisp")))
        ;; A modified buffer is edited, and not saved.
        (goto-char (point-min))
        (insert ";; user's unsaved line\n")
        (let* ((proposed (concat ";; user's unsaved line\n" (sly-agent-q-diff-test-new)))
               (out (sly-agent-q-tools-test--ok "propose_file_edit" :path "a.lisp" :new_content proposed)))
          (should (string-match-p "in buffer a.lisp, which had unsaved changes, so it was not saved" out))
          (should (equal proposed (buffer-string)))
          (should (buffer-modified-p))
          (should (equal (sly-agent-q-diff-test-expected '(3)) (sly-agent-q-tools-test--contents "a.lisp"))))))))

(ert-deftest sly-agent-q-diff-test-file-changed-behind-an-unmodified-buffer ()
  "The file changed on disk behind its unmodified visiting buffer: propose_file_edit and write_file
write the file (the edit computed against the disk, so the outside change stays), without a
question, and the buffer shows the result."
  (sly-agent-q-diff-test--with-server
    (let* ((file (sly-agent-q-tools-test--write "a.lisp" (sly-agent-q-diff-test-old)))
           (buffer (find-file-noselect file))
           (outside ";; changed outside Emacs\n"))
      (unwind-protect
          (progn
            (sly-agent-q-tools-test--write "a.lisp" (concat outside (sly-agent-q-diff-test-old)))
            ;; Later than the visit, whatever the clock's resolution.
            (set-file-times file (time-add nil 10))
            (should-not (verify-visited-file-modtime buffer))
            (let ((out (sly-agent-q-tools-test--ok "propose_file_edit" :path "a.lisp"
                                                   :new_content (concat outside (sly-agent-q-diff-test-new)))))
              (should (string-match-p "\\`Applied all 3 hunks to a.lisp (buffer a.lisp reverted)\\.\\'" out)))
            (should (equal (concat outside (sly-agent-q-diff-test-new)) (sly-agent-q-tools-test--contents "a.lisp")))
            (should (equal (sly-agent-q-tools-test--contents "a.lisp") (with-current-buffer buffer (buffer-string))))
            (should-not (buffer-modified-p buffer))
            (should (verify-visited-file-modtime buffer))
            ;; write_file the same way.
            (sly-agent-q-tools-test--write "a.lisp" "(changed outside again)\n")
            (set-file-times file (time-add nil 20))
            (should (string-match-p "buffer a.lisp reverted"
                                    (sly-agent-q-tools-test--ok "write_file" :path "a.lisp" :content "(new)\n")))
            (should (equal "(new)\n" (sly-agent-q-tools-test--contents "a.lisp")))
            (should (equal "(new)\n" (with-current-buffer buffer (buffer-string))))
            (should-not (buffer-modified-p buffer))
            (should-not (sly-agent-q-tools-test--temp-files)))
        (with-current-buffer buffer (set-buffer-modified-p nil))
        (kill-buffer buffer)))))

(ert-deftest sly-agent-q-diff-test-coding-kept ()
  (sly-agent-q-diff-test--with-server
    (let ((file (sly-agent-q-tools-test--write "latin.txt" "caf\u00e9\n" 'iso-latin-1-unix)))
      ;; On disk.
      (should (string-match-p "Applied all"
                              (sly-agent-q-tools-test--ok "propose_file_edit" :path "latin.txt"
                                                          :new_content "caf\u00e9 cr\u00e8me\n")))
      (should (equal (unibyte-string ?c ?a ?f #xe9 ?\s ?c ?r #xe8 ?m ?e ?\n)
                     (sly-agent-q-tools-test--bytes "latin.txt")))
      ;; Through an unmodified buffer, a character latin-1 cannot hold
      ;; is refused before the buffer is touched.
      (with-current-buffer (find-file-noselect file)
        (should (string-match-p "cannot represent"
                                (sly-agent-q-tools-test--fails "propose_file_edit" :path "latin.txt"
                                                               :new_content "\u03bb\n")))
        (should (equal "caf\u00e9 cr\u00e8me\n" (buffer-string)))
        (should-not (buffer-modified-p))))))

(ert-deftest sly-agent-q-diff-test-errors ()
  (sly-agent-q-tools-test--with-project
    (sly-agent-q-tools-test--write "a.lisp" "(a)\n(a)\n")
    (let ((asked nil))
      ;; Unusable proposals are answered at once, applying nothing, and the tool explains.
      (dolist (args (list (list :path "a.lisp" :old_text "(zzz)" :new_text "y")
                          (list :path "a.lisp" :old_text "(a)" :new_text "(b)")
                          (list :path "../x.lisp" :new_content "x")
                          (list :path "a.lisp")
                          (list :path "a.lisp" :new_content "x" :old_text "(a)" :new_text "y")))
        (let ((decisions (sly-agent-q-diff-test-review args (lambda (_r _cb) (setq asked t)))))
          (should (= 1 (length decisions)))
          (should (equal [] (plist-get (plist-get (car decisions) :arguments) :accepted_hunks)))
          (apply #'sly-agent-q-tools-test--fails "propose_file_edit" (plist-get (car decisions) :arguments))))
      (should-not asked))
    (should (string-match-p "not found"
                            (sly-agent-q-tools-test--fails "propose_file_edit" :path "a.lisp"
                                                    :old_text "(zzz)" :new_text "y")))
    (should (string-match-p "occurs 2 times"
                            (sly-agent-q-tools-test--fails "propose_file_edit" :path "a.lisp"
                                                    :old_text "(a)" :new_text "y")))
    (should (string-match-p "outside"
                            (sly-agent-q-tools-test--fails "propose_file_edit" :path "../x.lisp"
                                                    :new_content "x")))
    (should (string-match-p "does not exist"
                            (sly-agent-q-tools-test--fails "propose_file_edit" :path "b.lisp"
                                                    :old_text "x" :new_text "y")))
    (should (string-match-p "has 1 hunk"
                            (sly-agent-q-tools-test--fails "propose_file_edit" :path "a.lisp"
                                                    :new_content "(b)\n" :accepted_hunks [2])))
    (should (string-match-p "No change"
                            (sly-agent-q-tools-test--ok "propose_file_edit" :path "a.lisp"
                                                 :new_content "(a)\n(a)\n")))
    (should (string-match-p "No hunk was accepted"
                            (sly-agent-q-tools-test--ok "propose_file_edit" :path "a.lisp"
                                                 :new_content "(b)\n" :accepted_hunks [])))
    (should (equal "(a)\n(a)\n" (sly-agent-q-tools-test--contents "a.lisp")))))

(ert-deftest sly-agent-q-diff-test-new-file ()
  (sly-agent-q-diff-test--with-server
    (let ((d (car (sly-agent-q-diff-test-review (list :path "new/b.lisp" :new_content "(b)\n")
                                                (sly-agent-q-diff-test-choose '(1))))))
      (should (equal "@@ -0,0 +1 @@"
                     (plist-get (aref (plist-get sly-agent-q-diff-test-request :hunks) 0) :header)))
      (should (string-match-p "Applied all 1 hunk to new/b.lisp"
                              (apply #'sly-agent-q-tools-test--ok "propose_file_edit" (plist-get d :arguments))))
      (should (equal "(b)\n" (sly-agent-q-tools-test--contents "new/b.lisp"))))))

;;;; End to end, through the real server

(defvar sly-agent-q-project-root)

(ert-deftest sly-agent-q-diff-test-end-to-end ()
  "The model proposes a 3-hunk edit; the approver accepts 1 and 3; the server runs it."
  (skip-unless (fboundp 'sly-agent-q-test-send))
  (sly-agent-q-tools-test--with-project
    (sly-agent-q-tools-test--write "src/a.lisp" (sly-agent-q-diff-test-old))
    (let ((script
           `((steps . [((content . [((type . "tool_use") (name . "propose_file_edit")
                                     (input . ((path . "src/a.lisp")
                                               (new_content . ,(sly-agent-q-diff-test-new))
                                               (description . "Three changes"))))])
                        (stop_reason . "tool_use"))
                       ((content . [((type . "text") (text . "Result: {{last_tool_result}}"))]))]))))
      (eval
       `(sly-agent-q-test-with-server ',script
          (let* ((sly-agent-q-approval-function (sly-agent-q-diff-test-choose '(1 3)))
                 (outcome (sly-agent-q-test-send "Change it")))
            (should (eq (plist-get outcome :status) 'finished))
            (should (string-match-p "Applied hunks 1, 3 of 3 to src/a.lisp (rejected: 2)\\."
                                    (plist-get outcome :text)))
            (should (= 3 (length (plist-get sly-agent-q-diff-test-request :hunks))))))
       t)
      (should (equal (sly-agent-q-diff-test-expected '(1 3))
                     (sly-agent-q-tools-test--contents "src/a.lisp"))))))

(defvar sly-agent-q-diff-test-diff-requests nil
  "The diff/hunks requests Emacs sent during the last `sly-agent-q-diff-test-through-server'.")

(defun sly-agent-q-diff-test-through-server (tool input approver)
  "Run a turn where the model calls TOOL with INPUT, APPROVER deciding.
The project's src/a.lisp holds the 30-line text first.  Return (OUTCOME):
the turn's outcome.  The diff/hunks requests sent are in
`sly-agent-q-diff-test-diff-requests'."
  (let ((script
         `((steps . [((content . [((type . "tool_use") (name . ,tool) (input . ,input))])
                      (stop_reason . "tool_use"))
                     ((content . [((type . "text") (text . "Result: {{last_tool_result}}"))]))]))))
    (sly-agent-q-tools-test--write "src/a.lisp" (sly-agent-q-diff-test-old))
    (setq sly-agent-q-diff-test-diff-requests nil)
    (advice-add 'sly-agent-q-server-request :before
                (lambda (method params &rest _)
                  (when (eq method 'diff/hunks) (push params sly-agent-q-diff-test-diff-requests)))
                '((name . record-diff-requests)))
    (unwind-protect
        (list (eval `(sly-agent-q-test-with-server ',script
                       (let ((sly-agent-q-approval-function ',approver))
                         (sly-agent-q-test-send "Change it")))
                    t))
      (advice-remove 'sly-agent-q-server-request 'record-diff-requests))))

(ert-deftest sly-agent-q-diff-test-hunks-come-from-the-server ()
  "Review and apply use the server's hunks."
  (skip-unless (fboundp 'sly-agent-q-test-send))
  (sly-agent-q-tools-test--with-project
    (let ((run (sly-agent-q-diff-test-through-server
                "propose_file_edit" `((path . "src/a.lisp") (new_content . ,(sly-agent-q-diff-test-new)))
                (sly-agent-q-diff-test-choose '(2)))))
      (should (string-match-p "Applied hunk 2 of 3 to src/a.lisp (rejected: 1, 3)\\."
                              (plist-get (car run) :text)))
      (should (equal "@@ -13,6 +12,7 @@"
                     (plist-get (aref (plist-get sly-agent-q-diff-test-request :hunks) 1) :header)))
      (should (equal (sly-agent-q-diff-test-expected '(2))
                     (sly-agent-q-tools-test--contents "src/a.lisp"))))))

(ert-deftest sly-agent-q-diff-test-reviewed-texts-are-not-sent-back ()
  "The server reads a reviewed edit's texts itself (the file, the call's arguments): Emacs sends digests."
  (skip-unless (fboundp 'sly-agent-q-test-send))
  (sly-agent-q-tools-test--with-project
    (let ((run (sly-agent-q-diff-test-through-server
                "propose_file_edit"
                `((path . "src/a.lisp") (new_content . ,(sly-agent-q-diff-test-expected '(1 2))))
                (sly-agent-q-diff-test-choose '(1)))))
      (should (string-match-p "Applied hunk 1 of 2 to src/a.lisp (rejected: 2)\\."
                              (plist-get (car run) :text)))
      (should (= 1 (length sly-agent-q-diff-test-diff-requests)))
      (should-not (plist-member (car sly-agent-q-diff-test-diff-requests) :old))
      (should-not (plist-member (car sly-agent-q-diff-test-diff-requests) :new))
      (should (equal (sly-agent-q-diff-test-expected '(1))
                     (sly-agent-q-tools-test--contents "src/a.lisp"))))))

(ert-deftest sly-agent-q-diff-test-write-approval-diff-comes-from-the-server ()
  "The diff an approval of write_file shows is the server's."
  (skip-unless (fboundp 'sly-agent-q-test-send))
  (sly-agent-q-tools-test--with-project
    (setq sly-agent-q-diff-test-request nil)
    (let ((run (sly-agent-q-diff-test-through-server
                "write_file"
                `((path . "src/a.lisp") (content . ,(sly-agent-q-diff-test-expected '(3))))
                (lambda (r callback)
                  (setq sly-agent-q-diff-test-request r)
                  (funcall callback '(:decision "approved"))))))
      (should (eq (plist-get (car run) :status) 'finished))
      (should (string-match-p "^@@ -25,6 \\+25,6 @@$" (plist-get sly-agent-q-diff-test-request :diff)))
      (should (equal (sly-agent-q-diff-test-expected '(3)) (sly-agent-q-tools-test--contents "src/a.lisp"))))))

;;;; No line diff in Emacs

(ert-deftest sly-agent-q-diff-test-no-line-diff-in-emacs ()
  "Emacs has no line diff of its own: every path takes the server's hunks.
A diff of a large file would hold Emacs's only thread."
  (dolist (f '(sly-agent-q-diff-hunks sly-agent-q-diff--myers sly-agent-q-diff--anchors
               sly-agent-q-diff--matches sly-agent-q-diff--changes))
    (should-not (fboundp f))))

(defvar sly-agent-q-permission-rules)

(defvar sly-agent-q-diff-test-asked nil
  "Non-nil when the last allowed edit was put to the approver nonetheless.")

(ert-deftest sly-agent-q-diff-test-allowed-edit-takes-the-servers-hunks ()
  "A propose_file_edit the user's rules allow, unreviewed, applies the server's hunks.
Emacs asks for them without waiting; the edit lands through the visiting
buffer, point in unchanged text stays, and a rewind puts the file back."
  (skip-unless (fboundp 'sly-agent-q-test-send))
  (sly-agent-q-tools-test--with-project
    (let* ((sly-agent-q-permission-rules '((:action allow :tool "propose_file_edit")))
           (file (sly-agent-q-tools-test--write "src/a.lisp" (sly-agent-q-diff-test-old)))
           (buffer (find-file-noselect file))
           (script
            `((steps . [((content . [((type . "tool_use") (name . "propose_file_edit")
                                      (input . ((path . "src/a.lisp")
                                                (new_content . ,(sly-agent-q-diff-test-new)))))])
                         (stop_reason . "tool_use"))
                        ((content . [((type . "text") (text . "Result: {{last_tool_result}}"))]))
                        ((content . [((type . "text") (text . "Again."))]))]))))
      (with-current-buffer buffer
        (goto-char (point-min))
        (search-forward "(line 20)"))
      (setq sly-agent-q-diff-test-diff-requests nil
            sly-agent-q-diff-test-asked nil)
      (advice-add 'sly-agent-q-server-request :before
                  (lambda (method params &rest _)
                    (when (eq method 'diff/hunks) (push params sly-agent-q-diff-test-diff-requests)))
                  '((name . record-diff-requests)))
      (unwind-protect
          (eval
           `(sly-agent-q-test-with-server ',script
              (let* ((sly-agent-q-approval-function
                      (lambda (_r cb) (setq sly-agent-q-diff-test-asked t) (funcall cb '(:decision "denied"))))
                     (outcome (sly-agent-q-test-send "Change it")))
                (should (eq (plist-get outcome :status) 'finished))
                (should-not sly-agent-q-diff-test-asked)
                (should (string-match-p "Applied all 3 hunks to src/a.lisp (through buffer a.lisp, saved)\\."
                                        (plist-get outcome :text)))
                ;; The server computed the hunks, from the texts Emacs sent.
                (should (= 1 (length sly-agent-q-diff-test-diff-requests)))
                (should (equal (sly-agent-q-diff-test-new)
                               (plist-get (car sly-agent-q-diff-test-diff-requests) :new)))
                (should (equal (sly-agent-q-diff-test-new) (sly-agent-q-tools-test--contents "src/a.lisp")))
                ;; Only the changed lines were replaced: point stays on its line.
                (with-current-buffer ,buffer
                  (should (equal (sly-agent-q-diff-test-new) (buffer-string)))
                  (should (looking-back "^(line 20)" (line-beginning-position))))
                ;; What the edit changed was kept: a rewind puts the file back.
                (let* ((id (sly-agent-q-chat-conversation-id (sly-agent-q-chat-buffer)))
                       (turns nil) (rewound nil))
                  (sly-agent-q-server-request 'conversation/turns (list :conversationId id)
                                              (lambda (r) (setq turns (append (plist-get r :turns) nil))))
                  (sly-agent-q-test-wait (lambda () turns) 10 "the turns")
                  (should (equal (append (plist-get (car turns) :changed) nil) (list ,file)))
                  (sly-agent-q-sessions-rewind id (plist-get (car turns) :turnId) nil
                                               (lambda (o) (setq rewound o)))
                  (sly-agent-q-test-wait (lambda () rewound) 10 "the rewind")
                  (should (equal (list ,file) (plist-get rewound :restored)))
                  (should (equal (sly-agent-q-diff-test-old) (sly-agent-q-tools-test--contents "src/a.lisp"))))))
           t)
        (advice-remove 'sly-agent-q-server-request 'record-diff-requests)))))

(defun sly-agent-q-diff-test-edit-script ()
  "A model's script: propose_file_edit of src/a.lisp, then the tool's result."
  `((steps . [((content . [((type . "tool_use") (name . "propose_file_edit")
                            (input . ((path . "src/a.lisp")
                                      (new_content . ,(sly-agent-q-diff-test-new)))))])
               (stop_reason . "tool_use"))
              ((content . [((type . "text") (text . "Result: {{last_tool_result}}"))]))])))

(ert-deftest sly-agent-q-diff-test-server-killed-while-an-allowed-edit-waits-for-its-hunks ()
  "The server killed while an allowed edit waits for its hunks: the file is left alone.
The call is dropped with the server that made it, so nothing would
answer the model or keep the change for a rewind: the edit must not
land later, whole or in part, and Emacs must not wait on it."
  (skip-unless (fboundp 'sly-agent-q-test-send))
  (sly-agent-q-tools-test--with-project
    (let* ((sly-agent-q-permission-rules '((:action allow :tool "propose_file_edit")))
           (sly-agent-q-server-auto-restart t)
           ;; Its restart is not counted against the other tests' (three a minute).
           (sly-agent-q-server--restart-times nil)
           (file (sly-agent-q-tools-test--write "src/a.lisp" (sly-agent-q-diff-test-old)))
           (script
            (sly-agent-q-diff-test-edit-script)))
      (setq sly-agent-q-diff--hunk-cache nil)
      ;; Right after the edit's hunks were asked for, the server is killed.
      (sly-agent-q-test-kill-server-at 'diff/hunks)
      (unwind-protect
          (eval
           `(sly-agent-q-test-with-server ',script
              (sly-agent-q-send "Change it" #'ignore)
              (sly-agent-q-test-wait (lambda () sly-agent-q-test-killed-server) 20 "the edit's hunks asked for")
              ;; The death is seen, the server is started again and ready.
              (sly-agent-q-test-wait (lambda () (not (process-live-p sly-agent-q-test-killed-server)))
                                     10 "the server's death")
              (sly-agent-q-test-wait (lambda ()
                                       (and (sly-agent-q-connection-ready-p)
                                            (not (eq (jsonrpc--process sly-agent-q-current-connection)
                                                     sly-agent-q-test-killed-server))))
                                     20 "the server started again")
              ;; A request to the new server and its answer: anything the dead one left
              ;; waiting has had its chance to run.
              (let (turns)
                (sly-agent-q-server-request 'conversation/list nil (lambda (r) (setq turns (or r t))))
                (sly-agent-q-test-wait (lambda () turns) 10 "the new server's answer"))
              (should (equal (sly-agent-q-diff-test-old) (sly-agent-q-tools-test--contents "src/a.lisp")))
              ;; The user is told.
              (should (string-match-p "server exited" (sly-agent-q-test-chat-text))))
           t)
        (sly-agent-q-test-stop-killing)))))

(ert-deftest sly-agent-q-diff-test-server-killed-while-a-review-waits-for-its-hunks ()
  "The server killed while an edit's review waits for its hunks: the user is told, the turn ends.
The review asks the server to read the texts itself; that request fails
with the server's death, and asking again with the texts must not
start a new server before the death is reported, which took the
report away (the chat still showed the turn going, and its entry waiting)."
  (skip-unless (fboundp 'sly-agent-q-test-send))
  (sly-agent-q-tools-test--with-project
    (let* ((sly-agent-q-server-auto-restart t)
           ;; Its restart is not counted against the other tests' (three a minute).
           (sly-agent-q-server--restart-times nil)
           (outcome nil)
           (script
            (sly-agent-q-diff-test-edit-script)))
      (sly-agent-q-tools-test--write "src/a.lisp" (sly-agent-q-diff-test-old))
      (setq sly-agent-q-diff--hunk-cache nil)
      (sly-agent-q-test-kill-server-at 'diff/hunks)
      (unwind-protect
          (eval
           `(sly-agent-q-test-with-server ',script
              (let ((sly-agent-q-approval-function (sly-agent-q-diff-test-choose '(1 2 3))))
                (sly-agent-q-send "Change it" (lambda (o) (setq outcome o)))
                (sly-agent-q-test-wait (lambda () sly-agent-q-test-killed-server) 20 "the review's hunks asked for")
                (sly-agent-q-test-wait (lambda () (not (process-live-p sly-agent-q-test-killed-server)))
                                       10 "the server's death")
                ;; The user is told, and the turn is over.
                (sly-agent-q-test-wait (lambda () (string-match-p "server exited" (sly-agent-q-test-chat-text)))
                                       10 "the chat to say the server exited")
                (sly-agent-q-test-wait (lambda () outcome) 10 "the turn to end")
                (should (eq (plist-get outcome :status) 'failed))
                (with-current-buffer (sly-agent-q-chat-buffer)
                  (should-not (sly-agent-q-turn-running)))
                ;; The edit did not land.
                (should (equal (sly-agent-q-diff-test-old) (sly-agent-q-tools-test--contents "src/a.lisp")))))
           t)
        (sly-agent-q-test-stop-killing)))))

;; The review's first request (the server reads the texts) failing with
;; the server's death asked again with the texts, and that request started
;; a server: one the user had said not to restart, or, its start deferred
;; until the death was handled, one started after the user stopped it.
(ert-deftest sly-agent-q-diff-test-server-killed-while-a-review-waits-starts-no-server ()
  "The server killed while a review waits for its hunks, auto-restart off: no server is started.
Nor does one start when the user stops the server once the death is seen."
  (skip-unless (fboundp 'sly-agent-q-test-send))
  (sly-agent-q-tools-test--with-project
    (let ((sly-agent-q-server-auto-restart nil) (started 0) (outcome nil))
      (sly-agent-q-tools-test--write "src/a.lisp" (sly-agent-q-diff-test-old))
      (setq sly-agent-q-diff--hunk-cache nil)
      (sly-agent-q-test-kill-server-at 'diff/hunks)
      (advice-add 'sly-agent-q-server-start :before (lambda (&rest _) (cl-incf started))
                  '((name . sly-agent-q-diff-test-count-starts)))
      (unwind-protect
          (sly-agent-q-test-with-server (sly-agent-q-diff-test-edit-script)
            (setq started 0 sly-agent-q-approval-function (sly-agent-q-diff-test-choose '(1 2 3)))
            (sly-agent-q-send "Change it" (lambda (o) (setq outcome o)))
            (sly-agent-q-test-wait (lambda () outcome) 20 "the turn to end")
            (should sly-agent-q-test-killed-server)
            ;; The user stops what is left, as M-x sly-agent-q-stop-server does.
            (sly-agent-q-server-stop)
            (sly-agent-q-test-sleep 1)
            (should (= started 0))
            (should-not (sly-agent-q-connection-live-p))
            (should (equal (sly-agent-q-diff-test-old) (sly-agent-q-tools-test--contents "src/a.lisp"))))
        (advice-remove 'sly-agent-q-server-start 'sly-agent-q-diff-test-count-starts)
        (sly-agent-q-test-stop-killing)))))

(provide 'sly-agent-q-diff-test)
;;; sly-agent-q-diff-test.el ends here
