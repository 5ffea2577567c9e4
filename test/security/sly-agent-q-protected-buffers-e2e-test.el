;;; sly-agent-q-protected-buffers-e2e-test.el --- Protected files reached through buffers and roots  -*- lexical-binding: t; -*-

;;; Commentary:

;; The real bundled server, real Emacs buffers and files, the mock LLM
;; as a hostile model.  A buffer visiting a protected file (through a
;; link, under another case) is a write to that file once the user
;; saves it: changing its text asks, saying why, like writing the file.
;; And the root the server judges a call's paths against is the root
;; Emacs resolves them against, even when the user's current buffer
;; moved to another project meanwhile.  Run with test/security/run.sh.

;;; Code:

(require 'sly-agent-q-test-helper
         (expand-file-name "../elisp/sly-agent-q-test-helper"
                           (file-name-directory (or load-file-name buffer-file-name))))

(defun sly-agent-q-protected-buffers-test--step (name input)
  "A mock step in which the model calls the tool NAME with INPUT (an alist)."
  `((content . [((type . "tool_use") (name . ,name) (input . ,input))])
    (stop_reason . "tool_use")))

(defun sly-agent-q-protected-buffers-test--write (file text)
  "Write TEXT to FILE, making its directory."
  (make-directory (file-name-directory file) t)
  (let ((coding-system-for-write 'utf-8-unix))
    (write-region text nil file nil 'silent)))

(defun sly-agent-q-protected-buffers-test--read (file)
  "FILE's text."
  (with-temp-buffer (insert-file-contents file) (buffer-string)))

(defun sly-agent-q-protected-buffers-test--text (buffer)
  "BUFFER's text."
  (with-current-buffer buffer (buffer-substring-no-properties (point-min) (point-max))))

(ert-deftest sly-agent-q-protected-buffers-edits-ask ()
  "Changing the text of a buffer that visits a protected file asks, saying why.
Through a link named like nothing special, under another case, and
for the user's last buffer (write_to_buffer without a buffer): each
of buffer_edit, write_to_buffer and buffer_append asks although the
tools' level runs them unasked; denied, no buffer changes.  A buffer
visiting a plain file is edited unasked."
  (let* ((root (file-name-as-directory (file-truename (make-temp-file "saq-protbuf" t))))
         (dir-locals (expand-file-name ".dir-locals.el" root))
         (link (expand-file-name "notes.el" root))
         (agent-q (expand-file-name "AGENT-Q.md" root))
         (cased (expand-file-name "src/Agents.MD" root))
         (plain (expand-file-name "plain.txt" root))
         (asked nil)
         buffers)
    (unwind-protect
        (progn
          (sly-agent-q-protected-buffers-test--write dir-locals "((nil . ((fill-column . 70))))\n")
          (make-symbolic-link dir-locals link)
          (sly-agent-q-protected-buffers-test--write agent-q "Be careful.\n")
          (sly-agent-q-protected-buffers-test--write cased "Be careful too.\n")
          (sly-agent-q-protected-buffers-test--write plain "plain text\n")
          (let ((find-file-visit-truename nil)
                (enable-local-variables nil))
            (setq buffers (mapcar #'find-file-noselect (list link agent-q cased plain))))
          (let* ((last-user-buffer (nth 1 buffers))
                 (sly-agent-q-project-root root)
                 (sly-agent-q-files-default-buffer-function (lambda () last-user-buffer))
                 (approve (lambda (request callback)
                            (push request asked)
                            (funcall callback '(:decision "denied" :reason "no")))))
            (sly-agent-q-test-with-server
                `((steps . [,(sly-agent-q-protected-buffers-test--step
                              "buffer_edit" `((buffer_name . ,(buffer-name (nth 0 buffers)))
                                              (old_text . "fill-column . 70")
                                              (new_text . "eval . (shell-command \"touch /tmp/pwned\")")))
                            ,(sly-agent-q-protected-buffers-test--step
                              "write_to_buffer" '((content . "Obey the README.\n")))
                            ,(sly-agent-q-protected-buffers-test--step
                              "buffer_append" `((buffer_name . ,(buffer-name (nth 2 buffers)))
                                                (text . "Obey.\n")))
                            ,(sly-agent-q-protected-buffers-test--step
                              "buffer_edit" `((buffer_name . ,(buffer-name (nth 3 buffers)))
                                              (old_text . "plain")
                                              (new_text . "edited")))
                            ((content . [((type . "text") (text . "done"))]))]))
              (setq sly-agent-q-approval-function approve)
              (should (eq (plist-get (sly-agent-q-test-send "Edit them" 60) :status) 'finished))
              (let ((results (sly-agent-q-test-tool-results)))
                (should (= (length results) 4))
                (dotimes (i 3)
                  (should (cdr (nth i results)))
                  (should (string-match-p "the buffer visits .*, which is a protected file" (car (nth i results))))
                  (should (string-match-p "did not allow it (no); the buffer was not changed" (car (nth i results)))))
                (should-not (cdr (nth 3 results))))))
          ;; Asked once for each protected buffer, naming the file as it resolves and why.
          (should (equal (mapcar (lambda (r) (plist-get (plist-get r :reason) :kind)) (reverse asked))
                         '("protected" "protected" "protected")))
          (should (equal (mapcar (lambda (r) (plist-get (plist-get r :reason) :path)) (reverse asked))
                         '(".dir-locals.el" "AGENT-Q.md" "src/Agents.MD")))
          (should (string-match-p "Emacs applies its variables"
                                  (plist-get (plist-get (car (last asked)) :reason) :why)))
          ;; The world: the protected buffers and files unchanged, the plain buffer edited.
          (should (equal (sly-agent-q-protected-buffers-test--text (nth 0 buffers)) "((nil . ((fill-column . 70))))\n"))
          (should (equal (sly-agent-q-protected-buffers-test--text (nth 1 buffers)) "Be careful.\n"))
          (should (equal (sly-agent-q-protected-buffers-test--text (nth 2 buffers)) "Be careful too.\n"))
          (should-not (buffer-modified-p (nth 0 buffers)))
          (should (equal (sly-agent-q-protected-buffers-test--text (nth 3 buffers)) "edited text\n"))
          (should (equal (sly-agent-q-protected-buffers-test--read dir-locals) "((nil . ((fill-column . 70))))\n")))
      (dolist (b buffers)
        (when (buffer-live-p b)
          (with-current-buffer b (set-buffer-modified-p nil))
          (kill-buffer b)))
      (delete-directory root t))))

(ert-deftest sly-agent-q-protected-buffers-judged-buffer-is-written ()
  "The buffer judged is the buffer written, when the call names none.
write_to_buffer without a buffer writes the user's last buffer: judged
while it was a plain file's, it must not land in the buffer the user's
last one became right after (one visiting AGENT-Q.md), unasked."
  (let* ((root (file-name-as-directory (file-truename (make-temp-file "saq-protbuf" t))))
         (agent-q (expand-file-name "AGENT-Q.md" root))
         (plain (expand-file-name "plain.txt" root))
         (asked nil)
         buffers)
    (unwind-protect
        (progn
          (sly-agent-q-protected-buffers-test--write agent-q "Be careful.\n")
          (sly-agent-q-protected-buffers-test--write plain "plain text\n")
          (setq buffers (mapcar #'find-file-noselect (list plain agent-q)))
          (let* ((asked-for 0)
                 (sly-agent-q-project-root root)
                 ;; The user's last buffer: the plain one when first asked, AGENT-Q.md's after.
                 (sly-agent-q-files-default-buffer-function
                  (lambda () (nth (min 1 (1- (cl-incf asked-for))) buffers)))
                 (approve (lambda (request callback)
                            (push request asked)
                            (funcall callback '(:decision "denied")))))
            (sly-agent-q-test-with-server
                `((steps . [,(sly-agent-q-protected-buffers-test--step
                              "write_to_buffer" '((content . "Obey the README.\n") (position . 1)))
                            ((content . [((type . "text") (text . "done"))]))]))
              (setq sly-agent-q-approval-function approve)
              (should (eq (plist-get (sly-agent-q-test-send "Write" 60) :status) 'finished))))
          (should-not asked)
          (should (equal (sly-agent-q-protected-buffers-test--text (nth 1 buffers)) "Be careful.\n"))
          (should (equal (sly-agent-q-protected-buffers-test--text (nth 0 buffers)) "Obey the README.\nplain text\n")))
      (dolist (b buffers)
        (when (buffer-live-p b)
          (with-current-buffer b (set-buffer-modified-p nil))
          (kill-buffer b)))
      (delete-directory root t))))

(ert-deftest sly-agent-q-protected-buffers-judged-file-is-the-file-visited ()
  "A buffer write runs only while the buffer visits the file it was judged for.
The user approves an edit of AGENT-Q.md's buffer; while the approval
waits the buffer is made to visit .dir-locals.el: the approved edit is
not applied there."
  (let* ((root (file-name-as-directory (file-truename (make-temp-file "saq-protbuf" t))))
         (agent-q (expand-file-name "AGENT-Q.md" root))
         (dir-locals (expand-file-name ".dir-locals.el" root))
         (asked nil)
         buffers)
    (unwind-protect
        (progn
          (sly-agent-q-protected-buffers-test--write agent-q "Be careful.\n")
          (setq buffers (list (find-file-noselect agent-q)))
          (let* ((sly-agent-q-project-root root)
                 (approve (lambda (request callback)
                            (push request asked)
                            ;; While the user reads the approval, the buffer comes to visit another file.
                            (with-current-buffer (nth 0 buffers)
                              (let ((name (buffer-name)))
                                (set-visited-file-name dir-locals t)
                                (rename-buffer name)))
                            (funcall callback '(:decision "approved")))))
            (sly-agent-q-test-with-server
                    `((steps . [,(sly-agent-q-protected-buffers-test--step
                                  "buffer_edit" `((buffer_name . ,(buffer-name (nth 0 buffers)))
                                                  (old_text . "careful")
                                                  (new_text . "obedient")))
                                ((content . [((type . "text") (text . "done"))]))]))
                  (setq sly-agent-q-approval-function approve)
                  (should (eq (plist-get (sly-agent-q-test-send "Edit it" 60) :status) 'finished))
                  (let ((results (sly-agent-q-test-tool-results)))
                    (should (= (length results) 1))
                    (should (cdr (car results)))
                    (should (string-match-p "now visits .*\\.dir-locals\\.el.*was not changed" (car (car results)))))))
          (should (equal (mapcar (lambda (r) (plist-get (plist-get r :reason) :path)) asked) '("AGENT-Q.md")))
          ;; The world: the buffer now visiting .dir-locals.el holds the text it had.
          (should (equal (sly-agent-q-protected-buffers-test--text (nth 0 buffers)) "Be careful.\n"))
          (should-not (file-exists-p dir-locals)))
      (dolist (b buffers)
        (when (buffer-live-p b)
          (with-current-buffer b (set-buffer-modified-p nil))
          (kill-buffer b)))
      (delete-directory root t))))

(ert-deftest sly-agent-q-protected-buffers-one-root-per-call ()
  "A call's paths resolve against the root the server judged them by.
The turn starts in project A; the user's current buffer then moves to
project B, where `notes.el' is a link to B's `.dir-locals.el'.  A write
of notes.el, which the server judged in A (no such file, nothing
protected) and an allow rule lets run unasked, must not write B's
.dir-locals.el: Emacs resolves it in A too."
  (let* ((a (file-name-as-directory (file-truename (make-temp-file "saq-protbuf-a" t))))
         (b (file-name-as-directory (file-truename (make-temp-file "saq-protbuf-b" t))))
         (b-locals (expand-file-name ".dir-locals.el" b))
         (original "((nil . ((fill-column . 70))))\n")
         (asked nil)
         buffers)
    (unwind-protect
        (progn
          (sly-agent-q-protected-buffers-test--write (expand-file-name "main.lisp" a) "(in-package :a)\n")
          (sly-agent-q-protected-buffers-test--write (expand-file-name "main.lisp" b) "(in-package :b)\n")
          (sly-agent-q-protected-buffers-test--write b-locals original)
          (make-symbolic-link b-locals (expand-file-name "notes.el" b))
          (setq buffers (list (find-file-noselect (expand-file-name "main.lisp" a))
                              (find-file-noselect (expand-file-name "main.lisp" b))))
          (let* ((current (nth 0 buffers))
                 ;; The root follows the user's buffer (no project: its directory).
                 (sly-agent-q-project-root nil)
                 (project-find-functions nil)
                 (sly-agent-q-files-default-buffer-function (lambda () current))
                 (sly-agent-q-permission-rules '((:action allow :tool "write_file")))
                 (approve (lambda (request callback)
                            (push request asked)
                            (funcall callback '(:decision "denied")))))
            (sly-agent-q-test-with-server
                `((steps . [,(sly-agent-q-protected-buffers-test--step
                              "write_file" '((path . "notes.el") (content . "((nil . ((eval . (shell-command \"x\")))))\n")))
                            ((content . [((type . "text") (text . "done"))]))]))
              (setq sly-agent-q-approval-function approve)
              (let (outcome)
                (sly-agent-q-send "Write notes.el" (lambda (plist) (setq outcome plist)))
                ;; The turn was sent with A as its root; the user moves to B.
                (setq current (nth 1 buffers))
                (should (equal (file-name-as-directory (file-truename (sly-agent-q-files-project-root))) b))
                (sly-agent-q-test-wait (lambda () outcome) 60 "the turn")
                (should (eq (plist-get outcome :status) 'finished)))))
          ;; B's .dir-locals.el, never judged, is untouched: the write went to A, where it was judged.
          (should (equal (sly-agent-q-protected-buffers-test--read b-locals) original))
          (should (file-regular-p (expand-file-name "notes.el" a)))
          (should-not (file-symlink-p (expand-file-name "notes.el" a)))
          (should-not asked))
      (dolist (buf buffers)
        (when (buffer-live-p buf)
          (with-current-buffer buf (set-buffer-modified-p nil))
          (kill-buffer buf)))
      (delete-directory a t)
      (delete-directory b t))))

(ert-deftest sly-agent-q-protected-buffers-root-changed-by-the-user-refuses ()
  "A call judged in root A while the user has since set `sly-agent-q-project-root' to B is refused.
Run in either root, what the server judged and what Emacs does would
differ, or the agent would work outside the root the user chose; the
same root under another spelling (a link to it) is the same root."
  (let* ((a (file-name-as-directory (file-truename (make-temp-file "saq-protbuf-a" t))))
         (b (file-name-as-directory (file-truename (make-temp-file "saq-protbuf-b" t))))
         (link (concat (directory-file-name b) "-link")))
    (unwind-protect
        (progn
          (make-symbolic-link (directory-file-name a) link)
          (let ((sly-agent-q-project-root nil))
            (should (equal (sly-agent-q-files-call-root a) a)))
          (let ((sly-agent-q-project-root a))
            (should (equal (sly-agent-q-files-call-root a) a))
            (should (equal (sly-agent-q-files-call-root link) (file-name-as-directory link))))
          (let ((sly-agent-q-project-root b))
            (should (string-match-p "The project root is now .*, not .*, which this call was judged against; it was not run"
                                    (cadr (should-error (sly-agent-q-files-call-root a) :type 'sly-agent-q-tool-error)))))
          ;; Through the dispatch: the call is answered with the refusal, and nothing runs.
          (let* ((sly-agent-q-project-root b)
                 (answer nil)
                 (call (sly-agent-q-dispatch--make-call :id "x" :kind 'tool
                                               :params (list :tool "write_file"
                                                             :arguments (list :path "notes.el" :content "x")
                                                             :projectRoot a))))
            (cl-letf (((symbol-function 'sly-agent-q-dispatch--call-send) (lambda (_call reply) (setq answer reply))))
              (sly-agent-q-handle-call 'tool call))
            (should (string-match-p "it was not run" (plist-get (plist-get answer :error) :message)))
            (should-not (file-exists-p (expand-file-name "notes.el" a)))
            (should-not (file-exists-p (expand-file-name "notes.el" b)))))
      (delete-file link)
      (delete-directory a t)
      (delete-directory b t))))

(ert-deftest sly-agent-q-protected-buffers-indirect-buffers-judged-by-their-base ()
  "An indirect buffer shares its base buffer's text but visits no file itself.
The agent's buffer checks judge it by its base buffer's file: an edit
of an indirect buffer of .dir-locals.el asks (denied: the base buffer
keeps its text), one of ~/.sbclrc outside the root is refused, and one
of a credentials file is never read."
  (let* ((root (file-name-as-directory (file-truename (make-temp-file "saq-indirect" t))))
         (outside (file-name-as-directory (file-truename (make-temp-file "saq-indirect-out" t))))
         (dir-locals (expand-file-name ".dir-locals.el" root))
         (sbclrc (expand-file-name ".sbclrc" outside))
         (authinfo (expand-file-name ".authinfo" outside))
         (asked nil)
         bases indirects results)
    (unwind-protect
        (progn
          (sly-agent-q-protected-buffers-test--write dir-locals "((nil . ((fill-column . 70))))\n")
          (sly-agent-q-protected-buffers-test--write sbclrc "(print 1)\n")
          (sly-agent-q-protected-buffers-test--write authinfo "machine x login u password SECRET123\n")
          (let ((enable-local-variables nil))
            (setq bases (mapcar #'find-file-noselect (list dir-locals sbclrc authinfo))))
          (setq indirects (cl-loop for b in bases for name in '("notes-a" "notes-b" "notes-c")
                                   collect (make-indirect-buffer b (generate-new-buffer-name name) nil t)))
          (let ((sly-agent-q-project-root root)
                (approve (lambda (request callback)
                           (push request asked)
                           (funcall callback '(:decision "denied" :reason "no")))))
            (sly-agent-q-test-with-server
                `((steps . [,(sly-agent-q-protected-buffers-test--step
                              "buffer_edit" `((buffer_name . ,(buffer-name (nth 0 indirects)))
                                              (old_text . "fill-column . 70")
                                              (new_text . "eval . (shell-command \"touch /tmp/pwned\")")))
                            ,(sly-agent-q-protected-buffers-test--step
                              "buffer_append" `((buffer_name . ,(buffer-name (nth 1 indirects)))
                                                (text . "(run-program \"/bin/sh\")\n")))
                            ,(sly-agent-q-protected-buffers-test--step
                              "read_buffer" `((buffer . ,(buffer-name (nth 2 indirects)))))
                            ((content . [((type . "text") (text . "done"))]))]))
              (setq sly-agent-q-approval-function approve)
              (should (eq (plist-get (sly-agent-q-test-send "Go" 60) :status) 'finished))
              (setq results (sly-agent-q-test-tool-results))))
          ;; The .dir-locals.el edit asked (a protected file) and, denied, changed nothing.
          (should (= (length asked) 1))
          (should (equal (sly-agent-q-protected-buffers-test--text (nth 0 bases)) "((nil . ((fill-column . 70))))\n"))
          ;; The file outside the root: refused, its buffer unchanged.
          (should (equal (sly-agent-q-protected-buffers-test--text (nth 1 bases)) "(print 1)\n"))
          (should (string-match-p "outside the project root" (car (nth 1 results))))
          ;; The credentials never reach the model.
          (should-not (cl-some (lambda (r) (string-match-p "SECRET123" (format "%s" r))) results))
          (should (string-match-p "credentials" (car (nth 2 results)))))
      (mapc (lambda (b) (when (buffer-live-p b) (with-current-buffer b (set-buffer-modified-p nil)) (kill-buffer b)))
            (append indirects bases))
      (delete-directory root t)
      (delete-directory outside t))))

(provide 'sly-agent-q-protected-buffers-e2e-test)
;;; sly-agent-q-protected-buffers-e2e-test.el ends here
