;;; sly-agent-q-sessions.el --- Conversations: resume, rename, delete, export, show the prompt  -*- lexical-binding: t; -*-

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

;; The server saves each conversation as it happens, one file per
;; conversation under `sly-agent-q-conversation-directory'.  This module
;; lists a project's saved conversations (`sly-agent-q-resume', a
;; `tabulated-list-mode' buffer: RET resumes, r renames, d deletes, e
;; exports, g refreshes), reopens one in the chat buffer with its whole
;; history, and writes a conversation out as Org or Markdown
;; (`sly-agent-q-export').  `sly-agent-q-show-system-prompt' shows what
;; the model is told (the system prompt, the project instructions in it
;; and the tools), anything invisible in it made visible.  Everything
;; goes through the server's requests, asynchronously.

;;; Code:

(require 'cl-lib)
(require 'subr-x)
(require 'tabulated-list)
(require 'iso8601)
(require 'diff-mode)
(require 'sly-agent-q-server)
(require 'sly-agent-q-chat)
(require 'sly-agent-q-chats)
(require 'sly-agent-q-files)
(require 'sly-agent-q-diff)
(require 'sly-agent-q-display)

(defvar sly-agent-q-conversations-buffer-name "*sly-agent-q conversations*"
  "Name of the buffer listing saved conversations.")

;;;; The list

(defvar sly-agent-q-conversations-mode-map
  (let ((map (make-sparse-keymap)))
    (define-key map (kbd "RET") #'sly-agent-q-conversations-resume)
    (define-key map (kbd "r") #'sly-agent-q-conversations-rename)
    (define-key map (kbd "d") #'sly-agent-q-conversations-delete)
    (define-key map (kbd "e") #'sly-agent-q-conversations-export)
    map)
  "Keymap of `sly-agent-q-conversations-mode'.")

(define-derived-mode sly-agent-q-conversations-mode tabulated-list-mode "AgentQ-Conversations"
  "The saved conversations of a project.
RET resumes the conversation at point in the chat buffer, r renames
it, d deletes its file, e exports it, g reads the list again.

\\{sly-agent-q-conversations-mode-map}"
  (setq tabulated-list-format [("Updated" 16 t) ("Turns" 5 sly-agent-q-sessions--by-turns :right-align t)
                               ("Cost" 8 sly-agent-q-sessions--by-cost :right-align t)
                               ("Model" 18 t) ("Title" 0 t)]
        tabulated-list-sort-key '("Updated" . t)
        tabulated-list-padding 1)
  (add-hook 'tabulated-list-revert-hook #'sly-agent-q-sessions--refresh nil t)
  (tabulated-list-init-header))

(defvar-local sly-agent-q-sessions--project nil
  "The project root whose conversations the buffer lists.")

(defun sly-agent-q-sessions--by-turns (a b)
  "Non-nil if entry A has a smaller turn count than entry B."
  (< (plist-get (car a) :turns) (plist-get (car b) :turns)))

(defun sly-agent-q-sessions--by-cost (a b)
  "Non-nil if entry A cost less than entry B."
  (< (plist-get (car a) :costUsd) (plist-get (car b) :costUsd)))

(defun sly-agent-q-sessions--time (iso)
  "The ISO 8601 time ISO as local \"YYYY-MM-DD HH:MM\"."
  (condition-case nil
      (format-time-string "%Y-%m-%d %H:%M" (encode-time (iso8601-parse iso)))
    (error (sly-agent-q-display-line iso 40))))

(defun sly-agent-q-sessions--what (event)
  "The lines of what EVENT (interrupted or repaired) did, drawn as data."
  (mapconcat (lambda (line) (sly-agent-q-display-line line 300))
             (append (plist-get event :what) nil) "\n"))

(defun sly-agent-q-sessions--state (summary)
  "Return the note of SUMMARY's health: interrupted, repaired or none.
A conversation a fault interrupted (its server died during a tool
call...) is repaired when it is resumed; the list says when each
happened, and what, in the text's help-echo."
  (let ((interrupted (plist-get summary :interrupted))
        (repaired (plist-get summary :repaired)))
    (cond
     (interrupted
      (propertize (format "  [interrupted %s%s; resuming repairs it]"
                          (sly-agent-q-sessions--time (plist-get interrupted :at))
                          (let ((calls (append (plist-get interrupted :calls) nil)))
                            (if calls (concat " during " (mapconcat (lambda (c) (sly-agent-q-display-line c 80))
                                                                    calls ", "))
                              "")))
                  'face 'sly-agent-q-error-face
                  'help-echo (sly-agent-q-sessions--what interrupted)))
     (repaired
      (propertize (format "  [repaired %s]" (sly-agent-q-sessions--time (plist-get repaired :at)))
                  'help-echo (sly-agent-q-sessions--what repaired)))
     (t ""))))

(defun sly-agent-q-sessions--entry (summary)
  "The `tabulated-list-entries' entry of the saved conversation SUMMARY."
  (list summary
        (vector (sly-agent-q-sessions--time (plist-get summary :updated))
                (format "%d" (or (plist-get summary :turns) 0))
                (format "$%.4f" (or (plist-get summary :costUsd) 0))
                (sly-agent-q-display-line (plist-get summary :model) 60)
                (concat (sly-agent-q-display-line (plist-get summary :title) 200)
                        (if (eq (plist-get summary :open) t) "  (open)" "")
                        (sly-agent-q-sessions--state summary)))))

(defun sly-agent-q-sessions--show (buffer result)
  "Fill BUFFER with the conversations of RESULT (conversation/saved's answer)."
  (when (buffer-live-p buffer)
    (with-current-buffer buffer
      (setq tabulated-list-entries
            (mapcar #'sly-agent-q-sessions--entry (plist-get result :conversations)))
      (tabulated-list-print t)
      (let ((errors (plist-get result :errors)))
        (when (and errors (> (length errors) 0))
          (message "sly-agent-q: %d saved conversation(s) cannot be read: %s"
                   (length errors)
                   (mapconcat #'sly-agent-q-display-line errors "; ")))))))

(defun sly-agent-q-sessions--refresh ()
  "Ask the server for the list again."
  (let ((buffer (current-buffer)))
    (sly-agent-q-server-request
     'conversation/saved
     (sly-agent-q-configuration-plist-compact (list :projectRoot sly-agent-q-sessions--project))
     (lambda (result) (sly-agent-q-sessions--show buffer result))
     (lambda (msg) (message "sly-agent-q: cannot list the saved conversations: %s"
                          (sly-agent-q-display-line msg))))))

;;;###autoload
(defun sly-agent-q-resume ()
  "List this project's saved conversations; RET on one resumes it.
The chat buffer then shows its whole history, and the next message
continues it with the model seeing the same history."
  (interactive)
  (unless sly-agent-q-conversation-directory
    (user-error "Conversations are not saved: `sly-agent-q-conversation-directory' is nil"))
  ;; In a chat, its own project; elsewhere the project the buffer is in.
  (let ((project (directory-file-name (expand-file-name (sly-agent-q-chats-root-here))))
        (buffer (get-buffer-create sly-agent-q-conversations-buffer-name)))
    (with-current-buffer buffer
      (sly-agent-q-conversations-mode)
      (setq sly-agent-q-sessions--project project)
      (sly-agent-q-sessions--refresh))
    (pop-to-buffer buffer)))

(defun sly-agent-q-sessions--at-point ()
  "The saved conversation on the current line, a plist."
  (or (tabulated-list-get-id) (user-error "No conversation on this line")))

(defun sly-agent-q-conversations-resume ()
  "Reopen the conversation at point in the chat buffer."
  (interactive)
  (sly-agent-q-sessions-resume (plist-get (sly-agent-q-sessions--at-point) :conversationId)
                               nil sly-agent-q-sessions--project))

(defun sly-agent-q-sessions-resume (conversation-id &optional callback root)
  "Reopen saved conversation CONVERSATION-ID in the chat buffer.
CALLBACK, if non-nil, is called with the chat buffer once it is drawn.
ROOT, if non-nil, is the project it is resumed for (the list's): it
opens in a chat of that project."
  (sly-agent-q-server-request
   'conversation/resume (list :conversationId conversation-id)
   (lambda (result)
     (let ((buffer (sly-agent-q-chat-show-history
                    (plist-get result :conversationId)
                    (plist-get result :title)
                    (plist-get result :messages)
                    :usage (plist-get result :usage)
                    :cost (plist-get result :costUsd)
                    :model (plist-get result :model)
                    :calls (plist-get result :calls)
                    :turn-ends (plist-get result :turnEnds)
                    :root root)))
       (when (eq (plist-get result :truncated) t)
         (with-current-buffer buffer
           (sly-agent-q-transcript-notice
            "[The file's last record was cut off (a crash while writing); it is left out.]")))
       (when (plist-get result :repaired)
         (with-current-buffer buffer
           (sly-agent-q-transcript-repaired-notice (plist-get result :repaired))))
       (unless noninteractive (pop-to-buffer buffer))
       (when callback (funcall callback buffer))))
   (lambda (msg) (message "sly-agent-q: cannot resume the conversation: %s" (sly-agent-q-display-line msg)))))

(defun sly-agent-q-conversations-rename (title)
  "Give the conversation at point the title TITLE."
  (interactive (list (read-string "New title: " (plist-get (sly-agent-q-sessions--at-point) :title))))
  (let ((id (plist-get (sly-agent-q-sessions--at-point) :conversationId))
        (buffer (current-buffer)))
    (sly-agent-q-server-request
     'conversation/rename (list :conversationId id :title title)
     (lambda (_) (with-current-buffer buffer (sly-agent-q-sessions--refresh))))))

(defun sly-agent-q-conversations-delete ()
  "Delete the saved file of the conversation at point, after asking."
  (interactive)
  (let ((summary (sly-agent-q-sessions--at-point))
        (buffer (current-buffer)))
    (when (yes-or-no-p (format "Delete the saved conversation %s? "
                               (sly-agent-q-display-name (plist-get summary :title) 200)))
      (sly-agent-q-server-request
       'conversation/delete (list :conversationId (plist-get summary :conversationId) :saved t)
       (lambda (_) (with-current-buffer buffer (sly-agent-q-sessions--refresh)))))))

(defun sly-agent-q-conversations-export (file)
  "Export the conversation at point to FILE (Org or Markdown by its extension)."
  (interactive (list (sly-agent-q-sessions--read-export-file
                      (plist-get (sly-agent-q-sessions--at-point) :title))))
  (sly-agent-q-sessions-export (plist-get (sly-agent-q-sessions--at-point) :conversationId) file))

;;;; Rewind

(declare-function sly-agent-q-tool-rewind-change "sly-agent-q-tool-rewind" (kind name before expected))

(defun sly-agent-q-sessions--first-words (text)
  "The start of TEXT's first line, drawn as data, cut at about 60 columns."
  (let ((line (car (split-string (or text "") "\n"))))
    (truncate-string-to-width
     (sly-agent-q-display-line (substring line 0 (min (length line) 200)) t) 60 nil nil "…")))

(defun sly-agent-q-sessions--read-turn (choices)
  "Return the id of the turn the user picks among CHOICES.
CHOICES is the list of turns conversation/turns answers."
  ;; Numbered, so that two turns of one minute with the same words are two
  ;; choices, not one that always means the first; newest first, in every
  ;; completion UI (the list's and the cycling one's order both given).
  (let* ((labelled (reverse
                    (cl-loop for turn in (append choices nil)
                             for n from 1
                             collect (cons (format "%d. %s  %s" n
                                                   (sly-agent-q-sessions--first-words (plist-get turn :text))
                                                   (sly-agent-q-sessions--time (plist-get turn :at)))
                                           turn))))
         (completion-extra-properties
          (list :annotation-function
                (lambda (choice)
                  (let ((changed (plist-get (cdr (assoc choice labelled)) :changed)))
                    (if (> (length changed) 0)
                        (format "   changed %s"
                                (mapconcat (lambda (f) (sly-agent-q-display-line (file-name-nondirectory f)))
                                           changed ", "))
                      "")))))
         (choice (completing-read "Rewind to before the turn: "
                                  (lambda (string pred action)
                                    (if (eq action 'metadata)
                                        '(metadata (display-sort-function . identity)
                                                   (cycle-sort-function . identity))
                                      (complete-with-action action (mapcar #'car labelled) string pred)))
                                  nil t)))
    ;; RET on an empty answer gives "": no turn, and nothing to rewind.
    (or (plist-get (cdr (assoc choice labelled)) :turnId)
        (user-error "No turn chosen; nothing was rewound"))))

(defun sly-agent-q-sessions--refused-diff (refused &optional then)
  "Show the diffs of REFUSED, a list of (NAME EXPECTED CURRENT), in a buffer.
Return the buffer.  The server computes the diffs: the buffer is
filled and shown once they came, then THEN, if non-nil, is called
with no argument.  Never waits."
  (let ((buffer (get-buffer-create "*sly-agent-q rewind refused*")))
    (sly-agent-q-diff-texts-later
     ;; The name and both texts are from outside (the agent wrote them).
     (mapcar (pcase-lambda (`(,name ,expected ,current))
               (list (sly-agent-q-display-line name t) (or expected "") current))
             refused)
     (lambda (diffs)
       (when (buffer-live-p buffer)
         (with-current-buffer buffer
           (let ((inhibit-read-only t))
             (erase-buffer)
             (insert "These were changed since the agent changed them, so the rewind left them alone.\n"
                     "Each diff goes from what the agent left to what is there now.\n\n")
             (dolist (diff diffs)
               (insert (sly-agent-q-display-text diff) "\n")))
           (diff-mode)
           (setq buffer-read-only t))
         (unless noninteractive (display-buffer buffer)))
       (when then (funcall then))))
    buffer))

(defun sly-agent-q-sessions-apply-rewind (restore)
  "Put back the files and buffers of RESTORE (conversation/rewind's list).
Return a plist: :restored (names), :refused (list of (NAME EXPECTED
CURRENT) the user changed since), :failed (list of (NAME MESSAGE))."
  (let (restored refused failed)
    (seq-doseq (item restore)
      (let ((name (plist-get item :name)))
        (if (eq (plist-get item :tooLarge) t)
            (push (list name "too large to have been kept") failed)
          (condition-case err
              (let ((current (sly-agent-q-tool-rewind-change
                              (plist-get item :kind) name
                              (plist-get item :before) (plist-get item :expected))))
                (if current
                    (push (list name (plist-get item :expected) current) refused)
                  (push name restored)))
            (error (push (list name (error-message-string err)) failed))))))
    (list :restored (nreverse restored) :refused (nreverse refused) :failed (nreverse failed))))

;;;###autoload
(defun sly-agent-q-rewind (truncate)
  "Undo what the agent changed in files and buffers since a turn you choose.
Each file or buffer goes back to what it was before that turn, unless
you changed it since the agent did: those are left alone and their
diffs shown.  With TRUNCATE (asked for; a prefix argument says yes)
that turn and the later ones are also dropped from the conversation.
What the agent did inside the Lisp image (evaluations, compiled
definitions) cannot be rewound."
  (interactive (list (or current-prefix-arg 'ask)))
  (let* ((buffer (or (sly-agent-q-chat-buffer t) (user-error "There is no chat")))
         (id (or (sly-agent-q-chat-conversation-id buffer)
                 (user-error "The chat has no conversation yet"))))
    (sly-agent-q-server-request
     'conversation/turns (list :conversationId id)
     (lambda (result)
       (let* ((turns (append (plist-get result :turns) nil))
              (turn (if turns (sly-agent-q-sessions--read-turn turns)
                      (user-error "This conversation has no saved turns")))
              (truncate (if (eq truncate 'ask)
                            (y-or-n-p "Also drop that turn and the later ones from the conversation? ")
                          truncate)))
         (sly-agent-q-sessions-rewind id turn truncate))))))

(defun sly-agent-q-sessions-rewind (conversation-id turn-id truncate &optional callback)
  "Rewind CONVERSATION-ID to before its turn TURN-ID.
With TRUNCATE, also drop that turn and the later ones.
CALLBACK, if non-nil, gets the plist of `sly-agent-q-sessions-apply-rewind',
after the diffs of what was left alone are shown.
The files are put back in the root of the chat holding the
conversation, whatever project the user's current buffer is in, and
that chat keeps its own title and spending."
  (let* ((chat (sly-agent-q-chats-of-conversation conversation-id))
         (root (if chat (sly-agent-q-chats-root chat) sly-agent-q-project-root)))
    (sly-agent-q-server-request
     'conversation/rewind (list :conversationId conversation-id :turnId turn-id :truncate (if truncate t :json-false))
     (lambda (result)
       (let ((outcome (let ((sly-agent-q-project-root root))
                        (sly-agent-q-sessions-apply-rewind (plist-get result :restore)))))
         (when (plist-get result :messages)
           ;; What was spent stays spent: the header line keeps the usage and the cost.
           (apply #'sly-agent-q-chat-show-history conversation-id
                  (or (sly-agent-q-chat-title (if (buffer-live-p chat) chat (sly-agent-q-chat-buffer))) "rewound")
                  (plist-get result :messages)
                  :calls (plist-get result :calls)
                  :turn-ends (plist-get result :turnEnds)
                  (sly-agent-q-chat-spending (if (buffer-live-p chat) chat (sly-agent-q-chat-buffer)))))
         (message "sly-agent-q: put back %d file(s) and buffer(s)%s%s%s.  What the agent did inside the Lisp image cannot be rewound."
                  (length (plist-get outcome :restored))
                  (if (plist-get outcome :refused)
                      (format "; left %d you changed since (see the diffs)" (length (plist-get outcome :refused)))
                    "")
                  (if (plist-get outcome :failed)
                      (format "; could not put back %s"
                              (mapconcat (lambda (f) (format "%s (%s)" (sly-agent-q-display-line (car f))
                                                             (sly-agent-q-display-line (cadr f))))
                                         (plist-get outcome :failed) ", "))
                    "")
                  (if truncate "; the conversation now ends before that turn" ""))
         (cond ((plist-get outcome :refused)
                ;; The callback comes once the diffs are shown.
                (sly-agent-q-sessions--refused-diff
                 (plist-get outcome :refused)
                 (and callback (lambda () (funcall callback outcome)))))
               (callback (funcall callback outcome)))))
     (lambda (msg) (message "sly-agent-q: cannot rewind: %s" (sly-agent-q-display-line msg))))))

;;;; Export

(defun sly-agent-q-sessions-export-file-name (title)
  "The default file name to export the conversation TITLE to, as NAME.org.
NAME is made of TITLE's letters and digits; when it has none (an empty
or \"...\" title), it is conversation-DATE, never an empty name that
would make a hidden file."
  (let ((stem (string-trim (truncate-string-to-width
                            (replace-regexp-in-string "[^[:alnum:]]+" "-" (downcase (or title "")))
                            56)
                           "-+" "-+")))
    (concat (if (string-empty-p stem)
                (format-time-string "conversation-%Y-%m-%d-%H%M")
              stem)
            ".org")))

(defun sly-agent-q-sessions--read-export-file (title)
  "Ask for the file to export the conversation TITLE to."
  (read-file-name "Export to (.org or .md): " nil nil nil
                  (sly-agent-q-sessions-export-file-name title)))

(defun sly-agent-q-sessions--format (file)
  "The export format for FILE: \"markdown\" for .md/.markdown, else \"org\"."
  (if (member (file-name-extension file) '("md" "markdown")) "markdown" "org"))

(defun sly-agent-q-sessions-export (conversation-id file &optional callback)
  "Write conversation CONVERSATION-ID to FILE as Org or Markdown.
The format follows FILE's extension (.md or .markdown for Markdown).
An existing FILE is replaced only after asking.  CALLBACK, if
non-nil, is called with FILE once it is written."
  (let ((file (expand-file-name file)))
    (when (and (file-exists-p file) (not noninteractive)
               (not (yes-or-no-p (format "%s exists; replace it? " file))))
      (user-error "Not exported"))
    (sly-agent-q-server-request
     'conversation/export (list :conversationId conversation-id
                                :format (sly-agent-q-sessions--format file))
     (lambda (result)
       ;; Written the way the agent's file tools write: whole, never half.
       (sly-agent-q-files-write-atomically file (plist-get result :text))
       (message "sly-agent-q: exported to %s" file)
       (when callback (funcall callback file)))
     (lambda (msg) (message "sly-agent-q: cannot export the conversation: %s" (sly-agent-q-display-line msg))))))

;;;; Compaction

;;;###autoload
(defun sly-agent-q-compact ()
  "Have the model summarize the older part of the chat's conversation.
The summary replaces those messages in what the model is sent.
The last two exchanges stay whole.  The chat buffer and the saved
file keep every message.  This also happens by
itself when the history nears the model's context window."
  (interactive)
  (let* ((buffer (or (sly-agent-q-chat-buffer t) (user-error "There is no chat")))
         (id (or (sly-agent-q-chat-conversation-id buffer)
                 (user-error "The chat has no conversation yet"))))
    (message "sly-agent-q: compacting...")
    (sly-agent-q-server-request
     'conversation/compact (list :conversationId id)
     (lambda (result)
       (if (not (eq (plist-get result :compacted) t))
           (message "sly-agent-q: too few turns to compact")
         (when (buffer-live-p buffer)
           (with-current-buffer buffer
             (sly-agent-q-transcript-compacted-notice (plist-get result :replacedMessages)
                                                (plist-get result :tokensBefore)
                                                (plist-get result :tokensAfter))))
         (message "sly-agent-q: compacted")))
     (lambda (msg) (message "sly-agent-q: cannot compact: %s" (sly-agent-q-display-line msg))))))

;;;###autoload
(defun sly-agent-q-export (file)
  "Export the chat buffer's conversation to FILE, as Org or Markdown.
The format follows FILE's extension: .md or .markdown for Markdown,
anything else Org.  Tool calls become collapsible blocks."
  (interactive
   (let ((buffer (sly-agent-q-chat-buffer t)))
     (unless (and buffer (sly-agent-q-chat-conversation-id buffer))
       (user-error "The chat has no conversation yet"))
     (list (sly-agent-q-sessions--read-export-file (sly-agent-q-chat-title buffer)))))
  (let ((id (sly-agent-q-chat-conversation-id (sly-agent-q-chat-buffer t))))
    (unless id (user-error "The chat has no conversation yet"))
    (sly-agent-q-sessions-export id file)))

;;;; What the model is told

(defvar sly-agent-q-system-prompt-buffer-name "*sly-agent-q system prompt*"
  "Name of the buffer `sly-agent-q-show-system-prompt' shows.")

(defun sly-agent-q-sessions--instructions-text (instructions)
  "What INSTRUCTIONS (prompt/show's account of a project file) say, as text."
  (cl-destructuring-bind (&key file bytes removed removedCharacters tagText truncated &allow-other-keys)
      instructions
    (concat
     (format "Project instructions: %s, %s%s\n"
             (sly-agent-q-display-line file) (file-size-human-readable bytes)
             (if (eq truncated t) " (only its first part is sent)" ""))
     (if (and (numberp removed) (> removed 0))
         (format "  %d invisible or direction-changing character%s removed before sending: %s\n"
                 removed (if (= removed 1) "" "s")
                 (mapconcat (lambda (c) (format "%s ×%d" (sly-agent-q-display-line (plist-get c :codePoint))
                                                (plist-get c :count)))
                            removedCharacters ", "))
       "  No invisible characters in it.\n")
     (if tagText
         (format "  Hidden in Unicode tag characters (not sent): %s\n" (sly-agent-q-display-name tagText 2000))
       ""))))

(defun sly-agent-q-sessions--show-prompt (result)
  "Show prompt/show's RESULT in a read-only buffer."
  (cl-destructuring-bind (&key system tools instructions sent &allow-other-keys) result
    (with-current-buffer (get-buffer-create sly-agent-q-system-prompt-buffer-name)
      (let ((inhibit-read-only t))
        (erase-buffer)
        (insert (propertize (if (eq sent t)
                                "The system prompt the conversation's last request carried"
                              "The system prompt the next turn would carry")
                            'face 'bold)
                "\nCharacters a reader cannot see (zero-width, bidi controls, tags...) are shown escaped, as \\u200B.\n\n")
        (insert (if instructions (sly-agent-q-sessions--instructions-text instructions)
                  "No project instructions (AGENT-Q.md, AGENTS.md) are sent.\n")
                "\n" (propertize "System prompt" 'face 'bold) "\n\n"
                (sly-agent-q-display-text system) "\n\n"
                (propertize (format "Tools (%d)" (length tools)) 'face 'bold) "\n")
        (seq-doseq (tool tools)
          (insert "\n" (propertize (sly-agent-q-display-line (plist-get tool :name)) 'face 'bold) "\n"
                  (sly-agent-q-display-text (plist-get tool :description)) "\n"
                  "Parameters: " (sly-agent-q-display-text (sly-agent-q-display-json (plist-get tool :inputSchema))) "\n"))
        (goto-char (point-min)))
      (special-mode)
      (pop-to-buffer (current-buffer)))))

;;;###autoload
(defun sly-agent-q-show-system-prompt ()
  "Show exactly what the model is told, in a read-only buffer.
That is the system prompt (the one the chat's conversation last
sent, else the one a turn would carry now), which project
instruction file it includes with the invisible characters removed
from it, and each tool's description and parameters.  Anything
invisible or direction-changing is shown escaped."
  (interactive)
  (let* ((buffer (sly-agent-q-chat-buffer t))
         (id (and buffer (sly-agent-q-chat-conversation-id buffer)))
         (root (directory-file-name (expand-file-name (if buffer (sly-agent-q-chats-root buffer)
                                                          (sly-agent-q-chats-root-here))))))
    (sly-agent-q-server-request
     'prompt/show
     (append (and id (list :conversationId id))
             (and root (list :context (list :projectRoot root))))
     #'sly-agent-q-sessions--show-prompt
     (lambda (msg) (message "sly-agent-q: cannot show the system prompt: %s" (sly-agent-q-display-line msg))))))

(provide 'sly-agent-q-sessions)
;;; sly-agent-q-sessions.el ends here
