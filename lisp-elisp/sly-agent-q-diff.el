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
;; hold Emacs's only thread.  They are kept under the digests of the two
;; texts, so that the proposal, computed again at the apply, finds the
;; very hunks the user reviewed.  Without a server the hunks are
;; computed here (Myers' algorithm on lines anchored by patience
;; diff, three lines of context, as GNU diff -u).
;;
;; Apply.  The capability propose_file_edit (see
;; `sly-agent-q-diff-apply-proposal') applies exactly the accepted
;; hunks, through the visiting buffer if there is one, and says which.
;; If the text changed since the review, nothing is applied.

;;; Code:

(require 'cl-lib)
(require 'sly-agent-q-files)
(require 'sly-agent-q-display)

(defvar sly-agent-q-approval-function)
(declare-function sly-agent-q-server-ready-p "sly-agent-q-server" ())
(declare-function sly-agent-q-server-request "sly-agent-q-server" (method params success &optional failure))

(defcustom sly-agent-q-diff-context-lines 3
  "Lines of unchanged context around each hunk of a proposed edit."
  :type 'integer
  :group 'sly-agent-q-tools)

(defconst sly-agent-q-diff--max-cost 1000
  "Edit distance beyond which a region is diffed as one replacement.")

;;;; Line diff

(defun sly-agent-q-diff--myers (a b)
  "Return the matched pairs (I . J) of a shortest edit from A to B.
A and B are vectors of integers.  The pairs ascend.  When A and B
differ by more than `sly-agent-q-diff--max-cost' edits, return
nil, which makes them one change."
  (let* ((n (length a)) (m (length b)) (max (+ n m)) (off (1+ max))
         (v (make-vector (+ 3 (* 2 max)) 0))
         (limit (min max sly-agent-q-diff--max-cost))
         (trace nil) (found nil) (d 0))
    (unless (or (zerop n) (zerop m))
      (while (and (not found) (<= d limit))
        (let ((k (- d)))
          (while (and (not found) (<= k d))
            (let* ((x (if (or (= k (- d))
                              (and (/= k d)
                                   (< (aref v (+ off k -1)) (aref v (+ off k 1)))))
                          (aref v (+ off k 1))
                        (1+ (aref v (+ off k -1)))))
                   (y (- x k)))
              (while (and (< x n) (< y m) (= (aref a x) (aref b y)))
                (setq x (1+ x) y (1+ y)))
              (aset v (+ off k) x)
              (when (and (>= x n) (>= y m))
                (setq found t)))
            (setq k (+ k 2))))
        (push (substring v (- off d) (+ off d 1)) trace)
        (unless found (setq d (1+ d))))
      (when found
        (let ((x n) (y m) (matches nil))
          (cl-loop for dd downfrom d to 1
                   for prev in (cdr trace)
                   do (let* ((k (- x y))
                             (base (1- dd))
                             (prev-k (if (or (= k (- dd))
                                             (and (/= k dd)
                                                  (< (aref prev (+ base k -1))
                                                     (aref prev (+ base k 1)))))
                                         (1+ k)
                                       (1- k)))
                             (prev-x (aref prev (+ base prev-k)))
                             (prev-y (- prev-x prev-k)))
                        (while (and (> x prev-x) (> y prev-y))
                          (setq x (1- x) y (1- y))
                          (push (cons x y) matches))
                        (setq x prev-x y prev-y)))
          (while (and (> x 0) (> y 0))
            (setq x (1- x) y (1- y))
            (push (cons x y) matches))
          matches)))))

