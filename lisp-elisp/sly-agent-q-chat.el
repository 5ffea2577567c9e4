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
;; A turn moves through the states sending (chat/send in flight),
;; running (the server gave it an id) and then ends as finished, failed
;; or cancelled, exactly once.  While it runs, the server's chat/turnState
;; notifications say what it is doing (requesting, streaming,
;; running-tools, awaiting-approval...); the header line shows it
;; first, and `sly-agent-q-chat-turn-transitions' is the chat's view of
;; which state may follow which.  The model's Markdown is rendered as it
;; streams (sly-agent-q-markdown.el).

;;; Code:

(require 'cl-lib)
(require 'subr-x)
(require 'seq)
(require 'button)
(require 'jsonrpc)
(require 'ewoc)
(require 'sly-agent-q-server)
(require 'sly-agent-q-bridge)
(require 'sly-agent-q-display)
(require 'sly-agent-q-markdown)
(require 'sly-agent-q-faces)
(require 'sly-agent-q-chats)

(declare-function json-pretty-print-buffer "json" (&optional minimize))
(autoload 'sly-agent-q-menu "sly-agent-q-menu" nil t)

;;;; Options

(defcustom sly-agent-q-chat-buffer-name "*sly-agent-q*"
  "Name of the first chat buffer; the others are named after their project."
  :type 'string
  :group 'sly-agent-q)

(defcustom sly-agent-q-prompt "> "
  "The prompt in front of the input area."
  :type 'string
  :group 'sly-agent-q)

(defcustom sly-agent-q-turn-state-labels
  '((requesting . "waiting for the model")
    (streaming . "answering")
    (running-tools . "running tools")
    (awaiting-approval . "awaiting approval: C-c C-r answers"))
  "How the header line names the states of a running turn.
Each element is (STATE . LABEL), STATE a symbol of the protocol's
chat/turnState.  A state not listed is shown by its name."
  :type '(alist :key-type symbol :value-type string)
  :group 'sly-agent-q)

(defcustom sly-agent-q-turn-check-interval 15
  "Seconds between two checks, while a turn runs, that the server still runs it.
A turn whose last messages Emacs never read (one it could not parse)
is then ended with an error instead of waiting forever."
  :type 'number
  :group 'sly-agent-q)

(defcustom sly-agent-q-stream-flush-interval 0.05
  "Seconds between insertions of streamed text.
Deltas arriving in between are inserted together."
  :type 'number
  :group 'sly-agent-q)

(defcustom sly-agent-q-attachment-max-chars 100000
  "Largest attachment, in characters; longer text is cut."
  :type 'integer
  :group 'sly-agent-q)

(defcustom sly-agent-q-fontify-code-blocks t
  "Non-nil means fontify Markdown code blocks in answers as Lisp."
  :type 'boolean
  :group 'sly-agent-q)

(defcustom sly-agent-q-fontify-max-chars 20000
  "Largest code block fontified in an answer, in characters.
A larger block is left plain: fontifying it would hold Emacs up."
  :type 'integer
  :group 'sly-agent-q)

(defcustom sly-agent-q-entry-preview-lines 20
  "Most lines of a tool's arguments or result shown in its expanded entry.
The whole text is one key away, in its own buffer:
\\<sly-agent-q-chat-entry-map>\\[sly-agent-q-chat-open-entry] on the entry."
  :type 'integer
  :group 'sly-agent-q)

(defcustom sly-agent-q-entry-preview-line-chars 200
  "Most characters of one line shown in an expanded tool entry.
Longer lines are cut: a line of a megabyte would stall redisplay."
  :type 'integer
  :group 'sly-agent-q)

(defcustom sly-agent-q-header-refresh-interval 0.25
  "Least seconds between two updates of the chat's header line."
  :type 'number
  :group 'sly-agent-q)

(defcustom sly-agent-q-turn-finished-hook nil
  "Functions run when a turn ends, each called with a plist.
The plist has :status (the symbol `finished', `failed' or
`cancelled'), :text (the assistant's final text), :message (why it
failed, if it did), :usage (token counts), :costUsd, :turnId and
:conversationId."
  :type 'hook
  :group 'sly-agent-q)

;;;; Buffer state

(cl-defstruct (sly-agent-q-turn (:constructor sly-agent-q--make-turn))
  "One exchange: the user's message and everything until it ends.
STATE is the last state chat/turnState gave it, a symbol, or nil.
CANCEL-UNSENT is t while a cancel asked for could not be written to
the server (it is sent again a second later, or when the server
speaks), `sending' while that is on its way."
  id conversation-id (status 'sending) callback cancel-requested (start (float-time))
  state watchdog cancel-unsent)

