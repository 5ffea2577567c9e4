;;; sly-agent-q-approval.el --- Approving the agent's dangerous tool calls  -*- lexical-binding: t; -*-

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

;; Before a dangerous tool runs the server sends `emacs/call' of kind
;; "approval".  Emacs answers with a decision:
;;
;;   (:decision "approved")                 run it
;;   (:decision "approved" :always t)       run it, and this tool from now
;;                                          on in this session
;;   (:decision "denied" :reason "...")     do not run it; tell the model why
;;   (:decision "modified" :arguments ARGS) run it with other arguments
;;
;; Before anyone is asked, the call is prepared the way the tool would
;; do it (`sly-agent-q-tool-preview'): a call the tool would refuse
;; (a path outside the project, a buffer it may not change...) is
;; answered with that error and never put to the user.  The approval
;; shows the resolved path and every argument in the order received;
;; a value shortened in the chat says so, and v shows them whole.  For
;; what writes, d shows the diff against what is there now.
;;
;; Every call makes one request (`sly-agent-q-approval--request'), a
;; file edit's with its hunks.  Who decides: `sly-agent-q-approval-function'
;; when set (scripts, tests); otherwise the user: a file edit in its
;; review, hunk by hunk (sly-agent-q-diff-review.el draws it and hands
;; back the accepted hunks), anything else inline in the chat buffer:
;; buttons and the keys y (approve), n (deny with a reason), e (edit
;; the arguments), a (always allow this tool for the session) on the
;; approval, and C-c C-r anywhere in the chat, a prompt offering the
;; same answers, where point may be in the input and y would insert a
;; y.  Every answer goes through one normalizer and one once-only
;; guard; the approvals waiting are kept in a list in the chat buffer.

;;; Code:

(require 'cl-lib)
(require 'subr-x)
(require 'button)
(require 'sly-agent-q-server)
(require 'sly-agent-q-chat)
(require 'sly-agent-q-tools)
(require 'sly-agent-q-diff-review)
(require 'sly-agent-q-display)
(require 'sly-agent-q-faces)
(require 'diff-mode)

(declare-function sly-agent-q-diff-fetch-hunks "sly-agent-q-diff" (old new then &optional source))

(defcustom sly-agent-q-approval-function nil
  "Function deciding approvals instead of the interactive UI, or nil.
nil means ask the user: in the chat buffer, or for a file edit in its
review.  Otherwise it is called as (FUNCTION REQUEST CALLBACK) for
every call that asks, a file edit too.  REQUEST is one plist shape:
:tool, :arguments, :safetyLevel, :description (what the tool does)
and :callId always; when the tool touches a file or buffer :path,
the resolved path relative to the project root, or :buffer, and for
what writes :diff, the unified diff against what is there now, and
:new-file; :detail, a line saying what the call acts on, such as the
restart debugger_invoke_restart invokes; :reason, what made it ask: a
plist whose :kind is \"level\", \"rule\", for a read outside the
project \"outside\" with its :path, or for a write to a protected
file \"protected\" with its :path and :why; :client, the MCP client
that asks; :lispArguments and :shownOnly, the arguments that are Lisp
source and those only shown.  A file edit reviewed hunk by hunk
\(propose_file_edit, replace_definition, insert_form) has :review
\(\"diff\" or \"form\") and :hunks, a vector of (:index N :header
\"@@ ...\" :text DIFF-LINES), its :diff being those hunks; a Lisp
form's edit that adds read-time (#.) forms has :read_time_evaluation, a vector
of \"#.FORM\" strings: code the reader runs as the text is read.
CALLBACK must be called once, now or later, with a decision plist
\(:decision \"approved\", \"denied\" or \"modified\", :reason STRING,
:arguments PLIST for \"modified\", :always t to allow the tool for
the rest of the session (a command of run_command, marked
:alwaysCommand t: that exact command alone); a rule, a read outside
the project and a protected file ask each time, and the last two take
only \"approved\" or \"denied\").  For a request with :hunks, the
decision may be just (:accepted_hunks [N ...]): the hunks to apply,
none denying the edit.  A function that signals denies the call."
  :type '(choice (const :tag "Ask in the chat buffer" nil) function)
  :group 'sly-agent-q)

(defcustom sly-agent-q-approval-display t
  "Non-nil means show the chat buffer when an approval is needed."
  :type 'boolean
  :group 'sly-agent-q)

(defcustom sly-agent-q-approval-value-chars 300
  "Longest argument value shown whole in an approval in the chat.
Longer values are shortened there, saying so; the key v on the
approval shows every argument whole."
  :type 'integer
  :group 'sly-agent-q)

(cl-defstruct (sly-agent-q-approval (:constructor sly-agent-q-approval--make))
  "An approval waiting for the user, drawn as the chat section SECTION."
  request callback (status 'pending) detail section buffer)

;;;; The request

;; One request, built in one place (`sly-agent-q-approval--request'),
;; is what every decider sees: `sly-agent-q-approval-function', the
;; approval in the chat, and the review of a file edit, which only
;; draws the request's :hunks and answers with the accepted ones.  Its
;; keys (documented in `sly-agent-q-approval-function'):
;;
;;   :tool :arguments :safetyLevel :description :callId   always
;;   :reason :lispArguments :shownOnly :client :alwaysCommand
;;                                         as the server sent them
;;   :review                               "diff" or "form": a file edit
;;                                         reviewed hunk by hunk
;;   :path or :buffer, :detail              what the call acts on
;;   :diff :new-file                        for what writes
;;   :hunks                                 for a reviewed edit: a vector
;;                                         of (:index N :header "@@..."
;;                                         :text "...")
;;   :read_time_evaluation                 for a Lisp form's edit adding
;;                                         #. forms: a vector of "#.FORM"
;;   :conversationId :turnId               the conversation that asked
;;
;; Every answer, from whichever decider, goes through one normalizer
;; (`sly-agent-q-approval--normalize') and one once-only guard
;; (`sly-agent-q-approval--once').

(defun sly-agent-q-approval--once (function)
  "Return a function calling FUNCTION with its argument the first time only.
Later calls do nothing.  An error in FUNCTION is reported, not
signalled: the decider that answered (a button, a timer, a user's
approval function) is not the place to fail."
  (let ((called nil))
    (lambda (decision)
      (unless called
        (setq called t)
        (condition-case err
            (funcall function decision)
          (error (message "sly-agent-q: answering the approval failed: %s"
                          (sly-agent-q-display-line (error-message-string err)))))))))

(defun sly-agent-q-approval--accepted (arguments hunks)
  "The decision running the call of ARGUMENTS with the accepted HUNKS.
HUNKS is a list or vector of hunk numbers; none accepted denies it."
  (let ((accepted (sort (delete-dups (append hunks nil)) #'<)))
    (if accepted
        (list :decision "modified"
              :arguments (plist-put (copy-sequence arguments) :accepted_hunks (vconcat accepted)))
      (list :decision "denied" :reason "The user rejected every hunk"))))

(defun sly-agent-q-approval--normalize (decision &optional request)
  "DECISION, from any decider, as the protocol's object, for REQUEST.
DECISION is a plist (:decision \"approved\", \"denied\" or
\"modified\", a string or a symbol, :reason, :arguments, :always); on a
request with :hunks it may also be just (:accepted_hunks [N ...]), the
hunks accepted of the edit.  Anything else is a denial saying so."
  (let* ((d (plist-get decision :decision))
         (name (if (symbolp d) (and d (symbol-name d)) d))
         (hunks (plist-get decision :accepted_hunks)))
    (cond
     ((and (plist-get request :hunks) (member name '(nil "modified"))
           (or (vectorp hunks) (and hunks (listp hunks)))
           (not (plist-get decision :arguments)))
      (sly-agent-q-approval--accepted (plist-get request :arguments) hunks))
     (t
      (pcase name
        ("approved" (if (plist-get decision :always)
                        (list :decision "approved" :always t)
                      (list :decision "approved")))
        ("modified" (let ((args (plist-get decision :arguments)))
                      (list :decision "modified"
                            :arguments (or args (make-hash-table :test #'equal)))))
        ;; No reason, no stand-in: the server says "The user denied TOOL." then.
        ("denied" (let ((reason (plist-get decision :reason)))
                    (if (and reason (not (string-blank-p (format "%s" reason))))
                        (list :decision "denied" :reason (format "%s" reason))
                      (list :decision "denied"))))
        (_ (list :decision "denied"
                 :reason (format "the approval function gave an invalid decision: %S" decision))))))))

(defun sly-agent-q-approval--hunks (proposal)
  "Return the hunks of PROPOSAL for a request: (:index :header :text) each."
  (vconcat (mapcar (lambda (h) (list :index (plist-get h :index)
                                     :header (plist-get h :header)
                                     :text (plist-get h :text)))
                   (plist-get proposal :hunks))))

(defun sly-agent-q-approval--request (params preview &optional proposal)
  "The approval request, from call PARAMS, as every decider sees it.
PREVIEW is what `sly-agent-q-tool-preview' prepared: its :path
\(resolved, relative to the root), :buffer, and for what writes
:diff (against what is there now) are added.  PROPOSAL, for a file
edit reviewed hunk by hunk, gives :hunks and the diff of those hunks.
:alwaysCommand t marks a command, which \"always\" allows again alone,
never the whole tool.  The keys are documented in
`sly-agent-q-approval-function'."
  (append
   (list :tool (plist-get params :tool)
         :arguments (plist-get params :arguments)
         :safetyLevel (plist-get params :safetyLevel)
         :description (plist-get params :description)
         :callId (plist-get params :callId))
   ;; The conversation that asked: its chat shows the approval.
   (and (plist-get params :conversationId)
        (list :conversationId (plist-get params :conversationId)
              :turnId (plist-get params :turnId)))
   ;; What made it ask (the tool's level, a rule, a read outside the
   ;; project): which answers the server honours.
   (and (plist-get params :reason) (list :reason (plist-get params :reason)))
   ;; The arguments that are Lisp source: shown and edited as Lisp.
   (and (plist-get params :lispArguments) (list :lispArguments (plist-get params :lispArguments)))
   ;; The arguments only shown (a command's line, its program): not edited.
   (and (plist-get params :shownOnly) (list :shownOnly (plist-get params :shownOnly)))
   ;; A call from an MCP client (Claude Code...), not from our model.
   (and (plist-get params :client) (list :client (plist-get params :client)))
   ;; A command: "always" would allow that exact command, not the tool.
   (and (eq (plist-get params :alwaysCommand) t) (list :alwaysCommand t))
   (and proposal (list :review (plist-get params :review)))
   (and (plist-get preview :detail) (list :detail (plist-get preview :detail)))
   (let ((path (or (plist-get preview :path) (plist-get proposal :rel))))
     (and path (list :path path)))
   (and (plist-get preview :buffer) (list :buffer (plist-get preview :buffer)))
   (cond
    (proposal
     (append
     (list :diff (sly-agent-q-diff-unified
                  (list :rel (sly-agent-q-display-line (plist-get proposal :rel) t)
                        :hunks (plist-get proposal :hunks)))
           :new-file (and (not (plist-get (plist-get proposal :current) :exists))
                          (not (plist-get (plist-get proposal :current) :buffer)))
           :hunks (sly-agent-q-approval--hunks proposal))
     ;; The #. forms a Lisp form's edit adds (each "#.FORM").
     (and (plist-get proposal :read-eval)
          (list :read_time_evaluation (vconcat (plist-get proposal :read-eval))))))
    ((plist-member preview :new)
     ;; The name on the diff's own lines is drawn as data: a name
     ;; holding a newline would otherwise draw a header of its own.
     (list :diff (sly-agent-q-diff-text
                  (sly-agent-q-display-line
                   (or (plist-get preview :path) (plist-get preview :buffer)) t)
                  (plist-get preview :old) (plist-get preview :new))
           :new-file (and (plist-get preview :path)
                          (equal (plist-get preview :old) "")))))))

;;;; Who decides

(cl-defmethod sly-agent-q-handle-call ((_kind (eql approval)) call)
  "Decide the approval CALL, from a timer (see `sly-agent-q-approval--start')."
  ;; Reading a request that carries a large edit already held the process
  ;; filter; preparing its review is a second step, with keys read between.
  (run-at-time 0 nil #'sly-agent-q-approval--start call))

(defun sly-agent-q-approval--start (call)
  "Decide the approval CALL, unless it was cancelled before it started.
The call is first prepared as the tool would do it; if the tool would
refuse it, CALL is answered with that error and nobody is asked.
Otherwise its request is put to `sly-agent-q-approval-function', else
to the user: in the chat, or for a file edit (the review kind the
server sent is \"diff\" or \"form\") in its hunk-by-hunk review."
  (unless (sly-agent-q-call-done call)
    (condition-case err
        (sly-agent-q-approval--prepare call)
      (error
       (setq sly-agent-q-connection-last-handler-error err)
       (sly-agent-q-call-fail call (format "Emacs failed to start the approval: %s"
                                           (error-message-string err)))))))

(defun sly-agent-q-approval--prepare (call)
  "Prepare the approval CALL and put it to whoever decides.
All of it runs against the root the server judged the call by, the
chat's (`sly-agent-q-files-call-root' of its projectRoot): the preview,
the review of a file edit and its hunks, and each step that comes
later (`sly-agent-q-files-keeping-root').  The file the user reviews
is then the file written, whatever project the user's current buffer
is in."
  (let ((params (sly-agent-q-call-params call)))
    (cl-destructuring-bind (&key capability arguments review projectRoot &allow-other-keys) params
      (pcase (condition-case err
                 (let ((sly-agent-q-project-root (sly-agent-q-files-call-root projectRoot)))
                   (list :ok sly-agent-q-project-root
                         (sly-agent-q-tool-preview capability arguments review)))
               (sly-agent-q-tool-error (list :refused (cadr err))))
        (`(:refused ,why) (sly-agent-q-call-fail call why))
        (`(:ok ,root ,preview)
         (let ((sly-agent-q-project-root root))
           (sly-agent-q-approval--route
            call params preview
            (sly-agent-q-files-keeping-root
             (lambda (decision)
               (sly-agent-q-call-reply
                call (sly-agent-q-approval--bind params preview decision)))))))))))

(defun sly-agent-q-approval--bind (params preview decision)
  "DECISION on the call of PARAMS, with the :target it was given for.
The target is the digest of PREVIEW, what the user was shown (for
edited arguments, of what they act on at the decision); the call runs
only if what it acts on is still that."
  (let ((target
         (pcase (plist-get decision :decision)
           ("approved" (sly-agent-q-tool-preview-digest preview))
           ("modified" (let ((arguments (plist-get decision :arguments)))
                         (and (listp arguments)
                              (condition-case nil
                                  (let ((sly-agent-q-project-root
                                         (sly-agent-q-files-call-root (plist-get params :projectRoot))))
                                    (sly-agent-q-tool-preview-target (plist-get params :capability) arguments
                                                                     (plist-get params :review)))
                                (sly-agent-q-tool-error nil))))))))
    (if target (append decision (list :target target)) decision)))

(defun sly-agent-q-approval--route (call params preview callback)
  "Put the approval CALL, with PARAMS and PREVIEW, to whoever decides.
CALLBACK gets the decision, normalized, once.
Run in the chat whose conversation asked, when one holds it: the
review and the approval are that chat's.  When that chat was killed
since the call came, the call fails and nobody is asked."
  (let ((refused (sly-agent-q-dispatch-refusal params)))
    (if refused
        (sly-agent-q-call-fail call refused)
      (with-current-buffer (or (sly-agent-q-chats-of-conversation (plist-get params :conversationId))
                               (current-buffer))
        (sly-agent-q-approval--route-here call params preview callback)))))

(defun sly-agent-q-approval--route-here (call params preview reply)
  "Put the approval CALL, with PARAMS and PREVIEW, to whoever decides.
REPLY gets the decision, normalized, once.  A file edit (review kind
\"diff\" or \"form\") is reviewed hunk by hunk; the hunks of anything
else that writes only make its :diff.  Both are the server's, asked
without waiting."
  (if (member (plist-get params :review) '("diff" "form"))
      (let ((review (sly-agent-q-approval--review-edit params preview reply)))
        (when (bufferp review)
          (sly-agent-q-call-on-cancel
           call (sly-agent-q-files-keeping-root
                 (lambda (_reason)
                   ;; A review shown was remembered (its hunks, for the apply).
                   (when (sly-agent-q-diff-review-showing-p review)
                     (ignore-errors (sly-agent-q-diff-forget-review (sly-agent-q-approval--edit params))))
                   (sly-agent-q-diff-review-cancel review))))))
    (let ((answer (sly-agent-q-approval--answerer params reply)))
      (sly-agent-q-diff-fetch-hunks
       (plist-get preview :old) (plist-get preview :new)
       (sly-agent-q-files-keeping-root
        (lambda ()
          ;; A call cancelled (or whose server died) while the hunks came is
          ;; put to no one: nothing would answer it.
          (unless (sly-agent-q-call-done call)
            (let ((request (sly-agent-q-approval--request params preview)))
              (sly-agent-q-approval--put request (funcall answer request)
                                         (lambda (request answer)
                                           (sly-agent-q-approval--ask call request answer)))))))))))

(defun sly-agent-q-approval--answerer (params reply)
  "A function of a request, returning the function that answers it.
The answer, whoever gives it, is normalized for that request, and
for a Lisp form's edit (review kind \"form\" in PARAMS) carries the
accepted hunks with the call's own arguments; REPLY gets it once.  A
reviewed edit that is denied is forgotten (see
`sly-agent-q-diff-forget-review')."
  (let ((reply (sly-agent-q-approval--once reply)))
    ;; The answer comes later (the user's decision): the review it
    ;; forgets is of the file of the call's root.
    (sly-agent-q-files-keeping-root
     (lambda (request)
       (sly-agent-q-files-keeping-root
        (lambda (decision)
          (let ((decision (sly-agent-q-approval--normalize decision request)))
            (when (and (member (plist-get params :review) '("diff" "form"))
                       (equal (plist-get decision :decision) "denied"))
              (ignore-errors (sly-agent-q-diff-forget-review (sly-agent-q-approval--edit params))))
            (funcall reply (if (and (equal (plist-get params :review) "form")
                                    (equal (plist-get decision :decision) "modified"))
                               ;; Only the hunks are the review's: the form's
                               ;; other arguments stay the call's own.
                               (list :decision "modified"
                                     :arguments (plist-put (copy-sequence (plist-get params :arguments))
                                                           :accepted_hunks
                                                           (plist-get (plist-get decision :arguments)
                                                                      :accepted_hunks)))
                             decision)))))))))

(defun sly-agent-q-approval--put (request answer ask)
  "Put REQUEST to `sly-agent-q-approval-function', or else to ASK.
ANSWER takes the decision; ASK is called with REQUEST and ANSWER to
ask the user.  An approval function that signals denies the call,
saying why."
  (let ((approver sly-agent-q-approval-function))
    (if (not approver)
        (funcall ask request answer)
      (condition-case err
          (funcall approver request answer)
        (error
         (funcall answer (list :decision "denied"
                               :reason (format "The approval function failed: %s"
                                               (error-message-string err)))))))))

(defun sly-agent-q-approval--edit (params)
  "The file edit the call of PARAMS proposes (propose_file_edit's arguments).
A Lisp form's edit (review kind \"form\") is the one the server computed."
  (let ((arguments (plist-get params :arguments)))
    (if (equal (plist-get params :review) "form") (plist-get arguments :edit) arguments)))

(defun sly-agent-q-approval--review-edit (params preview reply)
  "Put the file edit of the call of PARAMS, with PREVIEW, to whoever decides.
Its hunks come from the server, asked without waiting; then its
request, with :hunks, goes to `sly-agent-q-approval-function' or to
the user's review (`sly-agent-q-diff-review-show').  REPLY gets the
decision once.  A proposal that cannot be computed, or changes
nothing, is answered with no hunk accepted, so that the tool itself
tells the model why.  Return the review buffer (shown once the hunks
are there), or nil when none is shown.  Never signals."
  (let* ((answer (sly-agent-q-approval--answerer params reply))
         (arguments (plist-get params :arguments))
         (none (lambda () (funcall (funcall answer nil)
                                   (list :decision "modified"
                                         :arguments (plist-put (copy-sequence arguments)
                                                               :accepted_hunks [])))))
         (fail (lambda (err)
                 (funcall (funcall answer nil)
                          (list :decision "denied"
                                :reason (format "The proposed edit could not be reviewed: %s"
                                                (error-message-string err))))))
         (edit (sly-agent-q-approval--edit params))
         ;; Bound by the caller now, maybe not when the server answers.
         (approver sly-agent-q-approval-function)
         (display sly-agent-q-diff-review-display-function))
    (condition-case err
        (let* ((texts (sly-agent-q-diff-proposal edit t))
               (buffer (unless approver (sly-agent-q-diff-review-buffer (plist-get texts :rel))))
               (call-id (plist-get params :callId)))
          (sly-agent-q-diff-fetch-hunks
           (plist-get texts :old) (plist-get texts :new)
           ;; The proposal computed again when the hunks came is of the
           ;; same file: the one the texts were read from.
           (sly-agent-q-files-keeping-root
            (lambda ()
              (condition-case err
                  (let ((proposal (sly-agent-q-diff-proposal edit))
                        (read-eval (plist-get arguments :read_time_evaluation)))
                    ;; A Lisp form's edit adding #. forms: code run as the
                    ;; text is read, shown above its diff.
                    (when (> (length read-eval) 0)
                      (setq proposal (plist-put proposal :read-eval (append read-eval nil))))
                    (sly-agent-q-diff-remember-review edit proposal)
                    (if (null (plist-get proposal :hunks))
                        (funcall none)
                      (let* ((request (sly-agent-q-approval--request params preview proposal))
                             (sly-agent-q-approval-function approver))
                        (sly-agent-q-approval--put
                         request (funcall answer request)
                         (lambda (_request answer)
                           (if (buffer-live-p buffer)
                               (sly-agent-q-diff-review-show buffer proposal answer display)
                             (funcall answer (list :decision "denied"
                                                   :reason "The user closed the review without deciding"))))))))
                (sly-agent-q-tool-error (funcall none))
                (error (funcall fail err)))
              (when (and (buffer-live-p buffer) (not (sly-agent-q-diff-review-showing-p buffer)))
                ;; Answered without a review (no change): nothing to show.
                (kill-buffer buffer))))
           (let ((current (plist-get texts :current)))
             ;; The text on disk is the one reviewed: the server can read it itself.
             (and call-id (plist-get current :exists) (not (plist-get current :modified))
                  (list :callId call-id :file (plist-get texts :file)))))
          (and (buffer-live-p buffer) buffer))
      ;; Let the tool run and report the problem itself, applying nothing.
      (sly-agent-q-tool-error (funcall none) nil)
      (error (funcall fail err) nil))))

(defun sly-agent-q-approval-review-edit (arguments callback &optional tool call-id)
  "Put the file edit ARGUMENTS of a call of TOOL to whoever decides.
ARGUMENTS are a propose_file_edit's.  CALLBACK is called once with
the decision: (:decision \"modified\" :arguments ARGUMENTS+:accepted_hunks)
or (:decision \"denied\" :reason ...).  The request, with its
:hunks, goes to `sly-agent-q-approval-function' when it is set, else
to the review buffer.  CALL-ID names the call whose approval this
is: the server then finds the texts itself (see
`sly-agent-q-diff-fetch-hunks').  Return the review buffer, or nil
when none is shown.  Never signals."
  (sly-agent-q-approval--review-edit
   (list :tool tool :arguments arguments :callId call-id :review "diff")
   nil callback))

(define-obsolete-function-alias 'sly-agent-q-diff-review
  #'sly-agent-q-approval-review-edit "0.2.0")

;;;; The interactive UI

(defvar sly-agent-q-approval-map
  (let ((map (make-sparse-keymap)))
    (set-keymap-parent map button-map)
    (define-key map "y" #'sly-agent-q-approve)
    (define-key map "n" #'sly-agent-q-deny)
    (define-key map "e" #'sly-agent-q-edit-arguments)
    (define-key map "a" #'sly-agent-q-approve-always)
    (define-key map "d" #'sly-agent-q-approval-show-diff)
    (define-key map "v" #'sly-agent-q-approval-show-arguments)
    map)
  "Keys on an approval in the chat buffer.")

(define-key sly-agent-q-chat-mode-map (kbd "C-c C-a") #'sly-agent-q-approve)
(define-key sly-agent-q-chat-mode-map (kbd "C-c C-d") #'sly-agent-q-deny)
(define-key sly-agent-q-chat-mode-map (kbd "C-c C-e") #'sly-agent-q-edit-arguments)
(define-key sly-agent-q-chat-mode-map (kbd "C-c C-r") #'sly-agent-q-approval-answer)

(defun sly-agent-q-approval--offers-p (request answer)
  "Non-nil when REQUEST can be answered with ANSWER, `edit' or `always'.
A permission rule that asks, a read outside the project and a write
to a protected file ask each time (the server does not remember an
\"always\" for them); the arguments of a read outside the project or
of a protected write are not edited (what is read or written is the
file the server names, and why it asks)."
  (let ((kind (plist-get (plist-get request :reason) :kind)))
    (pcase answer
      ('edit (not (member kind '("outside" "protected"))))
      ('always (not (member kind '("rule" "outside" "protected")))))))

(defun sly-agent-q-approval--choices (request)
  "The answers that apply to REQUEST: (KEY NAME COMMAND) each.
A diff is offered only for a call that has one: a restart or an
evaluation writes nothing to show as one."
  `((?y "approve" sly-agent-q-approve)
    (?n "deny" sly-agent-q-deny)
    ,@(and (sly-agent-q-approval--offers-p request 'edit)
           '((?e "edit arguments" sly-agent-q-edit-arguments)))
    ,@(and (sly-agent-q-approval--offers-p request 'always)
           `((?a ,(sly-agent-q-approval--always-label request "always allow %s" 40)
                 sly-agent-q-approve-always)))
    ,@(and (plist-get request :diff) '((?d "show diff" sly-agent-q-approval-show-diff)))
    (?v "arguments whole" sly-agent-q-approval-show-arguments)))

(defun sly-agent-q-approval-answer (&optional approval)
  "Answer APPROVAL from a prompt.
APPROVAL defaults to the one at point, or the oldest waiting.  The
prompt owns the keyboard, so it works with point anywhere, in the
input too, and offers only the answers that apply."
  (interactive)
  (let* ((a (or approval (sly-agent-q-approval--at-point-or-pending)))
         (request (sly-agent-q-approval-request a))
         (choices (sly-agent-q-approval--choices request))
         (waiting (sly-agent-q-approval--pending (sly-agent-q-approval-buffer a)))
         (choice (read-multiple-choice
                  ;; Which call is answered, when several wait: the prompt names it.
                  (format "%s%s needs your approval%s"
                          (sly-agent-q-display-line (plist-get request :tool) 80)
                          (let ((what (sly-agent-q-approval--what request)))
                            (if what (concat " " what) ""))
                          (if (cdr waiting)
                              (format " (%d of %d waiting)" (1+ (or (cl-position a waiting) 0))
                                      (length waiting))
                            ""))
                  (mapcar (lambda (c) (list (car c) (nth 1 c))) choices))))
    (funcall (nth 2 (assq (car choice) choices)) a)))

(defun sly-agent-q-approval--what (request)
  "What REQUEST acts on, in one short line, or nil.
Its target, or the start of its Lisp form."
  (let ((lisp (sly-agent-q-approval--lisp-argument request)))
    (cond ((plist-get request :path) (sly-agent-q-display-line (plist-get request :path) 60))
          ((plist-get request :buffer) (sly-agent-q-display-line (plist-get request :buffer) 60))
          ((plist-get request :detail) (sly-agent-q-display-line (plist-get request :detail) 60))
          (lisp (sly-agent-q-display-line
                 (replace-regexp-in-string "[ \t\n]+" " "
                                           (plist-get (plist-get request :arguments) lisp))
                 60)))))

(defvar-local sly-agent-q-approval--waiting nil
  "The approvals waiting in this chat buffer for the user, newest first.
Kept as the chat keeps its tool entries: an approval leaves the list
when it is answered, withdrawn or denied with the buffer.")

(defun sly-agent-q-approval--pending (buffer)
  "The approvals waiting in BUFFER, oldest first."
  (when (buffer-live-p buffer)
    (with-current-buffer buffer
      ;; An approval answered by a path that did not remove it is not waiting.
      (setq sly-agent-q-approval--waiting
            (cl-remove-if-not (lambda (a) (eq (sly-agent-q-approval-status a) 'pending))
                              sly-agent-q-approval--waiting))
      (reverse sly-agent-q-approval--waiting))))

(defun sly-agent-q-approval--settle (approval status &optional detail)
  "Record STATUS (and DETAIL) for APPROVAL, no longer waiting, and redraw it."
  (setf (sly-agent-q-approval-status approval) status
        (sly-agent-q-approval-detail approval) detail)
  (let ((buffer (sly-agent-q-approval-buffer approval)))
    (when (buffer-live-p buffer)
      (with-current-buffer buffer
        (setq sly-agent-q-approval--waiting (delq approval sly-agent-q-approval--waiting)))
      (sly-agent-q-approval--redraw approval))))

(define-button-type 'sly-agent-q-approval
  'keymap sly-agent-q-approval-map
  'follow-link t)

(defun sly-agent-q-approval--ask (call request callback)
  "Show REQUEST in the chat whose conversation asked; CALLBACK gets the decision.
CALL's cancellation marks it cancelled."
  (let* ((buf (sly-agent-q-chat-for-request request))
         (approval (sly-agent-q-approval--make :request request :callback callback :buffer buf)))
    (with-current-buffer buf
      (push approval sly-agent-q-approval--waiting)
      (setf (sly-agent-q-approval-section approval)
            (sly-agent-q-transcript-insert-section
             (lambda () (sly-agent-q-approval--render approval)))))
    (sly-agent-q-call-on-cancel
     call (lambda (reason)
            (when (eq (sly-agent-q-approval-status approval) 'pending)
              (sly-agent-q-approval--settle approval 'cancelled reason))))
    (when (and sly-agent-q-approval-display (not noninteractive))
      (display-buffer buf))
    (message "sly-agent-q: %s needs your approval: C-c C-r in %s answers it (%s)"
             (if (plist-get request :client)
                 (format "%s, asked by %s,"
                         (sly-agent-q-display-line (plist-get request :tool) 80)
                         (sly-agent-q-approval--asker request))
               (sly-agent-q-display-line (plist-get request :tool) 80))
             (buffer-name buf)
             (mapconcat (lambda (c) (format "%c %s" (car c) (nth 1 c)))
                        (sly-agent-q-approval--choices request) ", "))))

(defun sly-agent-q-approval--asker (request)
  "Return who asks for REQUEST, in the product's words: the chat or an MCP client."
  (if (plist-get request :client)
      (concat "MCP client calling itself " (sly-agent-q-display-name (plist-get request :client)))
    "the model in this chat"))

(defun sly-agent-q-approval--deny-all ()
  "Deny every approval still waiting in the current buffer (it is being killed).
Run by the chat's kill after its turn's cancel was sent (see
`sly-agent-q-chat-kill-hook'), never before."
  (dolist (a (sly-agent-q-approval--pending (current-buffer)))
    (setf (sly-agent-q-approval-status a) 'denied)
    (funcall (sly-agent-q-approval-callback a)
             (list :decision "denied" :reason "the user closed the chat buffer")))
  (setq sly-agent-q-approval--waiting nil))

(add-hook 'sly-agent-q-chat-kill-hook #'sly-agent-q-approval--deny-all)

(defun sly-agent-q-approval--render (approval)
  "Insert APPROVAL's text at point."
  (let* ((request (sly-agent-q-approval-request approval))
         (tool (plist-get request :tool))
         (start (point)))
    (pcase (sly-agent-q-approval-status approval)
      ('pending
       ;; The frame in one face; what the user decides on in the default face.
       (insert (propertize "  ┏━ ⚠ this call needs your approval\n" 'face 'sly-agent-q-approval-frame-face))
       (insert (sly-agent-q-approval--summary request))
       (insert (propertize "  ┗ " 'face 'sly-agent-q-approval-frame-face))
       (dolist (b `(("Approve" sly-agent-q-approve "y")
                    ("Deny" sly-agent-q-deny "n")
                    ,@(and (sly-agent-q-approval--offers-p request 'edit)
                           '(("Edit arguments" sly-agent-q-edit-arguments "e")))
                    ,@(and (sly-agent-q-approval--offers-p request 'always)
                           `((,(sly-agent-q-approval--always-label request "Always allow %s" 80)
                              sly-agent-q-approve-always "a")))
                    ,@(and (plist-get request :diff)
                           '(("Show diff" sly-agent-q-approval-show-diff "d")))
                    ("Show arguments whole" sly-agent-q-approval-show-arguments "v")))
         (let ((cmd (nth 1 b)))
           (insert-text-button (format "[%s]" (car b))
                               'type 'sly-agent-q-approval
                               'action (lambda (_) (funcall cmd approval))
                               'help-echo (format "%s (key %s)" (car b) (nth 2 b))))
         (insert " "))
       (insert (propertize (format "(%s here; C-c C-r anywhere in the chat)\n"
                                   (mapconcat (lambda (c) (string (car c)))
                                              (sly-agent-q-approval--choices request) " / "))
                           'face 'sly-agent-q-meta-face))
       ;; The buttons' line wraps under its buttons, not at column 0, out of the frame.
       (sly-agent-q-display-keep-place start (point) "    ")
       (add-text-properties start (point) (list 'keymap sly-agent-q-approval-map
                                                'sly-agent-q-approval approval)))
      (status
       (insert (propertize
                (concat "  "
                        (pcase status
                          ('approved (propertize "✓ approved" 'face 'sly-agent-q-success-face))
                          ('always (propertize "✓ approved (and from now on in this session)"
                                               'face 'sly-agent-q-success-face))
                          ('modified (propertize "✎ approved with edited arguments"
                                                 'face 'sly-agent-q-success-face))
                          ('denied (propertize "✗ denied" 'face 'sly-agent-q-error-face))
                          (_ (propertize "– approval withdrawn" 'face 'sly-agent-q-meta-face)))
                        " "
                        ;; Meta text, under the face of its escapes (`escape-glyph').
                        (let ((what (concat (sly-agent-q-display-line tool 80)
                                            (let ((d (sly-agent-q-approval-detail approval)))
                                              (if d (concat ": " (sly-agent-q-display-line d)) "")))))
                          (add-face-text-property 0 (length what) 'sly-agent-q-meta-face t what)
                          what)
                        "\n")
                ;; Its detail is the image's or a client's: a narrow window
                ;; wraps it deeper than the product's own lines start.
                'wrap-prefix "    "))))))

(defun sly-agent-q-approval--value (value)
  "VALUE, an argument parsed from JSON, as compact JSON text."
  (sly-agent-q-display-json value))

(defun sly-agent-q-approval--elements-after-cut (value)
  "How many elements of VALUE, a vector, start beyond the approval's cut.
A long element shortened in the approval would otherwise hide the
ones after it (`rm' after a long `echo' argument); 0 for other values."
  (if (not (vectorp value))
      0
    (let ((n (length value)) (i 0))
      ;; The first element whose start (the text of those before it) lies past the cut.
      (while (and (< i n)
                  (< (length (sly-agent-q-approval--value (seq-subseq value 0 i)))
                     sly-agent-q-approval-value-chars))
        (setq i (1+ i)))
      (if (< i n) (- n i) 0))))

(defun sly-agent-q-approval--words-after-cut (line)
  "How many words of LINE, a command line quoted by the server, follow the cut.
The server joins its words with one space, each bare or quoted as
\='...\=' (a quote inside as \='\\\='\=') or $\='...\=' (with
backslash escapes): a space outside quotes past the cut starts a
hidden word."
  (let ((cut sly-agent-q-approval-value-chars) (state nil) (n 0) (i 0) (len (length line)))
    (while (< i len)
      (let ((c (aref line i)))
        (pcase state
          ('nil (cond ((eq c ?\') (setq state 'single))
                      ((and (eq c ?$) (< (1+ i) len) (eq (aref line (1+ i)) ?\'))
                       (setq state 'ansi i (1+ i)))
                      ((eq c ?\\) (setq i (1+ i)))
                      ((and (eq c ?\s) (>= i cut)) (setq n (1+ n)))))
          ('single (when (eq c ?\') (setq state nil)))
          ('ansi (cond ((eq c ?\\) (setq i (1+ i)))
                       ((eq c ?\') (setq state nil))))))
      (setq i (1+ i)))
    n))

(defconst sly-agent-q-approval--frame "  ┃ "
  "The start of each line of an approval the product draws.")

(defun sly-agent-q-approval--summary (request)
  "The lines of the approval REQUEST shown in the chat, before its buttons.
What the user decides on comes first, each on its own line made by
the product: the tool, its trust level, the target (the resolved
path, the buffer, or what the call acts on), who asks.  Then every
argument in the order received, in a framed block: text from outside
is drawn by `sly-agent-q-display-line' (a long value is shortened and
says so), a value of many lines as a framed block of its own, so
nothing in them can draw a line of the approval."
  (let* ((frame (propertize sly-agent-q-approval--frame 'face 'sly-agent-q-approval-frame-face))
         (path (plist-get request :path))
         (buffer (plist-get request :buffer))
         (detail (plist-get request :detail))
         (diff (plist-get request :diff))
         (line (lambda (label text)
                 (sly-agent-q-display-keep-frame (concat frame label ": " text "\n") frame))))
    (concat
     (funcall line "tool" (sly-agent-q-display-line (plist-get request :tool) 80))
     (funcall line "trust level" (sly-agent-q-display-line (plist-get request :safetyLevel) 40))
     (cond
      (path (concat
             (funcall line "target" (concat "file " (sly-agent-q-display-line path)))
             (funcall line "the target is"
                      (concat "the path resolved, relative to the project root"
                              (cond ((and diff (plist-get request :new-file))
                                     "; a new file is written (d shows the diff)")
                                    (diff "; the file is written (d shows the diff against what is there now)")
                                    (t ""))))))
      (buffer (concat
               (funcall line "target" (concat "buffer " (sly-agent-q-display-line buffer)))
               (if diff (funcall line "the target is" "changed (d shows the diff of its text)") "")))
      (detail (funcall line "target" (sly-agent-q-display-line detail)))
      (t (funcall line "target" "what the arguments below name")))
     (if (and detail (or path buffer))
         (funcall line "acts on" (sly-agent-q-display-line detail))
       "")
     (funcall line "asked by" (sly-agent-q-approval--asker request))
     (sly-agent-q-display-keep-frame (concat frame "arguments:\n") frame)
     (mapconcat
      (lambda (pair)
        (let* ((key (sly-agent-q-display-line (substring (symbol-name (car pair)) 1) 60))
               (value (cdr pair))
               (bar (propertize "╎ " 'face 'sly-agent-q-display-frame-face))
               (sub (concat frame "  " bar))
               (lisp (and (stringp value) (sly-agent-q-approval--lisp-p request (car pair)))))
          (if (and (stringp value)
                   (or lisp (string-search "\n" (string-trim-right value "\n"))))
              (concat (sly-agent-q-display-keep-frame (concat sub key ":\n") sub)
                      ;; A form is shown as Lisp: in the faces `lisp-mode' gives it.
                      (sly-agent-q-display-block value (concat sub "  " bar)
                                                 :max-line-chars sly-agent-q-approval-value-chars
                                                 :faces (and lisp (sly-agent-q-faces-lisp value))))
            (let ((text (if (and (stringp value) (eq (car pair) :command_line)
                                 (eq (plist-get request :alwaysCommand) t))
                            ;; Quoted by the server as a shell reads it back: shown as that line.
                            value
                          (sly-agent-q-approval--value value))))
              (sly-agent-q-display-keep-frame
               (concat sub key ": "
                      (if (> (length text) sly-agent-q-approval-value-chars)
                          (concat (sly-agent-q-display-line text sly-agent-q-approval-value-chars)
                                  (let ((hidden (if (eq text value)
                                                    (sly-agent-q-approval--words-after-cut value)
                                                  (sly-agent-q-approval--elements-after-cut value))))
                                    (if (> hidden 0)
                                        (format " [%d more argument%s follow%s; v shows every argument whole]"
                                                hidden (if (= hidden 1) "" "s") (if (= hidden 1) "s" ""))
                                      " [v shows every argument whole]")))
                        (sly-agent-q-display-line text t))
                      "\n")
               sub)))))
      (cl-loop for (key value) on (plist-get request :arguments) by #'cddr
               collect (cons key value))
      ""))))

(defun sly-agent-q-approval--lisp-p (request key)
  "Non-nil when argument KEY (a keyword) of REQUEST is Lisp source.
The server names them (:lispArguments): they are shown and edited as
Lisp, not as JSON strings."
  (seq-contains-p (plist-get request :lispArguments) (substring (symbol-name key) 1)))

(defun sly-agent-q-approval--lisp-argument (request)
  "The first argument of REQUEST that is Lisp source text, as a keyword, or nil."
  (cl-loop for (key value) on (plist-get request :arguments) by #'cddr
           when (and (stringp value) (sly-agent-q-approval--lisp-p request key))
           return key))

(defun sly-agent-q-approval-show-diff (&optional approval)
  "Show the diff of what APPROVAL would write, in a `diff-mode' buffer.
APPROVAL defaults to the one at point, or the oldest waiting.
Return the buffer."
  (interactive)
  (let* ((a (or approval (sly-agent-q-approval--at-point-or-pending)))
         (request (sly-agent-q-approval-request a))
         (diff (or (plist-get request :diff)
                   (user-error "%s writes nothing to show as a diff" (plist-get request :tool))))
         (buf (get-buffer-create "*sly-agent-q approval diff*")))
    (with-current-buffer buf
      (let ((inhibit-read-only t))
        (erase-buffer)
        (insert (sly-agent-q-display-text diff)))
      (diff-mode)
      (setq buffer-read-only t)
      (setq header-line-format
            ;; A "%" in a name would be a mode-line construct.
            (string-replace
             "%" "%%" (format " What %s would write to %s" (sly-agent-q-display-line (plist-get request :tool) 80)
                              (sly-agent-q-display-line (or (plist-get request :path) (plist-get request :buffer))))))
      (goto-char (point-min)))
    (unless noninteractive (display-buffer buf))
    buf))

(defun sly-agent-q-approval-show-arguments (&optional approval)
  "Show every argument of APPROVAL whole, in the order received.
APPROVAL defaults to the one at point, or the oldest waiting.
Return the buffer."
  (interactive)
  (let* ((a (or approval (sly-agent-q-approval--at-point-or-pending)))
         (request (sly-agent-q-approval-request a))
         (buf (get-buffer-create "*sly-agent-q approval arguments*")))
    (with-current-buffer buf
      (let ((inhibit-read-only t))
        (erase-buffer)
        (insert (format "%s%s\n\n" (sly-agent-q-display-line (plist-get request :tool) 80)
                        (if (plist-get request :path)
                            (format " on %s (resolved, relative to the project root)"
                                    (sly-agent-q-display-line (plist-get request :path) t))
                          "")))
        ;; Whole, but drawn as data: its control and bidi characters escaped.
        (cl-loop for (key value) on (plist-get request :arguments) by #'cddr
                 for shown = (sly-agent-q-display-text
                              (if (stringp value) value (sly-agent-q-approval--value value)))
                 do (progn
                      ;; A form drawn as written is shown in Lisp's faces.
                      (when (and (stringp value) (sly-agent-q-approval--lisp-p request key)
                                 (string= shown value))
                        (pcase-dolist (`(,from ,to ,face) (sly-agent-q-faces-lisp value))
                          (add-face-text-property from to face nil shown)))
                      (insert (sly-agent-q-display-line (substring (symbol-name key) 1)) ":\n"
                              shown "\n\n"))))
      (special-mode)
      (goto-char (point-min)))
    (unless noninteractive (display-buffer buf))
    buf))

(defun sly-agent-q-approval--redraw (approval)
  "Redraw APPROVAL in place, alone."
  (sly-agent-q-transcript-redraw-section (sly-agent-q-approval-section approval)))

(defun sly-agent-q-approval--decide (approval status decision &optional detail)
  "Record STATUS for APPROVAL and send DECISION (with DETAIL shown)."
  (unless (eq (sly-agent-q-approval-status approval) 'pending)
    (user-error "This approval was already answered"))
  (sly-agent-q-approval--settle approval status detail)
  (funcall (sly-agent-q-approval-callback approval) decision))

(defun sly-agent-q-approval--at-point-or-pending ()
  "The approval at point, or the oldest pending one in the chat buffer."
  (or (get-text-property (point) 'sly-agent-q-approval)
      (car (sly-agent-q-approval--pending (sly-agent-q-chat-buffer t)))
      (user-error "No approval is waiting")))

(defun sly-agent-q-approve (&optional approval)
  "Approve APPROVAL (default: the one at point, or the oldest waiting)."
  (interactive)
  (let ((a (or approval (sly-agent-q-approval--at-point-or-pending))))
    (sly-agent-q-approval--decide a 'approved (list :decision "approved"))))

(defun sly-agent-q-approval--always-label (request format-string max)
  "Return the label of \"always\" for REQUEST, from FORMAT-STRING.
Its %s is what \"always\" would allow: the tool (its name cut at MAX
characters), or, for a tool that runs commands, this exact command."
  (format format-string
          (if (eq (plist-get request :alwaysCommand) t)
              "this exact command"
            (sly-agent-q-display-line (plist-get request :tool) max))))

(defun sly-agent-q-approve-always (&optional approval)
  "Approve APPROVAL and allow its tool for the rest of the session."
  (interactive)
  (let ((a (or approval (sly-agent-q-approval--at-point-or-pending))))
    (unless (sly-agent-q-approval--offers-p (sly-agent-q-approval-request a) 'always)
      (user-error "This call asks each time (a permission rule, a read outside the project, a protected file): approve it (y) or deny it (n)"))
    (sly-agent-q-approval--decide a 'always (list :decision "approved" :always t))))

(defun sly-agent-q-deny (&optional approval reason)
  "Deny APPROVAL, telling the model REASON (asked for when interactive)."
  (interactive)
  (let* ((a (or approval (sly-agent-q-approval--at-point-or-pending)))
         (why (or reason (read-string "Reason for the agent (optional): "))))
    (sly-agent-q-approval--decide a 'denied
                                  (if (string-blank-p why) (list :decision "denied")
                                    (list :decision "denied" :reason why))
                                  (and (not (string-empty-p why)) why))))

(defvar-local sly-agent-q-approval--editing nil
  "The approval whose arguments this buffer edits.")

(defvar-local sly-agent-q-approval--editing-lisp nil
  "The argument (a keyword) this buffer edits as Lisp, or nil for JSON.")

(defvar-local sly-agent-q-approval--editing-text nil
  "The text this buffer opened with, indented: left as it is, nothing was edited.")

(defvar sly-agent-q-edit-arguments-mode-map
  (let ((map (make-sparse-keymap)))
    (define-key map (kbd "C-c C-c") #'sly-agent-q-edit-arguments-finish)
    (define-key map (kbd "C-c C-k") #'sly-agent-q-edit-arguments-abort)
    map)
  "Keymap of the argument editing buffer.")

(defvar-local sly-agent-q-approval--edit-keys nil
  "The editing buffer's keys, ahead of every minor mode's.
`lisp-mode-hook' turns on modes such as SLIME's or SLY's that bind their
compile to the finishing key; there it must run the edited form.")

(add-to-list 'emulation-mode-map-alists 'sly-agent-q-approval--edit-keys)

(define-minor-mode sly-agent-q-edit-arguments-mode
  "Editing a tool call's arguments: a Lisp form as Lisp, the others as JSON.
\\[sly-agent-q-edit-arguments-finish] runs the tool with them,
\\[sly-agent-q-edit-arguments-abort] goes back."
  :lighter " Agent-Q-Args"
  :keymap sly-agent-q-edit-arguments-mode-map
  (setq sly-agent-q-approval--edit-keys
        (and sly-agent-q-edit-arguments-mode
             `((sly-agent-q-edit-arguments-mode . ,sly-agent-q-edit-arguments-mode-map)))))

(defun sly-agent-q-approval--editable-arguments (request)
  "The arguments of REQUEST, less those the server only displays (:shownOnly).
A command's line and program follow from its argv and directory: an
edit of them would not be what runs, so they are not offered."
  (let ((shown-only (append (plist-get request :shownOnly) nil)))
    (cl-loop for (key value) on (plist-get request :arguments) by #'cddr
             unless (member (substring (symbol-name key) 1) shown-only)
             append (list key value))))

(defun sly-agent-q-edit-arguments (&optional approval json)
  "Edit APPROVAL's arguments in a small buffer.
A call with a Lisp form (the eval and compile tools) has that form
edited as Lisp in `lisp-mode', its other arguments kept; with JSON
\(interactively, a prefix argument) or for other calls, every argument
is edited as JSON.  \\<sly-agent-q-edit-arguments-mode-map>\\[sly-agent-q-edit-arguments-finish] there runs the tool with them."
  (interactive (list nil current-prefix-arg))
  (let* ((a (or approval (sly-agent-q-approval--at-point-or-pending)))
         (request (sly-agent-q-approval-request a))
         (_ (unless (sly-agent-q-approval--offers-p request 'edit)
              (user-error "This call's arguments are not edited (a read outside the project, a protected file): approve it (y) or deny it (n)")))
         (lisp (and (not json) (sly-agent-q-approval--lisp-argument request)))
         (buf (get-buffer-create "*sly-agent-q arguments*")))
    (with-current-buffer buf
      (let ((inhibit-read-only t)) (erase-buffer))
      (if lisp (lisp-mode) (when (fboundp 'js-mode) (js-mode)))
      ;; The arguments are the model's, edited as they are: drawn without reordering.
      (sly-agent-q-display-editable-buffer)
      (if lisp
          (progn
            (insert (plist-get (plist-get request :arguments) lisp))
            (indent-region (point-min) (point-max)))
        (insert (sly-agent-q-entry-json (sly-agent-q-approval--editable-arguments request)) "\n"))
      ;; The buffer is reused: its undo starts here, with nothing of the
      ;; last call's edit, nor the arguments just drawn, to undo.
      (setq buffer-undo-list nil)
      (goto-char (point-min))
      ;; Its keys come before the Lisp minor modes `lisp-mode' turned on
      ;; (SLIME's and SLY's bind C-c C-c to compiling, which would run the
      ;; form unapproved): see `sly-agent-q-approval--edit-keys'.
      (sly-agent-q-edit-arguments-mode 1)
      (setq sly-agent-q-approval--editing a
            sly-agent-q-approval--editing-lisp lisp
            sly-agent-q-approval--editing-text (buffer-substring-no-properties (point-min) (point-max)))
      (setq header-line-format
            (string-replace
             "%" "%%" (format " %s of %s: C-c C-c run with %s, C-c C-k back"
                              (if lisp (format "The Lisp %s" (substring (symbol-name lisp) 1)) "Arguments")
                              (sly-agent-q-display-line (plist-get request :tool) 80)
                              (if lisp "it" "these")))))
    (pop-to-buffer buf)))

(defun sly-agent-q-approval--balanced-lisp ()
  "The current buffer's Lisp text, indented, or a user error if unbalanced.
A form cut short or with a stray parenthesis would be read as
something else than the user meant, or not at all, in the image."
  (syntax-propertize (point-max))
  (save-excursion
    (goto-char (point-min))
    (condition-case err
        (while (progn (forward-comment (buffer-size)) (not (eobp)))
          (forward-sexp 1))
      (scan-error
       (goto-char (nth 2 err))
       (user-error "Unbalanced: %s (near line %d); nothing was sent"
                   (cadr err) (line-number-at-pos))))
    ;; A #| comment (nested: its depth, where a ; comment is t, ended by
    ;; the text's end) or a |symbol| left open scans as whitespace to the end.
    (let ((state (syntax-ppss (point-max))))
      (when (or (nth 3 state) (integerp (nth 4 state)))
        (goto-char (nth 8 state))
        (user-error "Unbalanced: %s not closed (near line %d); nothing was sent"
                    (if (nth 4 state) "a comment" "a string or |symbol|")
                    (line-number-at-pos)))))
  (when (string-blank-p (buffer-string))
    (user-error "No form; nothing was sent"))
  (indent-region (point-min) (point-max))
  (string-trim (buffer-substring-no-properties (point-min) (point-max))))

(defun sly-agent-q-edit-arguments-finish ()
  "Run the tool with the arguments in this buffer.
A Lisp form is checked for balance first, and indented."
  (interactive)
  (unless sly-agent-q-approval--editing (user-error "This buffer edits no approval"))
  (let* ((a sly-agent-q-approval--editing)
         (lisp sly-agent-q-approval--editing-lisp)
         (unchanged (and lisp (equal (string-trim (buffer-substring-no-properties (point-min) (point-max)))
                                     (string-trim (or sly-agent-q-approval--editing-text "")))))
         (args (if lisp
                   (if unchanged
                       ;; Only indented when the buffer opened: the model's form, as it was.
                       (plist-get (sly-agent-q-approval-request a) :arguments)
                     (plist-put (copy-sequence (plist-get (sly-agent-q-approval-request a) :arguments))
                              lisp (sly-agent-q-approval--balanced-lisp)))
                 (condition-case err
                     (json-parse-string (buffer-string) :object-type 'plist
                                        :null-object nil :false-object :json-false)
                   (error (user-error "Not valid JSON: %s" (error-message-string err)))))))
    (unless (and (listp args) (or (null args) (keywordp (car args))))
      (user-error "The arguments must be a JSON object"))
    (sly-agent-q-approval--leave-editing)
    (if (equal args (if lisp
                        (plist-get (sly-agent-q-approval-request a) :arguments)
                      (sly-agent-q-approval--editable-arguments (sly-agent-q-approval-request a))))
        ;; Nothing changed: approved as the model gave it, not marked as edited.
        (sly-agent-q-approval--decide a 'approved (list :decision "approved"))
      (sly-agent-q-approval--decide a 'modified (list :decision "modified"
                                                      :arguments (or args (make-hash-table)))))))

(defun sly-agent-q-edit-arguments-abort ()
  "Leave the arguments unchanged; the approval still waits."
  (interactive)
  (sly-agent-q-approval--leave-editing))

(defun sly-agent-q-approval--leave-editing ()
  "Leave the edit buffer, which edits nothing from now on.
It is buried, not killed: the Lisp mode's requests made as the user
typed (SLIME's autodoc) answer in the buffer that asked, and selecting
a killed one is an error in their process filter.  The next edit
reuses it."
  (setq sly-agent-q-approval--editing nil
        sly-agent-q-approval--editing-text nil)
  (quit-window nil))

;; Options that widen what the agent may do (or what runs, where data
;; goes) are marked risky, so that a .dir-locals.el planted in a cloned
;; repository cannot set them silently, nor be marked safe for good.
;; Autoloaded: a .dir-locals.el visited before the package loads is
;; asked about as risky too (package.el loads the autoloads at start).
;;;###autoload
(dolist (option '(sly-agent-q-approval-function))
  (put option 'risky-local-variable t)
  ;; A value marked safe for good (`!') before the option was known to
  ;; be risky would be applied without a question: it is forgotten.
  (setq safe-local-variable-values
        (assq-delete-all option safe-local-variable-values)))

(provide 'sly-agent-q-approval)
;;; sly-agent-q-approval.el ends here
