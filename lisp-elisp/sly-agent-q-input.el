;;; sly-agent-q-input.el --- The chat's input: its text, history and attachments  -*- lexical-binding: t; -*-

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

;; The input of a chat buffer, after its prompt: its text, the messages
;; sent before (walked as in comint), a hold that refuses to send an
;; input still being filled in from elsewhere, and the attachments of
;; the next message.  The commands that use them are the chat's
;; (sly-agent-q-chat.el); everything here acts on the current buffer.

;;; Code:

(require 'cl-lib)
(require 'subr-x)
(require 'sly-agent-q-transcript)
(require 'sly-agent-q-header)

(defcustom sly-agent-q-attachment-max-chars 100000
  "Largest attachment, in characters; longer text is cut."
  :type 'integer
  :group 'sly-agent-q)

(cl-defstruct (sly-agent-q-input (:constructor sly-agent-q-input--make) (:copier nil))
  "The input of a chat buffer, besides its text.
HISTORY is the messages sent, newest first; HISTORY-INDEX the position
in it while walking it, or nil; HISTORY-DRAFT the input before walking
it.  ATTACHMENTS is the context for the next message, plists (:label
:text), newest first.  HOLD says why the input may not be sent yet:
\(MESSAGE DEADLINE PLACEHOLDER), or nil (`sly-agent-q-input-put-hold')."
  history history-index history-draft attachments hold)

(defvar-local sly-agent-q-input--state nil
  "The current chat buffer's `sly-agent-q-input'.")

(defun sly-agent-q-input-setup ()
  "Give the current chat buffer an empty input history, no attachments."
  (setq sly-agent-q-input--state (sly-agent-q-input--make)))

;;;; The input's text

(defun sly-agent-q-input-text ()
  "The text of the input area."
  (buffer-substring-no-properties (sly-agent-q-transcript-input-start) (point-max)))

(defun sly-agent-q-input-set (text)
  "Replace the input area with TEXT."
  (let ((inhibit-read-only t))
    (delete-region (sly-agent-q-transcript-input-start) (point-max))
    (goto-char (point-max))
    (insert text)))

(defun sly-agent-q-input-replace (old new)
  "Replace the last OLD in the input by NEW; non-nil if it was there.
Only that text changes: what the user typed around it, and point, stay.
The last: text put before OLD (an error's message) may hold OLD too."
  (save-excursion
    (goto-char (point-max))
    (when (search-backward old (sly-agent-q-transcript-input-start) t)
      (replace-match new t t)
      t)))

(defun sly-agent-q-input-put-hold (message seconds &optional placeholder)
  "Refuse to send the input, saying MESSAGE, for at most SECONDS.
With PLACEHOLDER, only while the input holds it.  Return the hold."
  (setf (sly-agent-q-input-hold sly-agent-q-input--state)
        (list message (+ (float-time) seconds) placeholder)))

(defun sly-agent-q-input-held ()
  "Return the message of the hold on the input while it is in force.
See `sly-agent-q-input-put-hold'."
  (pcase (sly-agent-q-input-hold sly-agent-q-input--state)
    (`(,message ,deadline ,placeholder)
     (and (< (float-time) deadline)
          (or (null placeholder)
              (save-excursion
                (goto-char (sly-agent-q-transcript-input-start))
                (search-forward placeholder nil t)))
          message))))

(defun sly-agent-q-input-release (hold)
  "End HOLD, from `sly-agent-q-input-put-hold', if it is still the input's."
  (when (eq (sly-agent-q-input-hold sly-agent-q-input--state) hold)
    (setf (sly-agent-q-input-hold sly-agent-q-input--state) nil)))

(defun sly-agent-q-input-to-send ()
  "The input's text to send, trimmed; an error while it may not be sent."
  (let ((text (string-trim (sly-agent-q-input-text)))
        (held (sly-agent-q-input-held)))
    (when held
      (user-error "%s" held))
    (when (and (string-empty-p text) (null (sly-agent-q-input-attachments sly-agent-q-input--state)))
      (user-error "Nothing to send"))
    text))

(defun sly-agent-q-input-sent (text)
  "The input's TEXT is sent: empty the input, put TEXT in the history."
  (sly-agent-q-input-set "")
  (unless (string-empty-p text)
    (sly-agent-q-input-add-history text))
  (setf (sly-agent-q-input-history-index sly-agent-q-input--state) nil))

;;;; History

(defun sly-agent-q-input-add-history (text)
  "Put TEXT, a message sent, in the input history."
  (push text (sly-agent-q-input-history sly-agent-q-input--state)))

(defun sly-agent-q-input-first-message ()
  "The first message sent in this chat, or nil."
  (car (last (sly-agent-q-input-history sly-agent-q-input--state))))

(defun sly-agent-q-input-walk-history (step)
  "Replace the input with the history item STEP away from the current one."
  (let ((input sly-agent-q-input--state))
    (unless (sly-agent-q-input-history input) (user-error "No input history"))
    (unless (sly-agent-q-input-history-index input)
      (setf (sly-agent-q-input-history-draft input) (sly-agent-q-input-text)))
    (let ((i (+ (or (sly-agent-q-input-history-index input) -1) step)))
      (cond ((< i -1) (user-error "End of history"))
            ((>= i (length (sly-agent-q-input-history input))) (user-error "Beginning of history"))
            ((= i -1) (setf (sly-agent-q-input-history-index input) nil)
             (sly-agent-q-input-set (or (sly-agent-q-input-history-draft input) "")))
            (t (setf (sly-agent-q-input-history-index input) i)
               (sly-agent-q-input-set (nth i (sly-agent-q-input-history input))))))))

;; Obsolete name (issue 46), kept for users who name it.
(define-obsolete-variable-alias 'sly-agent-q-chat-matching-input-history
  'sly-agent-q-input-matching-history "0.2.0")
(defvar sly-agent-q-input-matching-history nil
  "The regexps given to \\[sly-agent-q-chat-previous-matching-input].")

(defun sly-agent-q-input-read-regexp (prompt)
  "Read a regexp with PROMPT, the last one as default."
  (let* ((last (car sly-agent-q-input-matching-history))
         (regexp (read-regexp (if last (format "%s (default %s): " prompt last) (concat prompt ": "))
                              last 'sly-agent-q-input-matching-history)))
    (if (string-empty-p regexp) (or last (user-error "No regexp")) regexp)))

(defun sly-agent-q-input-search-history (regexp step)
  "Replace the input with a message sent before that matches REGEXP.
STEP 1 searches back from the one shown, -1 forward."
  (let* ((input sly-agent-q-input--state)
         (history (sly-agent-q-input-history input)))
    (unless history (user-error "No input history"))
    (let ((i (+ (or (sly-agent-q-input-history-index input) -1) step))
          (found nil))
      (while (and (not found) (>= i 0) (< i (length history)))
        (if (string-match-p regexp (nth i history))
            (setq found i)
          (setq i (+ i step))))
      (unless found (user-error "No %s message matches %s" (if (> step 0) "earlier" "later") regexp))
      (unless (sly-agent-q-input-history-index input)
        (setf (sly-agent-q-input-history-draft input) (sly-agent-q-input-text)))
      (setf (sly-agent-q-input-history-index input) found)
      (sly-agent-q-input-set (nth found history))
      (message "Message %d of %d" (- (length history) found) (length history)))))

;;;; Attachments

(defun sly-agent-q-input-attach (label text language)
  "Attach TEXT described by LABEL, in LANGUAGE, to the next message.
Return how many are attached."
  (let* ((cut (> (length text) sly-agent-q-attachment-max-chars))
         (body (if cut (substring text 0 sly-agent-q-attachment-max-chars) text))
         (block (format "```%s\n%s%s```%s" language body
                        (if (string-suffix-p "\n" body) "" "\n")
                        (if cut (format "\n(cut at %d characters)" sly-agent-q-attachment-max-chars) ""))))
    (push (list :label label :text block) (sly-agent-q-input-attachments sly-agent-q-input--state))
    (sly-agent-q-header-refresh)
    (length (sly-agent-q-input-attachments sly-agent-q-input--state))))

(defun sly-agent-q-input-attachment-count ()
  "How many attachments the next message has."
  (length (sly-agent-q-input-attachments sly-agent-q-input--state)))

(defun sly-agent-q-input-clear-attachments ()
  "Forget the attachments of the next message."
  (setf (sly-agent-q-input-attachments sly-agent-q-input--state) nil)
  (sly-agent-q-header-refresh))

(defun sly-agent-q-input-attachment-text ()
  "The attachments of the next message, as text to put before it."
  (mapconcat (lambda (a) (format "Attached %s:\n%s\n\n" (plist-get a :label) (plist-get a :text)))
             (reverse (sly-agent-q-input-attachments sly-agent-q-input--state)) ""))

(defun sly-agent-q-input-take-attachments ()
  "Take the attachments of the next message: (TEXT . LABELS).
TEXT goes before the message (`sly-agent-q-input-attachment-text');
LABELS name them, oldest first."
  (prog1 (cons (sly-agent-q-input-attachment-text)
               (mapcar (lambda (a) (plist-get a :label))
                       (reverse (sly-agent-q-input-attachments sly-agent-q-input--state))))
    (setf (sly-agent-q-input-attachments sly-agent-q-input--state) nil)))

;; Obsolete names (issue 46): these were sly-agent-q-chat-* before the
;; chat was split into a file per concept; kept for users who name them.

(provide 'sly-agent-q-input)
;;; sly-agent-q-input.el ends here
