;;; sly-agent-q-transcript.el --- The chat's transcript: insertion, notices, sections  -*- lexical-binding: t; -*-

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

;; The read-only transcript of a chat buffer, above its prompt and input:
;; where text is inserted (the transcript's end), notices, the user's
;; messages, and sections (the parts redrawn in place: tool entries,
;; approvals).  The agent's streamed text is sly-agent-q-stream.el's;
;; before a notice, a message or a section is written, the text streamed
;; before it ends (`sly-agent-q-transcript-end-text-hook').

;;; Code:

(require 'cl-lib)
(require 'subr-x)
(require 'button)
(require 'ewoc)
(require 'sly-agent-q-server)
(require 'sly-agent-q-display)
(require 'sly-agent-q-faces)
(require 'sly-agent-q-chats)

(defcustom sly-agent-q-prompt "> "
  "The prompt in front of the input area."
  :type 'string
  :group 'sly-agent-q)

(cl-defstruct (sly-agent-q-transcript (:constructor sly-agent-q-transcript--make) (:copier nil))
  "Where a chat buffer's transcript ends and its input starts.
OUTPUT is a marker at the end of the transcript (before the prompt),
INPUT a marker at the start of the input (after the prompt),
PROMPT-BREAK the overlay that puts the prompt on a line of its own."
  output input prompt-break)

(defvar-local sly-agent-q-transcript--state nil
  "The current chat buffer's `sly-agent-q-transcript'.")

(defconst sly-agent-q-transcript-read-only
  '(read-only t front-sticky (read-only) rear-nonsticky t)
  "Text properties of transcript text.")

(defvar sly-agent-q-transcript-end-text-hook nil
  "Functions run before a notice, a message or a section is written.
The agent's text streamed before it ends there (sly-agent-q-stream.el
adds its end).")

(defun sly-agent-q-transcript-setup (banner)
  "Make the current buffer an empty transcript: BANNER, then the prompt."
  (let ((inhibit-read-only t))
    (erase-buffer)
    (insert (sly-agent-q-transcript-notice-string banner) "\n")
    (add-text-properties (point-min) (point) sly-agent-q-transcript-read-only)
    (let ((prompt-start (point)))
      (insert (sly-agent-q-transcript--prompt-string sly-agent-q-prompt))
      (setq sly-agent-q-transcript--state
            (sly-agent-q-transcript--make :output (copy-marker prompt-start t)
                                          :input (copy-marker (point) nil))))))

(defun sly-agent-q-transcript-end ()
  "The marker at the end of the current chat buffer's transcript."
  (sly-agent-q-transcript-output sly-agent-q-transcript--state))

(defun sly-agent-q-transcript-input-start ()
  "The marker at the start of the current chat buffer's input."
  (sly-agent-q-transcript-input sly-agent-q-transcript--state))

;;;; Writing into the transcript

(defun sly-agent-q-transcript-notice-string (text &optional face)
  "TEXT as a notice, in FACE (default `sly-agent-q-meta-face')."
  (propertize text 'face (or face 'sly-agent-q-meta-face)))

(defmacro sly-agent-q-transcript-at-end (&rest body)
  "Run BODY with point at the end of the transcript, which it may extend.
Everything BODY inserts becomes read-only.  Returns BODY's value."
  (declare (indent 0) (debug t))
  (let ((start (make-symbol "start")))
    `(let ((inhibit-read-only t)
           (buffer-undo-list t)
           (,start (marker-position (sly-agent-q-transcript-end))))
       (save-excursion
         (goto-char (sly-agent-q-transcript-end))
         (prog1 (progn ,@body)
           (add-text-properties ,start (sly-agent-q-transcript-end) sly-agent-q-transcript-read-only)
           (sly-agent-q-transcript--break-before-prompt))))))

(defun sly-agent-q-transcript--break-before-prompt ()
  "Show the prompt on a line of its own, whatever the transcript ends with.
Streamed text ends where the model is in its sentence; the line break
is drawn, not inserted, so the transcript's text stays the model's."
  (let ((pos (marker-position (sly-agent-q-transcript-end))))
    (unless (overlayp (sly-agent-q-transcript-prompt-break sly-agent-q-transcript--state))
      (setf (sly-agent-q-transcript-prompt-break sly-agent-q-transcript--state) (make-overlay pos pos nil t nil)))
    (move-overlay (sly-agent-q-transcript-prompt-break sly-agent-q-transcript--state) pos pos)
    (overlay-put (sly-agent-q-transcript-prompt-break sly-agent-q-transcript--state) 'before-string
                 (and (> pos (point-min)) (not (eq (char-before pos) ?\n)) "\n"))))

(defun sly-agent-q-transcript-fresh-line ()
  "Start a new line at the end of the transcript unless one is started."
  (sly-agent-q-transcript-at-end
    (unless (or (= (point) (point-min)) (eq (char-before) ?\n))
      (insert "\n"))))

(defun sly-agent-q-transcript-insert (&rest strings)
  "Insert STRINGS at the end of the transcript of the current chat buffer."
  (sly-agent-q-transcript-at-end (apply #'insert strings)))

(defun sly-agent-q-transcript-notice (text &optional face)
  "Insert TEXT as a notice line in FACE in the current chat buffer.
TEXT may hold text from outside (an error, a title): it is drawn as
one line of data (`sly-agent-q-display-line'), cut when very long."
  (sly-agent-q-transcript-end-text)
  (sly-agent-q-transcript-insert (sly-agent-q-transcript-notice-string
                            (sly-agent-q-display-line text 2000) face)
                           "\n"))

;;;; What is said while no server is installed

(defun sly-agent-q-transcript-error-notice (message)
  "Insert \"Error: MESSAGE\" as a notice in the current chat buffer.
An error said while no server is found is marked: it stops being true
once `sly-agent-q-install-server' installs one, and that install takes
it away (`sly-agent-q-transcript--on-install-finished')."
  (let ((missing (condition-case nil (null (sly-agent-q-locate-find-server)) (user-error nil))))
    (sly-agent-q-transcript-end-text)
    (let ((start (marker-position (sly-agent-q-transcript-end))))
      (sly-agent-q-transcript-notice (concat "Error: " message) 'sly-agent-q-error-face)
      (when missing
        (let ((inhibit-read-only t) (buffer-undo-list t))
          (put-text-property start (sly-agent-q-transcript-end) 'sly-agent-q-server-missing t))))))

(defun sly-agent-q-transcript--installed-notice ()
  "What to say once a server is installed, as the chat will find it."
  (let ((found (condition-case nil (sly-agent-q-locate-find-server) (user-error nil)))
        (version (or (sly-agent-q-install-installed-version) "?")))
    (cond ((not (eq (cdr found) 'installed))
           (format "[The sly-agent-q server %s is installed, but the one used is %s.]"
                   version (if found (abbreviate-file-name (car found)) "none")))
          ((sly-agent-q-connection-live-p)
           (format "[The sly-agent-q server %s is installed: M-x sly-agent-q-restart-server \
puts it in place of the one running.]" version))
          (t (format "[The sly-agent-q server %s is installed: the next message starts it.]"
                     version)))))

(defun sly-agent-q-transcript--on-install-finished (error)
  "An install ended with ERROR (nil on success): correct what each chat said.
On success, the errors saying no server is installed are taken away and
the chat says the server is there."
  (unless error
    (dolist (buf (sly-agent-q-chats-list))
      (with-current-buffer buf
        (let ((inhibit-read-only t) (buffer-undo-list t) (pos (point-min)))
          (while (setq pos (text-property-any pos (sly-agent-q-transcript-end)
                                              'sly-agent-q-server-missing t))
            (let ((end (or (text-property-not-all pos (sly-agent-q-transcript-end)
                                                  'sly-agent-q-server-missing t)
                           (sly-agent-q-transcript-end))))
              ;; The mark covers the notice's whole line, its newline too.
              (delete-region pos end))))
        (sly-agent-q-transcript-notice (sly-agent-q-transcript--installed-notice))))))

(add-hook 'sly-agent-q-install-finished-functions #'sly-agent-q-transcript--on-install-finished)

(defun sly-agent-q-transcript-end-text ()
  "End the agent's run of text and start a fresh line.
The streamed text is inserted and its code blocks are fontified
\(`sly-agent-q-transcript-end-text-hook')."
  (run-hooks 'sly-agent-q-transcript-end-text-hook)
  (sly-agent-q-transcript-fresh-line))

(defun sly-agent-q-transcript-user-message (text &optional labels)
  "Insert the user's message TEXT and the agent's heading under it.
LABELS name the message's attachments."
  (sly-agent-q-transcript-end-text)
  (sly-agent-q-transcript-insert
   "\n" (propertize "You:" 'face 'sly-agent-q-user-face) " "
   (if labels (sly-agent-q-transcript-notice-string
               (concat (mapconcat (lambda (l) (format "[attached %s]" (sly-agent-q-display-line l))) labels " ")
                       "\n"))
     "")
   (sly-agent-q-display-text text) "\n\n"
   (propertize "Agent:" 'face 'sly-agent-q-assistant-face) "\n"))

;;;; Sections: parts of the transcript that are redrawn

;; A section (a tool entry, an approval) is an ewoc of one node, made
;; where the section starts.  Streamed text, notices and the user's
;; messages stay plain text inserted at the transcript's end, so
;; the streaming path is one `insert' with no ewoc to keep in step;
;; one ewoc for the whole transcript would delete whatever text sits
;; between two of its nodes when the first is redrawn.  The section's
;; last newline is the ewoc's footer: a redraw deletes and reinserts
;; only the node before it, so the markers of whatever follows (the
;; next section) are never at the deleted text's end, where they would
;; collapse onto the redrawn text's start.

(defun sly-agent-q-transcript--section-printer (render)
  "Insert a section by calling RENDER; its text becomes read-only.
The last newline RENDER inserts is left to the section's footer."
  (let ((start (point)))
    (funcall render)
    (when (and (> (point) start) (eq (char-before) ?\n))
      (delete-char -1))
    (add-text-properties start (point) sly-agent-q-transcript-read-only)))

(defun sly-agent-q-transcript-insert-section (render)
  "End the agent's text, then call RENDER on a fresh transcript line.
RENDER inserts whole lines at point, in the current chat buffer; it is
called again on each `sly-agent-q-transcript-redraw-section'.  Return the
section."
  (sly-agent-q-transcript-end-text)
  (sly-agent-q-transcript-at-end
    (let ((section (ewoc-create #'sly-agent-q-transcript--section-printer "" "\n" t)))
      (ewoc-enter-last section render)
      section)))

(defun sly-agent-q-transcript-redraw-section (section)
  "Redraw SECTION alone, calling its RENDER again.
The rest of the transcript is not touched."
  (let ((buffer (ewoc-buffer section)))
    (when (buffer-live-p buffer)
      (with-current-buffer buffer
        (let ((buffer-undo-list t))
          (ewoc-invalidate section (ewoc-nth section 0)))))))

;;;; Numbers, the prompt, notices of the conversation

(defun sly-agent-q-transcript-format-tokens (n)
  "N with thousands separators."
  (let ((s (format "%d" (or n 0))))
    (while (string-match "\\([0-9]\\)\\([0-9]\\{3\\}\\)\\($\\|,\\)" s)
      (setq s (replace-match "\\1,\\2\\3" t nil s)))
    s))

(defun sly-agent-q-transcript--prompt-string (text)
  "TEXT as prompt text: read-only, in the prompt's face and field."
  (propertize text
              'face 'sly-agent-q-prompt-face
              'read-only t 'front-sticky '(read-only) 'rear-nonsticky t
              'field 'sly-agent-q-prompt))

(defun sly-agent-q-transcript-repaired-notice (repairs)
  "Say in the chat that a fault had interrupted the conversation.
REPAIRS is the list (or vector) of what the server repaired in its
history when it read it back."
  (sly-agent-q-transcript-notice
   (format "[A fault had interrupted this conversation; its history was repaired: %s.]"
           (mapconcat #'identity (append repairs nil) "; "))
   'sly-agent-q-error-face))

(defun sly-agent-q-transcript-save-error-notice (message)
  "Say in the chat that the conversation is not saved, because of MESSAGE."
  (sly-agent-q-transcript-notice (format "[Not saved: %s]" message) 'sly-agent-q-error-face))

(defun sly-agent-q-transcript-compacted-notice (replaced before after)
  "Tell the chat that REPLACED messages were summarized, BEFORE to AFTER tokens."
  (sly-agent-q-transcript-notice
   (format "[Compacted: %d older message%s summarized for the model, about %s → %s tokens (%s saved); the transcript and the saved file keep them.]"
           replaced (if (= replaced 1) "" "s")
           (sly-agent-q-transcript-format-tokens before) (sly-agent-q-transcript-format-tokens after)
           (sly-agent-q-transcript-format-tokens (- before after)))))

;; Obsolete name (issue 46), kept for users who name it.
(define-obsolete-variable-alias 'sly-agent-q-chat-details-map
  'sly-agent-q-transcript-details-map "0.2.0")
(defvar sly-agent-q-transcript-details-map
  (let ((map (make-sparse-keymap)))
    (set-keymap-parent map button-map)
    (define-key map (kbd "TAB") #'sly-agent-q-transcript-toggle-details)
    (define-key map (kbd "<tab>") #'sly-agent-q-transcript-toggle-details)
    map)
  "Keymap on the button of a notice's details.")

(define-button-type 'sly-agent-q-details
  'action (lambda (button) (goto-char button) (sly-agent-q-transcript-toggle-details))
  'keymap sly-agent-q-transcript-details-map
  'follow-link t
  'help-echo "TAB or RET: show or hide them")

(defun sly-agent-q-transcript-notice-with-details (text details)
  "Insert the notice TEXT and a button to show or hide DETAILS under it.
Both come from outside (DETAILS is the image's listing): drawn as
data, DETAILS framed (`sly-agent-q-display-framed'), hidden at first."
  (sly-agent-q-transcript-end-text)
  (sly-agent-q-transcript-insert (sly-agent-q-transcript-notice-string
                            (format "[%s] " (sly-agent-q-display-line text 2000))))
  (let ((button (marker-position (sly-agent-q-transcript-end))))
    (sly-agent-q-transcript-insert "show them" "\n")
    (let ((body (marker-position (sly-agent-q-transcript-end))))
      (sly-agent-q-transcript-insert (sly-agent-q-display-framed details "  " 20000) "\n")
      (let ((overlay (make-overlay body (sly-agent-q-transcript-end)))
            (inhibit-read-only t) (buffer-undo-list t))
        (overlay-put overlay 'invisible t)
        (make-text-button button (+ button (length "show them"))
                          :type 'sly-agent-q-details 'sly-agent-q-details overlay)))))

(defun sly-agent-q-transcript-toggle-details ()
  "Show or hide the details of the notice whose button is at point."
  (interactive)
  (let* ((button (button-at (point)))
         (overlay (and button (button-get button 'sly-agent-q-details))))
    (when (overlayp overlay)
      (overlay-put overlay 'invisible (not (overlay-get overlay 'invisible))))))

;; Obsolete names (issue 46): these were sly-agent-q-chat-* before the
;; chat was split into a file per concept; kept for users who name them.
(define-obsolete-function-alias 'sly-agent-q-chat-toggle-details
  #'sly-agent-q-transcript-toggle-details "0.2.0")
(define-obsolete-function-alias 'sly-agent-q-chat-notice
  #'sly-agent-q-transcript-notice "0.2.0")
(define-obsolete-function-alias 'sly-agent-q-chat-error-notice
  #'sly-agent-q-transcript-error-notice "0.2.0")
(define-obsolete-function-alias 'sly-agent-q-chat-compacted-notice
  #'sly-agent-q-transcript-compacted-notice "0.2.0")
(define-obsolete-function-alias 'sly-agent-q-chat-repaired-notice
  #'sly-agent-q-transcript-repaired-notice "0.2.0")
(define-obsolete-function-alias 'sly-agent-q-chat-insert
  #'sly-agent-q-transcript-insert "0.2.0")
(define-obsolete-function-alias 'sly-agent-q-chat-insert-section
  #'sly-agent-q-transcript-insert-section "0.2.0")
(define-obsolete-function-alias 'sly-agent-q-chat-redraw-section
  #'sly-agent-q-transcript-redraw-section "0.2.0")

(provide 'sly-agent-q-transcript)
;;; sly-agent-q-transcript.el ends here
