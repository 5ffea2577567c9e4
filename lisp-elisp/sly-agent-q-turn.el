;;; sly-agent-q-turn.el --- A chat's turns: sending, states, cancelling, the server's notifications  -*- lexical-binding: t; -*-

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

;; A turn is one exchange: the user's message and everything until it
;; ends.  It moves through the states `sending' (chat/send in flight)
;; and `running' (the server gave it an id), then the states the
;; server's chat/turnState notifications give it (requesting,
;; streaming, running-tools, awaiting-approval...), and ends as
;; finished, failed or cancelled, exactly once.  The header line shows
;; its state first; `sly-agent-q-turn-transitions' is the chat's view
;; of which server state may follow which.
;;
;; The server's notifications of a turn (chat/textDelta, chat/toolCall,
;; chat/turnFinished...) are handled here: each goes to the chat buffer
;; running that turn.  Each chat buffer has one conversation on the
;; server; its id, spending and the running turn are this file's state
;; (`sly-agent-q-turn-chat').

;;; Code:

(require 'cl-lib)
(require 'subr-x)
(require 'jsonrpc)
(require 'sly-agent-q-server)
(require 'sly-agent-q-bridge)
(require 'sly-agent-q-display)
(require 'sly-agent-q-chats)
(require 'sly-agent-q-transcript)
(require 'sly-agent-q-stream)
(require 'sly-agent-q-entry)
(require 'sly-agent-q-header)
(require 'sly-agent-q-input)

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

(defcustom sly-agent-q-turn-finished-hook nil
  "Functions run when a turn ends, each called with a plist.
The plist has :status (the symbol `finished', `failed' or
`cancelled'), :text (the assistant's final text), :message (why it
failed, if it did), :usage (token counts), :costUsd, :turnId and
:conversationId."
  :type 'hook
  :group 'sly-agent-q)

(cl-defstruct (sly-agent-q-turn (:constructor sly-agent-q-turn-create) (:copier nil))
  "One exchange: the user's message and everything until it ends.
STATE is where it is: `sending' until the server accepts it,
`running' once it has an id, then the last state chat/turnState gave
it (`requesting', `streaming'...), and at its end `finished', `failed'
or `cancelled'.  CANCEL-UNSENT is t while a cancel asked for could not
be written to the server (it is sent again a second later, or when
the server speaks), `sending' while that is on its way."
  id conversation-id (state 'sending) callback cancel-requested (start (float-time))
  watchdog cancel-unsent)

(cl-defstruct (sly-agent-q-turn-chat (:constructor sly-agent-q-turn--make-chat) (:copier nil))
  "A chat buffer's conversation on the server, and the turn it runs.
RUNNING is the running `sly-agent-q-turn', or nil.  CONVERSATION-ID
is the server's id of the conversation; TITLE its saved title, when it
was resumed; USAGE its token usage plist, COST its cost in USD, MODEL
the model that answered last.  SERVER-DIED is non-nil when the server
died since this buffer last used it."
  running conversation-id title usage cost model server-died)

(defvar-local sly-agent-q-turn--chat nil
  "The current chat buffer's `sly-agent-q-turn-chat'.")

(defun sly-agent-q-turn-setup ()
  "Give the current chat buffer no conversation yet, no turn running."
  (setq sly-agent-q-turn--chat (sly-agent-q-turn--make-chat)))

(defun sly-agent-q-turn--chat-of (buffer)
  "The `sly-agent-q-turn-chat' of BUFFER."
  (buffer-local-value 'sly-agent-q-turn--chat buffer))

(defun sly-agent-q-turn-running ()
  "The running turn of the current chat buffer, or nil."
  (sly-agent-q-turn-chat-running sly-agent-q-turn--chat))

(defun sly-agent-q-turn-conversation (&optional buffer)
  "The server's id of the conversation of BUFFER, or nil.
BUFFER defaults to the current buffer."
  (sly-agent-q-turn-chat-conversation-id (sly-agent-q-turn--chat-of (or buffer (current-buffer)))))

(defun sly-agent-q-turn-new-conversation ()
  "Forget the current chat's conversation and its spending.
The next message starts a new conversation."
  (sly-agent-q-turn-free-conversation)
  (setf (sly-agent-q-turn-chat-usage sly-agent-q-turn--chat) nil
        (sly-agent-q-turn-chat-cost sly-agent-q-turn--chat) nil)
  (sly-agent-q-header-refresh))

(defun sly-agent-q-turn-resumed (id title usage cost model)
  "Make the saved conversation ID, called TITLE, the current chat's.
USAGE, COST and MODEL are its spending so far and its model."
  (setf (sly-agent-q-turn-chat-conversation-id sly-agent-q-turn--chat) id
        (sly-agent-q-turn-chat-title sly-agent-q-turn--chat) title
        (sly-agent-q-turn-chat-usage sly-agent-q-turn--chat) usage
        (sly-agent-q-turn-chat-cost sly-agent-q-turn--chat) cost
        (sly-agent-q-turn-chat-model sly-agent-q-turn--chat) model)
  (sly-agent-q-header-refresh))

(defun sly-agent-q-turn-title ()
  "The current chat's saved conversation's title, when it was resumed, or nil."
  (sly-agent-q-turn-chat-title sly-agent-q-turn--chat))

(defun sly-agent-q-turn-spending ()
  "The current chat's conversation's spending: a plist (:usage :cost :model)."
  (list :usage (sly-agent-q-turn-chat-usage sly-agent-q-turn--chat)
        :cost (sly-agent-q-turn-chat-cost sly-agent-q-turn--chat)
        :model (sly-agent-q-turn-chat-model sly-agent-q-turn--chat)))

(defun sly-agent-q-turn-release ()
  "Cancel the current chat's turn and free its conversation, as the chat ends.
Both on the server, which is not waited for."
  (let ((turn (sly-agent-q-turn-running)))
    (when (and turn (sly-agent-q-turn-id turn))
      (sly-agent-q-turn--fire-and-forget 'chat/cancel (list :turnId (sly-agent-q-turn-id turn)))))
  (sly-agent-q-turn-free-conversation))

(defun sly-agent-q-turn--fire-and-forget (method params)
  "Send request METHOD with PARAMS to a running server; ignore its answer.
Nothing waits, and no server is started for it."
  (when (sly-agent-q-connection-live-p)
    (ignore-errors
      (sly-agent-q-server-async-request (sly-agent-q-connection-current) method params
                                        :success-fn #'ignore :error-fn #'ignore
                                        :timeout-fn #'ignore))))

(defun sly-agent-q-turn-free-conversation ()
  "Tell the server to forget this buffer's conversation, and forget its id here."
  (when (sly-agent-q-turn-chat-conversation-id sly-agent-q-turn--chat)
    ;; A late call of it (sent before the server saw it go) must not run here or elsewhere.
    (sly-agent-q-chats-note-left (sly-agent-q-turn-chat-conversation-id sly-agent-q-turn--chat) (buffer-name))
    (sly-agent-q-turn--fire-and-forget
     'conversation/delete (list :conversationId (sly-agent-q-turn-chat-conversation-id sly-agent-q-turn--chat)))
    (setf (sly-agent-q-turn-chat-conversation-id sly-agent-q-turn--chat) nil)))

(defun sly-agent-q-turn-cancel ()
  "Cancel the running turn of the current chat buffer."
  (let ((turn (sly-agent-q-turn-running)))
    (unless turn (user-error "No turn is running"))
    (setf (sly-agent-q-turn-cancel-requested turn) t)
    ;; Said in the header line, which the turn's end clears; an echo
    ;; area message would stay after the turn was over.
    (sly-agent-q-header-refresh)
    (if (sly-agent-q-turn-id turn)
        (sly-agent-q-turn--send-cancel turn)
      (unless (sly-agent-q-connection-live-p)
        (sly-agent-q-turn--end turn 'cancelled)))))

(defmacro sly-agent-q-turn--in (buffer &rest body)
  "Run BODY in BUFFER if it is live."
  (declare (indent 1) (debug t))
  `(when (buffer-live-p ,buffer) (with-current-buffer ,buffer ,@body)))

(defun sly-agent-q-turn-header-state ()
  "What the chat is doing, in a few words, for the header line."
  (let ((turn (sly-agent-q-turn-running)))
    (cond (turn (sly-agent-q-turn--header-turn turn))
          ;; Said only once the server has died: before its first use it
          ;; is not running, and that is no news.
          ((and (sly-agent-q-turn-chat-server-died sly-agent-q-turn--chat) (not (sly-agent-q-connection-live-p)))
           "[server stopped: the next message starts it]")
          (t "[ready]"))))

;;;; The turn's states, as the server reports them

;; Obsolete name (issue 46), kept for users who name it.
(define-obsolete-variable-alias 'sly-agent-q-chat-turn-transitions
  'sly-agent-q-turn-transitions "0.2.0")
(defconst sly-agent-q-turn-transitions
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

(defun sly-agent-q-turn--terminal-state-p (state)
  "Non-nil if no state may follow STATE."
  (let ((row (assq state sly-agent-q-turn-transitions)))
    (and row (null (cdr row)))))

(defun sly-agent-q-turn--state-symbol (state)
  "STATE, a string of chat/turnState or nil, as a symbol."
  (and (stringp state) (intern state)))

(defun sly-agent-q-turn--enter-state (turn state previous)
  "Move TURN to STATE, the server having left PREVIOUS for it.
A transition outside `sly-agent-q-turn-transitions', or from
another state than the chat saw last, is logged."
  (let ((from (sly-agent-q-turn--server-state turn)))
    (unless (and (eq from previous)
                 (memq state (cdr (assq from sly-agent-q-turn-transitions))))
      (sly-agent-q-turn--log-unexpected turn from state previous))
    (setf (sly-agent-q-turn-state turn) state)
    (sly-agent-q-header-refresh)))

(defun sly-agent-q-turn--server-state (turn)
  "The last state chat/turnState gave TURN, or nil before the first."
  (let ((state (sly-agent-q-turn-state turn)))
    (and (not (memq state '(sending running))) state)))

(defun sly-agent-q-turn--log-unexpected (turn from state previous)
  "Log that TURN went from FROM to STATE, the server saying from PREVIOUS."
  (let ((text (format "turn %s: unexpected state %s after %s (the server says after %s)"
                      (sly-agent-q-turn-id turn) state (or from "none") (or previous "none"))))
    (sly-agent-q-connection-log-current "%s" text)
    ;; In *Messages* for whoever looks, not in the echo area: it is no error.
    (let ((inhibit-message t))
      (message "sly-agent-q: %s" text))))

(defun sly-agent-q-turn--state-label (state)
  "The label of STATE in `sly-agent-q-turn-state-labels', or nil."
  (cdr (assq state sly-agent-q-turn-state-labels)))

(defun sly-agent-q-turn--header-turn (turn)
  "The header line's part about TURN, which is nil when no turn is running."
  (let ((state (and turn (sly-agent-q-turn-state turn))))
    (cond ((not turn) "")
          ((sly-agent-q-turn-cancel-requested turn) "[cancelling…]")
          ((eq state 'sending) "[sending · C-c C-k cancels]")
          ((sly-agent-q-turn--terminal-state-p state) (format "[%s]" state))
          (t (format "[%s · C-c C-k cancels]"
                     (or (sly-agent-q-turn--state-label state) state "running"))))))


;;;; Turns

(defun sly-agent-q-turn--context ()
  "The editor context sent with a message: this chat's Lisp's package and its root."
  (sly-agent-q-configuration-plist-compact
   (list :currentPackage (ignore-errors (sly-agent-q-bridge-current-package (sly-agent-q-chats-lisp)))
         :projectRoot (directory-file-name (sly-agent-q-chats-root)))))

(defun sly-agent-q-turn-send (text callback)
  "Send TEXT as a new turn of this buffer's conversation.
CALLBACK, if non-nil, gets the outcome plist."
  (when (sly-agent-q-turn-running)
    (user-error "A turn is running; C-c C-k cancels it"))
  (let* ((buf (current-buffer))
         (name (buffer-name))
         (attachments (sly-agent-q-input-take-attachments))
         (attached (car attachments))
         (turn (sly-agent-q-turn-create :callback callback)))
    (sly-agent-q-transcript-user-message text (cdr attachments))
    (setf (sly-agent-q-turn-chat-running sly-agent-q-turn--chat) turn
          (sly-agent-q-turn-chat-server-died sly-agent-q-turn--chat) nil)
    (sly-agent-q-header-refresh)
    (sly-agent-q-server-ensure
     (lambda (conn err)
       (when (buffer-live-p buf)
         (with-current-buffer buf
           (cond
            ((not (eq (sly-agent-q-turn-running) turn)))
            (err (sly-agent-q-turn--end turn 'failed :message err))
            (t
             (sly-agent-q-server-async-request
              conn 'chat/send
              (sly-agent-q-configuration-plist-compact
               (list :conversationId (sly-agent-q-turn-chat-conversation-id sly-agent-q-turn--chat)
                     :text (concat attached text)
                     :context (sly-agent-q-turn--context)))
              :success-fn (lambda (result)
                            (if (buffer-live-p buf)
                                (sly-agent-q-turn--sent buf turn result)
                              (sly-agent-q-turn--sent-to-killed name result)))
              :error-fn (lambda (e)
                          (sly-agent-q-turn--in buf
                            (when (eql (plist-get e :code)
                                       (sly-agent-q-protocol-error-code 'unknown-conversation))
                              (setf (sly-agent-q-turn-chat-conversation-id sly-agent-q-turn--chat) nil))
                            (sly-agent-q-turn--end
                             turn 'failed
                             :message (format "chat/send failed: %s%s" (plist-get e :message)
                                              (if (eql (plist-get e :code)
                                                       (sly-agent-q-protocol-error-code
                                                        'unknown-conversation))
                                                  " (send again to start a new conversation)"
                                                "")))))
              :timeout-fn (lambda ()
                            (sly-agent-q-turn--in buf
                              (sly-agent-q-turn--end
                               turn 'failed :message "The server did not answer chat/send.")))
              :timeout sly-agent-q-request-timeout)))))))
    turn))

(defun sly-agent-q-turn--sent (buf turn result)
  "The server accepted TURN of BUF with RESULT (conversation and turn ids)."
  (sly-agent-q-turn--in buf
    (when (plist-get result :repaired)
      (sly-agent-q-transcript-repaired-notice (plist-get result :repaired)))
    (when (stringp (plist-get result :saveError))
      (sly-agent-q-transcript-save-error-notice (plist-get result :saveError)))
    (setf (sly-agent-q-turn-chat-conversation-id sly-agent-q-turn--chat) (plist-get result :conversationId))
    (setf (sly-agent-q-turn-conversation-id turn) (plist-get result :conversationId))
    (when (eq (sly-agent-q-turn-running) turn)
      (setf (sly-agent-q-turn-id turn) (plist-get result :turnId))
      (when (eq (sly-agent-q-turn-state turn) 'sending)
        (setf (sly-agent-q-turn-state turn) 'running))
      (setf (sly-agent-q-turn-watchdog turn)
            (run-at-time sly-agent-q-turn-check-interval sly-agent-q-turn-check-interval
                         #'sly-agent-q-turn--check buf turn))
      (when (sly-agent-q-turn-cancel-requested turn)
        (sly-agent-q-turn--send-cancel turn)))
    (sly-agent-q-header-refresh)))

(defun sly-agent-q-turn--sent-to-killed (name result)
  "The server accepted a turn of the chat NAME, killed meanwhile, with RESULT.
The kill knew no conversation to free: its calls are refused from now
on, and the server frees it (cancelling its turn), as a kill does."
  (let ((id (plist-get result :conversationId)))
    (when (stringp id)
      (sly-agent-q-chats-note-killed id name)
      (sly-agent-q-turn--fire-and-forget 'conversation/delete (list :conversationId id)))))

(defun sly-agent-q-turn--check (buf turn)
  "Ask the server about TURN of BUF; end it with an error if it is over.
Called from a timer: the answer comes later, nothing waits here."
  (if (not (and (buffer-live-p buf) (eq (sly-agent-q-turn-chat-running (sly-agent-q-turn--chat-of buf)) turn)))
      (cancel-timer (sly-agent-q-turn-watchdog turn))
    (when (sly-agent-q-connection-live-p)
      (with-current-buffer buf (sly-agent-q-turn--resend-cancel turn)))
    (when (sly-agent-q-connection-live-p)
      (sly-agent-q-server-request
       'chat/turnStatus (list :conversationId (sly-agent-q-turn-conversation-id turn)
                              :turnId (sly-agent-q-turn-id turn))
       (lambda (result)
         (when (eq (plist-get result :running) :json-false)
           (sly-agent-q-turn--in buf
             (sly-agent-q-turn--end
              turn 'failed
              :message "the server ended this turn, but its last messages never reached the chat (Emacs could not read one; the events buffer may say which)"))))
       #'ignore))))

(cl-defun sly-agent-q-turn--end (turn status &key text message usage cost said)
  "End TURN with STATUS (`finished', `failed' or `cancelled'), once.
TEXT is the final text, MESSAGE what went wrong, USAGE the tokens,
COST the turn's cost.  SAID non-nil: the chat already said what
went wrong, so no failure notice is added.  Runs the turn's
callback and `sly-agent-q-turn-finished-hook'."
  (when (sly-agent-q-turn-watchdog turn)
    (cancel-timer (sly-agent-q-turn-watchdog turn)))
  (when (eq (sly-agent-q-turn-running) turn)
    (setf (sly-agent-q-turn-chat-running sly-agent-q-turn--chat) nil)
    (setf (sly-agent-q-turn-state turn) status)
    (sly-agent-q-header-refresh)
    (sly-agent-q-stream-flush)
    (sly-agent-q-stream-end-segment)
    (unless said (sly-agent-q-turn--failure-notice status message))
    (sly-agent-q-header-refresh)
    (let ((plist (list :status status :text (or text "") :message message :usage usage
                       :costUsd cost :turnId (sly-agent-q-turn-id turn)
                       :conversationId (sly-agent-q-turn-conversation-id turn))))
      (when (sly-agent-q-turn-callback turn)
        (sly-agent-q-connection-call-safely (sly-agent-q-turn-callback turn) plist))
      (sly-agent-q-connection-run-safely sly-agent-q-turn-finished-hook plist))))

(defun sly-agent-q-turn--failure-notice (status message)
  "Say in the chat that a turn ended with STATUS.
STATUS is `cancelled', or `failed' for MESSAGE."
  (pcase status
    ('cancelled (sly-agent-q-transcript-notice "[cancelled]"))
    ('failed (sly-agent-q-transcript-error-notice (or message "the turn failed")))))

(defun sly-agent-q-turn--footer (reason steps usage cost)
  "Say in the chat how a finished turn ended.
REASON is why the model stopped, STEPS the tool steps, USAGE the
tokens and COST what the turn cost."
  (unless (member reason '("end_turn" "stop_sequence" nil))
    (sly-agent-q-transcript-notice (sly-agent-q-turn--stop-notice reason)))
  (sly-agent-q-transcript-notice
   (format "(%s%s in / %s out · $%.4f)"
           (if (and (numberp steps) (> steps 0))
               (format "%d tool step%s · " steps (if (= steps 1) "" "s"))
             "")
           (sly-agent-q-transcript-format-tokens (plist-get usage :inputTokens))
           (sly-agent-q-transcript-format-tokens (plist-get usage :outputTokens))
           (or cost 0))))

(defun sly-agent-q-turn-draw-end (end)
  "Draw the saved turn END as it was shown live.
END is a plist of conversation/resume's turnEnds."
  (let ((failed (plist-get end :failed)))
    (if failed
        (sly-agent-q-turn--failure-notice (if (equal (plist-get failed :kind) "cancelled") 'cancelled 'failed)
                                          (plist-get failed :message))
      (sly-agent-q-turn--footer (plist-get end :stopReason) (plist-get end :steps)
                                (plist-get end :usage) (plist-get end :costUsd)))))


(defun sly-agent-q-turn--send-cancel (turn)
  "Ask the server to cancel TURN."
  (let ((buf (current-buffer)))
    (sly-agent-q-server-request
     'chat/cancel (list :turnId (sly-agent-q-turn-id turn))
     (lambda (result)
       (setf (sly-agent-q-turn-cancel-unsent turn) nil)
       (sly-agent-q-turn--in buf
         ;; Nothing was running any more: end the turn here.
         (when (and (eq (sly-agent-q-turn-running) turn)
                    (not (eq (plist-get result :cancelled) t)))
           (sly-agent-q-turn--end turn 'cancelled))))
     (lambda (msg)
       (sly-agent-q-turn--in buf
         (if (and (eq (sly-agent-q-turn-running) turn) (sly-agent-q-connection-live-p))
             ;; The server lives but could not be written to (stopped by a
             ;; signal): the turn goes on there, so the cancel is sent again
             ;; a second later (or as soon as the server speaks), until the
             ;; server takes it.
             (progn
               (unless (sly-agent-q-turn-cancel-unsent turn)
                 (sly-agent-q-transcript-notice
                  (format "[The cancel could not be sent (%s); it is sent again until the server takes it.]"
                          (sly-agent-q-display-line (car (split-string (format "%s" msg) "\n" t)) 200))
                  'sly-agent-q-error-face))
               (setf (sly-agent-q-turn-cancel-unsent turn) t)
               (run-with-timer 1 nil #'sly-agent-q-turn--retry-cancel buf turn))
           (sly-agent-q-turn--end turn 'cancelled :message msg)))))))


;;;; Notifications from the server

(defun sly-agent-q-turn--buffer-for (params)
  "The chat buffer the notification PARAMS belongs to, or nil.
A buffer whose turn is still being sent adopts the turn id."
  (let ((turn-id (plist-get params :turnId))
        (conv (plist-get params :conversationId))
        (buffers (sly-agent-q-chats-list)))
    (or (cl-find-if (lambda (b) (let ((turn (sly-agent-q-turn-chat-running (sly-agent-q-turn--chat-of b))))
                                  (and turn turn-id (equal (sly-agent-q-turn-id turn) turn-id))))
                    buffers)
        (let ((b (cl-find-if (lambda (b) (let ((turn (sly-agent-q-turn-chat-running (sly-agent-q-turn--chat-of b)))
                                               (own (sly-agent-q-turn-conversation b)))
                                           (and turn turn-id (null (sly-agent-q-turn-id turn))
                                                (or (null own) (null conv) (equal own conv)))))
                             buffers)))
          (when b
            (with-current-buffer b
              (setf (sly-agent-q-turn-id (sly-agent-q-turn-running)) turn-id)
              (when conv (setf (sly-agent-q-turn-chat-conversation-id sly-agent-q-turn--chat) conv))))
          b)
        (and conv (cl-find-if (lambda (b) (equal (sly-agent-q-turn-conversation b)
                                                 conv))
                              buffers)))))

(defmacro sly-agent-q-turn--with-turn-buffer (params &rest body)
  "Run BODY in the chat buffer of notification PARAMS, with `turn' bound.
Notifications of turns that are over are ignored."
  (declare (indent 1) (debug t))
  `(let ((buf (sly-agent-q-turn--buffer-for ,params)))
     (when buf
       (with-current-buffer buf
         (let ((turn (sly-agent-q-turn-running)))
           (when (and turn (equal (sly-agent-q-turn-id turn) (plist-get ,params :turnId)))
             ;; The server speaks again: a cancel it could not take goes now.
             (sly-agent-q-turn--resend-cancel turn)
             ,@body))))))

(defun sly-agent-q-turn--retry-cancel (buf turn)
  "From a timer, send TURN's cancel again if BUF still has TURN running.
Nothing is sent when the cancel went already."
  (when (buffer-live-p buf)
    (with-current-buffer buf
      (when (eq (sly-agent-q-turn-running) turn)
        (sly-agent-q-turn--resend-cancel turn)))))

(defun sly-agent-q-turn--resend-cancel (turn)
  "Send TURN's cancel again if it could not be sent, and none is on its way."
  (when (eq (sly-agent-q-turn-cancel-unsent turn) t)
    (setf (sly-agent-q-turn-cancel-unsent turn) 'sending)
    (sly-agent-q-turn--send-cancel turn)))

(cl-defmethod sly-agent-q-handle-notification (_conn (_method (eql chat/textDelta)) params)
  "Show the streamed text of the chat/textDelta PARAMS."
  (cl-destructuring-bind (&key text &allow-other-keys) params
    (sly-agent-q-turn--with-turn-buffer params
      (sly-agent-q-stream-add-text (or text "")))))

(cl-defmethod sly-agent-q-handle-notification (_conn (_method (eql chat/thinkingDelta)) params)
  "Show the model's reasoning of the chat/thinkingDelta PARAMS, folded."
  (cl-destructuring-bind (&key text redacted &allow-other-keys) params
    (sly-agent-q-turn--with-turn-buffer params
      (sly-agent-q-stream-add-thinking text (eq redacted t)))))

(cl-defmethod sly-agent-q-handle-notification (_conn (_method (eql chat/toolCall)) params)
  "Add the tool entry of the chat/toolCall PARAMS.
It is queued until chat/toolStarted, or running already when it
started while the answer streamed."
  (cl-destructuring-bind (&key callId name arguments safetyLevel running &allow-other-keys) params
    (sly-agent-q-turn--with-turn-buffer params
      (sly-agent-q-entry-add
       (sly-agent-q-entry-create :call-id callId :name name :arguments arguments
                                :safety safetyLevel
                                :status (if (eq running t) 'running 'queued))))))

(cl-defmethod sly-agent-q-handle-notification (_conn (_method (eql chat/approvalNeeded)) params)
  "Mark the entry of the chat/approvalNeeded PARAMS as waiting for you."
  (cl-destructuring-bind (&key callId &allow-other-keys) params
    (sly-agent-q-turn--with-turn-buffer params
      (let ((entry (sly-agent-q-entry-of callId)))
        (when (and entry (memq (sly-agent-q-entry-status entry) '(queued running)))
          (setf (sly-agent-q-entry-status entry) 'approval)
          (sly-agent-q-entry-redraw entry))))))

(cl-defmethod sly-agent-q-handle-notification (_conn (_method (eql chat/toolStarted)) params)
  "Mark the entry of the chat/toolStarted PARAMS as running."
  (cl-destructuring-bind (&key callId &allow-other-keys) params
    (sly-agent-q-turn--with-turn-buffer params
      (let ((entry (sly-agent-q-entry-of callId)))
        ;; Only forward: a result that came first stays.
        (when (and entry (memq (sly-agent-q-entry-status entry) '(queued approval)))
          (setf (sly-agent-q-entry-status entry) 'running)
          (sly-agent-q-entry-redraw entry))))))

(cl-defmethod sly-agent-q-handle-notification (_conn (_method (eql chat/toolOutput)) params)
  "Show the running call's output so far, as the chat/toolOutput PARAMS give it.
Each replaces the last: the entry shows its last lines."
  (cl-destructuring-bind (&key callId tail totalBytes &allow-other-keys) params
    (sly-agent-q-turn--with-turn-buffer params
      (let ((entry (sly-agent-q-entry-of callId)))
        (when (and entry (stringp tail) (memq (sly-agent-q-entry-status entry) '(queued approval running)))
          (setf (sly-agent-q-entry-status entry) 'running
                (sly-agent-q-entry-output entry) tail
                (sly-agent-q-entry-output-bytes entry) totalBytes)
          (sly-agent-q-entry-redraw entry))))))

(cl-defmethod sly-agent-q-handle-notification (_conn (_method (eql chat/toolResult)) params)
  "Show the result in the chat/toolResult PARAMS in its entry."
  (cl-destructuring-bind (&key callId name success content error executionTimeMs
                              approvalWaitMs arguments approved &allow-other-keys)
      params
    (sly-agent-q-turn--with-turn-buffer params
      (let ((entry (or (sly-agent-q-entry-of callId)
                       (let ((e (sly-agent-q-entry-create :call-id callId :name name :safety "?")))
                         (sly-agent-q-entry-add e)
                         e)))
            (ok (eq success t)))
        (setf (sly-agent-q-entry-status entry) (if ok 'ok 'error)
              (sly-agent-q-entry-content entry) content
              (sly-agent-q-entry-error entry) (and (not ok) (or error content))
              (sly-agent-q-entry-time-ms entry) executionTimeMs
              (sly-agent-q-entry-wait-ms entry) approvalWaitMs
              (sly-agent-q-entry-ran-arguments entry) arguments
              (sly-agent-q-entry-approved entry) approved)
        (sly-agent-q-entry-redraw entry)))))

(cl-defmethod sly-agent-q-handle-notification (_conn (_method (eql chat/turnState)) params)
  "Show the state of the turn the chat/turnState PARAMS name.
The header line and the prompt say it; see `sly-agent-q-turn-transitions'."
  (cl-destructuring-bind (&key state previous &allow-other-keys) params
    (sly-agent-q-turn--with-turn-buffer params
      (sly-agent-q-turn--enter-state turn
                                     (sly-agent-q-turn--state-symbol state)
                                     (sly-agent-q-turn--state-symbol previous)))))


(cl-defmethod sly-agent-q-handle-notification (_conn (_method (eql chat/compacted)) params)
  "Say in the chat that the history was compacted, as chat/compacted PARAMS tell."
  (cl-destructuring-bind (&key replacedMessages tokensBefore tokensAfter &allow-other-keys) params
    (sly-agent-q-turn--with-turn-buffer params
      (sly-agent-q-stream-flush)
      (sly-agent-q-transcript-compacted-notice replacedMessages tokensBefore tokensAfter))))

(cl-defmethod sly-agent-q-handle-notification (_conn (_method (eql chat/notice)) params)
  "Say in the chat what the chat/notice PARAMS tell the user.
A notice with details (the definitions in the image that differ from
their files, at the end of a turn that changed the image) gets a
button that shows them."
  (cl-destructuring-bind (&key text details &allow-other-keys) params
    (sly-agent-q-turn--with-turn-buffer params
      (sly-agent-q-stream-flush)
      (if (stringp details)
          (sly-agent-q-transcript-notice-with-details text details)
        (sly-agent-q-transcript-notice (format "[%s]" text))))))


(cl-defmethod sly-agent-q-handle-notification (_conn (_method (eql chat/turnFinished)) params)
  "End the turn of the chat/turnFinished PARAMS with its usage and cost."
  (cl-destructuring-bind (&key conversationUsage conversationCostUsd model saveError stopReason
                              usage steps costUsd text &allow-other-keys)
      params
    (sly-agent-q-turn--with-turn-buffer params
      (setf (sly-agent-q-turn-chat-usage sly-agent-q-turn--chat) conversationUsage
            (sly-agent-q-turn-chat-cost sly-agent-q-turn--chat) conversationCostUsd
            (sly-agent-q-turn-chat-model sly-agent-q-turn--chat) (or model (sly-agent-q-turn-chat-model sly-agent-q-turn--chat)))
      (sly-agent-q-stream-flush)
      (sly-agent-q-stream-end-segment)
      (when (stringp saveError)
        (sly-agent-q-transcript-save-error-notice saveError))
      (sly-agent-q-turn--footer stopReason steps usage costUsd)
      (sly-agent-q-turn--end turn 'finished :text text :usage usage :cost costUsd))))

(defun sly-agent-q-turn--stop-notice (reason)
  "Return the notice for a turn that ended for REASON, a protocol stop reason."
  (pcase reason
    ("step_limit" "[stopped at the step limit, `sly-agent-q-max-steps'; send \"go on\" to continue]")
    ("max_tokens" "[stopped: the answer reached its length limit, `sly-agent-q-max-tokens']")
    ("refusal" "[stopped: the model declined to answer]")
    (_ (format "[stopped: %s]" reason))))

(cl-defmethod sly-agent-q-handle-notification (_conn (_method (eql chat/turnFailed)) params)
  "End the turn of the chat/turnFailed PARAMS as failed or cancelled."
  (cl-destructuring-bind (&key saveError kind message usage costUsd &allow-other-keys) params
    (sly-agent-q-turn--with-turn-buffer params
      (when (stringp saveError)
        (sly-agent-q-stream-flush)
        (sly-agent-q-transcript-save-error-notice saveError))
      (sly-agent-q-turn--end turn (if (equal kind "cancelled") 'cancelled 'failed)
                                  :message message :usage usage :cost costUsd))))

(defun sly-agent-q-turn--on-server-died (message)
  "Tell every chat buffer the server died with MESSAGE; end its turn."
  (dolist (buf (sly-agent-q-chats-list))
    (with-current-buffer buf
      (setf (sly-agent-q-turn-chat-server-died sly-agent-q-turn--chat) t)
      (sly-agent-q-header-refresh)
      (if (and (sly-agent-q-turn-chat-conversation-id sly-agent-q-turn--chat) (sly-agent-q-configuration-conversation-directory))
          ;; The server saved it as it went: the next message reloads it from disk.
          (sly-agent-q-transcript-notice
           (concat "[" message " The conversation goes on from its saved copy.]")
           'sly-agent-q-error-face)
        (sly-agent-q-transcript-notice
         (concat "[" message " The conversation starts fresh on the server; this transcript stays.]")
         'sly-agent-q-error-face)
        (setf (sly-agent-q-turn-chat-conversation-id sly-agent-q-turn--chat) nil))
      (sly-agent-q-entry-fail-unfinished "the server exited")
      (when (sly-agent-q-turn-running)
        ;; The notice above said it: not again as the turn's error.
        (sly-agent-q-turn--end (sly-agent-q-turn-running) 'failed :message message :said t)))))

(add-hook 'sly-agent-q-connection-died-functions #'sly-agent-q-turn--on-server-died)

(provide 'sly-agent-q-turn)
;;; sly-agent-q-turn.el ends here
