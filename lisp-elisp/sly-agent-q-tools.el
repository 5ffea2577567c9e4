;;; sly-agent-q-tools.el --- Buffer, file and navigation tools of sly-agent-q  -*- lexical-binding: t; -*-

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

;; The Emacs side of the agent's buffer, file and navigation tools.
;; The server declares the tools (server/tools/catalog/emacs.ts) and
;; forwards each call as a "capability" with a plist of arguments:
;;
;;   (sly-agent-q-tool-call-run CAPABILITY ARGS CALLBACK)
;;
;; looks CAPABILITY up in its declaration (`sly-agent-q-define-tool') and calls
;; CALLBACK exactly once, with (CONTENT nil) on success or (nil ERROR),
;; ERROR being a message that tells the model what to fix.  It never
;; signals and never waits: every capability here is a quick local
;; operation that finishes before it returns, except those that must
;; wait for the Lisp image (the debugger's) or for the server (the hunks
;; of an unreviewed propose_file_edit): their handlers return a function
;; that answers later.  The user's review of
;; propose_file_edit happens before, in its approval
;; (`sly-agent-q-approval-review-edit').
;;
;; Paths are confined to the project root (see sly-agent-q-files.el),
;; long results are paged with a note saying how to read on, and
;; buffers with unsaved changes are never overwritten.
;;
;; For the connection and approvals code:
;;
;; - `sly-agent-q-tool-call-run' answers emacs/call of kind "tool";
;;   `sly-agent-q-tool-call-capabilities' lists what it knows.
;; - `sly-agent-q-approval-review-edit' (sly-agent-q-approval.el) is the
;;   approval of propose_file_edit.  It returns the review buffer (drawn
;;   by sly-agent-q-diff-review.el), or nil when it answered at once;
;;   `sly-agent-q-diff-review-cancel' closes that buffer without
;;   answering when the server gives up (emacs/cancel).
;; - `sly-agent-q-files-default-buffer-function' may be set to return
;;   the buffer the user was last in (the default is the most recent
;;   buffer that is neither internal nor the agent's).
;; - `sly-agent-q-files-project-root' is the root the tools confine
;;   paths to; send it to the server as the editor context's root.
;; - Buffers named by `sly-agent-q-protected-buffer-regexps', or with
;;   `sly-agent-q-protected-buffer' set, are never written.

;;; Code:

(require 'cl-lib)
(require 'subr-x)
(require 'json)
(require 'sly-agent-q-files)
(require 'sly-agent-q-diff)
(require 'sly-agent-q-tool-declare)
(require 'sly-agent-q-tool-call)
(require 'sly-agent-q-tool-rewind)
(require 'sly-agent-q-tool-preview)

(defgroup sly-agent-q-tools nil
  "Buffer, file and navigation tools of the sly-agent-q agent."
  :prefix "sly-agent-q-"
  :group 'sly-agent-q)

;; The names these functions had in sly-agent-q-tools.el, before each
;; file defined only names of its own prefix.
(define-obsolete-function-alias 'sly-agent-q-tools-last-user-buffer #'sly-agent-q-files-last-user-buffer "0.2.0")
(define-obsolete-function-alias 'sly-agent-q-tools-project-root #'sly-agent-q-files-project-root "0.2.0")
(define-obsolete-function-alias 'sly-agent-q-tools-call #'sly-agent-q-tool-call-run "0.2.0")
(define-obsolete-function-alias 'sly-agent-q-tools-capabilities #'sly-agent-q-tool-call-capabilities "0.2.0")
(define-obsolete-function-alias 'sly-agent-q-tools-check-approved #'sly-agent-q-tool-preview-check-approved "0.2.0")
(define-obsolete-function-alias 'sly-agent-q-tools-check-one-form #'sly-agent-q-tool-preview-check-one-form "0.2.0")
(define-obsolete-function-alias 'sly-agent-q-tools-digest #'sly-agent-q-tool-preview-digest "0.2.0")
(define-obsolete-function-alias 'sly-agent-q-tools-disk-text #'sly-agent-q-tool-preview-disk-text "0.2.0")
(define-obsolete-function-alias 'sly-agent-q-tools-preview #'sly-agent-q-tool-preview "0.2.0")
(define-obsolete-function-alias 'sly-agent-q-tools-preview-proposal #'sly-agent-q-tool-preview-proposal "0.2.0")
(define-obsolete-function-alias 'sly-agent-q-tools-target #'sly-agent-q-tool-preview-target "0.2.0")
(define-obsolete-function-alias 'sly-agent-q-tools-buffer-target #'sly-agent-q-tool-rewind-buffer-target "0.2.0")
(define-obsolete-function-alias 'sly-agent-q-tools-changes #'sly-agent-q-tool-rewind-changes "0.2.0")
(define-obsolete-function-alias 'sly-agent-q-tools-file-target #'sly-agent-q-tool-rewind-file-target "0.2.0")
(define-obsolete-function-alias 'sly-agent-q-tools-rewind-change #'sly-agent-q-tool-rewind-change "0.2.0")
(define-obsolete-function-alias 'sly-agent-q-tools-snapshot #'sly-agent-q-tool-rewind-snapshot "0.2.0")

(defcustom sly-agent-q-tools-max-chars 20000
  "Most characters of text a buffer or file tool returns in one call.
Longer text is cut, with a note telling the model how to read on."
  :type 'integer
  :group 'sly-agent-q-tools)

(defcustom sly-agent-q-tools-max-lines 2000
  "Most lines read_file returns in one call without an explicit limit."
  :type 'integer
  :group 'sly-agent-q-tools)

(defcustom sly-agent-q-tools-max-entries 1000
  "Most entries directory_list and search_in_buffer return."
  :type 'integer
  :group 'sly-agent-q-tools)

;;;; The reviewed file edit

(cl-defun sly-agent-q-tools--propose-file-edit (&rest proposal &key path new_content old_text
                                                      new_text description accepted_hunks)
  "Capability propose_file_edit: apply the hunks of PROPOSAL the user accepted.
PROPOSAL is the edit of file PATH (NEW_CONTENT, or OLD_TEXT replaced by
NEW_TEXT, and why, DESCRIPTION) as the user reviewed it at the approval
\(sly-agent-q-diff.el), with ACCEPTED_HUNKS.  An edit the user's rules
allow without a review waits for the server's hunks, without blocking."
  (ignore path new_content old_text new_text description accepted_hunks)
  (sly-agent-q-diff-apply-proposal-later proposal))

;;;; How the tools' approvals are previewed

(defun sly-agent-q-tools--preview-write (args)
  "The preview of writing ARGS :content (appended when :append) to file :path."
  (let* ((content (plist-get args :content))
         (target (sly-agent-q-tools--write-target (plist-get args :path)))
         (old (sly-agent-q-tool-preview-disk-text (plist-get target :file))))
    (list :path (plist-get target :rel) :old old
          :new (if (eq (plist-get args :append) t) (concat old content) content))))

(defun sly-agent-q-tools--preview-save (args)
  "The preview of saving buffer ARGS :buffer_name to its file or :file_path."
  (let ((target (sly-agent-q-tools--save-target (plist-get args :buffer_name)
                                                (plist-get args :file_path))))
    (list :path (plist-get target :rel)
          :buffer (buffer-name (plist-get target :buffer))
          :old (sly-agent-q-tool-preview-disk-text (plist-get target :file))
          :new (sly-agent-q-files-buffer-text (plist-get target :buffer)))))

(defun sly-agent-q-tools--preview-path (key)
  "A preview function naming the resolved path in argument KEY (default \".\")."
  (lambda (args)
    (list :path (sly-agent-q-files-relative
                 (sly-agent-q-files-resolve (or (plist-get args key) "."))))))

(defun sly-agent-q-tools--preview-buffer (key)
  "A preview function naming the buffer to write in argument KEY."
  (lambda (args)
    ;; The buffer's file tells it from another of the same name; a
    ;; position means something only in the text it was given for.
    (let ((buffer (sly-agent-q-files-agent-buffer (plist-get args key) t)))
      (append (list :buffer (buffer-name buffer)
                    :file (sly-agent-q-files-buffer-file buffer))
              (and (plist-get args :position)
                   (list :text (secure-hash 'sha256 (sly-agent-q-files-buffer-text buffer))))))))

(defun sly-agent-q-tools--preview-edit (args)
  "The preview of replacing ARGS :old_text by :new_text in buffer :buffer_name."
  (let* ((buffer (sly-agent-q-files-agent-buffer (plist-get args :buffer_name) t))
         (old (sly-agent-q-files-buffer-text buffer))
         (old-text (plist-get args :old_text))
         (new-text (or (plist-get args :new_text) ""))
         (pos (sly-agent-q-files-unique-occurrence
               old-text old (format "buffer %s" (buffer-name buffer)))))
    (list :buffer (buffer-name buffer) :old old
          :new (concat (substring old 0 pos) new-text
                       (substring old (+ pos (length old-text)))))))


(defun sly-agent-q-tools--count-lines (text)
  "Return the number of lines of TEXT (a last line without newline counts)."
  (+ (cl-count ?\n text)
     (if (or (string-empty-p text) (string-suffix-p "\n" text)) 0 1)))

(defun sly-agent-q-tools--plural (n word)
  "Return \"N WORD\" with WORD pluralized for N."
  (format "%d %s" n
          (cond ((= n 1) word)
                ((string-suffix-p "ch" word) (concat word "es"))
                ((string-suffix-p "ry" word) (concat (substring word 0 -1) "ies"))
                (t (concat word "s")))))

;;;; Files

(cl-defun sly-agent-q-tools--read-file (&key path offset limit)
  "Capability read_file: LIMIT lines of file PATH from line OFFSET."
  (let* ((offset (or offset 1))
         (file (sly-agent-q-files-resolve path))
         (rel (sly-agent-q-files-relative file))
         (current (sly-agent-q-files-current-text file))
         (buffer (plist-get current :buffer)))
    (unless (or (plist-get current :exists) buffer)
      (sly-agent-q-tool-fail "%s does not exist." rel))
    ;; One pass over the text and one copy of the lines shown: a file of 50,000 lines read
    ;; line by line made as many strings, and the collections that followed froze Emacs.
    (let* ((text (plist-get current :text))
           (total (sly-agent-q-files-line-count text))
           (source (cond ((null buffer) "")
                         ((plist-get current :modified)
                          (format ", read from buffer %s, which has unsaved changes"
                                  (buffer-name buffer)))
                         (t (format ", read from buffer %s" (buffer-name buffer))))))
      (cond
       ((zerop total) (format "[%s: empty file%s]" rel source))
       ((> offset total)
        (sly-agent-q-tool-fail "%s has %s; offset %d is past the end."
                           rel (sly-agent-q-tools--plural total "line") offset))
       (t
        (let* ((max-lines (or limit sly-agent-q-tools-max-lines))
               (max-chars sly-agent-q-tools-max-chars)
               (end (min total (+ offset -1 max-lines)))
               (start (sly-agent-q-files-line-position text (1- offset)))
               (pos start) (i (1- offset)) (shown nil) (cut-line nil))
          ;; The first line is always shown (cut when longer than the cap); the next ones while
          ;; the whole stays within the cap.
          (while (and (< i end) (not shown))
            (let ((line-end (sly-agent-q-files-line-end text pos)))
              (cond ((and (= pos start) (> (- line-end pos) max-chars))
                     (setq shown (substring text start (+ start max-chars))
                           cut-line (1+ i)
                           i (1+ i)))
                    ((or (= pos start) (<= (- line-end start) max-chars))
                     (setq pos line-end i (1+ i)))
                    (t (setq shown (substring text start pos))))))
          (let ((last i))
            (concat
             (format "[%s: lines %d-%d of %d%s]\n" rel offset last total source)
             (or shown (substring text start pos))
             (when cut-line
               (format "\n[Line %d is longer than %d characters and was cut.]"
                       cut-line max-chars))
             (when (< last total)
               (format "\n[%d more line%s; call read_file with offset %d%s to continue.]"
                       (- total last) (if (= 1 (- total last)) "" "s")
                       (1+ last) (if limit (format " and limit %d" limit) "")))))))))))

(defun sly-agent-q-tools--write-target (path)
  "Resolve write_file's PATH; return a plist (:file :rel :buffer).
Signal the tool error write_file gives when it may not write there."
  (let* ((file (sly-agent-q-files-resolve path t))
         (rel (sly-agent-q-files-relative file))
         (buffer (sly-agent-q-files-visiting-buffer file)))
    (when (file-directory-p file)
      (sly-agent-q-tool-fail "%s is a directory." rel))
    (when (and buffer (buffer-modified-p buffer))
      (sly-agent-q-tool-fail
       "Buffer %s visits %s and has unsaved changes, so the file was not written (it would clobber them).  Edit the buffer instead (buffer_edit, write_to_buffer, then buffer_save), or ask the user to save or revert it."
       (buffer-name buffer) rel))
    (list :file file :rel rel :buffer buffer)))

(cl-defun sly-agent-q-tools--write-file (&key path content append)
  "Capability write_file: write CONTENT to file PATH, at its end if APPEND."
  (let* ((target (sly-agent-q-tools--write-target path))
         (file (plist-get target :file))
         (rel (plist-get target :rel))
         (buffer (plist-get target :buffer))
         (exists (file-exists-p file))
         (parent (file-name-directory file))
         (new-dir (not (file-directory-p parent))))
    (let* ((disk (and exists
                      (if append
                          (sly-agent-q-files-read-disk file)
                        ;; Only its coding is needed: an unreadable or
                        ;; binary file is simply replaced.
                        (ignore-errors (sly-agent-q-files-read-disk file)))))
           (coding (cond (disk (cdr disk))
                         (buffer (sly-agent-q-files-normalize-coding
                                  (buffer-local-value 'buffer-file-coding-system buffer)))))
           (text (if (and append disk) (concat (car disk) content) content))
           (used (sly-agent-q-files-write-atomically file text coding))
           (notes (list (sly-agent-q-tools--plural
                         (sly-agent-q-tools--count-lines text) "line"))))
      (when new-dir
        (push (format "created directory %s" (sly-agent-q-files-relative parent)) notes))
      (push (format "%s %s" (if disk "kept encoding" "encoding") used) notes)
      (when buffer
        (sly-agent-q-files-revert-buffer buffer)
        (push (format "buffer %s reverted" (buffer-name buffer)) notes))
      (format "%s %s to %s%s (%s)."
              (if (and append exists) "Appended" "Wrote")
              (sly-agent-q-tools--plural (length content) "character")
              rel (if exists "" ", a new file")
              (string-join (nreverse notes) "; ")))))

(cl-defun sly-agent-q-tools--directory-list (&key directory_path recursive pattern)
  "Capability directory_list: the entries of DIRECTORY_PATH matching PATTERN.
With RECURSIVE, those of its subdirectories too."
  (let* ((path (or directory_path "."))
         (regexp (and pattern (wildcard-to-regexp pattern)))
         (dir (sly-agent-q-files-resolve path))
         (rel (sly-agent-q-files-relative dir))
         (prefix (if (member rel '("./" ".")) "" (file-name-as-directory rel)))
         (entries nil) (count 0) (more 0))
    (unless (file-directory-p dir)
      (sly-agent-q-tool-fail "%s is not a directory%s." rel
                         (if (file-exists-p dir) "" " (it does not exist)")))
    (cl-labels
        ((walk (abs shown)
               (dolist (name (directory-files abs nil nil t))
                 (unless (member name '("." ".."))
                   ;; Appended literally: `expand-file-name' reads an
                   ;; entry named `~' or `~user' as a home directory.
                   (let* ((full (concat (file-name-as-directory abs) name))
                          (link (file-symlink-p full))
                          (isdir (and (not link) (file-directory-p full)))
                          (ignored (and isdir (member name vc-directory-exclusion-list)))
                          ;; An entry at the top named `~...' reads as home: ./~.
                          (show (concat (if (and (string-empty-p shown) (string-prefix-p "~" name)) "./" shown)
                                        name)))
                     (when (or (null regexp) (string-match-p regexp name))
                       (if (>= count sly-agent-q-tools-max-entries)
                           (cl-incf more)
                         (cl-incf count)
                         (push (cond
                                (link (format "%s -> %s" show link))
                                (isdir (concat show "/" (if (and recursive ignored) " (not listed)" "")))
                                (t (format "%s  %d" show
                                           (or (file-attribute-size (file-attributes full)) 0))))
                               entries)))
                     (when (and recursive isdir (not ignored))
                       (walk full (concat show "/"))))))))
      (walk dir prefix))
    (concat
     (format "[%s%s%s: %s; files show their size in bytes]\n"
             (if (string-empty-p prefix) "./" prefix)
             (if recursive ", recursive" "")
             (if pattern (format ", matching %s" pattern) "")
             (sly-agent-q-tools--plural (+ count more) "entry"))
     (string-join (nreverse entries) "\n")
     (if (> more 0)
         (format "\n[%d more entries not shown; list a subdirectory or use a pattern.]" more)
       ""))))

(cl-defun sly-agent-q-tools--current-directory ()
  "Capability current_directory: the project root and the other allowed roots."
  (concat
   (format "Project root: %s (relative paths are resolved against it)."
           (sly-agent-q-files-project-root))
   (if sly-agent-q-allowed-directories
       (format "\nAlso allowed, with absolute paths: %s."
               (mapconcat #'expand-file-name sly-agent-q-allowed-directories ", "))
     "")
   (if sly-agent-q-read-only-paths
       (format "\nRead-only: %s." (string-join sly-agent-q-read-only-paths ", "))
     "")))

(cl-defun sly-agent-q-tools--file-exists (&key path)
  "Capability file_exists: whether PATH exists, and what it is."
  (let* ((file (sly-agent-q-files-resolve path))
         (rel (sly-agent-q-files-relative file))
         (attributes (file-attributes file))
         (buffer (sly-agent-q-files-visiting-buffer file)))
    (cond
     ((null attributes)
      (if buffer
          (format "No: %s does not exist on disk, but buffer %s visits it (not saved yet)."
                  rel (buffer-name buffer))
        (format "No: %s does not exist." rel)))
     ((eq t (file-attribute-type attributes))
      (format "Yes: %s is a directory." (file-name-as-directory rel)))
     (t
      (format "Yes: %s is a file of %d bytes, modified %s%s."
              rel (file-attribute-size attributes)
              (format-time-string "%Y-%m-%d %H:%M:%S"
                                  (file-attribute-modification-time attributes))
              (cond ((null buffer) "")
                    ((buffer-modified-p buffer)
                     (format "; buffer %s visits it and has unsaved changes"
                             (buffer-name buffer)))
                    (t (format "; buffer %s visits it" (buffer-name buffer)))))))))

;;;; Buffers

(defun sly-agent-q-tools--buffer-description (buffer)
  "Return a short description of BUFFER: name, mode, file, modified flag."
  (with-current-buffer buffer
    (format "buffer %s (%s%s%s)" (buffer-name) major-mode
            (if buffer-file-name
                (format ", file %s" (sly-agent-q-files-relative buffer-file-name))
              "")
            (if (and buffer-file-name (buffer-modified-p)) ", unsaved changes" ""))))

(cl-defun sly-agent-q-tools--read-buffer (&key buffer start end max_lines)
  "Capability read_buffer: BUFFER's text from START to END, at most MAX_LINES."
  (let* ((max-lines max_lines)
         (start (or start 1))
         (buffer (sly-agent-q-files-agent-buffer buffer)))
    (with-current-buffer buffer
      (save-restriction
        (widen)
        (let ((size (point-max)))
          (when (> start size)
            (sly-agent-q-tool-fail "start %d is past the end of %s (its last position is %d)."
                               start (buffer-name) size))
          (setq end (min size (or end size)))
          (when (< end start)
            (sly-agent-q-tool-fail "end %d is before start %d." end start))
          (let ((stop end) (why nil))
            (when max-lines
              (save-excursion
                (goto-char start)
                (forward-line max-lines)
                (when (< (point) stop)
                  (setq stop (point) why (format "max_lines %d" max-lines)))))
            (when (> (- stop start) sly-agent-q-tools-max-chars)
              (setq stop (+ start sly-agent-q-tools-max-chars)
                    why (format "the %d-character limit" sly-agent-q-tools-max-chars)))
            (concat
             (format "[%s: characters %d-%d of %d, lines %d-%d of %d]\n"
                     (sly-agent-q-tools--buffer-description buffer)
                     start (1- stop) (1- size)
                     (line-number-at-pos start)
                     (line-number-at-pos (max start (1- stop)))
                     (count-lines (point-min) (point-max)))
             (buffer-substring-no-properties start stop)
             (when why
               (format "\n[Cut at position %d by %s: %d more characters; call read_buffer with start %d to read on.]"
                       stop why (- end stop) stop)))))))))

(defun sly-agent-q-tools--insert (buffer position text)
  "Insert TEXT in BUFFER at POSITION (nil: the end); return a report."
  (with-current-buffer buffer
    (save-restriction
      (widen)
      (let ((position (or position (point-max))))
        (when (> position (point-max))
          (sly-agent-q-tool-fail
           "position %d is past the end of buffer %s (its last position is %d)."
           position (buffer-name) (point-max)))
        (save-excursion
          (goto-char position)
          (insert text))
        (format "Inserted %s at position %d (line %d) of %s; it is not saved."
                (sly-agent-q-tools--plural (length text) "character")
                position (line-number-at-pos position)
                (sly-agent-q-tools--buffer-description buffer))))))

(cl-defun sly-agent-q-tools--write-to-buffer (&key content buffer position)
  "Capability write_to_buffer: insert CONTENT into BUFFER at POSITION."
  (sly-agent-q-tools--insert (sly-agent-q-files-agent-buffer buffer t) position content))

(cl-defun sly-agent-q-tools--buffer-append (&key buffer_name text)
  "Capability buffer_append: insert TEXT at the end of buffer BUFFER_NAME."
  (sly-agent-q-tools--insert (sly-agent-q-files-agent-buffer buffer_name t) nil text))

(cl-defun sly-agent-q-tools--buffer-file (&key buffer)
  "Internal capability buffer_file: BUFFER's name and the file it visits.
A JSON object {buffer, file}, file null for none.  BUFFER nil is the
user's last buffer, as the buffer tools take it; a buffer the agent
may not write is refused as they refuse it.  The server judges the
file as a write (its protected files): the user's next save writes
the buffer's text there."
  (let ((b (sly-agent-q-files-agent-buffer buffer t)))
    (json-encode (list (cons 'buffer (buffer-name b))
                       (cons 'file (sly-agent-q-files-buffer-file b))))))

(cl-defun sly-agent-q-tools--buffer-edit (&key buffer_name old_text new_text)
  "Capability buffer_edit: in buffer BUFFER_NAME, replace OLD_TEXT by NEW_TEXT.
OLD_TEXT must occur exactly once."
  (let ((buffer (sly-agent-q-files-agent-buffer buffer_name t))
        (old old_text)
        (new new_text))
    (with-current-buffer buffer
      (save-restriction
        (widen)
        (let* ((text (buffer-substring-no-properties (point-min) (point-max)))
               (pos (1+ (sly-agent-q-files-unique-occurrence
                         old text (format "buffer %s" (buffer-name))))))
          (save-excursion
            (goto-char pos)
            (delete-region pos (+ pos (length old)))
            (insert new))
          (format "Replaced %s with %s at line %d of %s; it is not saved."
                  (sly-agent-q-tools--plural (length old) "character")
                  (sly-agent-q-tools--plural (length new) "character")
                  (line-number-at-pos pos)
                  (sly-agent-q-tools--buffer-description buffer)))))))

(defun sly-agent-q-tools--real-major-mode-p (mode)
  "Return non-nil when MODE is a major mode a buffer may be put in.
That is `fundamental-mode', a mode derived from `prog-mode',
`text-mode' or `special-mode', or one named in `auto-mode-alist'.
Minor modes and other commands are not: turning on a global minor
mode (`server-mode', `desktop-save-mode'...) changes the whole Emacs."
  (and (symbolp mode)
       (fboundp mode)
       (not (memq mode minor-mode-list))
       (not (assq mode minor-mode-alist))
       (or (eq mode 'fundamental-mode)
           (cl-some (lambda (parent) (provided-mode-derived-p mode parent))
                    '(prog-mode text-mode special-mode))
           (cl-some (lambda (entry)
                      (eq mode (if (consp (cdr entry)) (cadr entry) (cdr entry))))
                    auto-mode-alist))))

(defun sly-agent-q-tools--major-mode (name)
  "Return the major mode function named NAME, or signal a tool error."
  (let ((mode (intern-soft name)))
    (unless (sly-agent-q-tools--real-major-mode-p mode)
      (sly-agent-q-tool-fail
       "%s is not a major mode the agent may use: give a major mode derived from prog-mode, text-mode or special-mode, or one of auto-mode-alist (e.g. lisp-mode, text-mode), or fundamental-mode."
       name))
    mode))

(cl-defun sly-agent-q-tools--buffer-create (&key buffer_name content mode)
  "Capability buffer_create: a buffer BUFFER_NAME holding CONTENT, in MODE."
  (let* ((name buffer_name)
         (mode-name mode)
         (content (or content ""))
         (mode (if mode-name
                   (sly-agent-q-tools--major-mode mode-name)
                 (let ((auto (assoc-default name auto-mode-alist #'string-match-p)))
                   (and (symbolp auto) (fboundp auto) auto)))))
    (when (or (string-empty-p (string-trim name)) (string-prefix-p " " name))
      (sly-agent-q-tool-fail "Buffer names must not be empty or start with a space."))
    (when (cl-some (lambda (re) (string-match-p re name)) sly-agent-q-protected-buffer-regexps)
      (sly-agent-q-tool-fail "%s is reserved for the agent's own buffers; choose another name."
                         name))
    (when (get-buffer name)
      (sly-agent-q-tool-fail
       "A buffer named %s already exists; choose another name, or change it with buffer_edit or write_to_buffer."
       name))
    (let ((buffer (generate-new-buffer name)))
      (condition-case err
          (with-current-buffer buffer
            (insert content)
            (when mode (funcall mode))
            (goto-char (point-min)))
        (error
         (kill-buffer buffer)
         (sly-agent-q-tool-fail "Could not create buffer %s: %s" name
                            (error-message-string err))))
      (format "Created buffer %s (%s, %s).  It visits no file: buffer_save with file_path writes it."
              (buffer-name buffer) (buffer-local-value 'major-mode buffer)
              (sly-agent-q-tools--plural (sly-agent-q-tools--count-lines content) "line")))))

(defun sly-agent-q-tools--save-target (name path)
  "Check saving buffer NAME to PATH (nil: its own file) as buffer_save would.
Return a plist (:buffer :file :rel :own :same :other); signal the tool
error buffer_save gives when it may not save."
  (let* ((buffer (sly-agent-q-files-agent-buffer name))
         (own (buffer-local-value 'buffer-file-name buffer)))
    (when (sly-agent-q-protected-buffer-p buffer)
      (sly-agent-q-tool-fail "Buffer %s belongs to the agent's own interface; it cannot be saved."
                         (buffer-name buffer)))
    (unless (or path own)
      (sly-agent-q-tool-fail "Buffer %s visits no file; give file_path to save it."
                         (buffer-name buffer)))
    (let* ((file (sly-agent-q-files-resolve (or path own) t))
           (rel (sly-agent-q-files-relative file))
           (own-true (and own (sly-agent-q-files-truename own)))
           (other (let ((b (sly-agent-q-files-visiting-buffer file)))
                    (and b (not (eq b buffer)) b))))
      (when (file-directory-p file)
        (sly-agent-q-tool-fail "%s is a directory." rel))
      (when (and other (buffer-modified-p other))
        (sly-agent-q-tool-fail
         "Buffer %s visits %s and has unsaved changes; saving over it would clobber them."
         (buffer-name other) rel))
      (list :buffer buffer :file file :rel rel :own own
            :same (equal own-true file) :other other))))

(cl-defun sly-agent-q-tools--buffer-save (&key buffer_name file_path)
  "Capability buffer_save: save buffer BUFFER_NAME to its file, or to FILE_PATH."
  (let* ((target (sly-agent-q-tools--save-target buffer_name file_path))
         (buffer (plist-get target :buffer))
         (file (plist-get target :file))
         (rel (plist-get target :rel))
         (own (plist-get target :own))
         (same (plist-get target :same))
         (other (plist-get target :other)))
    (if (and same (not (buffer-modified-p buffer)) (file-exists-p file)
             (verify-visited-file-modtime buffer))
        (format "Buffer %s has no unsaved changes; %s is up to date." (buffer-name buffer) rel)
      (let ((old-name (buffer-name buffer))
            (coding (sly-agent-q-files-save-buffer buffer file))
            (lines (with-current-buffer buffer
                     (save-restriction (widen) (count-lines (point-min) (point-max))))))
        (when other (sly-agent-q-files-revert-buffer other))
        (format "Saved buffer %s to %s (%s, %s)%s."
                old-name rel
                (sly-agent-q-tools--plural lines "line") coding
                (cond (same "")
                      (own (format "; the buffer still visits %s, which was not saved"
                                   (sly-agent-q-files-relative own)))
                      ((equal old-name (buffer-name buffer))
                       (format "; the buffer now visits %s" rel))
                      (t (format "; the buffer now visits %s and is named %s"
                                 rel (buffer-name buffer)))))))))

(defun sly-agent-q-tools--or-dash (string)
  "Return STRING, or \"-\" when it is empty."
  (if (string-empty-p string) "-" string))

(cl-defun sly-agent-q-tools--buffer-list (&key include_hidden)
  "Capability buffer_list: the open buffers, internal ones too if INCLUDE_HIDDEN."
  (let* ((hidden include_hidden)
         (last (sly-agent-q-files-default-buffer))
         (lines nil))
    (dolist (buffer (buffer-list))
      (when (or hidden (not (sly-agent-q-hidden-buffer-p buffer)))
        (with-current-buffer buffer
          (push (format "%s | %s | %s | %s | %d"
                        (buffer-name)
                        (if buffer-file-name (sly-agent-q-files-relative buffer-file-name) "-")
                        major-mode
                        (sly-agent-q-tools--or-dash
                         (string-join
                          (delq nil (list (and buffer-file-name
                                               (if (buffer-modified-p) "modified" "saved"))
                                          (and buffer-read-only "read-only")
                                          (and (eq buffer last) "user's buffer")
                                          (and (sly-agent-q-hidden-buffer-p buffer)
                                               "internal")
                                          (and (sly-agent-q-agent-buffer-p buffer)
                                               "agent's")))
                          ", "))
                        (buffer-size))
                lines))))
    (concat (format "%s (name | file | major mode | state | size in characters):\n"
                    (sly-agent-q-tools--plural (length lines) "buffer"))
            (string-join (nreverse lines) "\n"))))

;;;; Navigation

(defun sly-agent-q-tools--line-context (line)
  "Return LINE trimmed to at most 200 characters."
  (if (> (length line) 200) (concat (substring line 0 200) "...") line))

(cl-defun sly-agent-q-tools--search-in-buffer (&key pattern buffer regex all_matches case_sensitive)
  "Capability search_in_buffer: find PATTERN in BUFFER.
PATTERN is a regexp when REGEX; ALL_MATCHES gives every match;
CASE_SENSITIVE makes case count.  The server sends the parameters'
other names (the catalog's argumentNames) under these."
  (let* ((all all_matches)
         (case-sensitive case_sensitive)
         (name buffer)
         (needle pattern))
    (when (or (null needle) (string-empty-p needle))
      (sly-agent-q-tool-fail "Give the text to find as pattern."))
    (when regex
      (condition-case err
          (string-match-p needle "")
        (invalid-regexp
         (sly-agent-q-tool-fail "pattern is not a valid Emacs regexp: %s"
                            (error-message-string err)))))
    (let ((buffer (sly-agent-q-files-agent-buffer name))
          (matches nil) (count 0)
          (wanted (if all sly-agent-q-tools-max-entries 1))
          (done nil))
      (with-current-buffer buffer
        (save-restriction
          (widen)
          (save-excursion
            (goto-char (point-min))
            (let ((case-fold-search (not case-sensitive)))
              (while (and (not done) (< count 100000)
                          (if regex
                              (re-search-forward needle nil t)
                            (search-forward needle nil t)))
                (let ((begin (match-beginning 0)) (end (match-end 0)))
                  (cl-incf count)
                  (when (<= count wanted)
                    (save-excursion
                      (goto-char begin)
                      (push (format "line %d, column %d: %s"
                                    (line-number-at-pos begin)
                                    (current-column)
                                    (sly-agent-q-tools--line-context
                                     (buffer-substring-no-properties
                                      (line-beginning-position) (line-end-position))))
                            matches)))
                  ;; An empty match: step over one character, or stop at the end.
                  (when (= begin end)
                    (if (eobp) (setq done t) (forward-char 1)))))))))
      (sly-agent-q-tools--search-report needle regex buffer (nreverse matches) count all))))

(defun sly-agent-q-tools--search-report (needle regex buffer matches count all)
  "Return the report of a search for NEEDLE in BUFFER.
REGEX says whether NEEDLE is a regexp, MATCHES are the formatted
matches found out of COUNT, ALL whether every match was asked for."
  (let ((what (format "%s %S in buffer %s" (if regex "regexp" "text") needle
                      (buffer-name buffer))))
    (cond
     ((zerop count) (format "No match for %s." what))
     (t
      (concat
       (format "%s for %s%s:\n" (sly-agent-q-tools--plural count "match") what
               (if (and (not all) (> count 1)) " (the first shown; set all_matches to true to see every one)" ""))
       (string-join matches "\n")
       (if (and all (> count (length matches)))
           (format "\n[%d more matches not shown.]" (- count (length matches)))
         ""))))))

(cl-defun sly-agent-q-tools--goto-line (&key buffer_name line_number)
  "Capability goto_line: show line LINE_NUMBER of buffer BUFFER_NAME."
  (let* ((line line_number)
         (buffer (sly-agent-q-files-agent-buffer buffer_name))
         (position nil) (text nil))
    (with-current-buffer buffer
      (let ((total (save-restriction (widen) (line-number-at-pos (point-max)))))
        (when (> line total)
          (sly-agent-q-tool-fail "Buffer %s has only %s." (buffer-name)
                             (sly-agent-q-tools--plural total "line")))
        (save-restriction
          (widen)
          (save-excursion
            (goto-char (point-min))
            (forward-line (1- line))
            (setq position (point)
                  text (buffer-substring-no-properties (point) (line-end-position)))))
        (when (or (< position (point-min)) (> position (point-max)))
          (sly-agent-q-tool-fail
           "Line %d is outside the narrowed part of buffer %s (lines %d-%d); ask the user to widen it."
           line (buffer-name) (line-number-at-pos (point-min) t)
           (line-number-at-pos (point-max) t)))
        (goto-char position)))
    (let ((window (ignore-errors (display-buffer buffer))))
      (when (window-live-p window)
        (set-window-point window position)
        (ignore-errors (with-selected-window window (recenter))))
      (format "Point is at line %d of buffer %s%s: %s"
              line (buffer-name buffer)
              (if (window-live-p window) " (shown to the user)" "")
              (sly-agent-q-tools--line-context text)))))

;;;; The region

(cl-defun sly-agent-q-tools--read-region (&key buffer)
  "Capability read_region: the text between point and mark of BUFFER.
BUFFER defaults to the user's last one.  Point is the one its window
shows, when it is shown.  The text is read widened: narrowing hides
nothing of the region."
  (let* ((buffer (sly-agent-q-files-agent-buffer buffer))
         (window (get-buffer-window buffer t)))
    (with-current-buffer buffer
      (let ((mark (mark t))
            (point (if (window-live-p window) (window-point window) (point))))
        (unless mark
          (sly-agent-q-tool-fail "Buffer %s has no region: the mark is not set; ask the user to select the text."
                                 (buffer-name)))
        (save-restriction
          (widen)
          (let* ((start (min point mark))
                 (end (max point mark))
                 (stop (min end (+ start sly-agent-q-tools-max-chars))))
            (concat
             (format "[%s: the region%s, characters %d-%d, lines %d-%d]\n"
                     (sly-agent-q-tools--buffer-description buffer)
                     (if (region-active-p) "" " (not active: between point and the last mark)")
                     start (1- end)
                     (line-number-at-pos start) (line-number-at-pos (max start (1- end))))
             (buffer-substring-no-properties start stop)
             (when (< stop end)
               (format "\n[Cut at position %d by the %d-character limit: %d more characters; call read_buffer with start %d and end %d to read on.]"
                       stop sly-agent-q-tools-max-chars (- end stop) stop end)))))))))

;;;; The declarations
;;
;; One form per tool: the catalog (server/tools/catalog/emacs.ts) holds
;; its parameters and review kind, this its handler, what it changes
;; and how its approval is prepared.  Arguments come under the primary
;; tool's names.

(sly-agent-q-define-tool "read_file"
  :handler #'sly-agent-q-tools--read-file
  :changes nil
  :preview (sly-agent-q-tools--preview-path :path))

(sly-agent-q-define-tool "write_file"
  :handler #'sly-agent-q-tools--write-file
  :changes (lambda (args)
             (sly-agent-q-tool-rewind-file-target
              (plist-get (sly-agent-q-tools--write-target (plist-get args :path)) :file)))
  :preview #'sly-agent-q-tools--preview-write)

(sly-agent-q-define-tool "read_buffer"
  :handler #'sly-agent-q-tools--read-buffer
  :changes nil)

(sly-agent-q-define-tool "read_region"
  :handler #'sly-agent-q-tools--read-region
  :changes nil)

(sly-agent-q-define-tool "write_to_buffer"
  :handler #'sly-agent-q-tools--write-to-buffer
  :changes (lambda (args) (sly-agent-q-tool-rewind-buffer-target (plist-get args :buffer)))
  :preview (sly-agent-q-tools--preview-buffer :buffer))

(sly-agent-q-define-tool "search_in_buffer"
  :handler #'sly-agent-q-tools--search-in-buffer
  :changes nil)

(sly-agent-q-define-tool "buffer_append"
  :handler #'sly-agent-q-tools--buffer-append
  :changes (lambda (args) (sly-agent-q-tool-rewind-buffer-target (plist-get args :buffer_name)))
  :preview (sly-agent-q-tools--preview-buffer :buffer_name))

(sly-agent-q-define-tool "buffer_edit"
  :handler #'sly-agent-q-tools--buffer-edit
  :changes (lambda (args) (sly-agent-q-tool-rewind-buffer-target (plist-get args :buffer_name)))
  :preview #'sly-agent-q-tools--preview-edit)

(sly-agent-q-define-tool "buffer_file"
  :handler #'sly-agent-q-tools--buffer-file
  :changes nil)

(sly-agent-q-define-tool "buffer_create"
  :handler #'sly-agent-q-tools--buffer-create
  :changes (lambda (args) (list (cons 'buffer (plist-get args :buffer_name)))))

(sly-agent-q-define-tool "buffer_save"
  :handler #'sly-agent-q-tools--buffer-save
  :changes (lambda (args)
             (sly-agent-q-tool-rewind-file-target
              (plist-get (sly-agent-q-tools--save-target (plist-get args :buffer_name)
                                                         (plist-get args :file_path))
                         :file)))
  :preview #'sly-agent-q-tools--preview-save)

(sly-agent-q-define-tool "buffer_list"
  :handler #'sly-agent-q-tools--buffer-list
  :changes nil)

(sly-agent-q-define-tool "directory_list"
  :handler #'sly-agent-q-tools--directory-list
  :changes nil
  :preview (sly-agent-q-tools--preview-path :directory_path))

(sly-agent-q-define-tool "current_directory"
  :handler #'sly-agent-q-tools--current-directory
  :changes nil)

(sly-agent-q-define-tool "file_exists"
  :handler #'sly-agent-q-tools--file-exists
  :changes nil
  :preview (sly-agent-q-tools--preview-path :path))

(sly-agent-q-define-tool "goto_line"
  :handler #'sly-agent-q-tools--goto-line
  :changes nil)

(sly-agent-q-define-tool "propose_file_edit"
  :handler #'sly-agent-q-tools--propose-file-edit
  :changes (lambda (args)
             (sly-agent-q-tool-rewind-file-target (sly-agent-q-files-resolve (plist-get args :path) t)))
  :preview #'sly-agent-q-tool-preview-proposal)

(provide 'sly-agent-q-tools)
;;; sly-agent-q-tools.el ends here
