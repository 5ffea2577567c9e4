;;; sly-agent-q-entry.el --- A tool call's entry in the chat  -*- lexical-binding: t; -*-

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

;; Each tool call the agent makes is an entry in the chat's transcript:
;; one line (its name, trust level, arguments in short and state), that
;; TAB expands to its arguments and result, bounded, and o opens whole
;; in a buffer of their own.  An entry is a section of the transcript
;; (`sly-agent-q-transcript-insert-section'), redrawn alone as the call
;; goes on.

;;; Code:

(require 'cl-lib)
(require 'subr-x)
(require 'button)
(require 'sly-agent-q-server)
(require 'sly-agent-q-display)
(require 'sly-agent-q-faces)
(require 'sly-agent-q-transcript)

(declare-function json-pretty-print-buffer "json" (&optional minimize))

(defcustom sly-agent-q-entry-preview-lines 20
  "Most lines of a tool's arguments or result shown in its expanded entry.
The whole text is one key away, in its own buffer:
\\<sly-agent-q-entry-map>\\[sly-agent-q-entry-open] on the entry."
  :type 'integer
  :group 'sly-agent-q)

(defcustom sly-agent-q-entry-preview-line-chars 200
  "Most characters of one line shown in an expanded tool entry.
Longer lines are cut: a line of a megabyte would stall redisplay."
  :type 'integer
  :group 'sly-agent-q)

(cl-defstruct (sly-agent-q-entry (:constructor sly-agent-q-entry-create))
  "A tool call shown in the transcript; SECTION is where it is drawn.
ARGUMENTS are the model's; RAN-ARGUMENTS, when the user edited them,
the ones that ran.  TIME-MS is the run's own time; WAIT-MS the wait
for the user's approval.  STATUS is `queued' (announced, waiting for the
calls before it), `approval', `running', `ok' or `error'.  OUTPUT is
the last bytes a running call has output so far (a command's), from
chat/toolOutput, and OUTPUT-BYTES how many it has output in all.
NOTE, while the call has not ended, says what it waits for, when
something outside it holds it up (the helpers' load into the image)."
  call-id name arguments safety (status 'queued) content error time-ms
  approved expanded section ran-arguments wait-ms output output-bytes note)

;;;; Tool entries

;; Obsolete name (issue 46), kept for users who name it.
(define-obsolete-variable-alias 'sly-agent-q-chat-entry-map
  'sly-agent-q-entry-map "0.2.0")
(defvar sly-agent-q-entry-map
  (let ((map (make-sparse-keymap)))
    (set-keymap-parent map button-map)
    (define-key map (kbd "TAB") #'sly-agent-q-entry-toggle)
    (define-key map (kbd "<tab>") #'sly-agent-q-entry-toggle)
    (define-key map (kbd "o") #'sly-agent-q-entry-open)
    map)
  "Keymap on tool entries.")

(define-button-type 'sly-agent-q-entry
  'action #'sly-agent-q-entry--button
  'keymap sly-agent-q-entry-map
  'follow-link t
  'help-echo "TAB or RET: show or hide the details; o: the whole text in its own buffer")

(defun sly-agent-q-entry--json (value)
  "VALUE (parsed JSON) as pretty-printed JSON text."
  (if (null value) "{}"
    (condition-case nil
        (with-temp-buffer
          (insert (sly-agent-q-display-json value))
          (require 'json)
          (json-pretty-print-buffer)
          (buffer-string))
      (error (format "%S" value)))))

(defun sly-agent-q-entry--lisp-summary (form)
  "The Lisp source FORM as a summary: its first line's start, drawn as data.
An ellipsis at its end says that there was more.  Only the start of
FORM is looked at, however long it is."
  (let* ((start (or (string-match-p "[^ \t\n\r]" form) (length form)))
         (nl (string-search "\n" form start))
         (end (min (or nl (length form)) (+ start 60)))
         (more (string-match-p "[^ \t\n\r]" form end)))
    (concat (sly-agent-q-display-line (string-trim-right (substring form start end)) t)
            (if more "…" ""))))

(defun sly-agent-q-entry--summary-value (value)
  "VALUE, a tool argument that is not Lisp source, in short on one line.
A string shows its first 40 characters, quoted, and after its closing
quote how many more it has; any other value its JSON, cut at 40."
  (if (stringp value)
      (concat (sly-agent-q-display-line (prin1-to-string (substring value 0 (min 40 (length value)))) t)
              (if (> (length value) 40)
                  (propertize (format "…[%d more characters]" (- (length value) 40)) 'face 'escape-glyph)
                ""))
    (sly-agent-q-display-line (sly-agent-q-display-json value) 40)))

(defun sly-agent-q-entry--summarize-arguments (args &optional lisp)
  "A short one-line rendering of the tool arguments ARGS (a plist).
LISP names the arguments (strings) that hold Lisp source: they are
shown as Lisp, the others as JSON.  Keys and values come from the
model: each is drawn as one line of data.  Whole arguments are shown
while they fit in 160 characters; an ellipsis stands for the others,
so no argument's own note of what it leaves out is cut."
  (let ((parts (cl-loop for (k v) on (and (listp args) args) by #'cddr
                        for name = (substring (symbol-name k) 1)
                        collect (concat (sly-agent-q-display-line name 30) "="
                                        (if (and (stringp v) (member name lisp))
                                            (sly-agent-q-entry--lisp-summary v)
                                          (sly-agent-q-entry--summary-value v)))))
        (shown nil) (width 0))
    (while (and parts (<= (+ width (string-width (car parts))) 160))
      (setq width (+ width 1 (string-width (car parts))))
      (push (pop parts) shown))
    (concat (string-join (nreverse shown) " ")
            (cond ((null parts) "")
                  (shown " …")
                  (t "…")))))

(defconst sly-agent-q-entry--indent "      "
  "The indentation of a tool entry's arguments and result, before their frame.")

(defun sly-agent-q-entry--preview (text &optional lisp)
  "The start of TEXT, from outside, bounded for the chat window and framed.
At most `sly-agent-q-entry-preview-lines' lines, each cut at
`sly-agent-q-entry-preview-line-chars' characters, drawn by
`sly-agent-q-display-framed', with a line of the product's saying
what was left out.  Only the start of TEXT is looked at, so a text
of megabytes costs no more than a short one.  LISP non-nil: TEXT is
Lisp source, shown in the faces `lisp-mode' gives it."
  (let* ((max-lines sly-agent-q-entry-preview-lines)
         (max-chars sly-agent-q-entry-preview-line-chars)
         (lines nil) (start 0) (n 0) (cut nil)
         (len (length text)))
    (while (and (< start len) (< n max-lines))
      (let* ((nl (string-search "\n" text start))
             (end (or nl len)))
        (push (if (> (- end start) max-chars)
                  (progn (setq cut t)
                         (concat (substring text start (+ start max-chars)) "…"))
                (substring text start end))
              lines)
        (setq n (1+ n)
              start (if nl (1+ nl) len))))
    (let* ((source (string-join (nreverse lines) "\n"))
           (shown (sly-agent-q-display-framed source sly-agent-q-entry--indent nil
                                              (and lisp (sly-agent-q-faces-lisp source)))))
      (if (or cut (< start len))
          (concat shown
                  (propertize
                   (format "\n%s[%s characters in all, %s; o on the entry opens the whole text]"
                           sly-agent-q-entry--indent
                           (sly-agent-q-transcript-format-tokens len)
                           (if (< start len)
                               (format "%s more after these lines"
                                       (sly-agent-q-transcript-format-tokens (- len start)))
                             "long lines cut"))
                   'face 'sly-agent-q-meta-face))
        shown))))

(defun sly-agent-q-entry--ms (ms)
  "MS, a number of milliseconds or nil, as a short string."
  (if (numberp ms) (format "%d" (round ms)) "?"))

(defun sly-agent-q-entry--wait (ms)
  "MS, the wait for an approval in milliseconds, as a short phrase, or \"\"."
  (if (numberp ms)
      (format " · waited %s for approval"
              (if (< ms 1000) (format "%d ms" (round ms)) (format "%.1f s" (/ ms 1000.0))))
    ""))

(defun sly-agent-q-entry--command-failure (entry)
  "How ENTRY's command ended when it did not exit with status 0, or nil.
A command that fails is still a tool call that succeeded: its end is
read from the status line the server writes before a command's output
\(the first lines, up to the first empty one), never from the output.
Known by the command's own header (its \"$ \" line, then that status
line), not by the tool's name, which only the catalog names."
  (let ((content (sly-agent-q-entry-content entry)))
    (when (and (stringp content) (string-prefix-p "$ " content))
      (let ((head (car (split-string content "\n\n"))))
        (cond ((string-match "^exit status \\([0-9]+\\);" head)
               (and (not (equal (match-string 1 head) "0"))
                    (format "exit %s" (match-string 1 head))))
              ((string-match "^timed out after \\([0-9]+ s\\)" head)
               (format "timed out after %s" (match-string 1 head)))
              ((string-match "^killed by signal \\([A-Z0-9]+\\)" head)
               (format "killed by %s" (match-string 1 head))))))))

(defun sly-agent-q-entry--state-text (entry)
  "ENTRY's state after its summary.
A mark in the face of its meaning, then meta text."
  (let ((status (sly-agent-q-entry-status entry)))
    (pcase status
      ((or 'queued 'running)
       (let ((note (sly-agent-q-entry-note entry)))
         (concat (propertize (if (eq status 'queued) "… queued" "… running") 'face 'sly-agent-q-meta-face)
                 (if note
                     (propertize (concat " · " (sly-agent-q-display-line note 120)) 'face 'sly-agent-q-waiting-face)
                   ""))))
      ('approval (propertize "… waiting for approval" 'face 'sly-agent-q-waiting-face))
      ('ok (let ((failed (sly-agent-q-entry--command-failure entry)))
             (concat (if failed
                         (propertize (concat "✗ " failed) 'face 'sly-agent-q-error-face)
                       (propertize "✓" 'face 'sly-agent-q-success-face))
                     (propertize (format " %s ms%s" (sly-agent-q-entry--ms (sly-agent-q-entry-time-ms entry))
                                         (sly-agent-q-entry--wait (sly-agent-q-entry-wait-ms entry)))
                                 'face 'sly-agent-q-meta-face))))
      (_ (let ((state (concat "✗ " (sly-agent-q-display-line
                                     (car (split-string (or (sly-agent-q-entry-error entry) "failed") "\n"))
                                     80))))
           ;; Under the face of its escapes (`escape-glyph').
           (add-face-text-property 0 (length state) 'sly-agent-q-error-face t state)
           state)))))

