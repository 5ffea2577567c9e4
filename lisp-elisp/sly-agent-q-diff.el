;;; sly-agent-q-diff.el --- The hunks of the agent's file edits, and their application  -*- lexical-binding: t; -*-

;; Copyright (C) 2026  The sly-agent-q authors

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

;; The propose_file_edit tool's hunks and their application; the review
;; the user makes of them is in sly-agent-q-diff-review.el.
;;
;; Hunks.  The server computes them (diff/hunks, asked without waiting
;; by `sly-agent-q-diff-fetch-hunks'): a line diff of a large file would
;; hold Emacs's only thread, so there is none here.  They are kept under
;; the digests of the two texts, and a review keeps those it showed, so
;; that the proposal, computed again at the apply, finds the very hunks
;; the user reviewed.  When the server gives none, one hunk replaces the
;; whole text.
;;
;; Apply.  The capability propose_file_edit (see
;; `sly-agent-q-diff-apply-proposal') applies exactly the accepted
;; hunks, through the visiting buffer if there is one, and says which.
;; If the text changed since the review, nothing is applied.

;;; Code:

(require 'cl-lib)
(require 'sly-agent-q-files)
(require 'sly-agent-q-display)

(defvar sly-agent-q-current-connection)
(declare-function sly-agent-q-connection-ready-p "sly-agent-q-connection" ())
(declare-function sly-agent-q-connection-live-p "sly-agent-q-connection" (&optional conn))
(declare-function sly-agent-q-server-request "sly-agent-q-server" (method params success &optional failure))

(defcustom sly-agent-q-diff-context-lines 3
  "Lines of unchanged context around each hunk of a proposed edit."
  :type 'integer
  :group 'sly-agent-q-tools)

;;;; Hunks

;; A hunk is a plist: :index (1-based), :old-start, :old-end, :new-start,
;; :new-end (0-based line indexes, end excluded, context included),
;; :changes (the changed regions inside, each (OLD-START OLD-END
;; NEW-START NEW-END)), :header (the @@ line) and :text (its diff lines).
;; The server computes them (see "Hunks from the server" below); Emacs
;; only applies them.

(defun sly-agent-q-diff--range (start count)
  "Return the unified-diff range of COUNT lines from 0-based START."
  (cond ((= count 0) (format "%d,0" start))
        ((= count 1) (format "%d" (1+ start)))
        (t (format "%d,%d" (1+ start) count))))

(defun sly-agent-q-diff--whole-hunks (old new)
  "Return the one hunk replacing every line of OLD by every line of NEW.
What is shown and applied when the server gives no hunks: no diff, so
its cost is the texts' length (the server does the same when a diff
takes too long).  Nil when OLD and NEW are the same."
  (unless (equal old new)
    (let ((a (sly-agent-q-files-split-lines old))
          (b (sly-agent-q-files-split-lines new)))
      (list (list :index 1
                  :old-start 0 :old-end (length a) :new-start 0 :new-end (length b)
                  :changes (list (list 0 (length a) 0 (length b)))
                  :header (format "@@ -%s +%s @@"
                                  (sly-agent-q-diff--range 0 (length a))
                                  (sly-agent-q-diff--range 0 (length b)))
                  :text (concat (sly-agent-q-diff--diff-lines "-" a 0 (length a))
                                (sly-agent-q-diff--diff-lines "+" b 0 (length b))))))))

(defun sly-agent-q-diff--apply-hunks (a b hunks accepted)
  "Return the text of A with the hunks of HUNKS whose index is in ACCEPTED.
A and B are the line vectors HUNKS were computed from."
  (let ((parts nil) (i 0))
    (dolist (hunk hunks)
      (when (memq (plist-get hunk :index) accepted)
        (cl-loop for k from i below (plist-get hunk :old-start)
                 do (push (aref a k) parts))
        (cl-loop for k from (plist-get hunk :new-start) below (plist-get hunk :new-end)
                 do (push (aref b k) parts))
        (setq i (plist-get hunk :old-end))))
    (cl-loop for k from i below (length a) do (push (aref a k) parts))
    (apply #'concat (nreverse parts))))

(defun sly-agent-q-diff--hunks-fit-p (old new hunks &optional a b)
  "Non-nil when HUNKS turn the text OLD into NEW, as they are applied here.
Their line ranges must lie in the texts, in order, and applying them
all, by hunk and by change, must give NEW: hunks that do not are
never applied, so a buffer is never left half edited.  A and B, when
given, are the lines of OLD and NEW already split."
  (let* ((a (or a (sly-agent-q-files-split-lines old)))
         (b (or b (sly-agent-q-files-split-lines new)))
         (n (length a)) (m (length b))
         (old-end 0) (new-end 0) (at 0) (index 0) (parts nil))
    (and (cl-every
          (lambda (h)
            (let ((os (plist-get h :old-start)) (oe (plist-get h :old-end))
                  (ns (plist-get h :new-start)) (ne (plist-get h :new-end)))
              (and (eql (plist-get h :index) (cl-incf index))
                   (cl-every #'natnump (list os oe ns ne))
                   (<= old-end os oe n) (<= new-end ns ne m)
                   (stringp (plist-get h :header)) (stringp (plist-get h :text))
                   (listp (plist-get h :changes))
                   (cl-every
                    (lambda (c)
                      (and (listp c) (= (length c) 4) (cl-every #'natnump c)
                           (<= (max at os) (nth 0 c) (nth 1 c) oe)
                           (<= ns (nth 2 c) (nth 3 c) ne)
                           (progn
                             (cl-loop for k from at below (nth 0 c) do (push (aref a k) parts))
                             (cl-loop for k from (nth 2 c) below (nth 3 c) do (push (aref b k) parts))
                             (setq at (nth 1 c))
                             t)))
                    (plist-get h :changes))
                   (setq old-end oe new-end ne))))
          hunks)
         (progn
           (cl-loop for k from at below n do (push (aref a k) parts))
           (equal new (apply #'concat (nreverse parts))))
         (equal new (sly-agent-q-diff--apply-hunks
                     a b hunks (mapcar (lambda (h) (plist-get h :index)) hunks))))))

;;;; Proposals

(defun sly-agent-q-diff--string-arg (args key)
  "Return the string argument KEY of ARGS, or nil; signal if not a string."
  (let ((value (plist-get args key)))
    (cond ((or (null value) (eq value :json-false)) nil)
          ((stringp value) value)
          (t (sly-agent-q-tool-fail "Parameter %s must be a string."
                                (substring (symbol-name key) 1))))))

(defun sly-agent-q-diff-proposal (args &optional texts-only)
  "Compute the proposal of propose_file_edit ARGS, a plist.
Return a plist with keys :file (resolved), :rel (relative name),
:current (see `sly-agent-q-files-current-text'), :old and :new (the
texts), :a and :b (their lines), :hunks and :description.  With
TEXTS-ONLY, leave out :a, :b and :hunks.  The hunks are those the
user reviewed of these texts, else the server's when it computed them
\(see `sly-agent-q-diff-fetch-hunks'), else one hunk replacing the
whole text: no line diff runs here.  Signal `sly-agent-q-tool-error'
when ARGS are unusable."
  (let* ((path (sly-agent-q-diff--string-arg args :path))
         (new-content (sly-agent-q-diff--string-arg args :new_content))
         (old-text (sly-agent-q-diff--string-arg args :old_text))
         (new-text (sly-agent-q-diff--string-arg args :new_text))
         (description (sly-agent-q-diff--string-arg args :description)))
    (unless path (sly-agent-q-tool-fail "Parameter path is required."))
    (cond ((and new-content (or old-text new-text))
           (sly-agent-q-tool-fail
            "Give either new_content, or old_text and new_text, not both."))
          ((and (null new-content) (null old-text))
           (sly-agent-q-tool-fail
            "Give new_content (the whole new file), or old_text and new_text."))
          ((and old-text (null new-text))
           (sly-agent-q-tool-fail
            "old_text needs new_text (use \"\" to delete old_text).")))
    (let* ((file (sly-agent-q-files-resolve path t))
           (rel (sly-agent-q-files-relative file))
           (current (sly-agent-q-files-current-text file))
           (old (plist-get current :text))
           (new (if new-content
                    new-content
                  (unless (or (plist-get current :exists) (plist-get current :buffer))
                    (sly-agent-q-tool-fail
                     "%s does not exist; to create it, give new_content." rel))
                  (let ((pos (sly-agent-q-files-unique-occurrence old-text old rel)))
                    (concat (substring old 0 pos) new-text
                            (substring old (+ pos (length old-text)))))))
           (texts (list :file file :rel rel :current current :old old :new new
                        :description description)))
      (if texts-only
          texts
        ;; Lines split when the server's hunks came are not split again.
        (let ((known (sly-agent-q-diff--fetched old new)))
          (append texts
                  (list :a (if known (sly-agent-q-diff--known-a known) (sly-agent-q-files-split-lines old))
                        :b (if known (sly-agent-q-diff--known-b known) (sly-agent-q-files-split-lines new))
                        :hunks (or (sly-agent-q-diff--reviewed-hunks args file old)
                                   (and known (sly-agent-q-diff--known-hunks known))
                                   (sly-agent-q-diff--whole-hunks old new)))))))))

;;;; Hunks from the server

;; The server computes the hunks (server/diff.ts): a line diff of a large
;; file would hold Emacs's only thread.  Every path asks for them without
;; waiting and finds them here, under the two texts; a review also keeps
;; the hunks it showed (see `sly-agent-q-diff-remember-review'), so that
;; review and apply agree.  The texts are compared as they are, not
;; hashed: hashing encodes a large text first, which costs far more than
;; comparing it.

(cl-defstruct (sly-agent-q-diff--known
               (:constructor sly-agent-q-diff--make-known)
               (:copier nil))
  "The server's hunks turning OLD into NEW, whose lines are A and B."
  old new a b hunks)

(defvar sly-agent-q-diff--hunk-cache nil
  "The server's hunks of recent edits, newest first: `sly-agent-q-diff--known's.")

(defconst sly-agent-q-diff--hunk-cache-size 8
  "Edits whose server hunks are kept: more than ever wait for review at once.")

(defun sly-agent-q-diff--digests (old new)
  "The key of the texts OLD and NEW in `sly-agent-q-diff--hunk-cache'.
SHA-256 of their UTF-8 bytes, as the server computes them."
  (cons (secure-hash 'sha256 (encode-coding-string old 'utf-8 t))
        (secure-hash 'sha256 (encode-coding-string new 'utf-8 t))))

(defun sly-agent-q-diff--fetched (old new)
  "The `sly-agent-q-diff--known' hunks turning OLD into NEW, or nil.
Its hunks may be empty."
  (and (stringp old) (stringp new)
       (cl-find-if (lambda (known) (and (string= new (sly-agent-q-diff--known-new known))
                                        (string= old (sly-agent-q-diff--known-old known))))
                   sly-agent-q-diff--hunk-cache)))

(defun sly-agent-q-diff--keep-hunks (known)
  "Keep KNOWN, a `sly-agent-q-diff--known', in `sly-agent-q-diff--hunk-cache'."
  (push known sly-agent-q-diff--hunk-cache)
  (when (> (length sly-agent-q-diff--hunk-cache) sly-agent-q-diff--hunk-cache-size)
    (setcdr (nthcdr (1- sly-agent-q-diff--hunk-cache-size) sly-agent-q-diff--hunk-cache)
            nil)))

(defun sly-agent-q-diff--from-server (hunk)
  "HUNK as the server sends it (diff/hunks), as a hunk plist here."
  (list :index (plist-get hunk :index)
        :old-start (plist-get hunk :oldStart) :old-end (plist-get hunk :oldEnd)
        :new-start (plist-get hunk :newStart) :new-end (plist-get hunk :newEnd)
        :changes (mapcar (lambda (c) (append c nil)) (plist-get hunk :changes))
        :header (plist-get hunk :header)
        :text (plist-get hunk :text)))

(defun sly-agent-q-diff--diff-lines (prefix lines from to)
  "Return the lines FROM to TO (excluded) of the vector LINES as diff lines.
Each starts with PREFIX.
Joined in one `mapconcat' of `identity': a large hunk costs no Lisp
call per line.  Only the last line of a text may lack its newline."
  (if (>= from to)
      ""
    (let ((text (concat prefix (mapconcat #'identity (substring lines from to) prefix))))
      (if (string-suffix-p "\n" text)
          text
        (concat text "\n\\ No newline at end of file\n")))))

(defun sly-agent-q-diff--drawn (a b hunk)
  "Return HUNK, its header and text drawn from the lines A and B it puts in.
What the review shows is then what applying the hunk writes, whatever
header and text the server sent with it."
  (let ((parts nil) (at (plist-get hunk :old-start))
        (os (plist-get hunk :old-start)) (oe (plist-get hunk :old-end))
        (ns (plist-get hunk :new-start)) (ne (plist-get hunk :new-end)))
    (dolist (c (plist-get hunk :changes))
      (push (sly-agent-q-diff--diff-lines " " a at (nth 0 c)) parts)
      (push (sly-agent-q-diff--diff-lines "-" a (nth 0 c) (nth 1 c)) parts)
      (push (sly-agent-q-diff--diff-lines "+" b (nth 2 c) (nth 3 c)) parts)
      (setq at (nth 1 c)))
    (push (sly-agent-q-diff--diff-lines " " a at oe) parts)
    (append (list :header (format "@@ -%s +%s @@"
                                  (sly-agent-q-diff--range os (- oe os))
                                  (sly-agent-q-diff--range ns (- ne ns)))
                  :text (apply #'concat (nreverse parts)))
            (cl-loop for (key value) on hunk by #'cddr
                     unless (memq key '(:header :text)) append (list key value)))))

(defun sly-agent-q-diff-fetch-hunks (old new then &optional source)
  "Ask the server for the hunks turning OLD into NEW; then call THEN.
THEN gets no argument.  Never waits: THEN runs when the server
answered (the hunks are then in `sly-agent-q-diff--hunk-cache') or
failed, or at once when they were fetched already, without a server,
or when OLD or NEW is not a string (then one hunk replaces the whole
text, see `sly-agent-q-diff-proposal').  SOURCE, a plist (:callId ID
:file FILE), says that OLD is the text of FILE on disk and NEW the one
the arguments of the call ID, whose approval waits, give: the server
then reads them itself, checked against the digests of OLD and NEW,
and a large file's texts are not sent back to it.  If it cannot, the
texts are sent."
  (if (or (not (and (stringp old) (stringp new))) (sly-agent-q-diff--fetched old new))
      (funcall then)
    (let* ((key (sly-agent-q-diff--digests old new))
           (keep (lambda (result)
                   ;; Hunks that do not fit the texts are not kept: one hunk of
                   ;; the whole text serves instead.
                   (let ((hunks (ignore-errors
                                  (mapcar #'sly-agent-q-diff--from-server
                                          (append (plist-get result :hunks) nil))))
                         (a (sly-agent-q-files-split-lines old))
                         (b (sly-agent-q-files-split-lines new)))
                     (when (ignore-errors (sly-agent-q-diff--hunks-fit-p old new hunks a b))
                       (sly-agent-q-diff--keep-hunks
                        (sly-agent-q-diff--make-known
                         :old old :new new :a a :b b
                         ;; Shown as they are applied, not as the server wrote them.
                         :hunks (mapcar (lambda (h) (sly-agent-q-diff--drawn a b h)) hunks)))))
                   ;; What follows (a review drawn, an edit applied) is work of
                   ;; its own: it runs after Emacs has answered its input.
                   (run-with-timer 0 nil then)))
           (fail (lambda (&rest _) (funcall then)))
           (send-texts (lambda (&rest _)
                         ;; Asked again with the texts only if the server refused to
                         ;; read them: a request failing with the server's death
                         ;; would otherwise start a server, auto-restart or not.
                         (if (sly-agent-q-connection-ready-p)
                             (sly-agent-q-server-request
                              'diff/hunks
                              (list :old old :new new :context sly-agent-q-diff-context-lines)
                              keep fail)
                           (funcall then)))))
      (cond
       ((not (and (fboundp 'sly-agent-q-connection-ready-p) (sly-agent-q-connection-ready-p)))
        (funcall then))
       ((and (plist-get source :callId) (plist-get source :file))
        (sly-agent-q-server-request
         'diff/hunks
         (list :callId (plist-get source :callId) :oldFile (plist-get source :file)
               :oldDigest (car key) :newDigest (cdr key)
               :context sly-agent-q-diff-context-lines)
         keep send-texts))
       (t (funcall send-texts))))))

(defun sly-agent-q-diff-text (name old new)
  "Return the unified diff turning the text OLD into NEW, for file NAME.
A new file (OLD empty) shows its whole text as added lines.  The
hunks are the server's when `sly-agent-q-diff-fetch-hunks' got them,
else one hunk replaces the whole text."
  (sly-agent-q-diff-unified
   (list :rel name
         :hunks (let ((known (sly-agent-q-diff--fetched old new)))
                  (if known
                      (sly-agent-q-diff--known-hunks known)
                    (sly-agent-q-diff--whole-hunks old new))))))

(defun sly-agent-q-diff-texts-later (diffs then)
  "Call THEN with the unified diffs of DIFFS once the server computed them.
DIFFS is a list of (NAME OLD NEW); THEN gets the list of their diffs
\(see `sly-agent-q-diff-text'), in order.  Never waits: the hunks are
asked for one edit after another."
  (if (null diffs)
      (funcall then nil)
    (pcase-let ((`(,name ,old ,new) (car diffs)))
      (sly-agent-q-diff-fetch-hunks
       old new
       (lambda ()
         (let ((text (sly-agent-q-diff-text name old new)))
           (sly-agent-q-diff-texts-later
            (cdr diffs) (lambda (rest) (funcall then (cons text rest))))))))))

(defun sly-agent-q-diff-unified (proposal &optional hunks)
  "Return PROPOSAL's HUNKS (default: all) as one unified diff."
  (let ((rel (plist-get proposal :rel)))
    (concat (format "--- a/%s\n+++ b/%s\n" rel rel)
            (mapconcat (lambda (h) (concat (plist-get h :header) "\n" (plist-get h :text)))
                       (or hunks (plist-get proposal :hunks)) ""))))

;; What was reviewed: the key is the file and the proposal's arguments,
;; the value the hash of the text the hunks were computed from, the
;; hunks shown (the accepted numbers mean those hunks), and how many
;; reviews of these arguments are open or approved and not applied yet:
;; the same proposal made twice is two reviews, and applying one leaves
;; the other bound to the text it showed.
(defvar sly-agent-q-diff--reviews (make-hash-table :test #'equal)
  "Proposals reviewed and not applied yet: key -> (BASE-HASH HUNKS COUNT).")

(defun sly-agent-q-diff--key (file args)
  "Return the review key of ARGS proposing an edit of FILE."
  (list file (plist-get args :new_content) (plist-get args :old_text)
        (plist-get args :new_text) (plist-get args :description)))

(defun sly-agent-q-diff-remember-review (args proposal)
  "Remember that PROPOSAL, from ARGS, is being reviewed."
  (let* ((key (sly-agent-q-diff--key (plist-get proposal :file) args))
         (before (gethash key sly-agent-q-diff--reviews)))
    (puthash key
             (list (secure-hash 'sha1 (plist-get proposal :old))
                   (plist-get proposal :hunks)
                   (1+ (if before (nth 2 before) 0)))
             sly-agent-q-diff--reviews)))

(defun sly-agent-q-diff--release-review (key)
  "One review of KEY is over: forget it when it was the last."
  (let ((reviewed (gethash key sly-agent-q-diff--reviews)))
    (when reviewed
      (if (> (nth 2 reviewed) 1)
          (setf (nth 2 reviewed) (1- (nth 2 reviewed)))
        (remhash key sly-agent-q-diff--reviews)))))

(defun sly-agent-q-diff--reviewed-hunks (args file old)
  "The hunks reviewed of ARGS editing FILE, if they were of the text OLD."
  (let ((reviewed (gethash (sly-agent-q-diff--key file args) sly-agent-q-diff--reviews)))
    (and reviewed (equal (car reviewed) (secure-hash 'sha1 old))
         (nth 1 reviewed))))

(defun sly-agent-q-diff-forget-review (args)
  "Forget the review of ARGS, if any."
  (let ((file (ignore-errors
                (sly-agent-q-files-resolve (plist-get args :path)))))
    (when file
      (sly-agent-q-diff--release-review (sly-agent-q-diff--key file args)))))

(defun sly-agent-q-diff--accepted (args count)
  "Return the sorted list of hunk numbers accepted in ARGS, out of COUNT."
  (let ((value (plist-get args :accepted_hunks)))
    (if (or (null value) (eq value :json-false))
        (number-sequence 1 count)
      (unless (or (vectorp value) (listp value))
        (sly-agent-q-tool-fail "accepted_hunks must be an array of hunk numbers."))
      (let ((numbers (delete-dups (append value nil))))
        (dolist (n numbers)
          (unless (and (integerp n) (<= 1 n count))
            (sly-agent-q-tool-fail
             "accepted_hunks contains %S, but the proposal has %d hunk%s (numbered from 1)."
             n count (if (= count 1) "" "s"))))
        (sort numbers #'<)))))

(defun sly-agent-q-diff--apply-in-buffer (buffer proposal accepted)
  "Apply the ACCEPTED hunks of PROPOSAL to BUFFER, whose text it was computed from."
  (let* ((a (plist-get proposal :a))
         (b (plist-get proposal :b))
         (starts (make-vector (1+ (length a)) 1)))
    (dotimes (i (length a))
      (aset starts (1+ i) (+ (aref starts i) (length (aref a i)))))
    (with-current-buffer buffer
      (save-restriction
        (widen)
        (save-excursion
          ;; Replace only the changed lines, from the end, so that point
          ;; and markers in unchanged text stay where they are.
          (dolist (hunk (reverse (plist-get proposal :hunks)))
            (when (memq (plist-get hunk :index) accepted)
              (dolist (change (reverse (plist-get hunk :changes)))
                (let ((from (aref starts (nth 0 change)))
                      (to (aref starts (nth 1 change)))
                      (text (mapconcat #'identity
                                       (cl-subseq b (nth 2 change) (nth 3 change))
                                       "")))
                  (goto-char from)
                  (delete-region from to)
                  (insert text))))))))))

(defun sly-agent-q-diff--numbers (numbers)
  "Return NUMBERS as \"1, 3\"."
  (mapconcat #'number-to-string numbers ", "))

(defun sly-agent-q-diff--check-reviewed (args proposal)
  "Signal if the text of PROPOSAL, from ARGS, changed since it was reviewed.
The review of ARGS is forgotten either way: a proposal applies once."
  (let* ((key (sly-agent-q-diff--key (plist-get proposal :file) args))
         (reviewed (gethash key sly-agent-q-diff--reviews)))
    (sly-agent-q-diff--release-review key)
    (when (and reviewed
               (not (equal (car reviewed)
                           (secure-hash 'sha1 (plist-get proposal :old)))))
      (sly-agent-q-tool-fail
       "%s changed after the user reviewed the proposed edit, so nothing was applied.  Read it again and propose the edit anew."
       (plist-get proposal :rel)))))

(defun sly-agent-q-diff--new-text (proposal accepted)
  "Return the text of PROPOSAL's file with the ACCEPTED hunks applied."
  (sly-agent-q-diff--apply-hunks (plist-get proposal :a) (plist-get proposal :b)
                                 (plist-get proposal :hunks) accepted))

(defun sly-agent-q-diff--apply-through-buffer (proposal accepted)
  "Apply the ACCEPTED hunks of PROPOSAL in the buffer visiting its file.
Save the buffer unless it had unsaved changes.  Return the note saying
how, for the model."
  (let* ((current (plist-get proposal :current))
         (buffer (plist-get current :buffer))
         (was-modified (plist-get current :modified)))
    (unless was-modified
      ;; It will be saved: refuse what its coding cannot hold before
      ;; touching it.
      (sly-agent-q-files-check-encodable (sly-agent-q-diff--new-text proposal accepted)
                                         (plist-get current :coding)
                                         (plist-get proposal :file)))
    (sly-agent-q-diff--apply-in-buffer buffer proposal accepted)
    (if was-modified
        (format " in buffer %s, which had unsaved changes, so it was not saved"
                (buffer-name buffer))
      (condition-case err
          (sly-agent-q-files-save-buffer buffer)
        (sly-agent-q-tool-error
         (sly-agent-q-tool-fail
          "The accepted hunks (%s) were applied in buffer %s, but saving it to %s failed: %s  The buffer holds the change, unsaved."
          (sly-agent-q-diff--numbers accepted) (buffer-name buffer) (plist-get proposal :rel)
          (cadr err))))
      (format " (through buffer %s, saved)" (buffer-name buffer)))))

(defun sly-agent-q-diff--apply-to-file (proposal accepted)
  "Write PROPOSAL's file with the ACCEPTED hunks applied.
Revert a buffer visiting it; return the note saying so, for the model,
or \"\"."
  (let ((file (plist-get proposal :file)))
    (sly-agent-q-files-write-atomically file (sly-agent-q-diff--new-text proposal accepted)
                                        (plist-get (plist-get proposal :current) :coding))
    (let ((visiting (sly-agent-q-files-visiting-buffer file)))
      (if (not visiting)
          ""
        (sly-agent-q-files-revert-buffer visiting)
        (format " (buffer %s reverted)" (buffer-name visiting))))))

(defun sly-agent-q-diff--applied-message (rel count accepted note)
  "Say that the ACCEPTED hunks out of COUNT were applied to REL, adding NOTE."
  (let ((rejected (cl-set-difference (number-sequence 1 count) accepted)))
    (if rejected
        (format "Applied hunk%s %s of %d to %s%s (rejected: %s)."
                (if (cdr accepted) "s" "") (sly-agent-q-diff--numbers accepted)
                count rel note (sly-agent-q-diff--numbers rejected))
      (format "Applied all %d hunk%s to %s%s." count (if (= count 1) "" "s")
              rel note))))

(defun sly-agent-q-diff-apply-proposal (args)
  "Run the capability propose_file_edit with ARGS; return the model's answer.
Apply the hunks listed in :accepted_hunks (all when absent) and say
exactly which were applied.  Signal `sly-agent-q-tool-error' when
nothing can be applied."
  (let* ((proposal (sly-agent-q-diff-proposal args))
         (rel (plist-get proposal :rel))
         (count (length (plist-get proposal :hunks))))
    (sly-agent-q-diff--check-reviewed args proposal)
    (if (zerop count)
        (format "No change: the proposal is identical to the current text of %s." rel)
      (let ((accepted (sly-agent-q-diff--accepted args count)))
        (if (null accepted)
            (format "No hunk was accepted; nothing was applied to %s." rel)
          (sly-agent-q-diff--applied-message
           rel count accepted
           (if (plist-get (plist-get proposal :current) :buffer)
               (sly-agent-q-diff--apply-through-buffer proposal accepted)
             (sly-agent-q-diff--apply-to-file proposal accepted))))))))

(defconst sly-agent-q-diff--fetch-tries 3
  "How often the hunks of an edit are asked for when its file keeps changing.")

(defun sly-agent-q-diff-apply-proposal-later (args)
  "Run the capability propose_file_edit with ARGS once its hunks are known.
Return the model's answer (see `sly-agent-q-diff-apply-proposal') when
they are, because the user reviewed them or the server computed them;
otherwise a function of one argument, a function of (CONTENT ERROR),
which asks the server for them without waiting and answers it once
they came, for `sly-agent-q-tool-call-run' (it returns the function that
stops it).  Signal `sly-agent-q-tool-error' at once when ARGS are
unusable.  When the server that asked dies before the hunks came,
nothing is applied: the call died with it, and no one would answer
the model or keep the change for a rewind."
  (let ((texts (sly-agent-q-diff-proposal args t))
        (asker (and (boundp 'sly-agent-q-current-connection) sly-agent-q-current-connection)))
    (if (or (sly-agent-q-diff--reviewed-hunks args (plist-get texts :file) (plist-get texts :old))
            (sly-agent-q-diff--fetched (plist-get texts :old) (plist-get texts :new)))
        (sly-agent-q-diff-apply-proposal args)
      (lambda (answer)
        (let ((stopped nil) (tries 0))
          (cl-labels
              ((apply-now ()
                          (condition-case err
                              (funcall answer (sly-agent-q-diff-apply-proposal args) nil)
                            (sly-agent-q-tool-error (funcall answer nil (cadr err)))
                            (error (funcall answer nil (format "propose_file_edit failed in Emacs: %s"
                                                               (error-message-string err))))))
               (fetch (texts)
                      (cl-incf tries)
                      (sly-agent-q-diff-fetch-hunks
                       (plist-get texts :old) (plist-get texts :new)
                       ;; The root the call runs against (the server's, bound for
                       ;; it): the edit applied later resolves its path against it.
                       (sly-agent-q-files-keeping-root
                        (lambda ()
                          (cond
                           (stopped)
                           ((and asker (not (sly-agent-q-connection-live-p asker)))
                            ;; Answered for the form's sake: the call is dropped with its server.
                            (setq stopped t)
                            (funcall answer nil (format "The server exited before the hunks of the edit of %s came; nothing was applied."
                                                        (plist-get texts :rel))))
                           (t
                            ;; The file may have changed meanwhile: the hunks of its new
                            ;; text are asked for (a few times at most).
                            (let ((now (condition-case nil (sly-agent-q-diff-proposal args t)
                                         (sly-agent-q-tool-error nil))))
                              (if (and now (< tries sly-agent-q-diff--fetch-tries)
                                       (not (and (equal (plist-get now :old) (plist-get texts :old))
                                                 (equal (plist-get now :new) (plist-get texts :new)))))
                                  (fetch now)
                                (apply-now))))))))))
            (fetch texts))
          (lambda () (setq stopped t)))))))

(provide 'sly-agent-q-diff)
;;; sly-agent-q-diff.el ends here
