;;; sly-agent-q-files.el --- Path confinement and atomic writes for sly-agent-q  -*- lexical-binding: t; -*-

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

;; The ground the agent's file tools stand on:
;;
;; - Confinement.  Every path the model gives is resolved against the
;;   project root (`sly-agent-q-project-root', or the root of the
;;   project of the buffer the user was last in) and refused unless it
;;   stays inside that root or one of `sly-agent-q-allowed-directories'.
;;   Symbolic links are followed before the check, and a path that does
;;   not exist yet is checked through its deepest existing ancestor, so
;;   that new files can be created but never outside.  Writes are also
;;   refused under `sly-agent-q-read-only-paths'.
;;
;; - Reading.  `sly-agent-q-files-current-text' returns a file's text as
;;   the user would see it: the visiting buffer's text when there is
;;   one (unsaved changes included), else the decoded file.
;;
;; - Writing.  `sly-agent-q-files-write-atomically' writes into a
;;   temporary file in the target's directory and renames it over the
;;   target, keeping the coding system, the file modes and the extended
;;   attributes of the file it replaces.
;;
;; Failures the model can fix are signalled as `sly-agent-q-tool-error'
;; with a message written for the model.

;;; Code:

(require 'cl-lib)
(require 'project)
(require 'seq)
(require 'subr-x)
(require 'sly-agent-q-tool-error)

(defcustom sly-agent-q-project-root nil
  "Directory that the agent's relative paths are resolved against.
Nil means the root of the project (see `project-current') of the
buffer the user was last in, or that buffer's `default-directory'
when it belongs to no project.  The agent may read and write only
inside this root and `sly-agent-q-allowed-directories'."
  :type '(choice (const :tag "Project of the last buffer" nil)
                 (directory :tag "Fixed directory"))
  :group 'sly-agent-q-tools)

(defcustom sly-agent-q-allowed-directories nil
  "Directories outside the project root that the agent may also use.
Paths inside them must be given as absolute file names."
  :type '(repeat directory)
  :group 'sly-agent-q-tools)

(defcustom sly-agent-q-read-only-paths '(".git")
  "Files and directories the agent may read but never write.
Relative entries are relative to the project root."
  :type '(repeat string)
  :group 'sly-agent-q-tools)

(defcustom sly-agent-q-private-file-regexps
  '("/\\.ssh/" "/\\.gnupg/" "/\\.aws/" "/\\.authinfo\\(?:\\.gpg\\)?\\'"
    "/\\.netrc\\'" "/\\.pgpass\\'" "/\\.password-store/")
  "Regexps matching true file names the agent may neither read nor write.
They hold credentials; they are refused even inside the project,
and so are buffers visiting them."
  :type '(repeat regexp)
  :group 'sly-agent-q-tools)

(defun sly-agent-q-files-private-p (file)
  "Return non-nil when FILE is a file of credentials.
FILE is a true name; see `sly-agent-q-private-file-regexps'."
  (let ((file (expand-file-name file)))
    (cl-some (lambda (re) (string-match-p re file))
             sly-agent-q-private-file-regexps)))

;; The server's project tools (search_project, find_files, git) apply
;; the same rule: they get these regexps translated to JavaScript.  Only
;; the common part of the syntax is translated; anything else is sent as
;; untranslated, and the server's project tools then refuse to run.
(defun sly-agent-q-files--class-to-js (re i)
  "The bracket expression of RE starting at I, as JavaScript.
Return (SOURCE . NEXT), NEXT the index after its closing bracket, or
nil when it cannot be translated."
  (let ((n (length re)) (out (list "[")) (j (1+ i)) (ok t) (done nil))
    (when (and (< j n) (eq (aref re j) ?^)) (push "^" out) (cl-incf j))
    (when (and (< j n) (eq (aref re j) ?\])) (push "\\]" out) (cl-incf j))
    (while (and ok (not done))
      (if (>= j n) (setq ok nil)
        (let ((c (aref re j)))
          (cond ((eq c ?\]) (push "]" out) (setq done t) (cl-incf j))
                ((and (eq c ?\[) (< (1+ j) n) (eq (aref re (1+ j)) ?:))
                 (let* ((end (string-search ":]" re (+ j 2)))
                        (name (and end (substring re (+ j 2) end)))
                        (js (cdr (assoc name '(("digit" . "0-9") ("xdigit" . "0-9a-fA-F")
                                               ("space" . "\\s") ("alpha" . "\\p{L}")
                                               ("alnum" . "\\p{L}\\p{N}"))))))
                   (if js (progn (push js out) (setq j (+ end 2))) (setq ok nil))))
                ((memq c '(?\\ ?\[ ?/)) (push (string ?\\ c) out) (cl-incf j))
                (t (push (string c) out) (cl-incf j))))))
    (and ok (cons (apply #'concat (nreverse out)) j))))

(defun sly-agent-q-files-regexp-to-js (re)
  "RE, an Emacs regexp, as the source of an equivalent JavaScript one.
Nil when RE uses syntax outside the common part (syntax classes,
symbol and word boundaries, categories...).  The translation is
for file names, which hold no newline."
  (let ((n (length re)) (i 0) (out nil) (ok t))
    (cl-flet ((after-open-p () (or (null out) (member (car out) '("(" "(?:" "|" "^")))))
      (while (and ok (< i n))
        (let ((c (aref re i)))
          (cond
           ((eq c ?\\)
            (if (>= (1+ i) n) (setq ok nil)
              (let ((d (aref re (1+ i))))
                (setq i (+ i 2))
                (cond ((eq d ?') (push "$" out))
                      ((eq d ?`) (push "^" out))
                      ((eq d ?|) (push "|" out))
                      ((eq d ?\)) (push ")" out))
                      ((eq d ?\()
                       (cond ((and (< (1+ i) n) (eq (aref re i) ??) (eq (aref re (1+ i)) ?:))
                              (push "(?:" out) (setq i (+ i 2)))
                             ((and (< i n) (eq (aref re i) ??)) (setq ok nil))
                             (t (push "(" out))))
                      ((eq d ?{) (push "{" out))
                      ((eq d ?}) (push "}" out))
                      ((and (>= d ?1) (<= d ?9)) (push (string ?\\ d) out))
                      ((memq d '(?. ?* ?+ ?? ?\[ ?\] ?^ ?$ ?\\)) (push (string ?\\ d) out))
                      (t (setq ok nil))))))
           ((eq c ?\[)
            (let ((class (sly-agent-q-files--class-to-js re i)))
              (if class (progn (push (car class) out) (setq i (cdr class))) (setq ok nil))))
           ((eq c ?^) (push (if (after-open-p) "^" "\\^") out) (cl-incf i))
           ((eq c ?$)
            (push (if (or (= (1+ i) n) (string-prefix-p "\\)" (substring re (1+ i)))
                          (string-prefix-p "\\|" (substring re (1+ i))))
                      "$" "\\$")
                  out)
            (cl-incf i))
           ((memq c '(?* ?+ ??))
            ;; At the start of an expression Emacs reads them as themselves.
            (push (if (after-open-p) (string ?\\ c) (string c)) out) (cl-incf i))
           ((memq c '(?\( ?\) ?| ?{ ?} ?/)) (push (string ?\\ c) out) (cl-incf i))
           (t (push (string c) out) (cl-incf i))))))
    (and ok (apply #'concat (nreverse out)))))

(defun sly-agent-q-files-private-patterns ()
  "The private-file regexps as the server takes them.
A plist: :privateFilePatterns, the translated ones (a vector), and
:privateFilePatternsUntranslated, those that could not be (a vector)."
  (let (js bad)
    (dolist (re sly-agent-q-private-file-regexps)
      (let ((tr (and (stringp re) (sly-agent-q-files-regexp-to-js re))))
        (if tr (push tr js) (push (format "%s" re) bad))))
    (list :privateFilePatterns (vconcat (nreverse js))
          :privateFilePatternsUntranslated (vconcat (nreverse bad)))))

(defcustom sly-agent-q-max-file-size (* 10 1024 1024)
  "Largest file, in bytes, that the file tools read into Emacs."
  :type 'integer
  :group 'sly-agent-q-tools)

(defcustom sly-agent-q-new-file-coding-system 'utf-8-unix
  "Coding system of the files the agent creates."
  :type 'coding-system
  :group 'sly-agent-q-tools)

(define-obsolete-variable-alias 'sly-agent-q-tools-default-buffer-function
  'sly-agent-q-files-default-buffer-function "0.2.0")

(defvar sly-agent-q-files-default-buffer-function
  #'sly-agent-q-files-last-user-buffer
  "Function of no arguments returning the buffer the user was last in.
The tools use it when a call names no buffer, and to find the
project root when `sly-agent-q-project-root' is nil.  The
connection code may set it, e.g. to remember the buffer from which
the user sent the last message.")

(defcustom sly-agent-q-protected-buffer-regexps
  '("\\`\\*sly-agent-q" "\\`\\*agent-q")
  "Regexps matching names of buffers the agent must never write.
The agent's own chat, events and review buffers match the defaults.
A buffer can also protect itself by setting the buffer-local
variable `sly-agent-q-protected-buffer' to non-nil."
  :type '(repeat regexp)
  :group 'sly-agent-q-tools)

(defvar-local sly-agent-q-protected-buffer nil
  "Non-nil in a buffer that the agent's tools may not write.")

(defun sly-agent-q-files--occurrences (needle haystack)
  "Return the start indexes of every occurrence of NEEDLE in HAYSTACK.
Matching is literal and case-sensitive; occurrences do not overlap."
  (let ((start 0) (found nil) pos)
    (while (and (not (string-empty-p needle))
                (setq pos (string-search needle haystack start)))
      (push pos found)
      (setq start (+ pos (length needle))))
    (nreverse found)))

(defun sly-agent-q-files-unique-occurrence (needle haystack what)
  "Return the index of the only occurrence of NEEDLE in HAYSTACK.
WHAT names HAYSTACK in the message of the tool error signalled when
NEEDLE occurs zero or several times."
  (when (or (not (stringp needle)) (string-empty-p needle))
    (sly-agent-q-tool-fail "old_text must be a non-empty string."))
  (let ((found (sly-agent-q-files--occurrences needle haystack)))
    (cond
     ((null found)
      (sly-agent-q-tool-fail
       "old_text was not found in %s.  It must match exactly, whitespace and line breaks included; read it again and copy the text."
       what))
     ((cdr found)
      (sly-agent-q-tool-fail
       "old_text occurs %d times in %s (at lines %s); include more surrounding text so that it matches exactly once."
       (length found) what
       (mapconcat (lambda (pos)
                    (number-to-string (1+ (cl-count ?\n haystack :end pos))))
                  (seq-take found 10) ", ")))
     (t (car found)))))

(defun sly-agent-q-files-line-end (text start)
  "Where the line of TEXT that begins at START ends, after its newline."
  (let ((nl (string-search "\n" text start)))
    (if nl (1+ nl) (length text))))

(defun sly-agent-q-files-split-lines (text)
  "Return the lines of TEXT as a vector, each with its newline.
Only the last line may lack one."
  (let ((lines nil) (start 0) (len (length text)))
    (while (< start len)
      (let ((end (sly-agent-q-files-line-end text start)))
        (push (substring text start end) lines)
        (setq start end)))
    (vconcat (nreverse lines))))

(defun sly-agent-q-files-line-count (text)
  "The number of lines of TEXT, as `sly-agent-q-files-split-lines' counts them.
Counts without copying a line: a text of megabytes makes no garbage."
  (let ((n 0) (start 0) (len (length text)))
    (while (< start len)
      (setq start (sly-agent-q-files-line-end text start)
            n (1+ n)))
    n))

(defun sly-agent-q-files-line-position (text line)
  "The position in TEXT where its LINE (counted from 0) begins."
  (let ((start 0) (len (length text)))
    (while (and (> line 0) (< start len))
      (setq start (sly-agent-q-files-line-end text start)
            line (1- line)))
    start))

;;;; Buffers

(defun sly-agent-q-hidden-buffer-p (buffer)
  "Return non-nil when BUFFER is internal (a name with a leading space)."
  (string-prefix-p " " (buffer-name buffer)))

(defun sly-agent-q-agent-buffer-p (buffer)
  "Return non-nil when BUFFER is one of the agent's own buffers.
See `sly-agent-q-protected-buffer-regexps'."
  (or (buffer-local-value 'sly-agent-q-protected-buffer buffer)
      (let ((name (buffer-name buffer)))
        (cl-some (lambda (re) (string-match-p re name))
                 sly-agent-q-protected-buffer-regexps))))

(defun sly-agent-q-protected-buffer-p (buffer)
  "Return non-nil when the agent must not write BUFFER.
That is an internal buffer, a minibuffer or the agent's own, or an
indirect buffer of one (it shares that buffer's text)."
  (cl-some (lambda (b)
             (or (sly-agent-q-hidden-buffer-p b)
                 (minibufferp b)
                 (sly-agent-q-agent-buffer-p b)))
           (delq nil (list buffer (buffer-base-buffer buffer)))))

(defun sly-agent-q-files-buffer-file (buffer)
  "The file BUFFER's text is saved to: its own, or its base buffer's.
An indirect buffer visits no file but shares its base buffer's text,
which the user's save of the base buffer writes: every check of a
buffer's file goes through this."
  (buffer-local-value 'buffer-file-name (or (buffer-base-buffer buffer) buffer)))

(defun sly-agent-q-files-check-visit (visit)
  "Signal a tool error unless the buffer of VISIT still visits its file.
VISIT is the plist (:buffer NAME :file FILE) the server sends with a
call that changes a buffer's text: the buffer and the file it visited
when the server judged the write (FILE absent: none).  A buffer made
to visit another file meanwhile (while an approval waited) is a write
to a file nobody judged, perhaps a protected one: it is not changed."
  (let* ((name (plist-get visit :buffer))
         (buffer (and (stringp name) (get-buffer name)))
         (judged (let ((file (plist-get visit :file))) (and (stringp file) file)))
         (now (and buffer (sly-agent-q-files-buffer-file buffer))))
    (unless buffer
      (sly-agent-q-tool-fail "Buffer %S no longer exists; nothing was changed." name))
    (unless (equal now judged)
      (sly-agent-q-tool-fail
       "Buffer %S now visits %s, not %s, the file it visited when the write was judged (and asked about); the buffer was not changed."
       name (or now "no file") (or judged "no file")))))

(defun sly-agent-q-files-last-user-buffer ()
  "Return the most recent buffer that is neither internal nor the agent's."
  (or (cl-find-if (lambda (b) (not (sly-agent-q-protected-buffer-p b)))
                  (buffer-list))
      (current-buffer)))

(defun sly-agent-q-files-default-buffer ()
  "Return the buffer the user was last in, a live buffer."
  (let ((b (ignore-errors (funcall sly-agent-q-files-default-buffer-function))))
    (if (buffer-live-p b) b (sly-agent-q-files-last-user-buffer))))

;;;; Roots and confinement

(defun sly-agent-q-files-project-root ()
  "Return the project root the agent works in, as a directory name.
See `sly-agent-q-project-root'.  The connection code can send it to
the server as the project root of the editor context."
  (file-name-as-directory
   (expand-file-name
    (or sly-agent-q-project-root
        (let ((dir (buffer-local-value 'default-directory
                                       (sly-agent-q-files-default-buffer))))
          (or (and dir (not (file-remote-p dir))
                   (let ((project (ignore-errors (project-current nil dir))))
                     (and project (project-root project))))
              dir))
        default-directory))))

(defun sly-agent-q-files-call-root (root)
  "Return the value of `sly-agent-q-project-root' for a call of the server.
ROOT is the project root the server judged the call against (its
protected files, its approval), sent with it: the call's paths resolve
against that root, never against another one the user's current buffer
gives meanwhile.  Without a ROOT naming an existing local directory,
the current value.  When the user set `sly-agent-q-project-root' to
another root since, the call is refused (a `sly-agent-q-tool-error'):
run against either root, what the server judged and what Emacs does
would differ, or the agent would work outside the root the user chose."
  (if (not (and (stringp root) (file-name-absolute-p root) (not (file-remote-p root))
                (file-directory-p root)))
      sly-agent-q-project-root
    (when (and sly-agent-q-project-root
               (not (equal (file-name-as-directory (file-truename sly-agent-q-project-root))
                           (file-name-as-directory (file-truename root)))))
      (sly-agent-q-tool-fail
       "The project root is now %s (sly-agent-q-project-root), not %s, which this call was judged against; it was not run.  The next turn works in the new root."
       (abbreviate-file-name sly-agent-q-project-root) (abbreviate-file-name root)))
    (file-name-as-directory root)))

(defun sly-agent-q-files-keeping-root (function)
  "Return FUNCTION, to be run later against the project root bound now.
A step of a call that runs later (on a timer, at the server's answer,
at the user's decision) resolves its paths against the root the call
runs against, `sly-agent-q-project-root' as its handler bound it
from `sly-agent-q-files-call-root', never against the one the user's
current buffer gives by then: another chat's project, and another
file of the same name."
  (let ((root sly-agent-q-project-root))
    (lambda (&rest arguments)
      (let ((sly-agent-q-project-root root))
        (apply function arguments)))))

(defun sly-agent-q-files--existing-p (file)
  "Return non-nil when FILE exists, a dangling symbolic link included."
  (or (file-exists-p file) (file-symlink-p file)))

(defun sly-agent-q-files-truename (file)
  "Return the true name of FILE, which need not exist.
The deepest existing ancestor of FILE is resolved with
`file-truename' and the components that do not exist yet are
appended to it."
  (let ((file (directory-file-name (expand-file-name file)))
        (missing nil))
    (while (and (not (sly-agent-q-files--existing-p file))
                (not (equal file (directory-file-name
                                  (file-name-directory file)))))
      (push (file-name-nondirectory file) missing)
      (setq file (directory-file-name (file-name-directory file))))
    (let ((true (file-truename file)))
      ;; Appended literally: `expand-file-name' would read a part
      ;; named `~' as the home directory.
      (dolist (part missing)
        (setq true (concat (file-name-as-directory true) part)))
      true)))

(defun sly-agent-q-files--inside-p (file dir)
  "Return non-nil when FILE is DIR or inside it (both true names)."
  (let ((dir (file-name-as-directory dir)))
    (or (string-prefix-p dir (file-name-as-directory file))
        (string= (directory-file-name dir) (directory-file-name file)))))

(defun sly-agent-q-files-roots ()
  "Return the true names of the directories the agent may use.
The project root comes first."
  (cons (sly-agent-q-files-truename (sly-agent-q-files-project-root))
        (mapcar #'sly-agent-q-files-truename sly-agent-q-allowed-directories)))

(defun sly-agent-q-files-relative (file)
  "Return FILE relative to the project root when inside it, else FILE."
  (let ((root (sly-agent-q-files-truename (sly-agent-q-files-project-root)))
        (true (sly-agent-q-files-truename file)))
    (if (sly-agent-q-files--inside-p true root)
        (let* ((rel (file-relative-name true root))
               ;; A name of the project starting with `~' reads as the home
               ;; directory: shown as ./~ instead.
               (rel (if (string-prefix-p "~" rel) (concat "./" rel) rel)))
          (cond ((equal rel ".") "./")
                ((file-directory-p true) (file-name-as-directory rel))
                (t rel)))
      true)))

(defvar tramp-mode)

(defmacro sly-agent-q-files--without-handlers (&rest body)
  "Run BODY with every file name handler off, TRAMP's included.
A name from the model must never make Emacs open a connection, run
a decompressor or decrypt a file while it is being resolved."
  (declare (indent 0) (debug t))
  `(let ((file-name-handler-alist nil)
         (tramp-mode nil))
     ,@body))

(defun sly-agent-q-files--remote-component (name)
  "Return the first component of NAME that could make it remote, or nil.
That is any component containing `:' (TRAMP's /METHOD:HOST: and
/HOST: syntax, and the /: quoting prefix): after `..' collapses, such
a component can start the name."
  (cl-find-if (lambda (part) (string-search ":" part))
              (split-string name "/")))

(defun sly-agent-q-files--refuse-remote (path name)
  "Signal a tool error when NAME, resolved from PATH, could be remote."
  (let ((part (sly-agent-q-files--remote-component name)))
    (when part
      (sly-agent-q-tool-fail
       "The path %S was refused: its component %S contains `:', which Emacs can read as a remote (TRAMP) file name such as /ssh:host:/file.  Remote and TRAMP names are refused; use a local path inside the project without `:'."
       path part))))

(defun sly-agent-q-files--special-type (file)
  "Return a description of FILE when it is not a regular file or directory.
FIFOs, character and block devices and sockets are named; nil
otherwise.  FILE is a true name; it is examined, never opened."
  (let ((modes (file-attribute-modes (file-attributes file))))
    (and modes
         (pcase (aref modes 0)
           (?p "a named pipe (FIFO)")
           (?c "a character device")
           (?b "a block device")
           (?s "a socket")))))

(defun sly-agent-q-files-resolve (path &optional for-write)
  "Return the absolute true name of PATH, confined to the agent's roots.
PATH is relative to the project root, or absolute inside one of the
roots.  It need not exist.  It is taken literally: no file name
handler runs (TRAMP and the others are off), `$' means nothing
special, and a leading `~' is the home directory as in a shell
\(`~NAME' is refused as ambiguous: `sly-agent-q-files--home-path').
Signal `sly-agent-q-tool-error' when it leaves the roots (through
`..', an absolute name or a symbolic link), could be remote (any
component with `:'), is not a regular file or directory
\(a FIFO, device or socket), or, when FOR-WRITE is non-nil, lies
under `sly-agent-q-read-only-paths'."
  (unless (and (stringp path) (not (string-empty-p path)))
    (sly-agent-q-tool-fail "The path must be a non-empty string."))
  (when (string-match-p "\0" path)
    (sly-agent-q-tool-fail "The path %S contains a NUL character." path))
  ;; Before anything touches the file system, and before `..' collapses.
  (sly-agent-q-files--refuse-remote path path)
  ;; The roots are the user's, not the model's: found as before, with
  ;; the handlers the user has.
  (let ((root (sly-agent-q-files-project-root))
        (roots (sly-agent-q-files-roots)))
    (sly-agent-q-files--resolve-in (sly-agent-q-files--home-path path) for-write root roots
                                   path)))

(defun sly-agent-q-files--home-path (path)
  "PATH with a leading `~' read as a shell and Emacs read it.
`~' and `~/...' are the home directory: PATH is returned absolute,
and the confinement then refuses it unless the home directory is one
of the roots.  `~NAME...' (another user's home, or a name of the
project starting with `~'?) is refused as ambiguous.  A file of the
project named `~' is ./~: what the user approves reads as what
happens, never a folder silently named `~'."
  (cond ((not (string-prefix-p "~" path)) path)
        ((or (equal path "~") (string-prefix-p "~/" path))
         (concat (directory-file-name (expand-file-name "~")) (substring path 1)))
        (t (sly-agent-q-tool-fail
            "The path %s starts with `~', which a shell reads as the home directory of a user named %s; it was refused as ambiguous.  For a file of the project whose name starts with `~', write ./%s."
            path (car (split-string (substring path 1) "/")) path))))

(defun sly-agent-q-files--resolve-in (path for-write root roots &optional given)
  "Resolve PATH for `sly-agent-q-files-resolve', given ROOT and ROOTS.
FOR-WRITE is as there.  GIVEN is the path as the model wrote it, when
PATH is what it means (a leading `~' expanded).  No file name handler
runs."
  (sly-agent-q-files--without-handlers
    (let* ((home (and given (not (equal given path))))
           (lexical (expand-file-name (sly-agent-q-files--literal-path path) root))
           (true (progn (sly-agent-q-files--refuse-remote path lexical)
                        (sly-agent-q-files-truename lexical)))
           (inside (cl-find-if (lambda (r) (sly-agent-q-files--inside-p true r)) roots)))
      (when (equal (car roots) "/")
        (sly-agent-q-tool-fail
         "The project root is /, which would open the whole file system to the agent, so %s was refused.  The user should visit a file of the project or set sly-agent-q-project-root."
         path))
      (unless inside
        (sly-agent-q-tool-fail
         "%s is outside the project root %s%s; it was refused.  Use a path relative to the project root, without `..' leaving it%s."
         (or given path) (abbreviate-file-name root)
         (cond (home (format " (`~' is the home directory, as in a shell: it means %s; a file of the project named `~' is ./~)" true))
               ((equal true (directory-file-name lexical)) "")
               (t (format " (it resolves to %s)" (abbreviate-file-name true))))
         (if sly-agent-q-allowed-directories
             (format ", or an absolute path inside %s"
                     (mapconcat #'abbreviate-file-name
                                sly-agent-q-allowed-directories ", "))
           "")))
      ;; A symbolic link inside the root may point at a name with `:'.
      (sly-agent-q-files--refuse-remote
       path (substring true (min (length true) (length inside))))
      (when (sly-agent-q-files-private-p true)
        (sly-agent-q-tool-fail
         "%s holds credentials (sly-agent-q-private-file-regexps); the agent may not use it."
         path))
      (let ((special (sly-agent-q-files--special-type true)))
        (when special
          (sly-agent-q-tool-fail
           "%s is %s, not a regular file; the agent neither reads nor writes such files."
           path special)))
      (when for-write
        (dolist (ro sly-agent-q-read-only-paths)
          (let ((ro-true (sly-agent-q-files-truename (expand-file-name ro root))))
            (when (sly-agent-q-files--inside-p true ro-true)
              (sly-agent-q-tool-fail
               "%s is read-only for the agent (it is under %s, listed in sly-agent-q-read-only-paths)."
               path (sly-agent-q-files-relative ro-true))))))
      true)))

(defun sly-agent-q-files-inside-root-p (file)
  "Return non-nil when FILE may be written by the agent.
FILE is an absolute name, typically the file a buffer visits.
It must resolve, by `sly-agent-q-files-resolve' with its rules for
writing, inside the agent's roots."
  (condition-case nil
      (progn (sly-agent-q-files-resolve file t) t)
    (sly-agent-q-tool-error nil)))

(defun sly-agent-q-files--literal-path (path)
  "Return PATH so that `expand-file-name' takes it literally.
Whatever starts with `~' here is meant relative to the root
\(`sly-agent-q-files--home-path' has read a leading `~' already)."
  (if (string-prefix-p "~" path)
      (concat "./" path)
    path))

;;;; Reading

(defun sly-agent-q-files-visiting-buffer (file)
  "Return the live buffer visiting FILE, or nil."
  (let ((b (find-buffer-visiting file)))
    (and (buffer-live-p b) b)))

(defun sly-agent-q-files--check-size (file)
  "Signal a tool error when FILE is too large to read."
  (let ((size (file-attribute-size (file-attributes file))))
    (when (and size (> size sly-agent-q-max-file-size))
      (sly-agent-q-tool-fail
       "%s is %d bytes, larger than the %d bytes the agent reads (sly-agent-q-max-file-size)."
       (sly-agent-q-files-relative file) size sly-agent-q-max-file-size))))

(defun sly-agent-q-files-normalize-coding (coding)
  "Return CODING, or a UTF-8 coding with its end-of-line type if undecided."
  (cond ((null coding) sly-agent-q-new-file-coding-system)
        ((memq (coding-system-base coding) '(undecided prefer-utf-8))
         (coding-system-change-text-conversion coding 'utf-8))
        (t coding)))

(defun sly-agent-q-files-read-disk (file)
  "Return (TEXT . CODING) of FILE read from disk.
Signal a tool error when FILE is a directory, unreadable, too large
or binary."
  (when (file-directory-p file)
    (sly-agent-q-tool-fail "%s is a directory; use directory_list."
                           (sly-agent-q-files-relative file)))
  (unless (file-readable-p file)
    (sly-agent-q-tool-fail "%s %s." (sly-agent-q-files-relative file)
                           (if (file-exists-p file) "is not readable"
                             "does not exist")))
  (sly-agent-q-files--check-size file)
  (with-temp-buffer
    (let ((coding-system-for-read nil))
      (insert-file-contents file))
    (let ((coding last-coding-system-used))
      (when (or (memq (coding-system-base coding) '(no-conversion raw-text))
                (save-excursion (goto-char (point-min))
                                (search-forward "\0" nil t)))
        (sly-agent-q-tool-fail "%s looks like a binary file; the agent reads text files only."
                               (sly-agent-q-files-relative file)))
      (cons (buffer-substring-no-properties (point-min) (point-max))
            (sly-agent-q-files-normalize-coding coding)))))

(defun sly-agent-q-files-buffer-text (buffer)
  "Return the whole text of BUFFER, ignoring narrowing, without properties."
  (with-current-buffer buffer
    (save-restriction
      (widen)
      (buffer-substring-no-properties (point-min) (point-max)))))

(defun sly-agent-q-files-current-text (file)
  "Return what the user sees as the text of FILE, a plist.
Keys: :text, :coding, :exists, :buffer (the visiting buffer when its
text was used, else nil) and :modified (that buffer has unsaved
changes).  A buffer is used unless it is unmodified and the file on
disk is newer.  A file that does not exist has empty :text."
  (let ((buffer (sly-agent-q-files-visiting-buffer file)))
    (cond
     ((and buffer
           (or (buffer-modified-p buffer)
               (not (file-exists-p file))
               (verify-visited-file-modtime buffer)))
      (list :text (sly-agent-q-files-buffer-text buffer)
            :coding (sly-agent-q-files-normalize-coding
                     (buffer-local-value 'buffer-file-coding-system buffer))
            :exists (file-exists-p file)
            :buffer buffer
            :modified (buffer-modified-p buffer)))
     ((sly-agent-q-files--existing-p file)
      (let ((read (sly-agent-q-files-read-disk file)))
        (list :text (car read) :coding (cdr read) :exists t
              :buffer nil :modified nil)))
     (t (list :text "" :coding sly-agent-q-new-file-coding-system
              :exists nil :buffer nil :modified nil)))))

;;;; Writing

(defun sly-agent-q-files-check-encodable (text coding file)
  "Signal a tool error unless TEXT can be encoded in CODING for FILE."
  (let ((pos (unencodable-char-position 0 (length text) coding nil text)))
    (when pos
      (sly-agent-q-tool-fail
       "%s is encoded in %s, which cannot represent the character %s at line %d of the new content; the file was not written.  Use only characters of that encoding."
       (sly-agent-q-files-relative file) coding
       (string (aref text pos))
       (1+ (cl-count ?\n text :end pos))))))

(defun sly-agent-q-files--refuse-question (prompt &rest _)
  "Refuse to ask PROMPT, signalling a tool error instead."
  (sly-agent-q-tool-fail "Saving would have asked the user %S, so it was stopped."
                     (string-trim (format "%s" prompt))))

(defun sly-agent-q-files--load-userlock ()
  "Load userlock.el, the home of Emacs's file questions, if only autoloaded.
Emacs itself calls its autoloaded supersession check while writing;
loading the file then would put the asking definitions back over the
ones `sly-agent-q-files--without-questions' binds."
  (dolist (name '(ask-user-about-supersession-threat ask-user-about-lock))
    (autoload-do-load (symbol-function name) name)))

(defmacro sly-agent-q-files--without-questions (&rest body)
  "Run BODY so that any question Emacs would ask becomes a tool error.
The agent's saves run inside process filters, where no one can
answer, so nothing may prompt."
  (declare (indent 0) (debug t))
  `(progn
     (sly-agent-q-files--load-userlock)
     (cl-letf (((symbol-function 'yes-or-no-p) #'sly-agent-q-files--refuse-question)
               ((symbol-function 'y-or-n-p) #'sly-agent-q-files--refuse-question)
               ((symbol-function 'ask-user-about-supersession-threat)
                (lambda (file)
                  (sly-agent-q-files--refuse-question
                   (format "%s changed on disk; really edit the buffer?" file))))
               ((symbol-function 'ask-user-about-lock)
                (lambda (file opponent)
                  (sly-agent-q-files--refuse-question
                   (format "%s is locked by %s; steal the lock?" file opponent)))))
       ,@body)))

(defun sly-agent-q-files--save-here (file)
  "Save the current buffer, which visits FILE, as the user's save would.
Through `basic-save-buffer', so `before-save-hook',
`write-file-functions', backups (when the user has them on),
`after-save-hook' and VC run as usual; with `file-precious-flag'
bound to t, so FILE is written into a temporary file then renamed
over, never left half-written; and without any question.  A failure
is signalled as a tool error and leaves no temporary file."
  (let* ((dir (file-name-directory file))
         (before (directory-files dir t "\\`tmp" t))
         (done nil))
    (unwind-protect
        (condition-case err
            (let ((file-precious-flag t)
                  ;; `ask' (any other value) would prompt for a final newline.
                  (require-final-newline
                   (and (memq require-final-newline '(t visit visit-save))
                        require-final-newline))
                  (inhibit-message t))
              (sly-agent-q-files--without-questions
                (set-buffer-modified-p t)
                (basic-save-buffer))
              (setq done t))
          (file-error
           (sly-agent-q-tool-fail "Could not write %s: %s.  Nothing was changed."
                              (sly-agent-q-files-relative file)
                              (error-message-string err))))
      (unless done
        ;; basic-save-buffer leaves its temporary file when writing it fails.
        (dolist (f (directory-files dir t "\\`tmp" t))
          (unless (member f before)
            (ignore-errors (delete-file f))))))))

(defun sly-agent-q-files-write-atomically (file text &optional coding)
  "Write TEXT to FILE atomically, encoded in CODING, as a user's save would.
CODING nil means the coding of the existing file, or
`sly-agent-q-new-file-coding-system' for a new file.  TEXT is saved
from a temporary buffer visiting FILE through `basic-save-buffer'
\(see `sly-agent-q-files--save-here'), so FILE is never left
half-written and the user's save hooks, backups and VC run.  The
modes and extended attributes of an existing FILE are kept.  Missing
parent directories are created.  Return the coding system used."
  (let* ((file (expand-file-name file))
         (dir (file-name-directory file))
         (exists (file-exists-p file))
         (coding (sly-agent-q-files-normalize-coding
                  (or coding
                      (and exists (ignore-errors
                                    (cdr (sly-agent-q-files-read-disk file))))))))
    (when (file-directory-p file)
      (sly-agent-q-tool-fail "%s is a directory." (sly-agent-q-files-relative file)))
    (sly-agent-q-files-check-encodable text coding file)
    (condition-case err
        (unless (file-directory-p dir)
          (make-directory dir t))
      (file-error
       (sly-agent-q-tool-fail "Could not write %s: %s.  Nothing was changed."
                          (sly-agent-q-files-relative file)
                          (error-message-string err))))
    ;; An unmodified buffer visiting FILE that is older than the disk (the file changed behind
    ;; Emacs) would make the write below ask whether to go on; it holds nothing of the user's,
    ;; so it is brought up to the disk first, as the text the edit was made from.
    (let ((visiting (sly-agent-q-files-visiting-buffer file)))
      (when (and visiting exists (not (buffer-modified-p visiting))
                 (not (verify-visited-file-modtime visiting)))
        (sly-agent-q-files-revert-buffer visiting)))
    (with-temp-buffer
      (insert text)
      ;; Visiting FILE only now, so that inserting took no lock.
      (setq buffer-file-name file
            buffer-file-truename (abbreviate-file-name (file-truename file))
            buffer-file-coding-system coding)
      (unwind-protect
          (sly-agent-q-files--save-here file)
        (set-buffer-modified-p nil)
        (setq buffer-file-name nil)))
    coding))

(defun sly-agent-q-files-revert-buffer (buffer)
  "Revert BUFFER from its file, quietly, keeping its modes."
  (with-current-buffer buffer
    (let ((revert-without-query '("."))
          (inhibit-message t))
      (revert-buffer t t t))))

(defun sly-agent-q-files-save-buffer (buffer &optional file)
  "Save BUFFER's whole text to FILE, a resolved file name, as a user's save would.
FILE nil means the file BUFFER visits.  The buffer's coding system
is kept.  When FILE is the file BUFFER visits, or BUFFER visits no
file yet, BUFFER itself is saved through `basic-save-buffer' (see
`sly-agent-q-files--save-here') and visits FILE afterwards;
otherwise its text is written to FILE and BUFFER is left alone.
Return the coding system used."
  (with-current-buffer buffer
    (let* ((own (and buffer-file-name (expand-file-name buffer-file-name)))
           (file (or file own))
           (same (and own (equal (sly-agent-q-files-truename own)
                                 (sly-agent-q-files-truename file))))
           (coding (sly-agent-q-files-normalize-coding
                    (if (or buffer-file-name
                            (local-variable-p 'buffer-file-coding-system))
                        buffer-file-coding-system
                      sly-agent-q-new-file-coding-system))))
      (when (and same (file-exists-p file)
                 (not (verify-visited-file-modtime buffer)))
        (sly-agent-q-tool-fail
         "%s changed on disk since buffer %s visited it; saving would overwrite those changes, so nothing was saved.  Ask the user to revert or save the buffer."
         (sly-agent-q-files-relative file) (buffer-name buffer)))
      (when (and same (file-exists-p file) (not (file-writable-p file)))
        (sly-agent-q-tool-fail "%s is not writable; nothing was saved."
                           (sly-agent-q-files-relative file)))
      (cond
       ((and own (not same))
        (sly-agent-q-files-write-atomically
         file (sly-agent-q-files-buffer-text buffer) coding))
       (t
        (sly-agent-q-files-check-encodable (sly-agent-q-files-buffer-text buffer) coding file)
        (let ((modified (buffer-modified-p)))
          (unless own
            (let ((inhibit-message t))
              (set-visited-file-name file t)))
          (setq buffer-file-coding-system coding)
          (condition-case err
              (save-restriction
                (widen)
                (unless (file-directory-p (file-name-directory file))
                  (make-directory (file-name-directory file) t))
                (sly-agent-q-files--save-here file))
            (error
             ;; Back as it was: visiting no file, with its changes.
             (unless own
               (let ((inhibit-message t))
                 (set-visited-file-name nil t)))
             (set-buffer-modified-p modified)
             (signal (car err) (cdr err)))))))
      coding)))

;;;; The buffers the agent may use

(define-obsolete-variable-alias 'sly-agent-q-tools-allow-hidden-buffers
  'sly-agent-q-files-allow-hidden-buffers "0.2.0")

(defcustom sly-agent-q-files-allow-hidden-buffers nil
  "Non-nil lets the agent read internal buffers (names starting with a space).
They may hold process output, credentials included; the agent never
writes them."
  :type 'boolean
  :group 'sly-agent-q-tools)

(defun sly-agent-q-files-agent-buffer (name &optional for-write)
  "Return the live buffer named NAME, or the user's last buffer when NAME is nil.
Signal a tool error when there is none, when it is internal, or, if
FOR-WRITE is non-nil, when the agent may not write it."
  (let ((buffer (if name (get-buffer name) (sly-agent-q-files-default-buffer))))
    (unless (buffer-live-p buffer)
      (sly-agent-q-tool-fail "There is no buffer named %S; buffer_list shows the open buffers."
                             name))
    (let ((file (sly-agent-q-files-buffer-file buffer)))
      (when (and file (sly-agent-q-files-private-p (file-truename file)))
        (sly-agent-q-tool-fail "Buffer %s visits a file holding credentials; the agent may not use it."
                               (buffer-name buffer))))
    (when (and (sly-agent-q-hidden-buffer-p buffer)
               (or for-write (not sly-agent-q-files-allow-hidden-buffers)))
      (sly-agent-q-tool-fail "%S is an internal Emacs buffer; the agent may not use it."
                             (buffer-name buffer)))
    (when for-write
      (let ((file (sly-agent-q-files-buffer-file buffer)))
        (when (and file (not (sly-agent-q-files-inside-root-p file)))
          (sly-agent-q-tool-fail
           "Buffer %s visits %s, which is outside the project root or read-only for the agent; the agent may not change it."
           (buffer-name buffer) (abbreviate-file-name file))))
      (when (sly-agent-q-protected-buffer-p buffer)
        (sly-agent-q-tool-fail
         "Buffer %s belongs to the agent's own interface; the agent may not write it."
         (buffer-name buffer)))
      (when (or (buffer-local-value 'buffer-read-only buffer)
                (and (buffer-base-buffer buffer)
                     (buffer-local-value 'buffer-read-only (buffer-base-buffer buffer))))
        (sly-agent-q-tool-fail "Buffer %s is read-only." (buffer-name buffer)))
      ;; Its first change would make Emacs ask whether to edit it anyway, from inside the
      ;; handler; a modified buffer was asked already, by the user's own edit.
      (let ((file (sly-agent-q-files-buffer-file buffer))
            (visiting (or (buffer-base-buffer buffer) buffer)))
        (when (and file (not (buffer-modified-p visiting)) (file-exists-p file)
                   (not (verify-visited-file-modtime visiting)))
          (sly-agent-q-tool-fail
           "Buffer %s is older than %s, which changed on disk since it was visited, so nothing was changed.  read_file shows the file as it is now; ask the user to revert the buffer to edit it here."
           (buffer-name buffer) (sly-agent-q-files-relative file)))))
    buffer))

;; Options that widen what the agent may do (or what runs, where data
;; goes) are marked risky, so that a .dir-locals.el planted in a cloned
;; repository cannot set them silently, nor be marked safe for good.
;; Autoloaded: a .dir-locals.el visited before the package loads is
;; asked about as risky too (package.el loads the autoloads at start).
;;;###autoload
(dolist (option '(sly-agent-q-project-root
                  sly-agent-q-allowed-directories
                  sly-agent-q-read-only-paths
                  sly-agent-q-private-file-regexps
                  sly-agent-q-max-file-size
                  sly-agent-q-protected-buffer-regexps
                  sly-agent-q-files-allow-hidden-buffers))
  (put option 'risky-local-variable t)
  ;; A value marked safe for good (`!') before the option was known to
  ;; be risky would be applied without a question: it is forgotten.
  (setq safe-local-variable-values
        (assq-delete-all option safe-local-variable-values)))

(provide 'sly-agent-q-files)
;;; sly-agent-q-files.el ends here
