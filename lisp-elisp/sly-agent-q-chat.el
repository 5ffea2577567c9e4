;;; sly-agent-q-chat.el --- The sly-agent-q chat buffer  -*- lexical-binding: t; -*-

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

;; A chat buffer (*sly-agent-q*, then *sly-agent-q: PROJECT*; see
;; sly-agent-q-chats.el): a read-only transcript above an input
;; area.  RET (or C-c C-c) sends; streamed text is coalesced and inserted
;; on a short timer; each tool call is a one-line entry that TAB or RET
;; expands; C-c C-k cancels the running turn; M-p / M-n walk the input
;; history; the header line shows the model, tokens and cost.
;;
;; Scripting: `sly-agent-q-send' sends a message (with an optional
;; callback) and `sly-agent-q-turn-finished-hook' runs when a turn ends.
;;
;; This file is the chat's mode, the choice of the chat buffer a command
;; acts on, and the chat's commands.  The rest of the chat is a file per
;; concept, each keeping its state in a struct of its own held by one
;; buffer-local variable:
;;
;;   sly-agent-q-transcript.el  the transcript: insertion, notices, sections
;;   sly-agent-q-stream.el      the agent's streamed text, its rendering, its reasoning
;;   sly-agent-q-entry.el       a tool call's entry
;;   sly-agent-q-header.el      the header line, refreshed a few times a second
;;   sly-agent-q-input.el       the input: its text, history, attachments
;;   sly-agent-q-turn.el        turns, their states, sending, cancelling, and
;;                              the server's notifications of a turn

;;; Code:

(require 'cl-lib)
(require 'subr-x)
(require 'seq)
(require 'sly-agent-q-server)
(require 'sly-agent-q-display)
(require 'sly-agent-q-markdown)
(require 'sly-agent-q-chats)
(require 'sly-agent-q-transcript)
(require 'sly-agent-q-stream)
(require 'sly-agent-q-entry)
(require 'sly-agent-q-header)
(require 'sly-agent-q-input)
(require 'sly-agent-q-turn)

(autoload 'sly-agent-q-menu "sly-agent-q-menu" nil t)

(defcustom sly-agent-q-chat-buffer-name "*sly-agent-q*"
  "Name of the first chat buffer; the others are named after their project."
  :type 'string
  :group 'sly-agent-q)

;;;; Mode

(defvar sly-agent-q-chat-mode-map
  (let ((map (make-sparse-keymap)))
    (define-key map (kbd "RET") #'sly-agent-q-chat-return)
    (define-key map (kbd "<S-return>") #'newline)
    (define-key map (kbd "C-j") #'newline)
    (define-key map (kbd "C-c C-c") #'sly-agent-q-chat-send-input)
    (define-key map (kbd "C-c C-k") #'sly-agent-q-cancel)
    (define-key map (kbd "M-p") #'sly-agent-q-chat-previous-input)
    (define-key map (kbd "M-n") #'sly-agent-q-chat-next-input)
    (define-key map (kbd "M-r") #'sly-agent-q-chat-previous-matching-input)
    (define-key map (kbd "C-c C-m") #'sly-agent-q-menu)
    (define-key map (kbd "C-c C-n") #'sly-agent-q-new-conversation)
    (define-key map (kbd "C-c C-f") #'sly-agent-q-attach-file)
    (define-key map (kbd "C-c C-b") #'sly-agent-q-attach-buffer)
    map)
  "Keymap of the chat buffer.")

(define-derived-mode sly-agent-q-chat-mode fundamental-mode "Agent-Q"
  "Major mode of the sly-agent-q chat buffer.
The transcript (read-only) is above, the input after the prompt at the
end.  The header line says first what the chat is doing, then the
model, the tokens and the cost.

Sending and stopping:
  \\[sly-agent-q-chat-return]  sends the input (elsewhere: goes to the input)
  \\[sly-agent-q-chat-send-input]  sends the input
  \\[newline]  makes a new line in the input
  \\[sly-agent-q-cancel]  cancels the running turn

The input history, as in comint:
  \\[sly-agent-q-chat-previous-input] / \\[sly-agent-q-chat-next-input]  the previous / next message sent
  \\[sly-agent-q-chat-previous-matching-input]  the previous one matching a regexp (again: further back)

Conversation and context:
  \\[sly-agent-q-new-conversation]  starts a new conversation (the transcript stays)
  \\[sly-agent-q-attach-file]  attaches a file to the next message
  \\[sly-agent-q-attach-buffer]  attaches a buffer to the next message
  \\[sly-agent-q-menu]  the menu: model, provider, tool level, permission
      rules, resume, rewind, export, compact, MCP servers, cancel

On a tool entry TAB shows or hides its details, RET or o opens them.

\\{sly-agent-q-chat-mode-map}"
  (setq-local truncate-lines nil)
  (setq-local word-wrap t)
  (sly-agent-q-transcript-setup
   "sly-agent-q: ask about your Lisp image.  RET sends, C-j newline, C-c C-k cancels, M-p/M-r history, C-c C-m menu.")
  (sly-agent-q-stream-setup)
  (sly-agent-q-entry-setup)
  (sly-agent-q-input-setup)
  (sly-agent-q-turn-setup)
  (sly-agent-q-header-setup #'sly-agent-q-chat--header-line)
  (sly-agent-q-markdown-setup)
  (add-hook 'kill-buffer-hook #'sly-agent-q-chat--on-kill nil t))

(defvar sly-agent-q-chat-kill-hook nil
  "Run in a chat buffer being killed, once its turn's cancel was sent.
What still waits for the user there is answered here (an approval is
denied).  Answered before the cancel, the answer would reach the
server first and the turn would go on with it: one more request to
the model, paid for, its calls refused.")

(defun sly-agent-q-chat--on-kill ()
  "The chat buffer is being killed: stop its timer, its turn, its conversation.
In this order: the server hears of the cancel before any answer to
what waits in the chat (`sly-agent-q-chat-kill-hook')."
  (sly-agent-q-stream-stop)
  (sly-agent-q-turn-release)
  (run-hooks 'sly-agent-q-chat-kill-hook))

(defun sly-agent-q-chat-buffer (&optional no-create)
  "The chat a command acts on; create one unless NO-CREATE.
In a chat buffer, that chat.  Elsewhere the chat of the current
project, else the chat used last, else (unless NO-CREATE) a new chat
for the current project and Lisp."
  (cond ((sly-agent-q-chats-p) (current-buffer))
        ((let ((chats (sly-agent-q-chats-list)))
           (and chats
                (or (sly-agent-q-chats-of-root (sly-agent-q-chats-root-here))
                    (car chats)))))
        (no-create nil)
        (t (sly-agent-q-chats-create))))

(defun sly-agent-q-chat-for-request (params)
  "The chat a request of the server, with PARAMS, is for.
The chat holding its conversation (:conversationId); a request of no
chat's conversation (an MCP client's call) goes to the chat of the
current project, else the one used last, else a new one."
  (or (sly-agent-q-chats-of-conversation (plist-get params :conversationId))
      (sly-agent-q-chat-buffer)))


;;;; Header line

(defun sly-agent-q-chat--header-line ()
  "The header line of the chat buffer.
The state comes first: a narrow window cuts the line at its right end,
and the state is what the user looks there for."
  (let* ((spending (sly-agent-q-turn-spending))
         (usage (plist-get spending :usage))
         (attached (sly-agent-q-input-attachment-count)))
    (concat
     " " (propertize (sly-agent-q-turn-header-state) 'face 'mode-line-emphasis)
     " │ "
     ;; The model's name comes from the provider; "%" would be a mode-line construct.
     (string-replace "%" "%%" (sly-agent-q-display-line
                               (or (plist-get spending :model) sly-agent-q-model "default model") 40))
     (format " │ tokens %s in / %s out"
             (sly-agent-q-transcript-format-tokens (plist-get usage :inputTokens))
             (sly-agent-q-transcript-format-tokens (plist-get usage :outputTokens)))
     (format " │ $%.4f" (or (plist-get spending :cost) 0))
     ;; Which project and which Lisp; last, so that the state and the cost fit 80 columns.
     " │ " (string-replace "%" "%%" (sly-agent-q-display-line (sly-agent-q-chats-label) 80))
     (if (> attached 0) (format " │ [%d attached]" attached) ""))))

;;;; The conversation

(defun sly-agent-q-chat-title (&optional buffer)
  "The title of the conversation of BUFFER (default: the current buffer), or nil.
A resumed conversation's is the one it was saved with; a new one's is
its first message, as the server names it."
  (with-current-buffer (or buffer (current-buffer))
    (or (sly-agent-q-turn-title) (sly-agent-q-input-first-message))))

(defun sly-agent-q-chat-spending (&optional buffer)
  "Return the usage, cost and model shown in the header line of BUFFER.
The value is options of `sly-agent-q-chat-show-history' (:usage,
:cost, :model)."
  (with-current-buffer (or buffer (current-buffer))
    (sly-agent-q-turn-spending)))

(defun sly-agent-q-chat-conversation-id (&optional buffer)
  "The server's id of the conversation of BUFFER (default: the current buffer)."
  (sly-agent-q-turn-conversation buffer))

(defun sly-agent-q-chat--draw-message (message results &optional calls after-block)
  "Draw the saved MESSAGE (a plist) in the transcript.
RESULTS maps tool call ids to their tool_result blocks; CALLS, a
plist keyed by call id, says how each call ran (its time, the
approval's wait, the arguments that ran when edited).  AFTER-BLOCK,
if non-nil, is called after each block with the number of blocks drawn
and whether it was the last."
  (let ((user (equal (plist-get message :role) "user"))
        (drawn 0))
    (seq-doseq (block (plist-get message :content))
      (when (and after-block (> drawn 0)) (funcall after-block drawn nil))
      (setq drawn (1+ drawn))
      (pcase (plist-get block :type)
        ("text"
         (if user
             (sly-agent-q-transcript-user-message (plist-get block :text))
           (sly-agent-q-stream-add-text (plist-get block :text))
           (sly-agent-q-stream-flush)))
        ("thinking" (sly-agent-q-stream-add-thinking (plist-get block :thinking)))
        ("redacted_thinking" (sly-agent-q-stream-add-thinking nil t))
        ("tool_use"
         (let* ((result (gethash (plist-get block :id) results))
                (failed (or (null result) (eq (plist-get result :isError) t)))
                (run (and (stringp (plist-get block :id))
                          (plist-get calls (intern (concat ":" (plist-get block :id)))))))
           (sly-agent-q-entry-add
            (sly-agent-q-entry-create
             :call-id (plist-get block :id) :name (plist-get block :name)
             ;; Calls saved before their trust level was kept say only that they were saved.
             :arguments (plist-get block :input) :safety (or (plist-get run :safetyLevel) "saved")
             :status (if failed 'error 'ok)
             :content (and result (plist-get result :content))
             :error (and failed (if result (plist-get result :content) "no result was saved"))
             :time-ms (plist-get run :executionTimeMs)
             :wait-ms (plist-get run :approvalWaitMs)
             :ran-arguments (plist-get run :arguments)
             :approved t))))))
    ;; An answer's text ends with it, as it did live: the next answer's is not run on to it.
    (unless user (sly-agent-q-transcript-end-text))
    (when after-block (funcall after-block drawn t))))

(defun sly-agent-q-chat--history-buffer (conversation-id &optional root)
  "The chat to show the saved conversation CONVERSATION-ID in.
The chat holding it already; else the chat a command would act on (with
ROOT, the chat of that project, made if there is none), when it holds no
conversation yet; else a new chat, for that chat's project and Lisp:
each conversation in its own chat."
  (or (sly-agent-q-chats-of-conversation conversation-id)
      (let ((chat (if root
                      (or (sly-agent-q-chats-of-root root) (sly-agent-q-chats-create root))
                    (sly-agent-q-chat-buffer))))
        (if (or (null (sly-agent-q-chat-conversation-id chat))
                (equal (sly-agent-q-chat-conversation-id chat) conversation-id))
            chat
          (sly-agent-q-chats-create (sly-agent-q-chats-root chat) (sly-agent-q-chats-lisp chat))))))

(defun sly-agent-q-chat-show-history (conversation-id title messages &rest options)
  "Show saved conversation CONVERSATION-ID, called TITLE, in its own chat.
MESSAGES is its whole history (the server's conversation/resume
answer).  OPTIONS are :usage, :cost, :model, :calls (how each tool call
ran, a plist keyed by call id) and :turn-ends (how each turn ended, with
the number of messages before its end) and :root (the project it is
resumed for: it opens in a chat of that project).  The buffer's
transcript is replaced; the next message continues the conversation.
Return the chat buffer."
  (let ((buffer (sly-agent-q-chat--history-buffer conversation-id (plist-get options :root)))
        (results (make-hash-table :test #'equal)))
    (with-current-buffer buffer
      (when (sly-agent-q-turn-running) (user-error "A turn is running; C-c C-k cancels it"))
      (unless (equal (sly-agent-q-turn-conversation) conversation-id)
        (sly-agent-q-turn-free-conversation))
      (let ((input (sly-agent-q-input-text)))
        (sly-agent-q-chat-mode)
        (sly-agent-q-input-set input))
      (sly-agent-q-turn-resumed conversation-id title (plist-get options :usage)
                                (plist-get options :cost) (plist-get options :model))
      (sly-agent-q-transcript-notice (format "──── resumed: %s ────" (sly-agent-q-display-line title 200)))
      (seq-doseq (message messages)
        (seq-doseq (block (plist-get message :content))
          (when (equal (plist-get block :type) "tool_result")
            (puthash (plist-get block :toolUseId) block results))))
      (let ((ends (append (plist-get options :turn-ends) nil))
            (drawn 0))
        (seq-doseq (message messages)
          (setq drawn (1+ drawn))
          ;; A turn's end follows its last message (or its last block, when the
          ;; user's next text joined that message), as it did live.
          (sly-agent-q-chat--draw-message
           message results (plist-get options :calls)
           (lambda (blocks last)
             (while (and ends
                         (let ((at (or (plist-get (car ends) :afterMessage) 0))
                               (at-blocks (plist-get (car ends) :afterBlocks)))
                           (or (< at drawn)
                               (and (= at drawn)
                                    (if (numberp at-blocks) (<= at-blocks blocks) last)))))
               (sly-agent-q-turn-draw-end (pop ends)))))))
      (sly-agent-q-stream-end)
      (goto-char (point-max)))
    buffer))

;;;; Commands

(defun sly-agent-q-cancel ()
  "Cancel the running turn of this chat (elsewhere: of `sly-agent-q-chat-buffer').
The other chats' turns and evaluations go on."
  (interactive)
  (with-current-buffer (or (sly-agent-q-chat-buffer t) (user-error "No chat buffer"))
    (sly-agent-q-turn-cancel)))

(defun sly-agent-q-new-conversation ()
  "Start a new conversation in the chat buffer (the transcript stays)."
  (interactive)
  (with-current-buffer (sly-agent-q-chat-buffer)
    (when (sly-agent-q-turn-running) (user-error "A turn is running; C-c C-k cancels it"))
    (sly-agent-q-turn-new-conversation)
    (sly-agent-q-transcript-notice "──── new conversation ────")))

(defun sly-agent-q-send (string &optional callback)
  "Send STRING to the agent as the next message of the chat buffer's conversation.
CALLBACK, if non-nil, is called with the same plist as
`sly-agent-q-turn-finished-hook' when the turn ends.  Returns at once."
  (with-current-buffer (sly-agent-q-chat-buffer)
    (sly-agent-q-input-add-history string)
    (sly-agent-q-turn-send string callback)
    nil))

(defun sly-agent-q-chat-send-input ()
  "Send the input as a message."
  (interactive)
  (let ((text (sly-agent-q-input-to-send)))
    (when (sly-agent-q-turn-running)
      (user-error "A turn is running; C-c C-k cancels it"))
    (sly-agent-q-input-sent text)
    (sly-agent-q-turn-send text nil)))

(defun sly-agent-q-chat-return ()
  "Send the input if point is in it; otherwise go to the input."
  (interactive)
  (if (>= (point) (sly-agent-q-transcript-input-start))
      (sly-agent-q-chat-send-input)
    (goto-char (point-max))))

(defun sly-agent-q-chat-previous-input ()
  "Replace the input with the previous message sent."
  (interactive)
  (sly-agent-q-input-walk-history 1))

(defun sly-agent-q-chat-next-input ()
  "Replace the input with the next message sent."
  (interactive)
  (sly-agent-q-input-walk-history -1))

(defun sly-agent-q-chat-previous-matching-input (regexp &optional step)
  "Replace the input with the previous message sent that matches REGEXP.
As comint's \\[comint-previous-matching-input]: again goes further back;
STEP -1 searches forward (\\[sly-agent-q-chat-next-matching-input])."
  (interactive (list (sly-agent-q-input-read-regexp "Previous message matching")))
  (sly-agent-q-input-search-history regexp (or step 1)))

(defun sly-agent-q-chat-next-matching-input (regexp)
  "Replace the input with the next message sent that matches REGEXP."
  (interactive (list (sly-agent-q-input-read-regexp "Next message matching")))
  (sly-agent-q-chat-previous-matching-input regexp -1))

;;;; The input, from elsewhere

(defun sly-agent-q-chat-input-text ()
  "The text of the chat buffer's input, not yet sent."
  (with-current-buffer (sly-agent-q-chat-buffer)
    (sly-agent-q-input-text)))

(defun sly-agent-q-chat-set-input (text)
  "Replace the chat buffer's input with TEXT, for the user to edit and send."
  (with-current-buffer (sly-agent-q-chat-buffer)
    (sly-agent-q-input-set text)))

(defun sly-agent-q-chat-hold-input (message seconds &optional placeholder)
  "Refuse to send the chat's input, saying MESSAGE, for at most SECONDS.
For an input still being filled in from elsewhere (the image's answer
is on its way).  With PLACEHOLDER, the text standing for what is to
come, only while the input holds it: a user who replaced it sends
their own message.  Return the hold, for
`sly-agent-q-chat-release-input'."
  (with-current-buffer (sly-agent-q-chat-buffer)
    (sly-agent-q-input-put-hold message seconds placeholder)))

(defun sly-agent-q-chat-release-input (hold)
  "End HOLD, from `sly-agent-q-chat-hold-input', if it is still the chat's."
  (let ((chat (sly-agent-q-chat-buffer t)))
    (when chat
      (with-current-buffer chat
        (sly-agent-q-input-release hold)))))

(defun sly-agent-q-chat-replace-in-input (old new)
  "Replace the last OLD in the chat's input by NEW; non-nil if it was there.
Only that text changes: what the user typed around it, and point, stay.
The last: text put before OLD (an error's message) may hold OLD too."
  (let ((chat (sly-agent-q-chat-buffer t)))
    (when chat
      (with-current-buffer chat
        (sly-agent-q-input-replace old new)))))

;;;; Attachments

(defun sly-agent-q-chat--fence-language ()
  "The Markdown language tag for the current buffer's text."
  (cond ((derived-mode-p 'emacs-lisp-mode) "elisp")
        ((derived-mode-p 'lisp-mode 'lisp-data-mode) "lisp")
        (t "")))

(defun sly-agent-q-chat--attach (label text language)
  "Attach TEXT described by LABEL, in LANGUAGE, to the next message."
  (with-current-buffer (sly-agent-q-chat-buffer)
    (message "sly-agent-q: attached %s to the next message (%d attached)"
             label (sly-agent-q-input-attach label text language))))

(defun sly-agent-q-chat--describe-source ()
  "The current buffer's file name or buffer name."
  (if buffer-file-name (abbreviate-file-name buffer-file-name) (buffer-name)))

(defun sly-agent-q-attach-region (start end)
  "Attach the region between START and END to the next message."
  (interactive "r")
  (sly-agent-q-chat--attach (format "the region of %s (lines %d-%d)" (sly-agent-q-chat--describe-source)
                               (line-number-at-pos start) (line-number-at-pos end))
                       (buffer-substring-no-properties start end)
                       (sly-agent-q-chat--fence-language)))

(defun sly-agent-q-attach-defun ()
  "Attach the top-level form at point to the next message."
  (interactive)
  (let ((bounds (save-excursion
                  (end-of-defun)
                  (let ((end (point)))
                    (beginning-of-defun)
                    (cons (point) end)))))
    (unless (< (car bounds) (cdr bounds)) (user-error "No defun at point"))
    (sly-agent-q-chat--attach (format "the form at line %d of %s" (line-number-at-pos (car bounds))
                                 (sly-agent-q-chat--describe-source))
                         (buffer-substring-no-properties (car bounds) (cdr bounds))
                         (sly-agent-q-chat--fence-language))))

(defun sly-agent-q-attach-buffer (buffer)
  "Attach the text of BUFFER to the next message."
  (interactive (list (read-buffer "Attach buffer: " (current-buffer) t)))
  (with-current-buffer (get-buffer buffer)
    (sly-agent-q-chat--attach (format "the buffer %s" (sly-agent-q-chat--describe-source))
                         (save-restriction (widen) (buffer-substring-no-properties (point-min) (point-max)))
                         (sly-agent-q-chat--fence-language))))

(defun sly-agent-q-attach-file (file)
  "Attach the contents of FILE to the next message."
  (interactive "fAttach file: ")
  (let ((text (with-temp-buffer
                (insert-file-contents file)
                (buffer-string)))
        (lang (if (string-match-p "\\.\\(lisp\\|lsp\\|cl\\|asd\\)\\'" file) "lisp"
                (if (string-match-p "\\.el\\'" file) "elisp" ""))))
    (sly-agent-q-chat--attach (format "the file %s" (abbreviate-file-name (expand-file-name file)))
                         text lang)))

(defun sly-agent-q-clear-attachments ()
  "Forget the attachments of the next message."
  (interactive)
  (with-current-buffer (sly-agent-q-chat-buffer)
    (sly-agent-q-input-clear-attachments)
    (message "sly-agent-q: attachments cleared")))

(provide 'sly-agent-q-chat)
;;; sly-agent-q-chat.el ends here