(defun sly-agent-q-entry--split-arguments (arguments lisp)
  "ARGUMENTS (a plist) split into (JSON . FORMS) for drawing.
FORMS are (NAME . TEXT) of the arguments LISP names that are strings,
Lisp source drawn as Lisp, in their order; JSON the plist of the
others."
  (let ((json nil) (forms nil))
    (cl-loop for (k v) on (and (listp arguments) arguments) by #'cddr
             for name = (substring (symbol-name k) 1)
             do (if (and (stringp v) (member name lisp))
                    (push (cons name v) forms)
                  (setq json (plist-put json k v))))
    (cons json (nreverse forms))))

(defun sly-agent-q-entry--arguments-preview (arguments lisp)
  "The tool ARGUMENTS (a plist) framed for an expanded entry, bounded.
LISP names the arguments (strings) that hold Lisp source: each is
shown as Lisp, in its own framed block fontified as `lisp-mode'
fontifies it (never as a JSON string with \\n); the others as JSON."
  (pcase-let ((`(,json . ,forms) (sly-agent-q-entry--split-arguments arguments lisp)))
    (mapconcat
     #'identity
     (append
      (and (or json (null forms))
           (list (sly-agent-q-entry--preview (sly-agent-q-entry--json json))))
      (mapcar (lambda (form)
                (concat sly-agent-q-entry--indent
                        (propertize (format "%s:" (sly-agent-q-display-line (car form) 30))
                                    'face 'sly-agent-q-meta-face)
                        "\n"
                        (sly-agent-q-entry--preview (cdr form) t)))
              forms))
     "\n")))