(cl-defstruct (sly-agent-q-entry (:constructor sly-agent-q--make-entry))
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

(defvar-local sly-agent-q-chat--turn nil "The running `sly-agent-q-turn', or nil.")
(defvar-local sly-agent-q-chat--conversation-id nil "The server's id of this conversation.")
(defvar-local sly-agent-q-chat--header "" "The header line's text, as last computed.")
(defvar-local sly-agent-q-chat--header-timer nil "The pending refresh of the header line, or nil.")
(defvar-local sly-agent-q-chat--output nil "Marker at the end of the transcript.")
(defvar-local sly-agent-q-chat--input nil "Marker at the start of the input.")
(defvar-local sly-agent-q-chat--pending "" "Streamed text not inserted yet.")
(defvar-local sly-agent-q-chat--thinking nil
  "The model's reasoning last shown: (HEADER . OVERLAY), or nil.
HEADER is a marker at the start of its header line; OVERLAY covers
its text, hidden until TAB on the header shows it.")
(defvar-local sly-agent-q-chat--flush-timer nil "Timer inserting `sly-agent-q-chat--pending'.")
(defvar-local sly-agent-q-chat--segment nil "Marker at the start of the agent's current text, or nil.")
(defvar-local sly-agent-q-chat--entries nil "Hash table of tool entries by call id.")
(defvar-local sly-agent-q-chat--usage nil "The conversation's token usage plist.")
(defvar-local sly-agent-q-chat--cost nil "The conversation's cost in USD.")
(defvar-local sly-agent-q-chat--model nil "The model that answered last.")
(defvar-local sly-agent-q-chat--history nil "Sent messages, newest first.")
(defvar-local sly-agent-q-chat--history-index nil "Position in the history while walking it.")
(defvar-local sly-agent-q-chat--history-draft nil "The input before walking the history.")
(defvar-local sly-agent-q-chat--attachments nil "Context for the next message: plists (:label :text).")
(defvar-local sly-agent-q-chat--rendered nil
  "Marker up to which the agent's current text was queued for rendering.")
(defvar-local sly-agent-q-chat--render-queue nil
  "The agent's text inserted but not rendered yet, oldest first.
Each is a list (CONTEXT FROM TO CODE): markers at the start of its
run of text, at what is still to render and at its end; CODE, a
marker at the start of a run of text now complete, whose code blocks
are fontified once the text is rendered, or nil.")
(defvar-local sly-agent-q-chat--render-timer nil
  "Timer rendering the rest of `sly-agent-q-chat--render-queue'.")
(defvar sly-agent-q-chat--render-step-chars 16000
  "Most characters of the agent's text rendered in one step.
Rendering 100,000 characters that came at once held Emacs over 100 ms;
the rest is rendered from timers, with keys read between.")
(defvar-local sly-agent-q-chat--prompt-break nil
  "Overlay that puts the prompt on a line of its own.")
(defvar-local sly-agent-q-chat--title nil "The saved conversation's title, when it was resumed.")
(defvar-local sly-agent-q-chat--input-hold nil
  "Why the input may not be sent yet: (MESSAGE DEADLINE PLACEHOLDER), or nil.
See `sly-agent-q-chat-hold-input'.")
(defvar-local sly-agent-q-chat--server-died nil
  "Non-nil when the server died since this buffer last used it.")

(defconst sly-agent-q-chat--read-only
  '(read-only t front-sticky (read-only) rear-nonsticky t)
  "Text properties of transcript text.")

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
  (setq-local sly-agent-q-chat--entries (make-hash-table :test #'equal))
  (setq-local truncate-lines nil)
  (setq-local word-wrap t)
  (setq-local header-line-format '(:eval sly-agent-q-chat--header))
  (setq sly-agent-q-chat--header (sly-agent-q-chat--header-line))
  (let ((inhibit-read-only t))
    (erase-buffer)
    (insert (sly-agent-q-chat--notice-string
             "sly-agent-q: ask about your Lisp image.  RET sends, C-j newline, C-c C-k cancels, M-p/M-r history, C-c C-m menu.")
            "\n")
    (add-text-properties (point-min) (point) sly-agent-q-chat--read-only)
    (let ((prompt-start (point)))
      (insert (sly-agent-q-chat--prompt-string sly-agent-q-prompt))
      (setq sly-agent-q-chat--output (copy-marker prompt-start t))
      (setq sly-agent-q-chat--input (copy-marker (point) nil))))
  (sly-agent-q-markdown-setup)
  (add-hook 'kill-buffer-hook #'sly-agent-q-chat--on-kill nil t))

(defun sly-agent-q-chat--on-kill ()
  "The chat buffer is being killed: stop its timer, its turn, its conversation."
  (sly-agent-q-chat--cancel-timer)
  (let ((turn sly-agent-q-chat--turn))
    (when (and turn (sly-agent-q-turn-id turn))
      (sly-agent-q-chat--fire-and-forget 'chat/cancel (list :turnId (sly-agent-q-turn-id turn)))))
  (sly-agent-q-chat--free-conversation))

(defun sly-agent-q-chat--fire-and-forget (method params)
  "Send request METHOD with PARAMS to a running server; ignore its answer.
Nothing waits, and no server is started for it."
  (when (sly-agent-q-server-live-p)
    (ignore-errors
      (sly-agent-q-server-async-request (sly-agent-q-server-connection) method params
                                        :success-fn #'ignore :error-fn #'ignore
                                        :timeout-fn #'ignore))))

(defun sly-agent-q-chat--free-conversation ()
  "Tell the server to forget this buffer's conversation, and forget its id here."
  (when sly-agent-q-chat--conversation-id
    (sly-agent-q-chat--fire-and-forget
     'conversation/delete (list :conversationId sly-agent-q-chat--conversation-id))
    (setq sly-agent-q-chat--conversation-id nil)))

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

(defun sly-agent-q-chat--buffers ()
  "The live chat buffers."
  (sly-agent-q-chats-list))

;;;; Writing into the transcript

(defun sly-agent-q-chat--notice-string (text &optional face)
  "TEXT as a notice, in FACE (default `sly-agent-q-meta-face')."
  (propertize text 'face (or face 'sly-agent-q-meta-face)))

(defmacro sly-agent-q-chat--at-output (&rest body)
  "Run BODY with point at the end of the transcript, which it may extend.
Everything BODY inserts becomes read-only.  Returns BODY's value."
  (declare (indent 0) (debug t))
  (let ((start (make-symbol "start")))
    `(let ((inhibit-read-only t)
           (buffer-undo-list t)
           (,start (marker-position sly-agent-q-chat--output)))
       (save-excursion
         (goto-char sly-agent-q-chat--output)
         (prog1 (progn ,@body)
           (add-text-properties ,start sly-agent-q-chat--output sly-agent-q-chat--read-only)
           (sly-agent-q-chat--break-before-prompt))))))


(defun sly-agent-q-chat--break-before-prompt ()
  "Show the prompt on a line of its own, whatever the transcript ends with.
Streamed text ends where the model is in its sentence; the line break
is drawn, not inserted, so the transcript's text stays the model's."
  (let ((pos (marker-position sly-agent-q-chat--output)))
    (unless (overlayp sly-agent-q-chat--prompt-break)
      (setq sly-agent-q-chat--prompt-break (make-overlay pos pos nil t nil)))
    (move-overlay sly-agent-q-chat--prompt-break pos pos)
    (overlay-put sly-agent-q-chat--prompt-break 'before-string
                 (and (> pos (point-min)) (not (eq (char-before pos) ?\n)) "\n"))))

(defmacro sly-agent-q-chat--in (buffer &rest body)
  "Run BODY in BUFFER if it is live."
  (declare (indent 1) (debug t))
  `(when (buffer-live-p ,buffer) (with-current-buffer ,buffer ,@body)))

(defun sly-agent-q-chat--fresh-line ()
  "Start a new line at the end of the transcript unless one is started."
  (sly-agent-q-chat--at-output
    (unless (or (= (point) (point-min)) (eq (char-before) ?\n))
      (insert "\n"))))

(defun sly-agent-q-chat-insert (&rest strings)
  "Insert STRINGS at the end of the transcript of the current chat buffer."
  (sly-agent-q-chat--at-output (apply #'insert strings)))

(defun sly-agent-q-chat-notice (text &optional face)
  "Insert TEXT as a notice line in FACE in the current chat buffer.
TEXT may hold text from outside (an error, a title): it is drawn as
one line of data (`sly-agent-q-display-line'), cut when very long."
  (sly-agent-q-chat--end-text)
  (sly-agent-q-chat-insert (sly-agent-q-chat--notice-string
                            (sly-agent-q-display-line text 2000) face)
                           "\n"))

;;;; What is said while no server is installed

(defun sly-agent-q-chat-error-notice (message)
  "Insert \"Error: MESSAGE\" as a notice in the current chat buffer.
An error said while no server is found is marked: it stops being true
once `sly-agent-q-install-server' installs one, and that install takes
it away (`sly-agent-q-chat--on-install-finished')."
  (let ((missing (condition-case nil (null (sly-agent-q-server-find)) (user-error nil))))
    (sly-agent-q-chat--end-text)
    (let ((start (marker-position sly-agent-q-chat--output)))
      (sly-agent-q-chat-notice (concat "Error: " message) 'sly-agent-q-error-face)
      (when missing
        (let ((inhibit-read-only t) (buffer-undo-list t))
          (put-text-property start sly-agent-q-chat--output 'sly-agent-q-server-missing t))))))

(defun sly-agent-q-chat--installed-notice ()
  "What to say once a server is installed, as the chat will find it."
  (let ((found (condition-case nil (sly-agent-q-server-find) (user-error nil)))
        (version (or (sly-agent-q-install-installed-version) "?")))
    (cond ((not (eq (cdr found) 'installed))
           (format "[The sly-agent-q server %s is installed, but the one used is %s.]"
                   version (if found (abbreviate-file-name (car found)) "none")))
          ((sly-agent-q-server-live-p)
           (format "[The sly-agent-q server %s is installed: M-x sly-agent-q-restart-server \
puts it in place of the one running.]" version))
          (t (format "[The sly-agent-q server %s is installed: the next message starts it.]"
                     version)))))

(defun sly-agent-q-chat--on-install-finished (error)
  "An install ended with ERROR (nil on success): correct what each chat said.
On success, the errors saying no server is installed are taken away and
the chat says the server is there."
  (unless error
    (dolist (buf (sly-agent-q-chat--buffers))
      (with-current-buffer buf
        (let ((inhibit-read-only t) (buffer-undo-list t) (pos (point-min)))
          (while (setq pos (text-property-any pos sly-agent-q-chat--output
                                              'sly-agent-q-server-missing t))
            (let ((end (or (text-property-not-all pos sly-agent-q-chat--output
                                                  'sly-agent-q-server-missing t)
                           sly-agent-q-chat--output)))
              ;; The mark covers the notice's whole line, its newline too.
              (delete-region pos end))))
        (sly-agent-q-chat-notice (sly-agent-q-chat--installed-notice))))))

(add-hook 'sly-agent-q-install-finished-functions #'sly-agent-q-chat--on-install-finished)

;;;; Streaming

(defun sly-agent-q-chat--cancel-timer ()
  "Cancel the flush timer of the current buffer."
  (when sly-agent-q-chat--flush-timer
    (cancel-timer sly-agent-q-chat--flush-timer)
    (setq sly-agent-q-chat--flush-timer nil)))

(defun sly-agent-q-chat--add-text (text)
  "Queue streamed TEXT; it is inserted by the next flush.
TEXT comes from the model: it is drawn as data (`sly-agent-q-display-text')."
  (setq sly-agent-q-chat--pending (concat sly-agent-q-chat--pending
                                          (sly-agent-q-display-text text)))
  (unless sly-agent-q-chat--flush-timer
    (let ((buf (current-buffer)))
      (setq sly-agent-q-chat--flush-timer
            (run-with-timer sly-agent-q-stream-flush-interval nil
                            (lambda ()
                              (when (buffer-live-p buf)
                                (with-current-buffer buf
                                  (setq sly-agent-q-chat--flush-timer nil)
                                  (sly-agent-q-chat--flush)))))))))

(defun sly-agent-q-chat--flush ()
  "Insert the queued streamed text now."
  (sly-agent-q-chat--cancel-timer)
  (unless (string-empty-p sly-agent-q-chat--pending)
    (let ((text sly-agent-q-chat--pending))
      (setq sly-agent-q-chat--pending "")
      (unless sly-agent-q-chat--segment
        (sly-agent-q-chat--fresh-line)
        (setq sly-agent-q-chat--segment (copy-marker sly-agent-q-chat--output nil)
              sly-agent-q-chat--rendered (copy-marker sly-agent-q-chat--output nil)))
      (sly-agent-q-chat-insert text)
      ;; The lines complete now are rendered now; the last, partial one waits.
      (let ((end (save-excursion
                   (goto-char sly-agent-q-chat--output)
                   (and (search-backward "\n" sly-agent-q-chat--rendered t) (1+ (point))))))
        (when end (sly-agent-q-chat--render sly-agent-q-chat--rendered end))))))

(defun sly-agent-q-chat--render (start end &optional complete)
  "Render the Markdown of the agent's text from START to END.
With COMPLETE, the run of text ends at END: its code blocks are
fontified after.  What is more than a step's worth is rendered later
\=(`sly-agent-q-chat--render-step-chars'), in order."
  (setq sly-agent-q-chat--render-queue
        (nconc sly-agent-q-chat--render-queue
               (list (list (copy-marker sly-agent-q-chat--segment) (copy-marker start)
                           (copy-marker end)
                           (and complete (copy-marker sly-agent-q-chat--segment))))))
  (set-marker sly-agent-q-chat--rendered end)
  (unless sly-agent-q-chat--render-timer
    (sly-agent-q-chat--render-some)))

(defvar sly-agent-q-chat--markdown-mode-step-chars 1000
  "Most characters rendered in one step when markdown-mode renders.
Its font lock costs about ten times the chat's own renderer's (and
more in a long paragraph): 16,000 characters of ordinary Markdown held
Emacs 0.7 s, of one long paragraph tens of seconds.")

(defun sly-agent-q-chat--render-some ()
  "Render a step's worth of `sly-agent-q-chat--render-queue'; ask for the rest."
  (let ((budget (if (and sly-agent-q-markdown-use-markdown-mode sly-agent-q-markdown-render
                         (sly-agent-q-markdown-mode-available-p))
                    (min sly-agent-q-chat--render-step-chars sly-agent-q-chat--markdown-mode-step-chars)
                  sly-agent-q-chat--render-step-chars))
        (inhibit-read-only t)
        (buffer-undo-list t))
    (while (and sly-agent-q-chat--render-queue (> budget 0))
      (condition-case err
          (setq budget (sly-agent-q-chat--render-job budget))
        (error
         ;; That run of text stays as written; the rest is still rendered.
         (message "sly-agent-q: rendering the agent's text failed: %s" (error-message-string err))
         (sly-agent-q-chat--drop-render-job))))
    (setq sly-agent-q-chat--render-timer
          (and sly-agent-q-chat--render-queue
               (sly-agent-q-display-next-step #'sly-agent-q-chat--render-some)))))

(defun sly-agent-q-chat--render-job (budget)
  "Render up to BUDGET characters of the first job of the render queue.
Return the budget left; a job done leaves the queue."
  (pcase-let ((`(,context ,from ,to ,code) (car sly-agent-q-chat--render-queue)))
    (if (< from to)
        (let ((end (save-excursion
                     (goto-char (min to (+ from budget)))
                     (unless (or (= (point) to) (bolp)) (forward-line 1))
                     (min (point) to))))
          (sly-agent-q-markdown-render-region context from end)
          (cl-decf budget (- end from))
          (set-marker from end))
      ;; Rendered; a complete run of text then has its code blocks
      ;; fontified, one at a time (each costs about as much as rendering it).
      (when (and code (= code context))
        (sly-agent-q-markdown-show-fences code to))
      (while (and code sly-agent-q-fontify-code-blocks (< code to) (> budget 0))
        (let ((next (sly-agent-q-chat--fontify-next-code-block code to)))
          (cl-decf budget (- next code))
          (set-marker code next)))
      (when (or (null code) (not sly-agent-q-fontify-code-blocks) (>= code to))
        (sly-agent-q-chat--drop-render-job)))
    budget))

(defun sly-agent-q-chat--drop-render-job ()
  "Take the first job off the render queue, its markers freed."
  (dolist (m (pop sly-agent-q-chat--render-queue)) (and m (set-marker m nil))))

(defun sly-agent-q-chat--end-segment ()
  "The agent's current run of text is complete: fontify its code blocks."
  (when sly-agent-q-chat--segment
    (sly-agent-q-chat--render sly-agent-q-chat--rendered sly-agent-q-chat--output t)
    (set-marker sly-agent-q-chat--rendered nil)
    (set-marker sly-agent-q-chat--segment nil)
    (setq sly-agent-q-chat--segment nil)))

(defun sly-agent-q-chat--end-text ()
  "End the agent's run of text and start a fresh line.
The queued text is inserted and its code blocks are fontified."
  (sly-agent-q-chat--flush)
  (sly-agent-q-chat--end-segment)
  (sly-agent-q-chat--fresh-line))

(defun sly-agent-q-chat--insert-user-message (text &optional labels)
  "Insert the user's message TEXT and the agent's heading under it.
LABELS name the message's attachments."
  (sly-agent-q-chat--end-text)
  (sly-agent-q-chat-insert
   "\n" (propertize "You:" 'face 'sly-agent-q-user-face) " "
   (if labels (sly-agent-q-chat--notice-string
               (concat (mapconcat (lambda (l) (format "[attached %s]" (sly-agent-q-display-line l))) labels " ")
                       "\n"))
     "")
   (sly-agent-q-display-text text) "\n\n"
   (propertize "Agent:" 'face 'sly-agent-q-assistant-face) "\n"))

(defun sly-agent-q-chat--code-mode (lang)
  "The major mode for code blocks tagged LANG, or nil for none."
  (let ((l (downcase (or lang ""))))
    (cond ((member l '("" "lisp" "common-lisp" "cl" "commonlisp" "lsp")) #'lisp-mode)
          ((member l '("elisp" "emacs-lisp" "el")) #'emacs-lisp-mode)
          ((member l '("scheme")) #'scheme-mode))))

(defun sly-agent-q-chat--fontify-next-code-block (start end)
  "Fontify the first Markdown code block between START and END.
Its code gets the faces of its language's mode; under them, the
block, fences included, gets `sly-agent-q-code-block-face', added
after the tokens' faces, so that the band has no gap.  Return where
the block ends, or END when there is none."
  (save-excursion
    (goto-char start)
    (if (not (re-search-forward "^[ \t]*```\\([^ \t\n`]*\\)[^\n]*\n" end t))
        end
      (let* ((fence-start (match-beginning 0))
             (code-start (match-end 0))
             (mode (sly-agent-q-chat--code-mode (match-string 1)))
             (closed (re-search-forward "^[ \t]*```[ \t]*$" end 'move))
             (code-end (if closed (match-beginning 0) (point)))
             (fence-end (point))
             (band-end (if (and closed (< (point) end)) (1+ (point)) (point))))
        ;; The code's faces are its language's alone: a renderer's (markdown-mode
        ;; reads an unclosed block as Markdown) would show through between tokens.
        (remove-text-properties fence-start band-end '(face nil))
        (put-text-property fence-start (1- code-start) 'face 'sly-agent-q-code-fence-face)
        (when closed
          (put-text-property code-end fence-end 'face 'sly-agent-q-code-fence-face)
          (when (and mode (<= (- code-end code-start) sly-agent-q-fontify-max-chars))
            ;; A mode that fails is the user's to mend; the block stays
            ;; plain, and the rest of the answer, and later ones, render.
            (condition-case err
                (sly-agent-q-chat--fontify-as mode code-start code-end)
              (error (message "sly-agent-q: %s could not fontify a code block: %s"
                              mode (error-message-string err))))))
        (add-face-text-property fence-start band-end 'sly-agent-q-code-block-face t)
        fence-end))))

(defun sly-agent-q-chat--fontify-buffer (mode)
  "The hidden buffer in MODE where code blocks are fontified.
It is kept: setting a mode up for each block cost as much as
fontifying it (the way Org fontifies source blocks)."
  (let ((buffer (get-buffer-create (format " *sly-agent-q-fontify %s*" mode))))
    (with-current-buffer buffer
      (unless (eq major-mode mode)
        (condition-case err
            (delay-mode-hooks (funcall mode))
          ;; Named in the mode already, the buffer would pass for set up.
          (error (kill-buffer buffer)
                 (signal (car err) (cdr err))))))
    buffer))

(defun sly-agent-q-chat--fontify-as (mode start end)
  "Give the text between START and END the faces MODE's font lock gives it."
  (let ((code (buffer-substring-no-properties start end))
        (faces nil))
    (with-current-buffer (sly-agent-q-chat--fontify-buffer mode)
      (let ((inhibit-read-only t) (buffer-undo-list t))
        (erase-buffer)
        (insert code))
      ;; Else a buffer fontified once counts as fontified for good.
      (setq font-lock-fontified nil)
      (ignore-errors (font-lock-ensure))
      (let ((pos (point-min)))
        (while (< pos (point-max))
          (let ((next (next-single-property-change pos 'face nil (point-max)))
                (face (get-text-property pos 'face)))
            (when face (push (list (1- pos) (1- next) face) faces))
            (setq pos next)))))
    (dolist (f faces)
      (put-text-property (+ start (nth 0 f)) (+ start (nth 1 f)) 'face (nth 2 f)))))

;;;; The model's reasoning

(defvar sly-agent-q-chat-thinking-map
  (let ((map (make-sparse-keymap)))
    (set-keymap-parent map button-map)
    (define-key map (kbd "TAB") #'sly-agent-q-chat-toggle-thinking)
    (define-key map (kbd "<tab>") #'sly-agent-q-chat-toggle-thinking)
    map)
  "Keymap on the header of the model's reasoning.")

(define-button-type 'sly-agent-q-thinking
  'action (lambda (button) (goto-char button) (sly-agent-q-chat-toggle-thinking))
  'keymap sly-agent-q-chat-thinking-map
  'follow-link t
  'help-echo "TAB or RET: show or hide the model's reasoning")

(defun sly-agent-q-chat--add-thinking (text &optional redacted)
  "Add TEXT, a piece of the model's reasoning, to its folded section.
The section is started above the answer it leads to; REDACTED: the
API encrypted that reasoning, shown as \"(redacted)\".  TEXT comes
from the model: drawn as data (`sly-agent-q-display-text')."
  (let ((piece (if redacted "(redacted)\n" (sly-agent-q-display-text (or text ""))))
        (section sly-agent-q-chat--thinking))
    ;; A section goes on only while nothing else was written after it.
    (unless (and section (= (overlay-end (cdr section)) sly-agent-q-chat--output))
      (sly-agent-q-chat--end-text)
      (let ((header (copy-marker sly-agent-q-chat--output))
            (body (progn (sly-agent-q-chat-insert "\n")
                         (marker-position sly-agent-q-chat--output))))
        ;; The text ends with a newline of its own, hidden with it: what follows starts a line.
        (sly-agent-q-chat-insert "\n")
        (let ((overlay (make-overlay body sly-agent-q-chat--output))
              (frame (propertize sly-agent-q-display-outside-frame
                                 'face 'sly-agent-q-display-frame-face)))
          (overlay-put overlay 'invisible t)
          (overlay-put overlay 'sly-agent-q-frame frame)
          (setq section (cons header overlay)
                sly-agent-q-chat--thinking section))))
    (let* ((overlay (cdr section))
           (inhibit-read-only t) (buffer-undo-list t)
           (at (1- (overlay-end overlay))))
      (save-excursion
        (goto-char at)
        ;; Redacted reasoning stands on a line of its own.
        (when (and redacted (> at (overlay-start overlay)) (not (eq (char-before) ?\n)))
          (setq piece (concat "\n" piece)))
        (insert (propertize piece 'face 'sly-agent-q-meta-face))
        (add-text-properties at (point) sly-agent-q-chat--read-only))
      (sly-agent-q-chat--draw-thinking-header (car section) overlay))))

(defun sly-agent-q-chat--draw-thinking-header (header overlay)
  "Write the header line at HEADER of the reasoning OVERLAY folds."
  (let* ((open (not (overlay-get overlay 'invisible)))
         (frame (and open (overlay-get overlay 'sly-agent-q-frame))))
    ;; Opened, every line of it (wrapped ones too) is drawn after the frame of
    ;; text from outside: without colours it still never reads as the chat's
    ;; own.  Folded, no prefix: a line starting in hidden text takes that
    ;; text's prefix, which framed the tool entry or answer after it.
    (overlay-put overlay 'line-prefix frame)
    (overlay-put overlay 'wrap-prefix frame)
    (sly-agent-q-chat--draw-thinking-header-line header overlay open)))

(defun sly-agent-q-chat--draw-thinking-header-line (header overlay open)
  "Write the header line at HEADER of OVERLAY, OPEN or folded."
  (let* ((inhibit-read-only t) (buffer-undo-list t)
         (body (overlay-start overlay))
         ;; Counted before the old header goes, which moves the overlay.
         (tokens (max 1 (/ (+ (- (overlay-end overlay) body) 3) 4))))
    (save-excursion
      (delete-region header (1- body))
      (goto-char header)
      (insert (propertize (format "%s Thinking… %s tokens" (if open "▾" "▸")
                                  (sly-agent-q-chat--format-tokens tokens))
                          'face 'sly-agent-q-meta-face))
      (make-text-button header (point) :type 'sly-agent-q-thinking 'sly-agent-q-thinking overlay)
      (add-face-text-property header (1+ header) 'sly-agent-q-toggle-face)
      (add-text-properties header (point) sly-agent-q-chat--read-only))))

(defun sly-agent-q-chat-toggle-thinking ()
  "Show or hide the model's reasoning whose header is at point."
  (interactive)
  (let* ((button (button-at (point)))
         (overlay (and button (button-get button 'sly-agent-q-thinking))))
    (when (overlayp overlay)
      (overlay-put overlay 'invisible (not (overlay-get overlay 'invisible)))
      (sly-agent-q-chat--draw-thinking-header (button-start button) overlay))))

;;;; Tool entries

(defvar sly-agent-q-chat-entry-map
  (let ((map (make-sparse-keymap)))
    (set-keymap-parent map button-map)
    (define-key map (kbd "TAB") #'sly-agent-q-chat-toggle-entry)
    (define-key map (kbd "<tab>") #'sly-agent-q-chat-toggle-entry)
    (define-key map (kbd "o") #'sly-agent-q-chat-open-entry)
    map)
  "Keymap on tool entries.")

(define-button-type 'sly-agent-q-entry
  'action #'sly-agent-q-chat--entry-button
  'keymap sly-agent-q-chat-entry-map
  'follow-link t
  'help-echo "TAB or RET: show or hide the details; o: the whole text in its own buffer")

(defun sly-agent-q-chat--json (value)
  "VALUE (parsed JSON) as pretty-printed JSON text."
  (if (null value) "{}"
    (condition-case nil
        (with-temp-buffer
          (insert (sly-agent-q-display-json value))
          (require 'json)
          (json-pretty-print-buffer)
          (buffer-string))
      (error (format "%S" value)))))

(defun sly-agent-q-chat--lisp-summary (form)
  "The Lisp source FORM as a summary: its first line's start, drawn as data.
An ellipsis at its end says that there was more.  Only the start of
FORM is looked at, however long it is."
  (let* ((start (or (string-match-p "[^ \t\n\r]" form) (length form)))
         (nl (string-search "\n" form start))
         (end (min (or nl (length form)) (+ start 60)))
         (more (string-match-p "[^ \t\n\r]" form end)))
    (concat (sly-agent-q-display-line (string-trim-right (substring form start end)) t)
            (if more "…" ""))))

(defun sly-agent-q-chat--summary-value (value)
  "VALUE, a tool argument that is not Lisp source, in short on one line.
A string shows its first 40 characters, quoted, and after its closing
quote how many more it has; any other value its JSON, cut at 40."
  (if (stringp value)
      (concat (sly-agent-q-display-line (prin1-to-string (substring value 0 (min 40 (length value)))) t)
              (if (> (length value) 40)
                  (propertize (format "…[%d more characters]" (- (length value) 40)) 'face 'escape-glyph)
                ""))
    (sly-agent-q-display-line (sly-agent-q-display-json value) 40)))

(defun sly-agent-q-chat--summarize-arguments (args &optional lisp)
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
                                            (sly-agent-q-chat--lisp-summary v)
                                          (sly-agent-q-chat--summary-value v)))))
        (shown nil) (width 0))
    (while (and parts (<= (+ width (string-width (car parts))) 160))
      (setq width (+ width 1 (string-width (car parts))))
      (push (pop parts) shown))
    (concat (string-join (nreverse shown) " ")
            (cond ((null parts) "")
                  (shown " …")
                  (t "…")))))

(defconst sly-agent-q-chat--entry-indent "      "
  "The indentation of a tool entry's arguments and result, before their frame.")

(defun sly-agent-q-chat--preview (text &optional lisp)
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
           (shown (sly-agent-q-display-framed source sly-agent-q-chat--entry-indent nil
                                              (and lisp (sly-agent-q-faces-lisp source)))))
      (if (or cut (< start len))
          (concat shown
                  (propertize
                   (format "\n%s[%s characters in all, %s; o on the entry opens the whole text]"
                           sly-agent-q-chat--entry-indent
                           (sly-agent-q-chat--format-tokens len)
                           (if (< start len)
                               (format "%s more after these lines"
                                       (sly-agent-q-chat--format-tokens (- len start)))
                             "long lines cut"))
                   'face 'sly-agent-q-meta-face))
        shown))))

(defun sly-agent-q-chat--ms (ms)
  "MS, a number of milliseconds or nil, as a short string."
  (if (numberp ms) (format "%d" (round ms)) "?"))

(defun sly-agent-q-chat--wait (ms)
  "MS, the wait for an approval in milliseconds, as a short phrase, or \"\"."
  (if (numberp ms)
      (format " · waited %s for approval"
              (if (< ms 1000) (format "%d ms" (round ms)) (format "%.1f s" (/ ms 1000.0))))
    ""))

(defun sly-agent-q-chat--command-failure (entry)
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

(defun sly-agent-q-chat--entry-state (entry)
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
      ('ok (let ((failed (sly-agent-q-chat--command-failure entry)))
             (concat (if failed
                         (propertize (concat "✗ " failed) 'face 'sly-agent-q-error-face)
                       (propertize "✓" 'face 'sly-agent-q-success-face))
                     (propertize (format " %s ms%s" (sly-agent-q-chat--ms (sly-agent-q-entry-time-ms entry))
                                         (sly-agent-q-chat--wait (sly-agent-q-entry-wait-ms entry)))
                                 'face 'sly-agent-q-meta-face))))
      (_ (let ((state (concat "✗ " (sly-agent-q-display-line
                                     (car (split-string (or (sly-agent-q-entry-error entry) "failed") "\n"))
                                     80))))
           ;; Under the face of its escapes (`escape-glyph').
           (add-face-text-property 0 (length state) 'sly-agent-q-error-face t state)
           state)))))

(defun sly-agent-q-chat--arguments-preview (arguments lisp)
  "The tool ARGUMENTS (a plist) framed for an expanded entry, bounded.
LISP names the arguments (strings) that hold Lisp source: each is
shown as Lisp, in its own framed block fontified as `lisp-mode'
fontifies it (never as a JSON string with \\n); the others as JSON."
  (let ((json nil) (forms nil))
    (cl-loop for (k v) on (and (listp arguments) arguments) by #'cddr
             for name = (substring (symbol-name k) 1)
             do (if (and (stringp v) (member name lisp))
                    (push (cons name v) forms)
                  (setq json (plist-put json k v))))
    (mapconcat
     #'identity
     (append
      (and (or json (null forms))
           (list (sly-agent-q-chat--preview (sly-agent-q-chat--json json))))
      (mapcar (lambda (form)
                (concat sly-agent-q-chat--entry-indent
                        (propertize (format "%s:" (sly-agent-q-display-line (car form) 30))
                                    'face 'sly-agent-q-meta-face)
                        "\n"
                        (sly-agent-q-chat--preview (cdr form) t)))
              (nreverse forms)))
     "\n")))

(defcustom sly-agent-q-chat-live-output-lines 8
  "Lines of a running command's output shown live in its tool entry."
  :type 'integer
  :group 'sly-agent-q)

(defun sly-agent-q-chat--last-lines (text n)
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

(defun sly-agent-q-chat--bytes (n)
  "N bytes, a number or nil, as a short phrase."
  (cond ((not (numberp n)) "? bytes")
        ((< n 10000) (format "%d bytes" n))
        ((< n 10000000) (format "%d KB" (round n 1000)))
        (t (format "%d MB" (round n 1000000)))))

(defun sly-agent-q-chat--render-entry (entry)
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
                  (sly-agent-q-chat--summarize-arguments
                   (or ran (sly-agent-q-entry-arguments entry)) lisp))))
    (let ((start (point)))
      (insert "  ")
      (insert-text-button summary 'type 'sly-agent-q-entry 'sly-agent-q-entry entry
                          'face 'sly-agent-q-tool-face)
      (add-face-text-property (+ start 2) (+ start 3) 'sly-agent-q-toggle-face)
      (insert "  " (sly-agent-q-chat--entry-state entry) "\n")
      ;; Its arguments are the model's: wrapped deeper than the product's lines start.
      (put-text-property start (point) 'wrap-prefix "    "))
    ;; A running command's last lines, live: what the server sends is a bounded tail, a few times a
    ;; second at most, and only its last lines are drawn.
    ;; A call stopped before its end (cancelled) keeps the last lines it showed.
    (when (and (memq status '(running error)) (sly-agent-q-entry-output entry))
      (let ((live (concat (format (if (eq status 'running)
                                      "    output so far (%s), its last lines:\n"
                                    "    output before it stopped (%s), its last lines:\n")
                                  (sly-agent-q-chat--bytes (sly-agent-q-entry-output-bytes entry)))
                          (sly-agent-q-chat--preview
                           (sly-agent-q-chat--last-lines (sly-agent-q-entry-output entry)
                                                         sly-agent-q-chat-live-output-lines))
                          "\n")))
        (add-face-text-property 0 (length live) 'sly-agent-q-meta-face t live)
        (insert live)))
    (when (sly-agent-q-entry-expanded entry)
      ;; The arguments and result are framed (`sly-agent-q-chat--preview');
      ;; the product's lines around them are meta text.
      (let* ((meta (lambda (text) (propertize text 'face 'sly-agent-q-meta-face)))
             (details
              (concat (funcall meta (if ran "    arguments that ran (edited by the user):\n" "    arguments:\n"))
                      (sly-agent-q-chat--arguments-preview (or ran (sly-agent-q-entry-arguments entry)) lisp)
                      "\n"
                      (if ran
                          (concat (funcall meta "    the model's arguments:\n")
                                  (sly-agent-q-chat--arguments-preview (sly-agent-q-entry-arguments entry) lisp)
                                  "\n")
                        "")
                      (pcase status
                        ((or 'queued 'running 'approval) (funcall meta "    (no result yet)\n"))
                        ('ok (concat (funcall meta "    result:\n")
                                     (sly-agent-q-chat--preview (or (sly-agent-q-entry-content entry) ""))
                                     "\n"))
                        (_ (concat (propertize "    error:\n" 'face 'sly-agent-q-error-face)
                                   (sly-agent-q-chat--preview (or (sly-agent-q-entry-error entry) ""))
                                   "\n")))
                      (if (sly-agent-q-entry-time-ms entry)
                          (funcall meta
                                   (format "    time: %s ms%s%s\n" (sly-agent-q-chat--ms (sly-agent-q-entry-time-ms entry))
                                           (sly-agent-q-chat--wait (sly-agent-q-entry-wait-ms entry))
                                           (if (eq (sly-agent-q-entry-approved entry) t) "" "  (not approved)")))
                        ""))))
        ;; A line that has no frame of its own wraps at the details' indentation.
        (sly-agent-q-display-keep-place 0 (length details) "      " details)
        (insert details)))))

(defun sly-agent-q-chat-json (value)
  "VALUE (parsed JSON) as pretty-printed JSON text, as tool entries show it."
  (sly-agent-q-chat--json value))

;;;; Sections: parts of the transcript that are redrawn

;; A section (a tool entry, an approval) is an ewoc of one node, made
;; where the section starts.  Streamed text, notices and the user's
;; messages stay plain text inserted at `sly-agent-q-chat--output', so
;; the streaming path is one `insert' with no ewoc to keep in step;
;; one ewoc for the whole transcript would delete whatever text sits
;; between two of its nodes when the first is redrawn.  The section's
;; last newline is the ewoc's footer: a redraw deletes and reinserts
;; only the node before it, so the markers of whatever follows (the
;; next section) are never at the deleted text's end, where they would
;; collapse onto the redrawn text's start.

(defun sly-agent-q-chat--section-printer (render)
  "Insert a section by calling RENDER; its text becomes read-only.
The last newline RENDER inserts is left to the section's footer."
  (let ((start (point)))
    (funcall render)
    (when (and (> (point) start) (eq (char-before) ?\n))
      (delete-char -1))
    (add-text-properties start (point) sly-agent-q-chat--read-only)))

(defun sly-agent-q-chat-insert-section (render)
  "End the agent's text, then call RENDER on a fresh transcript line.
RENDER inserts whole lines at point, in the current chat buffer; it is
called again on each `sly-agent-q-chat-redraw-section'.  Return the
section."
  (sly-agent-q-chat--end-text)
  (sly-agent-q-chat--at-output
    (let ((section (ewoc-create #'sly-agent-q-chat--section-printer "" "\n" t)))
      (ewoc-enter-last section render)
      section)))

(defun sly-agent-q-chat-redraw-section (section)
  "Redraw SECTION alone, calling its RENDER again.
The rest of the transcript is not touched."
  (let ((buffer (ewoc-buffer section)))
    (when (buffer-live-p buffer)
      (with-current-buffer buffer
        (let ((buffer-undo-list t))
          (ewoc-invalidate section (ewoc-nth section 0)))))))

(defun sly-agent-q-chat--redraw-entry (entry)
  "Redraw ENTRY in place."
  (sly-agent-q-chat-redraw-section (sly-agent-q-entry-section entry)))

(defvar sly-agent-q-chat-entry-note-functions nil
  "Functions asked, with a tool call's id, for the note of its new entry.
The first non-nil answer is the entry's NOTE (`sly-agent-q-entry'): a
call may wait for something (the helpers' load) before its entry is
drawn.")

(defun sly-agent-q-chat--add-entry (entry)
  "Insert ENTRY at the end of the transcript."
  (unless (sly-agent-q-entry-note entry)
    (setf (sly-agent-q-entry-note entry)
          (run-hook-with-args-until-success 'sly-agent-q-chat-entry-note-functions
                                            (sly-agent-q-entry-call-id entry))))
  (setf (sly-agent-q-entry-section entry)
        (sly-agent-q-chat-insert-section (lambda () (sly-agent-q-chat--render-entry entry))))
  (puthash (sly-agent-q-entry-call-id entry) entry sly-agent-q-chat--entries))

(defun sly-agent-q-chat--entry-button (button)
  "Toggle the entry of BUTTON."
  (let ((entry (button-get button 'sly-agent-q-entry)))
    (when entry
      (setf (sly-agent-q-entry-expanded entry) (not (sly-agent-q-entry-expanded entry)))
      (sly-agent-q-chat--redraw-entry entry))))

(defun sly-agent-q-chat-toggle-entry ()
  "Show or hide the details of the tool entry at point."
  (interactive)
  (let ((entry (get-text-property (point) 'sly-agent-q-entry)))
    (unless entry (user-error "No tool call here"))
    (let ((pos (point)))
      (setf (sly-agent-q-entry-expanded entry) (not (sly-agent-q-entry-expanded entry)))
      (sly-agent-q-chat--redraw-entry entry)
      (goto-char pos))))

(defun sly-agent-q-chat-open-entry ()
  "Show the whole arguments and result of the tool entry at point.
They go to a buffer of their own."
  (interactive)
  (let ((entry (get-char-property (point) 'sly-agent-q-entry)))
    (unless entry (user-error "No tool entry here"))
    (let ((buffer (get-buffer-create (format "*sly-agent-q %s %s*"
                                             (sly-agent-q-display-line (sly-agent-q-entry-name entry) 80)
                                             (sly-agent-q-display-line (sly-agent-q-entry-call-id entry) 80))))
          (text (concat "arguments:\n"
                        (sly-agent-q-chat--arguments-whole
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
        (when (> (sly-agent-q-chat--longest-line text) 10000)
          (setq-local truncate-lines t)
          (setq-local bidi-inhibit-bpa t)
          (setq-local bidi-paragraph-direction 'left-to-right)))
      (if noninteractive buffer (pop-to-buffer buffer)))))

(defun sly-agent-q-chat--arguments-whole (arguments lisp)
  "The tool ARGUMENTS (a plist) whole and framed, for an entry opened.
LISP names the arguments (strings) that hold Lisp source: each is
shown as Lisp, fontified as `lisp-mode' fontifies it; the others as JSON."
  (let ((json nil) (forms nil))
    (cl-loop for (k v) on (and (listp arguments) arguments) by #'cddr
             for name = (substring (symbol-name k) 1)
             do (if (and (stringp v) (member name lisp))
                    (push (cons name v) forms)
                  (setq json (plist-put json k v))))
    (mapconcat #'identity
               (append (and (or json (null forms))
                            (list (sly-agent-q-display-framed (sly-agent-q-chat--json json) "")))
                       (mapcar (lambda (form)
                                 (concat (sly-agent-q-display-line (car form) 30) ":\n"
                                         (sly-agent-q-display-framed (cdr form) "" nil
                                                                     (sly-agent-q-faces-lisp (cdr form)))))
                               (nreverse forms)))
               "\n")))

(defun sly-agent-q-chat--longest-line (text)
  "The length of the longest line of TEXT."
  (let ((start 0) (longest 0) (len (length text)))
    (while (< start len)
      (let ((end (or (string-search "\n" text start) len)))
        (setq longest (max longest (- end start))
              start (1+ end))))
    longest))

(defun sly-agent-q-chat-entry (call-id)
  "The tool entry of CALL-ID in the current chat buffer, or nil."
  (gethash call-id sly-agent-q-chat--entries))

;;;; Header line

(defun sly-agent-q-chat--format-tokens (n)
  "N with thousands separators."
  (let ((s (format "%d" (or n 0))))
    (while (string-match "\\([0-9]\\)\\([0-9]\\{3\\}\\)\\($\\|,\\)" s)
      (setq s (replace-match "\\1,\\2\\3" t nil s)))
    s))

(defun sly-agent-q-chat--header-line ()
  "The header line of the chat buffer.
The state comes first: a narrow window cuts the line at its right end,
and the state is what the user looks there for."
  (let ((usage sly-agent-q-chat--usage)
        (state (sly-agent-q-chat--header-state)))
    (concat
     " " (propertize state 'face 'mode-line-emphasis)
     " │ "
     ;; The model's name comes from the provider; "%" would be a mode-line construct.
     (string-replace "%" "%%" (sly-agent-q-display-line
                               (or sly-agent-q-chat--model sly-agent-q-model "default model") 40))
     (format " │ tokens %s in / %s out"
             (sly-agent-q-chat--format-tokens (plist-get usage :inputTokens))
             (sly-agent-q-chat--format-tokens (plist-get usage :outputTokens)))
     (format " │ $%.4f" (or sly-agent-q-chat--cost 0))
     ;; Which project and which Lisp; last, so that the state and the cost fit 80 columns.
     " │ " (string-replace "%" "%%" (sly-agent-q-display-line (sly-agent-q-chats-label) 80))
     (if sly-agent-q-chat--attachments
         (format " │ [%d attached]" (length sly-agent-q-chat--attachments))
       ""))))

(defun sly-agent-q-chat--header-state ()
  "What the chat is doing, in a few words, for the header line."
  (let ((turn sly-agent-q-chat--turn))
    (cond (turn (sly-agent-q-chat--header-turn turn))
          ;; Said only once the server has died: before its first use it
          ;; is not running, and that is no news.
          ((and sly-agent-q-chat--server-died (not (sly-agent-q-server-live-p)))
           "[server stopped: the next message starts it]")
          (t "[ready]"))))

;;;; The turn's states, as the server reports them

(defconst sly-agent-q-chat-turn-transitions
  '((nil requesting)
    (requesting streaming running-tools finished failed cancelled)
    (streaming running-tools finished failed cancelled)
    (running-tools awaiting-approval requesting failed cancelled finished)
    (awaiting-approval running-tools failed cancelled)
    (finished)
    (failed)
    (cancelled))
  "Which state of a turn may follow which: (STATE . NEXT-STATES).
The states are those of chat/turnState; nil is before the first.  The
same graph as the server's; a transition outside it is logged, not
refused: the server's word is the state shown.")

(defun sly-agent-q-chat--terminal-state-p (state)
  "Non-nil if no state may follow STATE."
  (let ((row (assq state sly-agent-q-chat-turn-transitions)))
    (and row (null (cdr row)))))

(defun sly-agent-q-chat--state-symbol (state)
  "STATE, a string of chat/turnState or nil, as a symbol."
  (and (stringp state) (intern state)))

(defun sly-agent-q-chat--enter-state (turn state previous)
  "Move TURN to STATE, the server having left PREVIOUS for it.
A transition outside `sly-agent-q-chat-turn-transitions', or from
another state than the chat saw last, is logged."
  (let ((from (sly-agent-q-turn-state turn)))
    (unless (and (eq from previous)
                 (memq state (cdr (assq from sly-agent-q-chat-turn-transitions))))
      (sly-agent-q-chat--log-unexpected turn from state previous))
    (setf (sly-agent-q-turn-state turn) state)
    (sly-agent-q-chat--show-state)))

(defun sly-agent-q-chat--log-unexpected (turn from state previous)
  "Log that TURN went from FROM to STATE, the server saying from PREVIOUS."
  (let ((text (format "turn %s: unexpected state %s after %s (the server says after %s)"
                      (sly-agent-q-turn-id turn) state (or from "none") (or previous "none"))))
    (sly-agent-q-server-log "%s" text)
    ;; In *Messages* for whoever looks, not in the echo area: it is no error.
    (let ((inhibit-message t))
      (message "sly-agent-q: %s" text))))

(defun sly-agent-q-chat--state-label (state)
  "The label of STATE in `sly-agent-q-turn-state-labels', or nil."
  (cdr (assq state sly-agent-q-turn-state-labels)))

(defun sly-agent-q-chat--header-turn (turn)
  "The header line's part about TURN, which is nil when no turn is running."
  (let ((state (and turn (sly-agent-q-turn-state turn))))
    (cond ((not turn) "")
          ((sly-agent-q-turn-cancel-requested turn) "[cancelling…]")
          ((eq (sly-agent-q-turn-status turn) 'sending) "[sending · C-c C-k cancels]")
          ((sly-agent-q-chat--terminal-state-p state) (format "[%s]" state))
          (t (format "[%s · C-c C-k cancels]"
                     (or (sly-agent-q-chat--state-label state) state "running"))))))

(defun sly-agent-q-chat--refresh-header ()
  "Have the header line show the chat's state, soon.
Updates come at most every `sly-agent-q-header-refresh-interval'
seconds: a stream of events must not recompute and redisplay the
header line each time."
  (unless sly-agent-q-chat--header-timer
    (let ((buffer (current-buffer)))
      (setq sly-agent-q-chat--header-timer
            (run-with-timer sly-agent-q-header-refresh-interval nil
                            (lambda ()
                              (when (buffer-live-p buffer)
                                (with-current-buffer buffer
                                  (setq sly-agent-q-chat--header-timer nil
                                        sly-agent-q-chat--header (sly-agent-q-chat--header-line))
                                  (force-mode-line-update)))))))))

(defun sly-agent-q-chat--show-state ()
  "Show the state of the running turn in the header line.
Only there: the prompt and the transcript are not touched, so nothing
runs into the text being streamed or into the input."
  (sly-agent-q-chat--refresh-header))

(defun sly-agent-q-chat--prompt-string (text)
  "TEXT as prompt text: read-only, in the prompt's face and field."
  (propertize text
              'face 'sly-agent-q-prompt-face
              'read-only t 'front-sticky '(read-only) 'rear-nonsticky t
              'field 'sly-agent-q-prompt))

;;;; Turns

(defun sly-agent-q-chat--context ()
  "The editor context sent with a message: this chat's Lisp's package and its root."
  (sly-agent-q-server-plist-compact
   (list :currentPackage (ignore-errors (sly-agent-q-bridge-current-package (sly-agent-q-chats-lisp)))
         :projectRoot (directory-file-name (sly-agent-q-chats-root)))))

(defun sly-agent-q-chat--attachment-text ()
  "The attachments of the next message, as text to put before it."
  (mapconcat (lambda (a) (format "Attached %s:\n%s\n\n" (plist-get a :label) (plist-get a :text)))
             (reverse sly-agent-q-chat--attachments) ""))

(defun sly-agent-q-chat--start-turn (text callback)
  "Send TEXT as a new turn of this buffer's conversation.
CALLBACK, if non-nil, gets the outcome plist."
  (when sly-agent-q-chat--turn
    (user-error "A turn is running; C-c C-k cancels it"))
  (let* ((buf (current-buffer))
         (attached (sly-agent-q-chat--attachment-text))
         (labels (mapcar (lambda (a) (plist-get a :label)) (reverse sly-agent-q-chat--attachments)))
         (turn (sly-agent-q--make-turn :callback callback)))
    (setq sly-agent-q-chat--attachments nil)
    (sly-agent-q-chat--insert-user-message text labels)
    (setq sly-agent-q-chat--turn turn
          sly-agent-q-chat--server-died nil)
    (sly-agent-q-chat--refresh-header)
    (sly-agent-q-server-ensure
     (lambda (conn err)
       (when (buffer-live-p buf)
         (with-current-buffer buf
           (cond
            ((not (eq sly-agent-q-chat--turn turn)))
            (err (sly-agent-q-chat--end-turn turn 'failed :message err))
            (t
             (sly-agent-q-server-async-request
              conn 'chat/send
              (sly-agent-q-server-plist-compact
               (list :conversationId sly-agent-q-chat--conversation-id
                     :text (concat attached text)
                     :context (sly-agent-q-chat--context)))
              :success-fn (lambda (result) (sly-agent-q-chat--sent buf turn result))
              :error-fn (lambda (e)
                          (sly-agent-q-chat--in buf
                            (when (eql (plist-get e :code)
                                       (sly-agent-q-protocol-error-code 'unknown-conversation))
                              (setq sly-agent-q-chat--conversation-id nil))
                            (sly-agent-q-chat--end-turn
                             turn 'failed
                             :message (format "chat/send failed: %s%s" (plist-get e :message)
                                              (if (eql (plist-get e :code)
                                                       (sly-agent-q-protocol-error-code
                                                        'unknown-conversation))
                                                  " (send again to start a new conversation)"
                                                "")))))
              :timeout-fn (lambda ()
                            (sly-agent-q-chat--in buf
                              (sly-agent-q-chat--end-turn
                               turn 'failed :message "The server did not answer chat/send.")))
              :timeout sly-agent-q-request-timeout)))))))
    turn))

(defun sly-agent-q-chat-repaired-notice (repairs)
  "Say in the chat that a fault had interrupted the conversation.
REPAIRS is the list (or vector) of what the server repaired in its
history when it read it back."
  (sly-agent-q-chat-notice
   (format "[A fault had interrupted this conversation; its history was repaired: %s.]"
           (mapconcat #'identity (append repairs nil) "; "))
   'sly-agent-q-error-face))

(defun sly-agent-q-chat--save-error-notice (message)
  "Say in the chat that the conversation is not saved, because of MESSAGE."
  (sly-agent-q-chat-notice (format "[Not saved: %s]" message) 'sly-agent-q-error-face))

(defun sly-agent-q-chat--sent (buf turn result)
  "The server accepted TURN of BUF with RESULT (conversation and turn ids)."
  (sly-agent-q-chat--in buf
    (when (plist-get result :repaired)
      (sly-agent-q-chat-repaired-notice (plist-get result :repaired)))
    (when (stringp (plist-get result :saveError))
      (sly-agent-q-chat--save-error-notice (plist-get result :saveError)))
    (setq sly-agent-q-chat--conversation-id (plist-get result :conversationId))
    (setf (sly-agent-q-turn-conversation-id turn) (plist-get result :conversationId))
    (when (eq sly-agent-q-chat--turn turn)
      (setf (sly-agent-q-turn-id turn) (plist-get result :turnId))
      (setf (sly-agent-q-turn-status turn) 'running)
      (setf (sly-agent-q-turn-watchdog turn)
            (run-at-time sly-agent-q-turn-check-interval sly-agent-q-turn-check-interval
                         #'sly-agent-q-chat--check-turn buf turn))
      (when (sly-agent-q-turn-cancel-requested turn)
        (sly-agent-q-chat--send-cancel turn)))
    (sly-agent-q-chat--refresh-header)))

(defun sly-agent-q-chat--check-turn (buf turn)
  "Ask the server about TURN of BUF; end it with an error if it is over.
Called from a timer: the answer comes later, nothing waits here."
  (if (not (and (buffer-live-p buf) (eq (buffer-local-value 'sly-agent-q-chat--turn buf) turn)))
      (cancel-timer (sly-agent-q-turn-watchdog turn))
    (when (sly-agent-q-server-live-p)
      (with-current-buffer buf (sly-agent-q-chat--resend-cancel turn)))
    (when (sly-agent-q-server-live-p)
      (sly-agent-q-server-request
       'chat/turnStatus (list :conversationId (sly-agent-q-turn-conversation-id turn)
                              :turnId (sly-agent-q-turn-id turn))
       (lambda (result)
         (when (eq (plist-get result :running) :json-false)
           (sly-agent-q-chat--in buf
             (sly-agent-q-chat--end-turn
              turn 'failed
              :message "the server ended this turn, but its last messages never reached the chat (Emacs could not read one; the events buffer may say which)"))))
       #'ignore))))

(cl-defun sly-agent-q-chat--end-turn (turn status &key text message usage cost said)
  "End TURN with STATUS (`finished', `failed' or `cancelled'), once.
TEXT is the final text, MESSAGE what went wrong, USAGE the tokens,
COST the turn's cost.  SAID non-nil: the chat already said what
went wrong, so no failure notice is added.  Runs the turn's
callback and `sly-agent-q-turn-finished-hook'."
  (when (sly-agent-q-turn-watchdog turn)
    (cancel-timer (sly-agent-q-turn-watchdog turn)))
  (when (eq sly-agent-q-chat--turn turn)
    (setq sly-agent-q-chat--turn nil)
    (setf (sly-agent-q-turn-status turn) status)
    (sly-agent-q-chat--refresh-header)
    (sly-agent-q-chat--flush)
    (sly-agent-q-chat--end-segment)
    (unless said (sly-agent-q-chat--failure-notice status message))
    (sly-agent-q-chat--show-state)
    (let ((plist (list :status status :text (or text "") :message message :usage usage
                       :costUsd cost :turnId (sly-agent-q-turn-id turn)
                       :conversationId (sly-agent-q-turn-conversation-id turn))))
      (when (sly-agent-q-turn-callback turn)
        (sly-agent-q-server-call-safely (sly-agent-q-turn-callback turn) plist))
      (sly-agent-q-server-run-safely sly-agent-q-turn-finished-hook plist))))

(defun sly-agent-q-chat--failure-notice (status message)
  "Say in the chat that a turn ended with STATUS.
STATUS is `cancelled', or `failed' for MESSAGE."
  (pcase status
    ('cancelled (sly-agent-q-chat-notice "[cancelled]"))
    ('failed (sly-agent-q-chat-error-notice (or message "the turn failed")))))

(defun sly-agent-q-chat--footer (reason steps usage cost)
  "Say in the chat how a finished turn ended.
REASON is why the model stopped, STEPS the tool steps, USAGE the
tokens and COST what the turn cost."
  (unless (member reason '("end_turn" "stop_sequence" nil))
    (sly-agent-q-chat-notice (sly-agent-q-chat--stop-notice reason)))
  (sly-agent-q-chat-notice
   (format "(%s%s in / %s out · $%.4f)"
           (if (and (numberp steps) (> steps 0))
               (format "%d tool step%s · " steps (if (= steps 1) "" "s"))
             "")
           (sly-agent-q-chat--format-tokens (plist-get usage :inputTokens))
           (sly-agent-q-chat--format-tokens (plist-get usage :outputTokens))
           (or cost 0))))

(defun sly-agent-q-chat--draw-turn-end (end)
  "Draw the saved turn END as it was shown live.
END is a plist of conversation/resume's turnEnds."
  (let ((failed (plist-get end :failed)))
    (if failed
        (sly-agent-q-chat--failure-notice (if (equal (plist-get failed :kind) "cancelled") 'cancelled 'failed)
                                          (plist-get failed :message))
      (sly-agent-q-chat--footer (plist-get end :stopReason) (plist-get end :steps)
                                (plist-get end :usage) (plist-get end :costUsd)))))

(defun sly-agent-q-chat-title (&optional buffer)
  "The title of the conversation of BUFFER (default: the current buffer), or nil.
A resumed conversation's is the one it was saved with; a new one's is
its first message, as the server names it."
  (with-current-buffer (or buffer (current-buffer))
    (or sly-agent-q-chat--title (car (last sly-agent-q-chat--history)))))

(defun sly-agent-q-chat-spending (&optional buffer)
  "Return the usage, cost and model shown in the header line of BUFFER.
The value is options of `sly-agent-q-chat-show-history' (:usage,
:cost, :model)."
  (with-current-buffer (or buffer (current-buffer))
    (list :usage sly-agent-q-chat--usage :cost sly-agent-q-chat--cost
          :model sly-agent-q-chat--model)))

(defun sly-agent-q-chat-conversation-id (&optional buffer)
  "The server's id of the conversation of BUFFER (default: the current buffer)."
  (buffer-local-value 'sly-agent-q-chat--conversation-id (or buffer (current-buffer))))

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
             (sly-agent-q-chat--insert-user-message (plist-get block :text))
           (sly-agent-q-chat--add-text (plist-get block :text))
           (sly-agent-q-chat--flush)))
        ("thinking" (sly-agent-q-chat--add-thinking (plist-get block :thinking)))
        ("redacted_thinking" (sly-agent-q-chat--add-thinking nil t))
        ("tool_use"
         (let* ((result (gethash (plist-get block :id) results))
                (failed (or (null result) (eq (plist-get result :isError) t)))
                (run (and (stringp (plist-get block :id))
                          (plist-get calls (intern (concat ":" (plist-get block :id)))))))
           (sly-agent-q-chat--add-entry
            (sly-agent-q--make-entry
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
    (unless user (sly-agent-q-chat--end-text))
    (when after-block (funcall after-block drawn t))))

(defun sly-agent-q-chat--history-buffer (conversation-id)
  "The chat to show the saved conversation CONVERSATION-ID in.
The chat holding it already; else the chat a command would act on,
when it holds no conversation yet; else a new chat, for that chat's
project and Lisp: each conversation in its own chat."
  (or (sly-agent-q-chats-of-conversation conversation-id)
      (let ((chat (sly-agent-q-chat-buffer)))
        (if (or (null (sly-agent-q-chat-conversation-id chat))
                (equal (sly-agent-q-chat-conversation-id chat) conversation-id))
            chat
          (sly-agent-q-chats-create (sly-agent-q-chats-root chat) (sly-agent-q-chats-lisp chat))))))

(defun sly-agent-q-chat-show-history (conversation-id title messages &rest options)
  "Show saved conversation CONVERSATION-ID, called TITLE, in its own chat.
MESSAGES is its whole history (the server's conversation/resume
answer).  OPTIONS are :usage, :cost, :model, :calls (how each tool call
ran, a plist keyed by call id) and :turn-ends (how each turn ended, with
the number of messages before its end).  The buffer's
transcript is replaced; the next message continues the conversation.
Return the chat buffer."
  (let ((buffer (sly-agent-q-chat--history-buffer conversation-id))
        (results (make-hash-table :test #'equal)))
    (with-current-buffer buffer
      (when sly-agent-q-chat--turn (user-error "A turn is running; C-c C-k cancels it"))
      (unless (equal sly-agent-q-chat--conversation-id conversation-id)
        (sly-agent-q-chat--free-conversation))
      (let ((input (sly-agent-q-chat--input-text)))
        (sly-agent-q-chat-mode)
        (sly-agent-q-chat--set-input input))
      (setq sly-agent-q-chat--conversation-id conversation-id
            sly-agent-q-chat--title title
            sly-agent-q-chat--usage (plist-get options :usage)
            sly-agent-q-chat--cost (plist-get options :cost)
            sly-agent-q-chat--model (plist-get options :model))
      (sly-agent-q-chat--refresh-header)
      (sly-agent-q-chat-notice (format "──── resumed: %s ────" (sly-agent-q-display-line title 200)))
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
               (sly-agent-q-chat--draw-turn-end (pop ends)))))))
      (sly-agent-q-chat--flush)
      (sly-agent-q-chat--end-segment)
      (goto-char (point-max)))
    buffer))

(defun sly-agent-q-chat--send-cancel (turn)
  "Ask the server to cancel TURN."
  (let ((buf (current-buffer)))
    (sly-agent-q-server-request
     'chat/cancel (list :turnId (sly-agent-q-turn-id turn))
     (lambda (result)
       (setf (sly-agent-q-turn-cancel-unsent turn) nil)
       (sly-agent-q-chat--in buf
         ;; Nothing was running any more: end the turn here.
         (when (and (eq sly-agent-q-chat--turn turn)
                    (not (eq (plist-get result :cancelled) t)))
           (sly-agent-q-chat--end-turn turn 'cancelled))))
     (lambda (msg)
       (sly-agent-q-chat--in buf
         (if (and (eq sly-agent-q-chat--turn turn) (sly-agent-q-server-live-p))
             ;; The server lives but could not be written to (stopped by a
             ;; signal): the turn goes on there, so the cancel is sent again
             ;; a second later (or as soon as the server speaks), until the
             ;; server takes it.
             (progn
               (unless (sly-agent-q-turn-cancel-unsent turn)
                 (sly-agent-q-chat-notice
                  (format "[The cancel could not be sent (%s); it is sent again until the server takes it.]"
                          (sly-agent-q-display-line (car (split-string (format "%s" msg) "\n" t)) 200))
                  'sly-agent-q-error-face))
               (setf (sly-agent-q-turn-cancel-unsent turn) t)
               (run-with-timer 1 nil #'sly-agent-q-chat--retry-cancel buf turn))
           (sly-agent-q-chat--end-turn turn 'cancelled :message msg)))))))

(defun sly-agent-q-cancel ()
  "Cancel the running turn of this chat (elsewhere: of `sly-agent-q-chat-buffer').
The other chats' turns and evaluations go on."
  (interactive)
  (with-current-buffer (or (sly-agent-q-chat-buffer t) (user-error "No chat buffer"))
    (let ((turn sly-agent-q-chat--turn))
      (unless turn (user-error "No turn is running"))
      (setf (sly-agent-q-turn-cancel-requested turn) t)
      ;; Said in the header line, which the turn's end clears; an echo
      ;; area message would stay after the turn was over.
      (sly-agent-q-chat--refresh-header)
      (if (sly-agent-q-turn-id turn)
          (sly-agent-q-chat--send-cancel turn)
        (unless (sly-agent-q-server-live-p)
          (sly-agent-q-chat--end-turn turn 'cancelled))))))

;;;; Notifications from the server

(defun sly-agent-q-chat--buffer-for (params)
  "The chat buffer the notification PARAMS belongs to, or nil.
A buffer whose turn is still being sent adopts the turn id."
  (let ((turn-id (plist-get params :turnId))
        (conv (plist-get params :conversationId))
        (buffers (sly-agent-q-chat--buffers)))
    (or (cl-find-if (lambda (b) (let ((turn (buffer-local-value 'sly-agent-q-chat--turn b)))
                                  (and turn turn-id (equal (sly-agent-q-turn-id turn) turn-id))))
                    buffers)
        (let ((b (cl-find-if (lambda (b) (let ((turn (buffer-local-value 'sly-agent-q-chat--turn b))
                                               (own (buffer-local-value 'sly-agent-q-chat--conversation-id b)))
                                           (and turn turn-id (null (sly-agent-q-turn-id turn))
                                                (or (null own) (null conv) (equal own conv)))))
                             buffers)))
          (when b
            (with-current-buffer b
              (setf (sly-agent-q-turn-id sly-agent-q-chat--turn) turn-id)
              (when conv (setq sly-agent-q-chat--conversation-id conv))))
          b)
        (and conv (cl-find-if (lambda (b) (equal (buffer-local-value 'sly-agent-q-chat--conversation-id b)
                                                 conv))
                              buffers)))))

(defmacro sly-agent-q-chat--with-turn-buffer (params &rest body)
  "Run BODY in the chat buffer of notification PARAMS, with `turn' bound.
Notifications of turns that are over are ignored."
  (declare (indent 1) (debug t))
  `(let ((buf (sly-agent-q-chat--buffer-for ,params)))
     (when buf
       (with-current-buffer buf
         (let ((turn sly-agent-q-chat--turn))
           (when (and turn (equal (sly-agent-q-turn-id turn) (plist-get ,params :turnId)))
             ;; The server speaks again: a cancel it could not take goes now.
             (sly-agent-q-chat--resend-cancel turn)
             ,@body))))))

(defun sly-agent-q-chat--retry-cancel (buf turn)
  "From a timer, send TURN's cancel again if BUF still has TURN running.
Nothing is sent when the cancel went already."
  (when (buffer-live-p buf)
    (with-current-buffer buf
      (when (eq sly-agent-q-chat--turn turn)
        (sly-agent-q-chat--resend-cancel turn)))))

(defun sly-agent-q-chat--resend-cancel (turn)
  "Send TURN's cancel again if it could not be sent, and none is on its way."
  (when (eq (sly-agent-q-turn-cancel-unsent turn) t)
    (setf (sly-agent-q-turn-cancel-unsent turn) 'sending)
    (sly-agent-q-chat--send-cancel turn)))

(cl-defmethod sly-agent-q-handle-notification (_conn (_method (eql chat/textDelta)) params)
  "Show the streamed text of the chat/textDelta PARAMS."
  (cl-destructuring-bind (&key text &allow-other-keys) params
    (sly-agent-q-chat--with-turn-buffer params
      (sly-agent-q-chat--add-text (or text "")))))

(cl-defmethod sly-agent-q-handle-notification (_conn (_method (eql chat/thinkingDelta)) params)
  "Show the model's reasoning of the chat/thinkingDelta PARAMS, folded."
  (cl-destructuring-bind (&key text redacted &allow-other-keys) params
    (sly-agent-q-chat--with-turn-buffer params
      (sly-agent-q-chat--add-thinking text (eq redacted t)))))

(cl-defmethod sly-agent-q-handle-notification (_conn (_method (eql chat/toolCall)) params)
  "Add the tool entry of the chat/toolCall PARAMS.
It is queued until chat/toolStarted, or running already when it
started while the answer streamed."
  (cl-destructuring-bind (&key callId name arguments safetyLevel running &allow-other-keys) params
    (sly-agent-q-chat--with-turn-buffer params
      (sly-agent-q-chat--add-entry
       (sly-agent-q--make-entry :call-id callId :name name :arguments arguments
                                :safety safetyLevel
                                :status (if (eq running t) 'running 'queued))))))

(cl-defmethod sly-agent-q-handle-notification (_conn (_method (eql chat/approvalNeeded)) params)
  "Mark the entry of the chat/approvalNeeded PARAMS as waiting for you."
  (cl-destructuring-bind (&key callId &allow-other-keys) params
    (sly-agent-q-chat--with-turn-buffer params
      (let ((entry (sly-agent-q-chat-entry callId)))
        (when (and entry (memq (sly-agent-q-entry-status entry) '(queued running)))
          (setf (sly-agent-q-entry-status entry) 'approval)
          (sly-agent-q-chat--redraw-entry entry))))))

(cl-defmethod sly-agent-q-handle-notification (_conn (_method (eql chat/toolStarted)) params)
  "Mark the entry of the chat/toolStarted PARAMS as running."
  (cl-destructuring-bind (&key callId &allow-other-keys) params
    (sly-agent-q-chat--with-turn-buffer params
      (let ((entry (sly-agent-q-chat-entry callId)))
        ;; Only forward: a result that came first stays.
        (when (and entry (memq (sly-agent-q-entry-status entry) '(queued approval)))
          (setf (sly-agent-q-entry-status entry) 'running)
          (sly-agent-q-chat--redraw-entry entry))))))

(cl-defmethod sly-agent-q-handle-notification (_conn (_method (eql chat/toolOutput)) params)
  "Show the running call's output so far, as the chat/toolOutput PARAMS give it.
Each replaces the last: the entry shows its last lines."
  (cl-destructuring-bind (&key callId tail totalBytes &allow-other-keys) params
    (sly-agent-q-chat--with-turn-buffer params
      (let ((entry (sly-agent-q-chat-entry callId)))
        (when (and entry (stringp tail) (memq (sly-agent-q-entry-status entry) '(queued approval running)))
          (setf (sly-agent-q-entry-status entry) 'running
                (sly-agent-q-entry-output entry) tail
                (sly-agent-q-entry-output-bytes entry) totalBytes)
          (sly-agent-q-chat--redraw-entry entry))))))

(cl-defmethod sly-agent-q-handle-notification (_conn (_method (eql chat/toolResult)) params)
  "Show the result in the chat/toolResult PARAMS in its entry."
  (cl-destructuring-bind (&key callId name success content error executionTimeMs
                              approvalWaitMs arguments approved &allow-other-keys)
      params
    (sly-agent-q-chat--with-turn-buffer params
      (let ((entry (or (sly-agent-q-chat-entry callId)
                       (let ((e (sly-agent-q--make-entry :call-id callId :name name :safety "?")))
                         (sly-agent-q-chat--add-entry e)
                         e)))
            (ok (eq success t)))
        (setf (sly-agent-q-entry-status entry) (if ok 'ok 'error)
              (sly-agent-q-entry-content entry) content
              (sly-agent-q-entry-error entry) (and (not ok) (or error content))
              (sly-agent-q-entry-time-ms entry) executionTimeMs
              (sly-agent-q-entry-wait-ms entry) approvalWaitMs
              (sly-agent-q-entry-ran-arguments entry) arguments
              (sly-agent-q-entry-approved entry) approved)
        (sly-agent-q-chat--redraw-entry entry)))))

(cl-defmethod sly-agent-q-handle-notification (_conn (_method (eql chat/turnState)) params)
  "Show the state of the turn the chat/turnState PARAMS name.
The header line and the prompt say it; see `sly-agent-q-chat-turn-transitions'."
  (cl-destructuring-bind (&key state previous &allow-other-keys) params
    (sly-agent-q-chat--with-turn-buffer params
      (sly-agent-q-chat--enter-state turn
                                     (sly-agent-q-chat--state-symbol state)
                                     (sly-agent-q-chat--state-symbol previous)))))

(defun sly-agent-q-chat-compacted-notice (replaced before after)
  "Tell the chat that REPLACED messages were summarized, BEFORE to AFTER tokens."
  (sly-agent-q-chat-notice
   (format "[Compacted: %d older message%s summarized for the model, about %s → %s tokens (%s saved); the transcript and the saved file keep them.]"
           replaced (if (= replaced 1) "" "s")
           (sly-agent-q-chat--format-tokens before) (sly-agent-q-chat--format-tokens after)
           (sly-agent-q-chat--format-tokens (- before after)))))

(cl-defmethod sly-agent-q-handle-notification (_conn (_method (eql chat/compacted)) params)
  "Say in the chat that the history was compacted, as chat/compacted PARAMS tell."
  (cl-destructuring-bind (&key replacedMessages tokensBefore tokensAfter &allow-other-keys) params
    (sly-agent-q-chat--with-turn-buffer params
      (sly-agent-q-chat--flush)
      (sly-agent-q-chat-compacted-notice replacedMessages tokensBefore tokensAfter))))

(cl-defmethod sly-agent-q-handle-notification (_conn (_method (eql chat/notice)) params)
  "Say in the chat what the chat/notice PARAMS tell the user.
A notice with details (the definitions in the image that differ from
their files, at the end of a turn that changed the image) gets a
button that shows them."
  (cl-destructuring-bind (&key text details &allow-other-keys) params
    (sly-agent-q-chat--with-turn-buffer params
      (sly-agent-q-chat--flush)
      (if (stringp details)
          (sly-agent-q-chat--notice-with-details text details)
        (sly-agent-q-chat-notice (format "[%s]" text))))))

(defvar sly-agent-q-chat-details-map
  (let ((map (make-sparse-keymap)))
    (set-keymap-parent map button-map)
    (define-key map (kbd "TAB") #'sly-agent-q-chat-toggle-details)
    (define-key map (kbd "<tab>") #'sly-agent-q-chat-toggle-details)
    map)
  "Keymap on the button of a notice's details.")

(define-button-type 'sly-agent-q-details
  'action (lambda (button) (goto-char button) (sly-agent-q-chat-toggle-details))
  'keymap sly-agent-q-chat-details-map
  'follow-link t
  'help-echo "TAB or RET: show or hide them")

(defun sly-agent-q-chat--notice-with-details (text details)
  "Insert the notice TEXT and a button to show or hide DETAILS under it.
Both come from outside (DETAILS is the image's listing): drawn as
data, DETAILS framed (`sly-agent-q-display-framed'), hidden at first."
  (sly-agent-q-chat--end-text)
  (sly-agent-q-chat-insert (sly-agent-q-chat--notice-string
                            (format "[%s] " (sly-agent-q-display-line text 2000))))
  (let ((button (marker-position sly-agent-q-chat--output)))
    (sly-agent-q-chat-insert "show them" "\n")
    (let ((body (marker-position sly-agent-q-chat--output)))
      (sly-agent-q-chat-insert (sly-agent-q-display-framed details "  " 20000) "\n")
      (let ((overlay (make-overlay body sly-agent-q-chat--output))
            (inhibit-read-only t) (buffer-undo-list t))
        (overlay-put overlay 'invisible t)
        (make-text-button button (+ button (length "show them"))
                          :type 'sly-agent-q-details 'sly-agent-q-details overlay)))))

(defun sly-agent-q-chat-toggle-details ()
  "Show or hide the details of the notice whose button is at point."
  (interactive)
  (let* ((button (button-at (point)))
         (overlay (and button (button-get button 'sly-agent-q-details))))
    (when (overlayp overlay)
      (overlay-put overlay 'invisible (not (overlay-get overlay 'invisible))))))

(cl-defmethod sly-agent-q-handle-notification (_conn (_method (eql chat/turnFinished)) params)
  "End the turn of the chat/turnFinished PARAMS with its usage and cost."
  (cl-destructuring-bind (&key conversationUsage conversationCostUsd model saveError stopReason
                              usage steps costUsd text &allow-other-keys)
      params
    (sly-agent-q-chat--with-turn-buffer params
      (setq sly-agent-q-chat--usage conversationUsage
            sly-agent-q-chat--cost conversationCostUsd
            sly-agent-q-chat--model (or model sly-agent-q-chat--model))
      (sly-agent-q-chat--flush)
      (sly-agent-q-chat--end-segment)
      (when (stringp saveError)
        (sly-agent-q-chat--save-error-notice saveError))
      (sly-agent-q-chat--footer stopReason steps usage costUsd)
      (sly-agent-q-chat--end-turn turn 'finished :text text :usage usage :cost costUsd))))

(defun sly-agent-q-chat--stop-notice (reason)
  "Return the notice for a turn that ended for REASON, a protocol stop reason."
  (pcase reason
    ("step_limit" "[stopped at the step limit, `sly-agent-q-max-steps'; send \"go on\" to continue]")
    ("max_tokens" "[stopped: the answer reached its length limit, `sly-agent-q-max-tokens']")
    ("refusal" "[stopped: the model declined to answer]")
    (_ (format "[stopped: %s]" reason))))

(cl-defmethod sly-agent-q-handle-notification (_conn (_method (eql chat/turnFailed)) params)
  "End the turn of the chat/turnFailed PARAMS as failed or cancelled."
  (cl-destructuring-bind (&key saveError kind message usage costUsd &allow-other-keys) params
    (sly-agent-q-chat--with-turn-buffer params
      (when (stringp saveError)
        (sly-agent-q-chat--flush)
        (sly-agent-q-chat--save-error-notice saveError))
      (sly-agent-q-chat--end-turn turn (if (equal kind "cancelled") 'cancelled 'failed)
                                  :message message :usage usage :cost costUsd))))

(defun sly-agent-q-chat--on-server-died (message)
  "Tell every chat buffer the server died with MESSAGE; end its turn."
  (dolist (buf (sly-agent-q-chat--buffers))
    (with-current-buffer buf
      (setq sly-agent-q-chat--server-died t)
      (sly-agent-q-chat--refresh-header)
      (if (and sly-agent-q-chat--conversation-id (sly-agent-q-server-conversation-directory))
          ;; The server saved it as it went: the next message reloads it from disk.
          (sly-agent-q-chat-notice
           (concat "[" message " The conversation goes on from its saved copy.]")
           'sly-agent-q-error-face)
        (sly-agent-q-chat-notice
         (concat "[" message " The conversation starts fresh on the server; this transcript stays.]")
         'sly-agent-q-error-face)
        (setq sly-agent-q-chat--conversation-id nil))
      (maphash (lambda (_ entry)
                 (when (memq (sly-agent-q-entry-status entry) '(queued running approval))
                   (setf (sly-agent-q-entry-status entry) 'error
                         (sly-agent-q-entry-error entry) "the server exited")
                   (sly-agent-q-chat--redraw-entry entry)))
               sly-agent-q-chat--entries)
      (when sly-agent-q-chat--turn
        ;; The notice above said it: not again as the turn's error.
        (sly-agent-q-chat--end-turn sly-agent-q-chat--turn 'failed :message message :said t)))))

(add-hook 'sly-agent-q-server-died-functions #'sly-agent-q-chat--on-server-died)
(add-hook 'sly-agent-q-chats-changed-hook #'sly-agent-q-chat--refresh-header)

;;;; Input

(defun sly-agent-q-chat--input-text ()
  "The text of the input area."
  (buffer-substring-no-properties sly-agent-q-chat--input (point-max)))

(defun sly-agent-q-chat--set-input (text)
  "Replace the input area with TEXT."
  (let ((inhibit-read-only t))
    (delete-region sly-agent-q-chat--input (point-max))
    (goto-char (point-max))
    (insert text)))

(defun sly-agent-q-chat-input-text ()
  "The text of the chat buffer's input, not yet sent."
  (with-current-buffer (sly-agent-q-chat-buffer)
    (sly-agent-q-chat--input-text)))

(defun sly-agent-q-chat-set-input (text)
  "Replace the chat buffer's input with TEXT, for the user to edit and send."
  (with-current-buffer (sly-agent-q-chat-buffer)
    (sly-agent-q-chat--set-input text)))

(defun sly-agent-q-chat-hold-input (message seconds &optional placeholder)
  "Refuse to send the chat's input, saying MESSAGE, for at most SECONDS.
For an input still being filled in from elsewhere (the image's answer
is on its way).  With PLACEHOLDER, the text standing for what is to
come, only while the input holds it: a user who replaced it sends
their own message.  Return the hold, for
`sly-agent-q-chat-release-input'."
  (with-current-buffer (sly-agent-q-chat-buffer)
    (setq sly-agent-q-chat--input-hold (list message (+ (float-time) seconds) placeholder))))

(defun sly-agent-q-chat--input-held ()
  "Return the message of the hold on the input while it is in force.
See `sly-agent-q-chat-hold-input'."
  (pcase sly-agent-q-chat--input-hold
    (`(,message ,deadline ,placeholder)
     (and (< (float-time) deadline)
          (or (null placeholder)
              (save-excursion
                (goto-char sly-agent-q-chat--input)
                (search-forward placeholder nil t)))
          message))))

(defun sly-agent-q-chat-release-input (hold)
  "End HOLD, from `sly-agent-q-chat-hold-input', if it is still the chat's."
  (let ((chat (sly-agent-q-chat-buffer t)))
    (when chat
      (with-current-buffer chat
        (when (eq sly-agent-q-chat--input-hold hold)
          (setq sly-agent-q-chat--input-hold nil))))))

(defun sly-agent-q-chat-replace-in-input (old new)
  "Replace the last OLD in the chat's input by NEW; non-nil if it was there.
Only that text changes: what the user typed around it, and point, stay.
The last: text put before OLD (an error's message) may hold OLD too."
  (let ((chat (sly-agent-q-chat-buffer t)))
    (when chat
      (with-current-buffer chat
        (save-excursion
          (goto-char (point-max))
          (when (search-backward old sly-agent-q-chat--input t)
            (replace-match new t t)
            t))))))

(defun sly-agent-q-chat-send-input ()
  "Send the input as a message."
  (interactive)
  (let ((text (string-trim (sly-agent-q-chat--input-text)))
        (held (sly-agent-q-chat--input-held)))
    (when held
      (user-error "%s" held))
    (when (and (string-empty-p text) (null sly-agent-q-chat--attachments))
      (user-error "Nothing to send"))
    (when sly-agent-q-chat--turn
      (user-error "A turn is running; C-c C-k cancels it"))
    (sly-agent-q-chat--set-input "")
    (unless (string-empty-p text)
      (push text sly-agent-q-chat--history))
    (setq sly-agent-q-chat--history-index nil)
    (sly-agent-q-chat--start-turn text nil)))

(defun sly-agent-q-chat-return ()
  "Send the input if point is in it; otherwise go to the input."
  (interactive)
  (if (>= (point) sly-agent-q-chat--input)
      (sly-agent-q-chat-send-input)
    (goto-char (point-max))))

(defun sly-agent-q-chat--walk-history (step)
  "Replace the input with the history item STEP away from the current one."
  (unless sly-agent-q-chat--history (user-error "No input history"))
  (unless sly-agent-q-chat--history-index
    (setq sly-agent-q-chat--history-draft (sly-agent-q-chat--input-text)))
  (let ((i (+ (or sly-agent-q-chat--history-index -1) step)))
    (cond ((< i -1) (user-error "End of history"))
          ((>= i (length sly-agent-q-chat--history)) (user-error "Beginning of history"))
          ((= i -1) (setq sly-agent-q-chat--history-index nil)
           (sly-agent-q-chat--set-input (or sly-agent-q-chat--history-draft "")))
          (t (setq sly-agent-q-chat--history-index i)
             (sly-agent-q-chat--set-input (nth i sly-agent-q-chat--history))))))

(defun sly-agent-q-chat-previous-input ()
  "Replace the input with the previous message sent."
  (interactive)
  (sly-agent-q-chat--walk-history 1))

(defun sly-agent-q-chat-next-input ()
  "Replace the input with the next message sent."
  (interactive)
  (sly-agent-q-chat--walk-history -1))

(defvar sly-agent-q-chat-matching-input-history nil
  "The regexps given to \[sly-agent-q-chat-previous-matching-input].")

(defun sly-agent-q-chat--read-matching (prompt)
  "Read a regexp with PROMPT, the last one as default."
  (let* ((last (car sly-agent-q-chat-matching-input-history))
         (regexp (read-regexp (if last (format "%s (default %s): " prompt last) (concat prompt ": "))
                              last 'sly-agent-q-chat-matching-input-history)))
    (if (string-empty-p regexp) (or last (user-error "No regexp")) regexp)))

(defun sly-agent-q-chat-previous-matching-input (regexp &optional step)
  "Replace the input with the previous message sent that matches REGEXP.
As comint's \\[comint-previous-matching-input]: again goes further back;
STEP -1 searches forward (\\[sly-agent-q-chat-next-matching-input])."
  (interactive (list (sly-agent-q-chat--read-matching "Previous message matching")))
  (unless sly-agent-q-chat--history (user-error "No input history"))
  (let* ((step (or step 1))
         (i (+ (or sly-agent-q-chat--history-index -1) step))
         (found nil))
    (while (and (not found) (>= i 0) (< i (length sly-agent-q-chat--history)))
      (if (string-match-p regexp (nth i sly-agent-q-chat--history))
          (setq found i)
        (setq i (+ i step))))
    (unless found (user-error "No %s message matches %s" (if (> step 0) "earlier" "later") regexp))
    (unless sly-agent-q-chat--history-index
      (setq sly-agent-q-chat--history-draft (sly-agent-q-chat--input-text)))
    (setq sly-agent-q-chat--history-index found)
    (sly-agent-q-chat--set-input (nth found sly-agent-q-chat--history))
    (message "Message %d of %d" (- (length sly-agent-q-chat--history) found)
             (length sly-agent-q-chat--history))))

(defun sly-agent-q-chat-next-matching-input (regexp)
  "Replace the input with the next message sent that matches REGEXP."
  (interactive (list (sly-agent-q-chat--read-matching "Next message matching")))
  (sly-agent-q-chat-previous-matching-input regexp -1))

;;;; Commands

(defun sly-agent-q-new-conversation ()
  "Start a new conversation in the chat buffer (the transcript stays)."
  (interactive)
  (with-current-buffer (sly-agent-q-chat-buffer)
    (when sly-agent-q-chat--turn (user-error "A turn is running; C-c C-k cancels it"))
    (sly-agent-q-chat--free-conversation)
    (setq sly-agent-q-chat--usage nil
          sly-agent-q-chat--cost nil)
    (sly-agent-q-chat--refresh-header)
    (sly-agent-q-chat-notice "──── new conversation ────")))

(defun sly-agent-q-send (string &optional callback)
  "Send STRING to the agent as the next message of the chat buffer's conversation.
CALLBACK, if non-nil, is called with the same plist as
`sly-agent-q-turn-finished-hook' when the turn ends.  Returns at once."
  (with-current-buffer (sly-agent-q-chat-buffer)
    (push string sly-agent-q-chat--history)
    (sly-agent-q-chat--start-turn string callback)
    nil))

;;;; Attachments

(defun sly-agent-q--fence-language ()
  "The Markdown language tag for the current buffer's text."
  (cond ((derived-mode-p 'emacs-lisp-mode) "elisp")
        ((derived-mode-p 'lisp-mode 'lisp-data-mode) "lisp")
        (t "")))

(defun sly-agent-q--attach (label text language)
  "Attach TEXT described by LABEL, in LANGUAGE, to the next message."
  (let* ((cut (> (length text) sly-agent-q-attachment-max-chars))
         (body (if cut (substring text 0 sly-agent-q-attachment-max-chars) text))
         (block (format "```%s\n%s%s```%s" language body
                        (if (string-suffix-p "\n" body) "" "\n")
                        (if cut (format "\n(cut at %d characters)" sly-agent-q-attachment-max-chars) ""))))
    (with-current-buffer (sly-agent-q-chat-buffer)
      (setq sly-agent-q-chat--attachments
            (cons (list :label label :text block) sly-agent-q-chat--attachments))
      (sly-agent-q-chat--refresh-header)
      (message "sly-agent-q: attached %s to the next message (%d attached)"
               label (length sly-agent-q-chat--attachments)))))

(defun sly-agent-q--describe-source ()
  "The current buffer's file name or buffer name."
  (if buffer-file-name (abbreviate-file-name buffer-file-name) (buffer-name)))

(defun sly-agent-q-attach-region (start end)
  "Attach the region between START and END to the next message."
  (interactive "r")
  (sly-agent-q--attach (format "the region of %s (lines %d-%d)" (sly-agent-q--describe-source)
                               (line-number-at-pos start) (line-number-at-pos end))
                       (buffer-substring-no-properties start end)
                       (sly-agent-q--fence-language)))

(defun sly-agent-q-attach-defun ()
  "Attach the top-level form at point to the next message."
  (interactive)
  (let ((bounds (save-excursion
                  (end-of-defun)
                  (let ((end (point)))
                    (beginning-of-defun)
                    (cons (point) end)))))
    (unless (< (car bounds) (cdr bounds)) (user-error "No defun at point"))
    (sly-agent-q--attach (format "the form at line %d of %s" (line-number-at-pos (car bounds))
                                 (sly-agent-q--describe-source))
                         (buffer-substring-no-properties (car bounds) (cdr bounds))
                         (sly-agent-q--fence-language))))

(defun sly-agent-q-attach-buffer (buffer)
  "Attach the text of BUFFER to the next message."
  (interactive (list (read-buffer "Attach buffer: " (current-buffer) t)))
  (with-current-buffer (get-buffer buffer)
    (sly-agent-q--attach (format "the buffer %s" (sly-agent-q--describe-source))
                         (save-restriction (widen) (buffer-substring-no-properties (point-min) (point-max)))
                         (sly-agent-q--fence-language))))

(defun sly-agent-q-attach-file (file)
  "Attach the contents of FILE to the next message."
  (interactive "fAttach file: ")
  (let ((text (with-temp-buffer
                (insert-file-contents file)
                (buffer-string)))
        (lang (if (string-match-p "\\.\\(lisp\\|lsp\\|cl\\|asd\\)\\'" file) "lisp"
                (if (string-match-p "\\.el\\'" file) "elisp" ""))))
    (sly-agent-q--attach (format "the file %s" (abbreviate-file-name (expand-file-name file)))
                         text lang)))

(defun sly-agent-q-clear-attachments ()
  "Forget the attachments of the next message."
  (interactive)
  (with-current-buffer (sly-agent-q-chat-buffer)
    (setq sly-agent-q-chat--attachments nil)
    (sly-agent-q-chat--refresh-header)
    (message "sly-agent-q: attachments cleared")))

(provide 'sly-agent-q-chat)
;;; sly-agent-q-chat.el ends here
