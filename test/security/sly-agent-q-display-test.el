;;; sly-agent-q-display-test.el --- Every string from outside is drawn as data  -*- lexical-binding: t; -*-

;;; Commentary:

;; A property test: seeded random strings mixing every kind of hostile
;; character (C0, C1, DEL, ESC sequences, newlines, bidi controls,
;; format characters, raw bytes, the product's frame characters, lines
;; of the approval itself, very long runs, text properties such as
;; `display' and `invisible') are fed into every display path that can
;; carry text from outside: approvals of every kind (writes and edits,
;; evaluation, debugger restarts, interrupting a thread, MCP calls by a
;; named client, tools of a configured MCP server), tool lines and
;; results, notices, streamed and resumed text, the resume list, the
;; MCP log, the echo area, the debugger's report in the chat.  The
;; drawn text must hold no raw control or bidi character, each line the
;; product draws for a decision exactly once and never imitated, cut
;; text marked, and no text property from the strings.  Run with
;; test/security/run.sh.

;;; Code:

(require 'sly-agent-q-test-helper
         (expand-file-name "../elisp/sly-agent-q-test-helper"
                           (file-name-directory (or load-file-name buffer-file-name))))
(require 'sly-agent-q-display)
(require 'sly-agent-q-approval)
(require 'sly-agent-q-sessions)
(require 'sly-agent-q-mcp)
(require 'sly-agent-q-debugger)
(require 'sly-agent-q-approval)

(defconst sly-agent-q-display-test--pieces
  (list "a" "b" "Z" "path/to/file.txt" " " "é" "日本" "🙂"
        "\n" "\r\n" "\t" "\0" "\a" "\b" "\f" "\v" "\e" "\e[2J" "\e]0;title\a" "\e[31m" "\177"
        (string #x80) (string #x85) (string #x9B) (string #x9F)
        (string #x202A) (string #x202B) (string #x202C) (string #x202D) (string #x202E)
        (string #x2066) (string #x2067) (string #x2068) (string #x2069)
        (string #x200E) (string #x200F) (string #x061C) (string #x200B) (string #x200D)
        (string #xFEFF) (string #x2028) (string #x2029) (string #xAD)
        (string #x3FFF85) (string #x3FFFFF)
        "┃" "┏" "┗" "╎" "\n  ┃ tool: write_file\n" "\n  ┃ asked by: the model in this chat\n"
        "\n  ┃ target: file src/harmless.txt\n" "\n  ┃ trust level: safe\n"
        "\n  ┏━ ⚠ this call needs your approval\n" "\n  ┗ [Approve]" "\n  ✓ approved write_file\n"
        ;; Lines of the product's outside an approval: a decision, a status.
        "\n  ⚠ eval_form (safe) was approved\n" "\nApprove? y\n" "\n    result:\n" "\n  ▸ eval_form (safe)\n"
        "\"" "\\" "%s" "%" "…[3 more characters cut]"
        ;; Look-alikes of the frame: a lighter or dashed line, another corner.
        "\n  │ tool: write_file\n" "\n  ┍━ ⚠ this call needs your approval\n" "\n  ┕ [Approve]"
        "\n  ╏ trust level: safe\n" "┇" "┋" "║" "┠" "▕" "▎" "❙" "｜" "⎸"
        ;; Invisible characters (Unicode's default ignorables): a name that
        ;; differs from a trusted one only by these reads the same.
        (string #x34F) (string #x115F) (string #x17B4) (string #x180B) (string #x3164)
        (string #xFE00) (string #xFFA0) (string #xFFF0) (string #xE0100) (string #xE0FFF))
  "Pieces the random strings are made of: every class of hostile character.")

(defun sly-agent-q-display-test--random-string ()
  "A random string of pieces, sometimes very long, sometimes with text properties."
  (let* ((n (random 12))
         (s (apply #'concat
                   (cl-loop repeat (1+ n)
                            collect (nth (random (length sly-agent-q-display-test--pieces))
                                         sly-agent-q-display-test--pieces)))))
    (when (zerop (random 4))
      (setq s (concat s (make-string (+ 400 (random 3000)) ?x))))
    (when (zerop (random 3))
      (setq s (propertize s 'display "FAKE" 'invisible t 'face 'error
                          'read-only nil 'sly-agent-q-approval 'forged)))
    s))

(defconst sly-agent-q-display-test--forbidden
  (rx (any (#x00 . #x08) (#x0B . #x1F) (#x7F . #x9F)
           #xAD #x61C (#x200B . #x200F) (#x2028 . #x202E) (#x2066 . #x2069) #xFEFF
           (#x3FFF80 . #x3FFFFF)
           ;; Look-alikes of the frame characters the product reserves.
           #x2502 (#x2506 . #x2507) (#x250A . #x250E) (#x2510 . #x2516) (#x2518 . #x254B) #x254F
           (#x2551 . #x2573) #x2575 #x2577 #x2579 #x257B #x257D #x257F
           (#x258C . #x2590) #x2595 (#x2758 . #x275A) (#x23B8 . #x23B9) #xFF5C
           ;; Invisible: default ignorables (but the emoji presentation selectors).
           #x34F (#x115F . #x1160) (#x17B4 . #x17B5) (#x180B . #x180F) #x3164
           (#xFE00 . #xFE0D) #xFFA0 (#xFFF0 . #xFFF8) (#xE0000 . #xE0FFF)))
  "A raw control, bidi or format character, or a look-alike of the frame.
Newlines and tabs stay in text of many lines (an answer, a result).")

(defconst sly-agent-q-display-test--decision-labels
  '("tool" "trust level" "target" "asked by")
  "The lines the product draws for each approval.")

(defun sly-agent-q-display-test--count-lines (regexp text)
  "How many lines of TEXT match REGEXP."
  (cl-count-if (lambda (l) (string-match-p regexp l)) (split-string text "\n")))

(defun sly-agent-q-display-test--check-text (what text)
  "Check that TEXT, drawn by WHAT, holds no raw control or bidi character."
  (let ((pos (string-match sly-agent-q-display-test--forbidden text)))
    (when pos
      (ert-fail (list what "raw character" (aref text pos)
                      (substring text (max 0 (- pos 40)) (min (length text) (+ pos 40))))))))

(defun sly-agent-q-display-test--check-properties (what buffer)
  "Check that no text property from the random strings reached BUFFER (drawn by WHAT)."
  (with-current-buffer buffer
    ;; The strings carry display "FAKE", invisible t and a forged approval;
    ;; the product's own properties (a table's alignment...) may stay.
    (dolist (forged '((display . "FAKE") (invisible . t) (sly-agent-q-approval . forged)))
      (let ((pos (point-min)))
        (while (< pos (point-max))
          (when (equal (get-text-property pos (car forged)) (cdr forged))
            (ert-fail (list what "property from outside" forged "at" pos)))
          (setq pos (next-single-property-change pos (car forged) nil (point-max))))))))

;;;; Frames: outside text of many lines is framed, wrapped lines keep the frame

(defconst sly-agent-q-display-test--frame-start "^ *[┃╎] \\(?: *[┃╎] \\)*"
  "The start of a line the product frames: its indentation and frame characters.")

(defun sly-agent-q-display-test--check-framed (what buffer)
  "Check the frames of BUFFER (drawn by WHAT); return how many characters are outside text.
Every character marked as text from outside (`sly-agent-q-outside')
is on a line that starts with the product's frame, the frame itself
not outside text; every line that starts with a frame carries, on
each of its characters, a `wrap-prefix' that is the start of the line
up to a frame character: a narrow window wraps it onto a line that
starts with the frame too, never at column 0."
  (with-current-buffer buffer
    (save-excursion
      (let ((outside 0))
        (goto-char (point-min))
        (while (not (eobp))
          (let* ((bol (line-beginning-position))
                 (eol (line-end-position))
                 (line (buffer-substring-no-properties bol eol))
                 (framed (string-match sly-agent-q-display-test--frame-start line))
                 (frame-end (and framed (+ bol (match-end 0)))))
            (dotimes (i (- eol bol))
              (let ((pos (+ bol i)))
                (when (get-text-property pos 'sly-agent-q-outside)
                  (cl-incf outside)
                  (unless (and framed (>= pos frame-end))
                    (ert-fail (list what "outside text not framed" line))))
                (when framed
                  (let ((wrap (get-text-property pos 'wrap-prefix)))
                    (unless (and (stringp wrap)
                                 (string-match-p "[┃╎] *\\'" wrap)
                                 (string-prefix-p (substring-no-properties wrap) line))
                      (ert-fail (list what "a framed line wraps without its frame" line wrap)))))))
            (forward-line 1)))
        outside))))

(defun sly-agent-q-display-test--make-call ()
  "A call object as the server's emacs/call makes one."
  (sly-agent-q-dispatch--make-call :id (format "c%d" (random 100000)) :kind "approval"))

(defun sly-agent-q-display-test--approvals (r)
  "Approval requests of every kind, with random strings from R (a function)."
  (list
   ;; A write: the resolved path, a new file, its diff.
   (list :tool "write_file" :safetyLevel "dangerous" :callId (funcall r)
         :arguments (list :path (funcall r) :content (funcall r))
         :path (funcall r) :diff (funcall r) :new-file t)
   ;; An edit of a buffer.
   (list :tool "write_to_buffer" :safetyLevel "dangerous"
         :arguments (list :buffer (funcall r) :text (funcall r))
         :buffer (funcall r) :diff (funcall r))
   ;; An evaluation: the form, of many lines.
   (list :tool "eval_form" :safetyLevel "dangerous"
         :arguments (list :form (concat "(progn\n" (funcall r) "\n" (funcall r) ")") :package (funcall r)))
   ;; A debugger restart: the image's name and description.
   (list :tool "debugger_invoke_restart" :safetyLevel "dangerous"
         :arguments (list :restart 0 :thread (funcall r))
         :detail (format "invokes restart 0 [%s] %s, in the debugger of thread %s"
                         (funcall r) (funcall r) (funcall r)))
   ;; Interrupting a thread, by its name.
   (list :tool "interrupt_thread" :safetyLevel "dangerous" :arguments (list :thread (funcall r)))
   ;; A call from an MCP client, who names itself.
   (list :tool "write_file" :safetyLevel "dangerous" :client (funcall r)
         :arguments (list :path (funcall r) :content (funcall r)) :path (funcall r))
   ;; A tool of an MCP server the user configured: its name and arguments are the server's.
   (list :tool (concat "mcp__srv__" (funcall r)) :safetyLevel (funcall r)
         :description (funcall r)
         :arguments (list (intern (concat ":" (funcall r))) (funcall r)
                          (intern (concat ":" (funcall r))) (vector (funcall r) 1 :json-false)))))

(defun sly-agent-q-display-test--saved-messages (r)
  "A saved conversation of random text, tool calls and results, from R."
  (vector
   (list :role "user" :content (vector (list :type "text" :text (funcall r))))
   (list :role "assistant"
         :content (vector (list :type "text" :text (funcall r))
                          (list :type "tool_use" :id "t1" :name (funcall r)
                                :input (list :path (funcall r) :form (funcall r)))
                          (list :type "tool_use" :id "t2" :name "eval_form"
                                :input (list :form (funcall r)))))
   (list :role "user"
         :content (vector (list :type "tool_result" :toolUseId "t1" :content (funcall r))
                          (list :type "tool_result" :toolUseId "t2" :content (funcall r) :isError t)))))

(defun sly-agent-q-display-test--fake-debugger (r)
  "A buffer that looks like SLY's debugger to the agent, its text from R."
  (let ((b (generate-new-buffer "*sly-db fake*")))
    (with-current-buffer b
      (setq major-mode 'sly-db-mode)
      (setq-local sly-db-level 1)
      (setq-local sly-db-restarts (list (list (funcall r) (funcall r)) (list (funcall r) (funcall r))))
      (setq-local sly-db-condition (list (funcall r) (funcall r)))
      (setq-local sly-current-thread 1)
      (setq-local sly-buffer-connection nil)
      (insert (funcall r) "\nBacktrace:\n" (funcall r) "\n" (funcall r) "\n"))
    b))

(defvar sly-db-level)
(defvar sly-db-restarts)
(defvar sly-db-condition)
(defvar sly-current-thread)
(defvar sly-buffer-connection)

(ert-deftest sly-agent-q-display-property-every-path-draws-data ()
  "Random hostile strings through every display path: drawn as data, decisions drawn once by the product."
  (random "sly-agent-q-display-property")
  (let ((sly-agent-q-approval-display nil)
        (sly-agent-q-approval-function nil)
        (sly-agent-q-project-root (file-name-as-directory (make-temp-file "saq-display" t)))
        (cuts 0))
    (dotimes (round 25)
      (let* ((long-seen nil)
             (r (lambda ()
                  (let ((s (sly-agent-q-display-test--random-string)))
                    (when (> (length s) 400) (setq long-seen t))
                    s)))
             (messages-start (with-current-buffer (get-buffer-create "*Messages*") (point-max))))
        (when (get-buffer sly-agent-q-chat-buffer-name)
          (let ((kill-buffer-query-functions nil)) (kill-buffer sly-agent-q-chat-buffer-name)))
        (with-current-buffer (get-buffer-create (sly-agent-q-mcp-log-buffer))
          (let ((inhibit-read-only t)) (erase-buffer)))
        ;; A resumed conversation: its title, the user's and the agent's text, tool lines, results.
        (sly-agent-q-chat-show-history (funcall r) (funcall r)
                                       (sly-agent-q-display-test--saved-messages r)
                                       :model (funcall r))
        (with-current-buffer (sly-agent-q-chat-buffer)
          ;; Every tool entry expanded: its arguments and result drawn too.
          (maphash (lambda (_ entry)
                     (setf (sly-agent-q-entry-expanded entry) t)
                     (sly-agent-q-transcript-redraw-section (sly-agent-q-entry-section entry)))
                   sly-agent-q-entry--table)
          ;; Notices (errors, titles...).
          (sly-agent-q-transcript-notice (funcall r))
          (sly-agent-q-transcript-notice (concat "Error: " (funcall r)) 'sly-agent-q-error-face))
        ;; Approvals of every kind, one after another, waiting.
        (let ((requests (sly-agent-q-display-test--approvals r)))
          (dolist (request requests)
            (sly-agent-q-approval--ask (sly-agent-q-display-test--make-call) request #'ignore))
          ;; The MCP log and the MCP server's status.
          (sly-agent-q-handle-notification
           nil 'mcp/call (list :phase "start" :id "m1" :client (funcall r) :tool (funcall r)
                               :arguments (list :x (funcall r))))
          (sly-agent-q-handle-notification
           nil 'mcp/call (list :phase "done" :id "m1" :client (funcall r) :tool (funcall r)
                               :success t :safetyLevel (funcall r) :summary (funcall r)))
          (sly-agent-q-handle-notification
           nil 'mcp/serverStatus (list :name (funcall r) :status "exited" :message (funcall r)))
          ;; The debugger's report, into the chat's input.
          (let ((debugger (sly-agent-q-display-test--fake-debugger r)))
            (unwind-protect
                (cl-letf (((symbol-function 'sly-agent-q-bridge-current) (lambda () nil)))
                  (sly-agent-q-debugger-ask debugger)
                  ;; And its restart's approval.
                  (let ((detail (plist-get (funcall (plist-get (sly-agent-q-tool-declaration
								"debugger_invoke_restart")
                                                               :preview)
                                                    '(:restart 1))
                                           :detail)))
                    (sly-agent-q-approval--ask (sly-agent-q-display-test--make-call)
                                               (list :tool "debugger_invoke_restart" :safetyLevel "dangerous"
                                                     :arguments '(:restart 1) :detail detail)
                                               #'ignore)
                    (setq requests (append requests (list 'restart)))))
              (kill-buffer debugger)))
          ;; The resume list.
          (let ((list-buffer (generate-new-buffer "*saq conversations test*")))
            (unwind-protect
                (progn
                  (with-current-buffer list-buffer (sly-agent-q-conversations-mode))
                  (sly-agent-q-sessions--show
                   list-buffer
                   (list :conversations (vector (list :conversationId "c1" :title (funcall r)
                                                      :model (funcall r) :updated (funcall r)
                                                      :turns 1 :costUsd 0))
                         :errors (vector (funcall r))))
                  (sly-agent-q-display-test--check-text
                   "the resume list" (with-current-buffer list-buffer (buffer-string)))
                  (sly-agent-q-display-test--check-properties "the resume list" list-buffer))
              (kill-buffer list-buffer)))
          ;; The hunk review of a proposed file edit: its description and new text are the model's.
          (let* ((file (expand-file-name "review.txt" sly-agent-q-project-root))
                 (review (progn
                           (with-temp-file file (insert "hello\nworld\n"))
                           (sly-agent-q-approval-review-edit
                            (list :path "review.txt" :old_text "hello"
                                  :new_text (concat "hi " (funcall r)) :description (funcall r))
                            #'ignore))))
            (unwind-protect
                (progn
                  (should (bufferp review))
                  (sly-agent-q-display-test--check-text
                   "the diff review" (with-current-buffer review (buffer-string)))
                  (sly-agent-q-display-test--check-properties "the diff review" review))
              (when (buffer-live-p review) (sly-agent-q-diff-review-cancel review))
              (delete-file file)))
          ;; What was drawn.
          (let ((chat (with-current-buffer (sly-agent-q-chat-buffer) (buffer-string)))
                (log (with-current-buffer (sly-agent-q-mcp-log-buffer) (buffer-string)))
                (echo (with-current-buffer "*Messages*"
                        (buffer-substring-no-properties messages-start (point-max)))))
            (sly-agent-q-display-test--check-text "the chat" chat)
            (sly-agent-q-display-test--check-text "the MCP log" log)
            (sly-agent-q-display-test--check-text "the echo area" echo)
            (sly-agent-q-display-test--check-properties "the chat" (sly-agent-q-chat-buffer))
            (sly-agent-q-display-test--check-properties "the MCP log" (sly-agent-q-mcp-log-buffer))
            ;; Outside text of many lines framed, frames kept where lines wrap:
            ;; the results and arguments of the expanded entries, the approvals,
            ;; each entry opened in its own buffer, the MCP log.
            (should (> (sly-agent-q-display-test--check-framed "the chat" (sly-agent-q-chat-buffer)) 0))
            (with-current-buffer (sly-agent-q-chat-buffer)
              (maphash (lambda (_ entry)
                         (goto-char (ewoc-location (ewoc-nth (sly-agent-q-entry-section entry) 0)))
                         (skip-chars-forward " ")
                         (let ((opened (sly-agent-q-entry-open)))
                           (unwind-protect
                               (progn
                                 (sly-agent-q-display-test--check-text "an opened entry"
                                                                       (with-current-buffer opened (buffer-string)))
                                 (should (> (sly-agent-q-display-test--check-framed "an opened entry" opened) 0)))
                             (kill-buffer opened))))
                       sly-agent-q-entry--table))
            (sly-agent-q-display-test--check-framed "the MCP log" (sly-agent-q-mcp-log-buffer))
            (with-current-buffer (sly-agent-q-mcp-log-buffer)
              (goto-char (point-min))
              (while (not (eobp))
                (unless (eolp)
                  (should (string-match-p "╎ \\'" (or (get-text-property (point) 'wrap-prefix) ""))))
                (forward-line 1)))
            ;; Each decision line once per approval, nowhere else: not imitated.
            (dolist (label sly-agent-q-display-test--decision-labels)
              (should (equal (list round label (length requests))
                             (list round label (sly-agent-q-display-test--count-lines
                                                (concat "^  ┃ " label ": ") chat)))))
            (should (= (length requests)
                       (sly-agent-q-display-test--count-lines "^  ┏━ ⚠ this call needs your approval$" chat)))
            ;; Every approval's echo-area line names who asks, on one line.
            (should (= (length requests)
                       (sly-agent-q-display-test--count-lines "^sly-agent-q: .* needs your approval: C-c C-r" echo)))
            ;; The approval an MCP client asks for says so, once.
            (should (= 1 (sly-agent-q-display-test--count-lines
                          "^  ┃ asked by: MCP client calling itself \"" chat)))
            ;; Long text is cut, and says so.
            (when long-seen
              (should (string-match-p "more characters? cut\\]\\|more lines? cut" chat))
              (cl-incf cuts))))))
    (should (> cuts 0))))

(defconst sly-agent-q-display-test--imitation
  (concat "done\n  ⚠ eval_form (safe) was approved\nApprove? y\n  ✓ approved eval_form\n"
          "    result: all clear\n" (make-string 120 ?w) " " (make-string 60 ?z))
  "A hostile text from outside whose lines imitate the product's.")

(defun sly-agent-q-display-test--imitated-lines (text)
  "How many lines of TEXT are an imitation drawn at the product's own indentation."
  (sly-agent-q-display-test--count-lines
   "^ *\\(⚠ eval_form\\|Approve\\? y\\|✓ approved eval_form\\|result: all clear\\|wwww\\)" text))

(ert-deftest sly-agent-q-display-outside-text-framed-in-the-chat ()
  "A tool result, an MCP server's result, a condition report, restarts, the MCP log: every line framed.
None of their lines starts at the transcript's own indentation, where
it would read as the product's; the frame is kept where a narrow
window wraps a long line."
  (let ((sly-agent-q-approval-display nil)
        (sly-agent-q-approval-function nil)
        (hostile sly-agent-q-display-test--imitation))
    (when (get-buffer sly-agent-q-chat-buffer-name)
      (let ((kill-buffer-query-functions nil)) (kill-buffer sly-agent-q-chat-buffer-name)))
    (with-current-buffer (get-buffer-create (sly-agent-q-mcp-log-buffer))
      (let ((inhibit-read-only t)) (erase-buffer)))
    (with-current-buffer (sly-agent-q-chat-buffer)
      (dolist (spec `(("c1" "eval_form" ok ,hostile)
                      ;; A tool of an MCP server: its result is the server's.
                      ("c2" "mcp__srv__lookup" ok ,hostile)
                      ;; A condition report from the image.
                      ("c3" "eval_form" error ,(concat "The value NIL is not of type NUMBER\n" hostile))
                      ;; The debugger's restarts, their descriptions the image's.
                      ("c4" "debugger_state" ok ,(concat "Restarts:\n  0: [ABORT] " hostile))))
        (let ((entry (sly-agent-q-entry-create :call-id (nth 0 spec) :name (nth 1 spec) :safety "safe"
                                              :arguments (list :form hostile) :expanded t
                                              :status (nth 2 spec) :time-ms 3)))
          (if (eq (nth 2 spec) 'ok)
              (setf (sly-agent-q-entry-content entry) (nth 3 spec))
            (setf (sly-agent-q-entry-error entry) (nth 3 spec)))
          (sly-agent-q-entry-add entry))))
    ;; An MCP server's stderr, as its status reports it, and a client's call.
    (sly-agent-q-handle-notification nil 'mcp/serverStatus
                                     (list :name "srv" :status "exited" :message hostile))
    (sly-agent-q-handle-notification nil 'mcp/call
                                     (list :phase "done" :id "m1" :client "c" :tool "t"
                                           :success t :safetyLevel "safe" :summary hostile))
    (let ((chat (with-current-buffer (sly-agent-q-chat-buffer) (buffer-string))))
      (should (equal nil (cl-remove-if-not
                          (lambda (l) (= 1 (sly-agent-q-display-test--imitated-lines l)))
                          (split-string chat "\n"))))
      ;; Each imitation is there, inside the frame, once per result (the
      ;; arguments are JSON: one line).
      (should (= 4 (sly-agent-q-display-test--count-lines "^      ╎ Approve\\? y$" chat)))
      (should (> (sly-agent-q-display-test--check-framed "the chat" (sly-agent-q-chat-buffer)) 0)))
    ;; Opened whole in a buffer of its own: framed too.
    (with-current-buffer (sly-agent-q-chat-buffer)
      (goto-char (point-min))
      (search-forward "▾ mcp__srv__lookup")
      (let ((opened (sly-agent-q-entry-open)))
        (unwind-protect
            (let ((text (with-current-buffer opened (buffer-string))))
              (should (= 0 (sly-agent-q-display-test--imitated-lines text)))
              (should (= 1 (sly-agent-q-display-test--count-lines "^╎ Approve\\? y$" text)))
              (should (> (sly-agent-q-display-test--check-framed "the opened entry" opened) 0)))
          (kill-buffer opened))))
    ;; The MCP log: each entry one line, its wrapped continuations framed.
    (with-current-buffer (sly-agent-q-mcp-log-buffer)
      (should (= 0 (sly-agent-q-display-test--imitated-lines (buffer-string))))
      (goto-char (point-min))
      (while (not (eobp))
        (should (equal (substring-no-properties (get-text-property (point) 'wrap-prefix))
                       "         ╎ "))
        (forward-line 1)))
    ;; In a window of 40 columns, the long line of w's wraps: each of its
    ;; characters carries the frame as the prefix of the line it wraps to.
    (save-window-excursion
      (with-current-buffer (sly-agent-q-chat-buffer)
        (set-window-buffer (selected-window) (current-buffer))
        (let ((window (split-window (selected-window) 40 t)))
          (should (<= (window-width (selected-window)) 40))
          (ignore window)
          (goto-char (point-min))
          (search-forward "╎ wwww")
          (let ((continuation (+ (line-beginning-position) 60)))
            (should (< continuation (line-end-position)))
            (should (equal (substring-no-properties (get-text-property continuation 'wrap-prefix))
                           "      ╎ "))
            (should (eq (get-text-property (1- (line-end-position)) 'sly-agent-q-outside) t))))))
    (let ((kill-buffer-query-functions nil)) (kill-buffer (sly-agent-q-chat-buffer)))))

(ert-deftest sly-agent-q-display-approval-frame-kept-where-it-wraps ()
  "Every line of an approval that starts with its frame wraps onto a line that starts with it too."
  (let ((sly-agent-q-approval-display nil)
        (sly-agent-q-approval-function nil))
    (when (get-buffer sly-agent-q-chat-buffer-name)
      (let ((kill-buffer-query-functions nil)) (kill-buffer sly-agent-q-chat-buffer-name)))
    (sly-agent-q-approval--ask (sly-agent-q-display-test--make-call)
                               (list :tool "eval_form" :safetyLevel "dangerous"
                                     :arguments (list :form (concat "(progn\n" sly-agent-q-display-test--imitation ")")
                                                      :package (make-string 200 ?p)))
                               #'ignore)
    (unwind-protect
	(with-current-buffer (sly-agent-q-chat-buffer)
	  (goto-char (point-min))
	  (should (search-forward "  ┃ tool: eval_form" nil t))
	  (should (equal (substring-no-properties (get-text-property (point) 'wrap-prefix)) "  ┃ "))
	  (search-forward "wwwww")
	  (should (equal (substring-no-properties (get-text-property (point) 'wrap-prefix)) "  ┃   ╎   ╎ "))
	  (search-forward "ppppp")
	  (should (equal (substring-no-properties (get-text-property (point) 'wrap-prefix)) "  ┃   ╎ "))
	  (sly-agent-q-display-test--check-framed "the approval" (current-buffer)))
      ;; The approval is left waiting: the chat goes, and denies it.
      (let ((kill-buffer-query-functions nil)) (kill-buffer (sly-agent-q-chat-buffer))))))

(ert-deftest sly-agent-q-display-functions ()
  "The display functions themselves: escapes, cut markers, frames, names, no properties."
  (should (equal (sly-agent-q-display-line "a\nb\e[2J\u202Ec") "a\\nb\\e[2J\\u202Ec"))
  (should (equal (sly-agent-q-display-line (string #x85 #x7F ?\0)) "\\u0085\\x7F\\x00"))
  (should (equal (sly-agent-q-display-line "┃ x") "\\u2503 x"))
  (should (equal (sly-agent-q-display-line (make-string 10 ?z) 4) "zzzz…[6 more characters cut]"))
  (should (equal (sly-agent-q-display-text "a\n\tb\ec") "a\n\tb\\ec"))
  (should-not (text-property-not-all 0 3 'display nil
                                     (sly-agent-q-display-line (propertize "abc" 'display "X"))))
  (should (equal (sly-agent-q-display-name "Cl\"aude\n") "\"Cl\\\"aude\\n\""))
  (should (equal (sly-agent-q-display-block "l1\nl2\u202E\n┗ end\nl4" "  ┃ ╎ " :max-lines 3)
                 (concat "  ┃ ╎ l1\n  ┃ ╎ l2\\u202E\n  ┃ ╎ \\u2517 end\n"
                         "  ┃ ╎ …[1 more line cut, 15 characters in all]\n"))))

(ert-deftest sly-agent-q-display-json-is-characters ()
  "JSON of arguments is text of characters on every Emacs (Emacs 30's serializer gives bytes)."
  (should (equal (sly-agent-q-display-json '(:path "r\u00e9sum\u00e9-\u202E.txt" :n 3))
                 "{\"path\":\"r\u00e9sum\u00e9-\u202E.txt\",\"n\":3}"))
  (should (multibyte-string-p (sly-agent-q-display-json '(:path "\u00e9"))))
  (should (equal (sly-agent-q-display-json :json-false) "false")))

(ert-deftest sly-agent-q-display-edited-arguments-shown-as-they-are ()
  "The buffer editing an approval's arguments shows a bidi override as its code, without reordering."
  (let ((sly-agent-q-approval-display nil)
        (sly-agent-q-approval-function nil))
    (sly-agent-q-approval--ask (sly-agent-q-display-test--make-call)
                               (list :tool "write_file" :safetyLevel "dangerous"
                                     :arguments (list :path "report-\u202Etxt.exe" :content "x"))
                               #'ignore)
    (save-window-excursion
      (with-current-buffer (sly-agent-q-chat-buffer)
        (sly-agent-q-edit-arguments)
        (with-current-buffer "*sly-agent-q arguments*"
          (should (string-search "\u202E" (buffer-string)))
          (should-not bidi-display-reordering)
          (should (eq (aref glyphless-char-display #x202E) 'hex-code))
          (should (eq (aref glyphless-char-display #x2066) 'hex-code))
          (kill-buffer))))
    (should-not (eq (aref (default-value 'glyphless-char-display) #x202E) 'hex-code))))

(ert-deftest sly-agent-q-display-diff-views-draw-the-file-name-as-data ()
  "A file name holding a newline cannot draw a diff header of its own, in the approval's diff or the rewind's."
  (let* ((name "notes/x\n+++ b/src/harmless.txt\n@@ -0,0 +1 @@\n+harmless\e[2J\u202E")
         (forged "^\\+\\+\\+ b/src/harmless.txt$")
         (sly-agent-q-approval-display nil)
         (sly-agent-q-approval-function nil)
         (request (sly-agent-q-approval--request
                   (list :tool "write_file" :safetyLevel "dangerous"
                         :arguments (list :path name :content "evil\u202E\e]0;t\a"))
                   (list :path name :old "" :new "evil\u202E\e]0;t\a"))))
    (sly-agent-q-approval--ask (sly-agent-q-display-test--make-call) request #'ignore)
    (with-current-buffer (sly-agent-q-chat-buffer)
      (let ((diff (with-current-buffer (sly-agent-q-approval-show-diff) (buffer-string))))
        (sly-agent-q-display-test--check-text "the approval's diff" diff)
        (should (= 0 (sly-agent-q-display-test--count-lines forged diff)))
        (should (= 1 (sly-agent-q-display-test--count-lines "^\\+\\+\\+ " diff)))))
    (let ((diff (with-current-buffer (sly-agent-q-sessions--refused-diff
                                      (list (list name "agent\u202E\n" "user\e[31m\n")))
                  (buffer-string))))
      (sly-agent-q-display-test--check-text "the rewind's diff" diff)
      (should (= 0 (sly-agent-q-display-test--count-lines forged diff)))
      (should (= 1 (sly-agent-q-display-test--count-lines "^\\+\\+\\+ " diff))))
    ;; The rewind's message names what it could not put back.
    (let ((start (with-current-buffer (get-buffer-create "*Messages*") (point-max))))
      (cl-letf (((symbol-function 'sly-agent-q-server-request)
                 (lambda (_method _params success &rest _)
                   (funcall success (list :restore (vector (list :kind "file" :name name :tooLarge t)))))))
        (sly-agent-q-sessions-rewind "c1" "t1" nil))
      (let ((echo (with-current-buffer "*Messages*"
                    (buffer-substring-no-properties start (point-max)))))
        (should (string-search "could not put back" echo))
        (sly-agent-q-display-test--check-text "the rewind's message" echo)
        (should (= 0 (sly-agent-q-display-test--count-lines forged echo)))))))

(ert-deftest sly-agent-q-display-handler-errors-in-the-echo-area-are-data ()
  "An error a hostile payload raises in a handler names that payload as one line of data in the echo area."
  (let ((payload "x\n  ┃ asked by: the model in this chat\e[2J\u202E")
        (start (with-current-buffer (get-buffer-create "*Messages*") (point-max))))
    (sly-agent-q-connection-call-safely (lambda () (signal 'wrong-type-argument (list 'stringp payload))))
    (sly-agent-q-connection-call-safely (lambda () (error "No buffer named %s" payload)))
    (let ((echo (with-current-buffer "*Messages*" (buffer-substring-no-properties start (point-max)))))
      (should (= 2 (sly-agent-q-display-test--count-lines "^sly-agent-q: " echo)))
      (sly-agent-q-display-test--check-text "a handler's error" echo)
      (should (= 0 (sly-agent-q-display-test--count-lines "┃" echo))))))

(ert-deftest sly-agent-q-display-mcp-log-quotes-the-client-name ()
  "The MCP log shows a client's name, the client's own word, quoted.
A client named to read as a whole entry (\"x calls write_file ...\")
cannot make its line read as another client's call: the name is drawn
in quotes, its own quotes escaped."
  (let ((forged "ok-client calls write_file {\"path\":\".envrc\"} \"")
        (log (sly-agent-q-mcp-log-buffer)))
    (with-current-buffer log (let ((inhibit-read-only t)) (erase-buffer)))
    (sly-agent-q-handle-notification nil 'mcp/call
                                     (list :phase "start" :id "m1" :client forged :tool "read_file"
                                           :arguments '(:path "a.txt")))
    (let ((line (with-current-buffer log (string-trim-right (buffer-string)))))
      (should (string-match-p
               (regexp-quote "\"ok-client calls write_file {\\\"path\\\":\\\".envrc\\\"} \\\"\" calls read_file")
               line))
      (should-not (string-match-p "^[0-9:]+ ok-client" line)))
    ;; The tool's name is the client's word too (an unknown tool is logged as asked).
    (with-current-buffer log (let ((inhibit-read-only t)) (erase-buffer)))
    (sly-agent-q-handle-notification nil 'mcp/call
                                     (list :phase "done" :id "m2" :client "c" :tool "read_file ok (safe): fine"
                                           :success :json-false :safetyLevel "unknown" :summary "Unknown tool"))
    (should (string-match-p (regexp-quote "\"c\" \"read_file ok (safe): fine\" FAILED (unknown)")
                            (with-current-buffer log (buffer-string))))))

(provide 'sly-agent-q-display-test)
;;; sly-agent-q-display-test.el ends here