(defun sly-agent-q-diff--anchors (a b)
  "Return the lines found once in A and once in B, matched in order.
A and B are vectors of integers.  The result is the longest run of
such pairs (I . J) ascending in both, found by patience sorting."
  (let ((seen (make-hash-table :test #'eql)) (pairs nil))
    ;; Each line's [count in A, index in A, count in B, index in B].
    (dotimes (i (length a))
      (let ((e (gethash (aref a i) seen)))
        (if e (aset e 0 (1+ (aref e 0))) (puthash (aref a i) (vector 1 i 0 nil) seen))))
    (dotimes (j (length b))
      (let ((e (gethash (aref b j) seen)))
        (when e (aset e 2 (1+ (aref e 2))) (aset e 3 j))))
    (maphash (lambda (_line e)
               (when (and (= (aref e 0) 1) (= (aref e 2) 1))
                 (push (cons (aref e 1) (aref e 3)) pairs)))
             seen)
    (let* ((pairs (vconcat (sort pairs (lambda (x y) (< (car x) (car y))))))
           (n (length pairs))
           (tails (make-vector n 0))      ; index of the pair ending each pile
           (back (make-vector n nil))     ; the pair before it in its run
           (piles 0))
      (dotimes (p n)
        (let ((j (cdr (aref pairs p))) (lo 0) (hi piles))
          (while (< lo hi)
            (let ((mid (/ (+ lo hi) 2)))
              (if (< (cdr (aref pairs (aref tails mid))) j) (setq lo (1+ mid)) (setq hi mid))))
          (when (> lo 0) (aset back p (aref tails (1- lo))))
          (aset tails lo p)
          (when (= lo piles) (setq piles (1+ piles)))))
      (let ((run nil) (p (and (> piles 0) (aref tails (1- piles)))))
        (while p
          (push (aref pairs p) run)
          (setq p (aref back p)))
        run))))

(defun sly-agent-q-diff--matches (a b)
  "Return the matched pairs (I . J) of an edit from A to B, ascending.
Lines unique to both texts anchor the match (patience diff); Myers's
algorithm matches the gaps between anchors.  A large file with many
scattered changes is then diffed in about linear time, where Myers's
alone took time growing with the product of its size and the changes."
  (let ((anchors (sly-agent-q-diff--anchors a b)))
    (if (null anchors)
        (sly-agent-q-diff--myers a b)
      (let ((i 0) (j 0) (out nil))
        (dolist (anchor (append anchors (list (cons (length a) (length b)))))
          (dolist (m (sly-agent-q-diff--myers (substring a i (car anchor)) (substring b j (cdr anchor))))
            (push (cons (+ i (car m)) (+ j (cdr m))) out))
          (when (< (car anchor) (length a)) (push anchor out))
          (setq i (1+ (car anchor)) j (1+ (cdr anchor))))
        (nreverse out)))))

(defun sly-agent-q-diff--changes (a b)
  "Return the changed regions between line vectors A and B.
Each is (OLD-START OLD-END NEW-START NEW-END), 0-based, end excluded."
  (let* ((n (length a)) (m (length b)) (pre 0) (suf 0))
    (while (and (< pre n) (< pre m) (equal (aref a pre) (aref b pre)))
      (cl-incf pre))
    (while (and (< suf (- n pre)) (< suf (- m pre))
                (equal (aref a (- n suf 1)) (aref b (- m suf 1))))
      (cl-incf suf))
    (let* ((table (make-hash-table :test #'equal))
           (ids (lambda (vec from to)
                  (let ((out (make-vector (- to from) 0)))
                    (dotimes (i (- to from))
                      (let ((line (aref vec (+ from i))))
                        (aset out i (or (gethash line table)
                                        (puthash line (hash-table-count table)
                                                 table)))))
                    out)))
           (ma (funcall ids a pre (- n suf)))
           (mb (funcall ids b pre (- m suf)))
           (changes nil) (i 0) (j 0))
      (dolist (match (sly-agent-q-diff--matches ma mb))
        (when (or (< i (car match)) (< j (cdr match)))
          (push (list (+ pre i) (+ pre (car match)) (+ pre j) (+ pre (cdr match)))
                changes))
        (setq i (1+ (car match)) j (1+ (cdr match))))
      (when (or (< i (length ma)) (< j (length mb)))
        (push (list (+ pre i) (+ pre (length ma)) (+ pre j) (+ pre (length mb)))
              changes))
      (nreverse changes))))

(defun sly-agent-q-diff--range (start count)
  "Return the unified-diff range of COUNT lines from 0-based START."
  (cond ((= count 0) (format "%d,0" start))
        ((= count 1) (format "%d" (1+ start)))
        (t (format "%d,%d" (1+ start) count))))

(defun sly-agent-q-diff--hunk-lines (prefix lines from to)
  "Return LINES FROM..TO (excluded) as diff lines starting with PREFIX."
  (let ((out nil))
    (cl-loop for i from from below to
             do (let ((line (aref lines i)))
                  (push (if (string-suffix-p "\n" line)
                            (concat prefix line)
                          (concat prefix line "\n\\ No newline at end of file\n"))
                        out)))
    (apply #'concat (nreverse out))))

(defun sly-agent-q-diff-hunks (a b &optional context)
  "Return the hunks turning line vector A into line vector B.
CONTEXT is the number of context lines (default
`sly-agent-q-diff-context-lines').  Each hunk is a plist with keys
:index (1-based), :old-start, :old-end, :new-start, :new-end (0-based
line indexes, end excluded, context included), :changes (the
changed regions inside, see `sly-agent-q-diff--changes'), :header
\(the @@ line) and :text (the hunk's diff lines)."
  (let* ((c (or context sly-agent-q-diff-context-lines))
         (n (length a)) (groups nil) (current nil) (index 0))
    (dolist (change (sly-agent-q-diff--changes a b))
      (if (and current (<= (- (nth 0 change) (nth 1 (car current))) (* 2 c)))
          (push change current)
        (when current (push (nreverse current) groups))
        (setq current (list change))))
    (when current (push (nreverse current) groups))
    (mapcar
     (lambda (group)
       (let* ((first (car group)) (last (car (last group)))
              (os (max 0 (- (nth 0 first) c)))
              (oe (min n (+ (nth 1 last) c)))
              (ns (- (nth 2 first) (- (nth 0 first) os)))
              (ne (+ (nth 3 last) (- oe (nth 1 last))))
              (i os) (parts nil))
         (dolist (change group)
           (push (sly-agent-q-diff--hunk-lines " " a i (nth 0 change)) parts)
           (push (sly-agent-q-diff--hunk-lines "-" a (nth 0 change) (nth 1 change)) parts)
           (push (sly-agent-q-diff--hunk-lines "+" b (nth 2 change) (nth 3 change)) parts)
           (setq i (nth 1 change)))
         (push (sly-agent-q-diff--hunk-lines " " a i oe) parts)
         (list :index (cl-incf index)
               :old-start os :old-end oe :new-start ns :new-end ne
               :changes group
               :header (format "@@ -%s +%s @@"
                               (sly-agent-q-diff--range os (- oe os))
                               (sly-agent-q-diff--range ns (- ne ns)))
               :text (apply #'concat (nreverse parts)))))
     (nreverse groups))))

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
texts), :a and :b (their lines), :hunks (see `sly-agent-q-diff-hunks')
and :description.  With TEXTS-ONLY, leave out :a, :b and :hunks, the
costly part.  The hunks are the server's when it computed them for
these texts (see `sly-agent-q-diff--server-hunks').  Signal
`sly-agent-q-tool-error' when ARGS are unusable."
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
        (let ((a (sly-agent-q-files-split-lines old))
              (b (sly-agent-q-files-split-lines new)))
          (append texts
                  (list :a a :b b
                        :hunks (or (sly-agent-q-diff--server-hunks old new)
                                   (sly-agent-q-diff-hunks a b)))))))))

;;;; Hunks from the server

;; The server computes the hunks (server/diff.ts): a line diff of a large
;; file would hold Emacs's only thread.  The review asks for them without
;; waiting and keeps them here, under the digests of the two texts; the
;; proposal, and so the apply, finds them, so review and apply agree.
;; The diff here in Lisp serves only when no server answers.

(defvar sly-agent-q-diff--hunk-cache nil
  "The server's hunks of recent edits, newest first.
Each is ((OLD-DIGEST . NEW-DIGEST) . HUNKS).")

(defconst sly-agent-q-diff--hunk-cache-size 8
  "Edits whose server hunks are kept: more than ever wait for review at once.")

(defun sly-agent-q-diff--digests (old new)
  "The key of the texts OLD and NEW in `sly-agent-q-diff--hunk-cache'.
SHA-256 of their UTF-8 bytes, as the server computes them."
  (cons (secure-hash 'sha256 (encode-coding-string old 'utf-8 t))
        (secure-hash 'sha256 (encode-coding-string new 'utf-8 t))))

(defun sly-agent-q-diff--server-hunks (old new)
  "The hunks the server computed turning OLD into NEW, or nil if none were."
  (cdr (assoc (sly-agent-q-diff--digests old new) sly-agent-q-diff--hunk-cache)))

(defun sly-agent-q-diff--from-server (hunk)
  "HUNK as the server sends it (diff/hunks), in `sly-agent-q-diff-hunks' form."
  (list :index (plist-get hunk :index)
        :old-start (plist-get hunk :oldStart) :old-end (plist-get hunk :oldEnd)
        :new-start (plist-get hunk :newStart) :new-end (plist-get hunk :newEnd)
        :changes (mapcar (lambda (c) (append c nil)) (plist-get hunk :changes))
        :header (plist-get hunk :header)
        :text (plist-get hunk :text)))

(defun sly-agent-q-diff-fetch-hunks (old new then &optional source)
  "Ask the server for the hunks turning OLD into NEW; call THEN with no argument.
Never waits: THEN runs when the server answered (the hunks are then in
`sly-agent-q-diff--hunk-cache') or failed, or at once without a server
or when OLD or NEW is not a string (the hunks are then computed here
if needed).  SOURCE, a plist (:callId ID :file FILE), says that OLD is
the text of FILE on disk and NEW the one the arguments of the call ID,
whose approval waits, give: the server then reads them itself,
checked against the digests of OLD and NEW, and a large file's texts
are not sent back to it.  If it cannot, the texts are sent."
  (if (not (and (stringp old) (stringp new)
                (fboundp 'sly-agent-q-server-ready-p) (sly-agent-q-server-ready-p)))
      (funcall then)
    (let* ((key (sly-agent-q-diff--digests old new))
           (keep (lambda (result)
                   (push (cons key (mapcar #'sly-agent-q-diff--from-server
                                           (append (plist-get result :hunks) nil)))
                         sly-agent-q-diff--hunk-cache)
                   (when (> (length sly-agent-q-diff--hunk-cache) sly-agent-q-diff--hunk-cache-size)
                     (setcdr (nthcdr (1- sly-agent-q-diff--hunk-cache-size) sly-agent-q-diff--hunk-cache)
                             nil))
                   (funcall then)))
           (send-texts (lambda (&rest _)
                         (sly-agent-q-server-request
                          'diff/hunks
                          (list :old old :new new :context sly-agent-q-diff-context-lines)
                          keep (lambda (_message) (funcall then))))))
      (if (and (plist-get source :callId) (plist-get source :file))
          (sly-agent-q-server-request
           'diff/hunks
           (list :callId (plist-get source :callId) :oldFile (plist-get source :file)
                 :oldDigest (car key) :newDigest (cdr key)
                 :context sly-agent-q-diff-context-lines)
           keep send-texts)
        (funcall send-texts)))))

(defun sly-agent-q-diff-text (name old new)
  "Return the unified diff turning the text OLD into NEW, for file NAME.
A new file (OLD empty) shows its whole text as added lines.  The
hunks are the server's when `sly-agent-q-diff-fetch-hunks' got them."
  (sly-agent-q-diff-unified
   (list :rel name
         :hunks (or (sly-agent-q-diff--server-hunks old new)
                    (sly-agent-q-diff-hunks (sly-agent-q-files-split-lines old)
                                            (sly-agent-q-files-split-lines new))))))

(defun sly-agent-q-diff-unified (proposal &optional hunks)
  "Return PROPOSAL's HUNKS (default: all) as one unified diff."
  (let ((rel (plist-get proposal :rel)))
    (concat (format "--- a/%s\n+++ b/%s\n" rel rel)
            (mapconcat (lambda (h) (concat (plist-get h :header) "\n" (plist-get h :text)))
                       (or hunks (plist-get proposal :hunks)) ""))))

;; What was reviewed: the key is the file and the proposal's arguments,
;; the value the hash of the text the hunks were computed from.
(defvar sly-agent-q-diff--reviews (make-hash-table :test #'equal)
  "Proposals reviewed and not applied yet: key -> (BASE-HASH . HUNKS).")

(defun sly-agent-q-diff--key (file args)
  "Return the review key of ARGS proposing an edit of FILE."
  (list file (plist-get args :new_content) (plist-get args :old_text)
        (plist-get args :new_text)))

(defun sly-agent-q-diff-remember-review (args proposal)
  "Remember that PROPOSAL, from ARGS, is being reviewed."
  (puthash (sly-agent-q-diff--key (plist-get proposal :file) args)
           (cons (secure-hash 'sha1 (plist-get proposal :old))
                 (length (plist-get proposal :hunks)))
           sly-agent-q-diff--reviews))

(defun sly-agent-q-diff-forget-review (args)
  "Forget the review of ARGS, if any."
  (let ((file (ignore-errors
                (sly-agent-q-files-resolve (plist-get args :path)))))
    (when file
      (remhash (sly-agent-q-diff--key file args) sly-agent-q-diff--reviews))))

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
    (remhash key sly-agent-q-diff--reviews)
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

(provide 'sly-agent-q-diff)
;;; sly-agent-q-diff.el ends here
