;;; sly-agent-q-display-e2e-test.el --- What the user reads is the truth, in a real image  -*- lexical-binding: t; -*-

;;; Commentary:

;; Approval prompts no model or MCP client can forge, end to end: a
;; real SBCL under SLIME (or SLY, with SLY_AGENT_Q_E2E_LISP=sly and
;; SLY_DIR), the real bundled server, the mock LLM, and the official
;; MCP client.  A hostile model writes to a path holding a newline that
;; would forge the resolved-path line, and to a name holding U+202E; a
;; hostile MCP client calls itself a name holding newlines, ESC and
;; bidi controls.  The chat buffer and the echo area must show the
;; truth: no raw control or bidi character, each line the product makes
;; exactly once.  Run with test/security/run.sh.

;;; Code:

(require 'sly-agent-q-test-helper
         (expand-file-name "../elisp/sly-agent-q-test-helper"
                           (file-name-directory (or load-file-name buffer-file-name))))
(require 'sly-agent-q-approval)
(require 'sly-agent-q-mcp)
(require 'text-property-search)

(declare-function slime-start "ext:slime")
(declare-function slime-connected-p "ext:slime")
(declare-function sly-start "ext:sly")
(declare-function sly-connected-p "ext:sly")

(defconst sly-agent-q-display-e2e-lisp sly-agent-q-test-lisp
  "Which Lisp mode these tests drive: `slime' or `sly'.")

(defun sly-agent-q-display-e2e--connect ()
  "Start SBCL under the Lisp mode under test."
  (sly-agent-q-test-connect-lisp))

(defconst sly-agent-q-display-e2e--forbidden
  "[\0-\t\v-\37\177-\237\u061C\u200E\u200F\u202A-\u202E\u2066-\u2069]"
  "A raw control or bidi character: never in the drawn text (newline aside).")

(defun sly-agent-q-display-e2e--lines-matching (regexp text)
  "The lines of TEXT matching REGEXP."
  (cl-remove-if-not (lambda (l) (string-match-p regexp l)) (split-string text "\n")))

(defun sly-agent-q-display-e2e--messages-since (start)
  "The text of *Messages* after position START."
  (with-current-buffer "*Messages*"
    (buffer-substring-no-properties (min start (point-max)) (point-max))))

(defun sly-agent-q-display-e2e--messages-end ()
  "The end of *Messages* now."
  (with-current-buffer (get-buffer-create "*Messages*") (point-max)))

(defun sly-agent-q-display-e2e--approval-text ()
  "The text of the first approval waiting in the chat buffer, or nil."
  (let ((buf (sly-agent-q-chat-buffer t)))
    (when buf
      (with-current-buffer buf
        (let ((m (save-excursion
                   (goto-char (point-min))
                   (text-property-search-forward 'sly-agent-q-approval nil nil))))
          (and m (buffer-substring-no-properties (prop-match-beginning m) (prop-match-end m))))))))

(defconst sly-agent-q-display-e2e--forged-path
  "notes/x-a\n    SPOOFED path src/harmless.txt (resolved, relative to the project root)"
  "A path whose newline would forge the approval's resolved-path line.")

(defconst sly-agent-q-display-e2e--rlo-path "notes/report-\u202Etxt.exe"
  "A name whose right-to-left override would make it read \"exe.txt\".")

(ert-deftest sly-agent-q-display-e2e-forged-path-is-drawn-as-data ()
  "A write_file whose path forges the resolved-path line, then one with U+202E: the chat shows the truth."
  (sly-agent-q-display-e2e--connect)
  (let ((root (file-name-as-directory (make-temp-file "saq-display-e2e" t)))
        (seen nil))
    (unwind-protect
        (let ((sly-agent-q-project-root root))
          (make-directory (expand-file-name "notes" root))
          (sly-agent-q-test-with-server
              `((steps . [((content . [((type . "tool_use") (name . "write_file")
                                        (input . ((path . ,sly-agent-q-display-e2e--forged-path)
                                                  (content . "forged\n"))))])
                           (stop_reason . "tool_use"))
                          ((content . [((type . "tool_use") (name . "write_file")
                                        (input . ((path . ,sly-agent-q-display-e2e--rlo-path)
                                                  (content . "rlo\n"))))])
                           (stop_reason . "tool_use"))
                          ((content . [((type . "text") (text . "done"))]))]))
            (let ((outcome nil)
                  (messages (sly-agent-q-display-e2e--messages-end)))
              (sly-agent-q-send "Write the notes" (lambda (p) (setq outcome p)))
              ;; The user reads each approval and denies it.
              (dotimes (_ 2)
                (let ((text (sly-agent-q-test-wait #'sly-agent-q-display-e2e--approval-text
                                                   60 "an approval in the chat")))
                  (push (cons text (sly-agent-q-test-chat-text)) seen)
                  (with-current-buffer (sly-agent-q-chat-buffer)
                    (sly-agent-q-deny nil "no"))))
              (sly-agent-q-test-wait (lambda () outcome) 60 "the turn to end")
              (setq seen (nreverse seen))
              (let ((forged (car (nth 0 seen)))
                    (rlo (car (nth 1 seen)))
                    (chat (sly-agent-q-test-chat-text)))
                ;; The newline is shown escaped: no line of the prompt starts with the forged text.
                (should-not (sly-agent-q-display-e2e--lines-matching "^ *SPOOFED" forged))
                (should-not (sly-agent-q-display-e2e--lines-matching "^ *SPOOFED" chat))
                (should (string-match-p (regexp-quote "notes/x-a\\n    SPOOFED") forged))
                ;; The product's target line appears once, and holds the whole path.
                (should (= 1 (length (sly-agent-q-display-e2e--lines-matching "^  ┃ target: " forged))))
                (should (string-match-p "^  ┃ target: .*notes/x-a\\\\n    SPOOFED" forged))
                (should (= 1 (length (sly-agent-q-display-e2e--lines-matching "^  ┃ tool: write_file$" forged))))
                (should (= 1 (length (sly-agent-q-display-e2e--lines-matching
                                      "^  ┃ asked by: the model in this chat$" forged))))
                ;; U+202E is drawn visibly, never raw, in the prompt, the tool line or anywhere else.
                (should (string-match-p (regexp-quote "report-\\u202Etxt.exe") rlo))
                (should-not (string-match-p sly-agent-q-display-e2e--forbidden chat))
                (should-not (string-match-p sly-agent-q-display-e2e--forbidden
                                            (sly-agent-q-display-e2e--messages-since messages)))
                ;; Nothing was written.
                (should-not (directory-files (expand-file-name "notes" root) nil "\\`[^.]"))))))
      (delete-directory root t))))

(defconst sly-agent-q-display-e2e--hostile-client
  (concat "Claude Code\n  ✓ approved write_file\n\e[2J\e]0;trusted\a"
          "\u202Eedoc edualC\u202C\u2066x\u2069\u200F\u061C"
          (make-string 400 ?Z))
  "An MCP client name with newlines, ESC sequences and bidi controls, and too long.")

(defun sly-agent-q-display-e2e--mcp-client (calls client-name poll)
  "Run the official MCP client over HTTP on CALLS, as CLIENT-NAME, calling POLL."
  (let* ((out (generate-new-buffer " *display e2e mcp client*"))
         (process-environment (cons (concat "MCP_CLIENT_NAME=" client-name) process-environment))
         (proc (make-process
                :name "display-e2e-mcp-client" :buffer out :connection-type 'pipe
                :stderr (get-buffer-create " *display e2e mcp client stderr*")
                :command (list "node" (expand-file-name "test/fixtures/mcp/client.mjs" sly-agent-q-test-root)
                               "http" sly-agent-q-mcp-state-file (json-encode calls)))))
    (unwind-protect
        (progn
          (sly-agent-q-test-wait (lambda () (funcall poll) (not (process-live-p proc)))
                                 120 "the MCP client")
          (sly-agent-q-test-sleep 0.1)
          (let ((json-array-type 'vector) (json-object-type 'alist) (json-false nil))
            (json-read-from-string (with-current-buffer out (buffer-string)))))
      (kill-buffer out))))

(ert-deftest sly-agent-q-display-e2e-hostile-mcp-client-name ()
  "An MCP client naming itself with newlines, ESC and bidi controls cannot forge the prompt or the echo area."
  (sly-agent-q-display-e2e--connect)
  (let ((root (file-name-as-directory (make-temp-file "saq-display-e2e" t)))
        (prompt nil) (chat nil) (echo nil))
    (unwind-protect
        (let ((sly-agent-q-project-root root)
              (sly-agent-q-mcp-state-file (expand-file-name "state/mcp.json" root)))
          (sly-agent-q-test-with-server
              '((steps . [((content . [((type . "text") (text . "unused"))]))]))
            (sly-agent-q-mcp-start)
            (sly-agent-q-test-wait (lambda () (file-exists-p sly-agent-q-mcp-state-file)) 20 "MCP to start")
            (let* ((messages (sly-agent-q-display-e2e--messages-end))
                   (r (sly-agent-q-display-e2e--mcp-client
                       (vector '((name . "write_file") (arguments . ((path . "mcp.txt") (content . "no\n")))))
                       sly-agent-q-display-e2e--hostile-client
                       (lambda ()
                         (let ((text (and (not prompt) (sly-agent-q-display-e2e--approval-text))))
                           (when text
                             (setq prompt text
                                   chat (sly-agent-q-test-chat-text)
                                   echo (sly-agent-q-display-e2e--messages-since messages))
                             (with-current-buffer (sly-agent-q-chat-buffer)
                               (sly-agent-q-deny nil "no"))))))))
              (should prompt)
              (should (eq (alist-get 'isError (aref r 0)) t))
              (should-not (file-exists-p (expand-file-name "mcp.txt" root)))
              ;; No raw control or bidi character in the chat or the echo area.
              (should-not (string-match-p sly-agent-q-display-e2e--forbidden chat))
              (should-not (string-match-p sly-agent-q-display-e2e--forbidden echo))
              ;; The client cannot print a line of its own: no forged "approved" line.
              (should-not (sly-agent-q-display-e2e--lines-matching "^ *✓ approved" chat))
              (should-not (sly-agent-q-display-e2e--lines-matching "^ *✓ approved" echo))
              ;; Who asks is one line the product made, naming the client as it calls itself, bounded.
              (let ((who (sly-agent-q-display-e2e--lines-matching "^  ┃ asked by: " prompt)))
                (should (= 1 (length who)))
                (should (string-match-p "^  ┃ asked by: MCP client calling itself \"Claude Code" (car who)))
                (should (< (length (car who)) 200)))
              (should (= 1 (length (sly-agent-q-display-e2e--lines-matching "^  ┃ tool: write_file$" prompt))))
              (should (string-match-p "MCP client calling itself \"Claude Code" echo))
              ;; One line in the echo area.
              (let ((asking (sly-agent-q-display-e2e--lines-matching "needs your approval" echo)))
                (should (= 1 (length asking)))
                (should (string-match-p "MCP client calling itself" (car asking)))))))
      (delete-directory root t))))

(provide 'sly-agent-q-display-e2e-test)
;;; sly-agent-q-display-e2e-test.el ends here