(defcustom sly-agent-q-chat-live-output-lines 8
  "Lines of a running command's output shown live in its tool entry."
  :type 'integer
  :group 'sly-agent-q)

(defun sly-agent-q-entry--last-lines (text n)
  "The last N lines of TEXT, its final newline left out."
  (let* ((end (if (string-suffix-p "\n" text) (1- (length text)) (length text)))
         (start end)
         (lines 0))
    ;; Back from the end to the Nth newline: only the tail is looked at.
    (while (and (> start 0) (< lines n))
      (setq start (1- start))
      (when (eq (aref text start) ?\n)
        (setq lines (1+ lines))))
    (substring text (if (and (< start end) (eq (aref text start) ?\n)) (1+ start) start) end)))

(defun sly-agent-q-entry--bytes (n)
  "N bytes, a number or nil, as a short phrase."
  (cond ((not (numberp n)) "? bytes")
        ((< n 10000) (format "%d bytes" n))
        ((< n 10000000) (format "%d KB" (round n 1000)))
        (t (format "%d MB" (round n 1000000)))))

(defun sly-agent-q-entry--render (entry)
  "Insert ENTRY's text at point.
The arguments shown are the ones that ran: the user's, marked, when
they edited the model's."
  (let* ((status (sly-agent-q-entry-status entry))
         (ran (sly-agent-q-entry-ran-arguments entry))
         (lisp (sly-agent-q-server-lisp-arguments (sly-agent-q-entry-name entry)))
         (summary
          (format "%s %s (%s)%s %s"
                  (if (sly-agent-q-entry-expanded entry) "▾" "▸")
                  (sly-agent-q-display-line (sly-agent-q-entry-name entry) 80)
                  (sly-agent-q-display-line (sly-agent-q-entry-safety entry) 20)
                  (if ran " ✎ edited:" "")
                  (sly-agent-q-entry--summarize-arguments
                   (or ran (sly-agent-q-entry-arguments entry)) lisp))))
    (let ((start (point)))
      (insert "  ")
      (insert-text-button summary 'type 'sly-agent-q-entry 'sly-agent-q-entry entry
                          'face 'sly-agent-q-tool-face)
      (add-face-text-property (+ start 2) (+ start 3) 'sly-agent-q-toggle-face)
      (insert "  " (sly-agent-q-entry--state-text entry) "\n")
      ;; Its arguments are the model's: wrapped deeper than the product's lines start.
      (put-text-property start (point) 'wrap-prefix "    "))
    ;; A running command's last lines, live: what the server sends is a bounded tail, a few times a
    ;; second at most, and only its last lines are drawn.
    ;; A call stopped before its end (cancelled) keeps the last lines it showed.
    (when (and (memq status '(running error)) (sly-agent-q-entry-output entry))
      (let ((live (concat (format (if (eq status 'running)
                                      "    output so far (%s), its last lines:\n"
                                    "    output before it stopped (%s), its last lines:\n")
                                  (sly-agent-q-entry--bytes (sly-agent-q-entry-output-bytes entry)))
                          (sly-agent-q-entry--preview
                           (sly-agent-q-entry--last-lines (sly-agent-q-entry-output entry)
                                                         sly-agent-q-chat-live-output-lines))
                          "\n")))
        (add-face-text-property 0 (length live) 'sly-agent-q-meta-face t live)
        (insert live)))
    (when (sly-agent-q-entry-expanded entry)
      ;; The arguments and result are framed (`sly-agent-q-entry--preview');
      ;; the product's lines around them are meta text.
      (let* ((meta (lambda (text) (propertize text 'face 'sly-agent-q-meta-face)))
             (details
              (concat (funcall meta (if ran "    arguments that ran (edited by the user):\n" "    arguments:\n"))
                      (sly-agent-q-entry--arguments-preview (or ran (sly-agent-q-entry-arguments entry)) lisp)
                      "\n"
                      (if ran
                          (concat (funcall meta "    the model's arguments:\n")
                                  (sly-agent-q-entry--arguments-preview (sly-agent-q-entry-arguments entry) lisp)
                                  "\n")
                        "")
                      (pcase status
                        ((or 'queued 'running 'approval) (funcall meta "    (no result yet)\n"))
                        ('ok (concat (funcall meta "    result:\n")
                                     (sly-agent-q-entry--preview (or (sly-agent-q-entry-content entry) ""))
                                     "\n"))
                        (_ (concat (propertize "    error:\n" 'face 'sly-agent-q-error-face)
                                   (sly-agent-q-entry--preview (or (sly-agent-q-entry-error entry) ""))
                                   "\n")))
                      (if (sly-agent-q-entry-time-ms entry)
                          (funcall meta
                                   (format "    time: %s ms%s%s\n" (sly-agent-q-entry--ms (sly-agent-q-entry-time-ms entry))
                                           (sly-agent-q-entry--wait (sly-agent-q-entry-wait-ms entry))
                                           (if (eq (sly-agent-q-entry-approved entry) t) "" "  (not approved)")))
                        ""))))
        ;; A line that has no frame of its own wraps at the details' indentation.
        (sly-agent-q-display-keep-place 0 (length details) "      " details)
        (insert details)))))

(defun sly-agent-q-entry-json (value)
  "VALUE (parsed JSON) as pretty-printed JSON text, as tool entries show it."
  (sly-agent-q-entry--json value))

(defvar-local sly-agent-q-entry--table nil
  "The current chat buffer's tool entries: a hash table by call id.")

(defun sly-agent-q-entry-setup ()
  "Give the current chat buffer an empty table of tool entries."
  (setq sly-agent-q-entry--table (make-hash-table :test #'equal)))

(defun sly-agent-q-entry-redraw (entry)
  "Redraw ENTRY in place."
  (sly-agent-q-transcript-redraw-section (sly-agent-q-entry-section entry)))

;; Obsolete name (issue 46), kept for users who name it.
(define-obsolete-variable-alias 'sly-agent-q-chat-entry-note-functions
  'sly-agent-q-entry-note-functions "0.2.0")
(defvar sly-agent-q-entry-note-functions nil
  "Functions asked, with a tool call's id, for the note of its new entry.
The first non-nil answer is the entry's NOTE (`sly-agent-q-entry'): a
call may wait for something (the helpers' load) before its entry is
drawn.")

(defun sly-agent-q-entry-add (entry)
  "Insert ENTRY at the end of the transcript."
  (unless (sly-agent-q-entry-note entry)
    (setf (sly-agent-q-entry-note entry)
          (run-hook-with-args-until-success 'sly-agent-q-entry-note-functions
                                            (sly-agent-q-entry-call-id entry))))
  (setf (sly-agent-q-entry-section entry)
        (sly-agent-q-transcript-insert-section (lambda () (sly-agent-q-entry--render entry))))
  (puthash (sly-agent-q-entry-call-id entry) entry sly-agent-q-entry--table))

(defun sly-agent-q-entry--button (button)
  "Toggle the entry of BUTTON."
  (let ((entry (button-get button 'sly-agent-q-entry)))
    (when entry
      (setf (sly-agent-q-entry-expanded entry) (not (sly-agent-q-entry-expanded entry)))
      (sly-agent-q-entry-redraw entry))))

(defun sly-agent-q-entry-toggle ()
  "Show or hide the details of the tool entry at point."
  (interactive)
  (let ((entry (get-text-property (point) 'sly-agent-q-entry)))
    (unless entry (user-error "No tool call here"))
    (let ((pos (point)))
      (setf (sly-agent-q-entry-expanded entry) (not (sly-agent-q-entry-expanded entry)))
      (sly-agent-q-entry-redraw entry)
      (goto-char pos))))

(defun sly-agent-q-entry-open ()
  "Show the whole arguments and result of the tool entry at point.
They go to a buffer of their own."
  (interactive)
  (let ((entry (get-char-property (point) 'sly-agent-q-entry)))
    (unless entry (user-error "No tool entry here"))
    (let ((buffer (get-buffer-create (format "*sly-agent-q %s %s*"
                                             (sly-agent-q-display-line (sly-agent-q-entry-name entry) 80)
                                             (sly-agent-q-display-line (sly-agent-q-entry-call-id entry) 80))))
          (text (concat "arguments:\n"
                        (sly-agent-q-entry--arguments-whole
                         (sly-agent-q-entry-arguments entry)
                         (sly-agent-q-server-lisp-arguments (sly-agent-q-entry-name entry)))
                        "\n\n"
                        (pcase (sly-agent-q-entry-status entry)
                          ((or 'queued 'running 'approval) "(no result yet)")
                          ('ok (concat "result:\n"
                                       (sly-agent-q-display-framed (sly-agent-q-entry-content entry) "")))
                          (_ (concat "error:\n"
                                     (sly-agent-q-display-framed (sly-agent-q-entry-error entry) ""))))
                        "\n")))
      (with-current-buffer buffer
        (let ((inhibit-read-only t))
          (erase-buffer)
          (insert text)
          (goto-char (point-min)))
        (special-mode)
        ;; A result of one enormous line is shown truncated and without
        ;; bidi reordering: wrapping it would stall redisplay.
        (when (> (sly-agent-q-entry--longest-line text) 10000)
          (setq-local truncate-lines t)
          (setq-local bidi-inhibit-bpa t)
          (setq-local bidi-paragraph-direction 'left-to-right)))
      (if noninteractive buffer (pop-to-buffer buffer)))))

(defun sly-agent-q-entry--arguments-whole (arguments lisp)
  "The tool ARGUMENTS (a plist) whole and framed, for an entry opened.
LISP names the arguments (strings) that hold Lisp source: each is
shown as Lisp, fontified as `lisp-mode' fontifies it; the others as JSON."
  (pcase-let ((`(,json . ,forms) (sly-agent-q-entry--split-arguments arguments lisp)))
    (mapconcat #'identity
               (append (and (or json (null forms))
                            (list (sly-agent-q-display-framed (sly-agent-q-entry--json json) "")))
                       (mapcar (lambda (form)
                                 (concat (sly-agent-q-display-line (car form) 30) ":\n"
                                         (sly-agent-q-display-framed (cdr form) "" nil
                                                                     (sly-agent-q-faces-lisp (cdr form)))))
                               forms))
               "\n")))

(defun sly-agent-q-entry--longest-line (text)
  "The length of the longest line of TEXT."
  (let ((start 0) (longest 0) (len (length text)))
    (while (< start len)
      (let ((end (or (string-search "\n" text start) len)))
        (setq longest (max longest (- end start))
              start (1+ end))))
    longest))

(defun sly-agent-q-entry-of (call-id)
  "The tool entry of CALL-ID in the current chat buffer, or nil."
  (gethash call-id sly-agent-q-entry--table))

(defun sly-agent-q-entry-fail-unfinished (message)
  "End every tool entry of the current chat that has not ended, with error MESSAGE."
  (maphash (lambda (_ entry)
             (when (memq (sly-agent-q-entry-status entry) '(queued running approval))
               (setf (sly-agent-q-entry-status entry) 'error
                     (sly-agent-q-entry-error entry) message)
               (sly-agent-q-entry-redraw entry)))
           sly-agent-q-entry--table))

;; Obsolete names (issue 46): these were sly-agent-q-chat-* before the
;; chat was split into a file per concept; kept for users who name them.
(define-obsolete-function-alias 'sly-agent-q-chat-toggle-entry
  #'sly-agent-q-entry-toggle "0.2.0")
(define-obsolete-function-alias 'sly-agent-q-chat-open-entry
  #'sly-agent-q-entry-open "0.2.0")
(define-obsolete-function-alias 'sly-agent-q-chat-entry
  #'sly-agent-q-entry-of "0.2.0")
(define-obsolete-function-alias 'sly-agent-q-chat-json
  #'sly-agent-q-entry-json "0.2.0")

(provide 'sly-agent-q-entry)
;;; sly-agent-q-entry.el ends here
