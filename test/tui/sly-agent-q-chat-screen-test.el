;;; sly-agent-q-chat-screen-test.el --- The chat as a person sees it, on a real terminal  -*- lexical-binding: t; -*-

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

;; `make run' in an 80-column terminal, the mock LLM answering; what the
;; screen shows is asserted, not the buffer behind it.

;;; Code:

(require 'sly-agent-q-tui-helper
         (expand-file-name "sly-agent-q-tui-helper"
                           (file-name-directory (or load-file-name buffer-file-name))))

(defconst sly-agent-q-chat-screen-test--markdown
  (concat "## Mapping over lists\n"
          "Use **MAPCAR** when you want the results, and `mapc` for side effects.\n"
          "- it takes *a function*\n"
          "- and one list or more\n\n"
          "| function | returns |\n|---|---|\n| mapcar | a new list |\n| mapc | its first list |\n\n"
          "```lisp\n(mapcar #'1+ '(1 2 3))\n```\n"
          "See [the HyperSpec](http://127.0.0.1/mapcar) for the rest. That is all.")
  "The model's Markdown answer.")

(ert-deftest sly-agent-q-tui-markdown-rendered-and-prompt-apart ()
  "A Markdown answer streams rendered; the prompt stays on its own line; the state leads the header."
  (sly-agent-q-tui-with-run
      (:script `((steps . [,(append (sly-agent-q-tui-step (sly-agent-q-tui-text sly-agent-q-chat-screen-test--markdown))
                                    '((chunk_delay_ms . 120)))])))
    ;; The chat's "Starting SBCL..." is followed by what became of it.
    (sly-agent-q-tui-wait "^SBCL is connected with SLIME\\.$" 10 "the chat saying the Lisp connected")
    (sly-agent-q-tui-type "How do I map over a list?")
    (sly-agent-q-tui-keys "Enter")
    ;; Mid-stream: the header line (the screen's first line) starts with the state.
    (let ((screen (sly-agent-q-tui-wait "^ \\[answering · C-c C-k cancels\\]" 30 "the answer streaming")))
      (sly-agent-q-tui-snapshot "chat-streaming")
      (should (string-prefix-p " [answering" (sly-agent-q-tui-header)))
      ;; No state text inside the transcript or the prompt line.
      (should-not (string-match-p "\\[answering\\]" screen))
      ;; The prompt is alone on its line, however the streamed text ends.
      (should (member ">" (sly-agent-q-tui-lines))))
    (let ((screen (sly-agent-q-tui-wait "That is all\\." 60 "the whole answer")))
      (setq screen (sly-agent-q-tui-wait "^ \\[ready\\]" 10 "the turn's end"))
      (sly-agent-q-tui-snapshot "chat-markdown")
      (let ((lines (sly-agent-q-tui-lines)))
        ;; Rendered: the heading without its ##, emphasis and code without their marks.
        (should (member "Mapping over lists" lines))
        ;; (In the transcript: the mode line below has its own "**".)
        (let ((transcript (substring screen (string-match "^You:" screen) (string-match "^>$" screen))))
          (should-not (string-match-p "##\\|\\*\\*\\|`" (replace-regexp-in-string "^```.*" "" transcript))))
        ;; A code block's fences stand on lines of their own.
        (should (member "```" lines))
        (should (member "Use MAPCAR when you want the results, and mapc for side effects." lines))
        (should (cl-some (lambda (l) (string-match-p "^[•●] it takes a function$" l)) lines))
        ;; The table's cells padded to their columns, the rule drawn to match.
        (should (member "│ function │ returns        │" lines))
        (should (member "├──────────┼────────────────┤" lines))
        (should (member "│ mapcar   │ a new list     │" lines))
        (should (member "│ mapc     │ its first list │" lines))
        (should (member "(mapcar #'1+ '(1 2 3))" lines))
        (should (cl-some (lambda (l) (string-match-p "the HyperSpec <http://127\\.0\\.0\\.1/mapcar>" l)) lines))
        ;; The prompt, alone at the end.
        (should (member ">" lines))
        ;; The header line fits: the state and the cost are both on the 80-column screen.
        (should (string-match-p "\\` \\[ready\\] │ .* │ \\$[0-9.]+" (sly-agent-q-tui-header)))))))

(ert-deftest sly-agent-q-tui-thinking-folded-above-the-answer ()
  "The model's reasoning streams into a folded section above its answer; TAB on it opens it."
  (sly-agent-q-tui-with-run
      (:script `((steps . [,(sly-agent-q-tui-step
                             '((type . "thinking")
                               (thinking . "The user asks what MAPCAR returns. Its lambda list first, then one call to be sure."))
                             (sly-agent-q-tui-tool "describe_symbol" '((symbol . "mapcar"))))
                           ,(sly-agent-q-tui-step
                             '((type . "thinking") (thinking . "A function of a function and lists: it returns a fresh list."))
                             (sly-agent-q-tui-text "MAPCAR returns a new list of the function's results. That is all."))])))
    (sly-agent-q-tui-type "What does mapcar return?")
    (sly-agent-q-tui-keys "Enter")
    ;; While it streams: a folded header, and none of the reasoning's text.
    (let ((screen (sly-agent-q-tui-wait "^▸ Thinking… [0-9]+ tokens$" 60 "the reasoning streaming, folded")))
      (sly-agent-q-tui-snapshot "chat-thinking-streaming")
      (should-not (string-match-p "lambda list first" screen)))
    (let ((screen (sly-agent-q-tui-wait "That is all\\." 60 "the whole answer")))
      (setq screen (sly-agent-q-tui-wait "^ \\[ready\\]" 10 "the turn's end"))
      (sly-agent-q-tui-snapshot "chat-thinking")
      ;; One folded section before the call, one before the answer, each above what it led to.
      (should (= 2 (cl-count-if (lambda (l) (string-match-p "^▸ Thinking… [0-9]+ tokens$" l)) (sly-agent-q-tui-lines))))
      (should (< (string-match "^▸ Thinking" screen) (string-match "describe_symbol" screen)
                 (string-match "^MAPCAR returns" screen)))
      (should-not (string-match-p "fresh list" screen)))
    ;; TAB on the second header opens it.
    (sly-agent-q-tui-keys "M->" "C-r")
    (sly-agent-q-tui-type "Thinking")
    (sly-agent-q-tui-keys "Enter" "Tab")
    (let ((screen (sly-agent-q-tui-wait "^▾ Thinking… [0-9]+ tokens$" 10 "the reasoning opened")))
      (sly-agent-q-tui-snapshot "chat-thinking-open")
      (should (string-match-p "it returns a fresh list\\." screen))
      (should-not (string-match-p "lambda list first" screen)))))

(ert-deftest sly-agent-q-tui-link-shows-its-address ()
  "A link whose text looks like an address shows its real address on the screen, title or not.
With markdown-mode (as `make run' has it when installed) a link with a
title showed its text alone: \"https://bank.example/\", the address hidden."
  (sly-agent-q-tui-with-run
      (:script `((steps . [,(sly-agent-q-tui-step
                             (sly-agent-q-tui-text
                              (concat "Log in at [https://bank.example/](http://127.0.0.1/evil \"Bank\") now.\n"
                                      "Or at [https://bank.example/](<http://127.0.0.1/evil2>) then.\n"
                                      "That is all.")))])))
    (sly-agent-q-tui-type "Where do I log in?")
    (sly-agent-q-tui-keys "Enter")
    (sly-agent-q-tui-wait "That is all\\." 60 "the whole answer")
    (let ((screen (sly-agent-q-tui-wait "^ \\[ready\\]" 10 "the turn's end")))
      (sly-agent-q-tui-snapshot "chat-link")
      (should (string-match-p "^Log in at https://bank\\.example/ <http://127\\.0\\.0\\.1/evil" screen))
      (should (string-match-p "^Or at https://bank\\.example/ <.*127\\.0\\.0\\.1/evil2" screen)))))

(ert-deftest sly-agent-q-tui-menu-fits-80-columns ()
  "The chat's menu (C-c C-m) at 80 columns: every group and key on the screen, no line wrapped.
Its four groups side by side were wider than the terminal: Emacs
wrapped each line, the last group's keys under the others' (a \\ at
each right edge)."
  (sly-agent-q-tui-with-run ()
    (sly-agent-q-tui-keys "C-c" "C-m")
    (let ((screen (sly-agent-q-tui-wait "MCP servers" 10 "the menu")))
      (sly-agent-q-tui-snapshot "menu")
      (dolist (title '("Model" "Conversation" "Context" "MCP servers"))
        (should (string-match-p (regexp-quote title) screen)))
      (dolist (entry '("Trust levels" "Permission rules" "Rewind files to a turn" "Cancel the running turn"
                       "Clear the attachments" "Connect the configured" "Their log"))
        (should (string-match-p (regexp-quote entry) screen)))
      ;; No line of the menu is continued on the next (Emacs's \ at the right edge).
      (should-not (cl-some (lambda (line) (string-match-p "\\\\$" line)) (sly-agent-q-tui-lines)))
      (sly-agent-q-tui-keys "C-g"))))

(ert-deftest sly-agent-q-tui-tool-call-and-approval-state ()
  "A tool call shows as an entry; waiting for an approval is said first in the header line.
At 80 columns; 40 lines, so that the entry above the file's approval and
its diff stays on the screen."
  (sly-agent-q-tui-with-run
      (:height 40
       :script `((steps . [,(sly-agent-q-tui-step (sly-agent-q-tui-text "Let me look it up.")
                                                  (sly-agent-q-tui-tool "describe_symbol" '((symbol . "mapcar"))))
                           ,(sly-agent-q-tui-step (sly-agent-q-tui-text "Now I write the notes.")
                                                  (sly-agent-q-tui-tool "write_file" '((path . "notes.txt") (content . "MAPCAR maps."))))])))
    (sly-agent-q-tui-type "Describe mapcar, then write notes")
    (sly-agent-q-tui-keys "Enter")
    (let ((screen (sly-agent-q-tui-wait "^ \\[awaiting approval" 60 "the approval")))
      (sly-agent-q-tui-snapshot "chat-approval")
      (should (string-match-p "▸ describe_symbol (safe) symbol=\"mapcar\"  ✓ [0-9]+ ms" screen))
      (should (string-match-p "write_file" screen))
      (should (string-match-p "C-c C-k cancels\\]" (sly-agent-q-tui-header))))
    (sly-agent-q-tui-keys "C-c" "C-k")
    (sly-agent-q-tui-wait "\\[cancelled\\]" 20 "the cancellation")
    (let ((screen (sly-agent-q-tui-wait "^ \\[ready\\]" 10 "the header line cleared")))
      (should-not (string-match-p "cancelling" screen)))))

(defconst sly-agent-q-chat-screen-test--warning-package
  ";;; saq-throwaway.el --- A package whose compilation warns  -*- lexical-binding: t; -*-
(defun saq-throwaway-value () saq-throwaway-free-variable)
;;; saq-throwaway.el ends here
"
  "A user's package that native compilation warns about (a free variable).")

(defun sly-agent-q-chat-screen-test--eval (form)
  "Evaluate FORM in the session with M-:, as a user does; return what the echo area shows."
  (sly-agent-q-tui-keys "M-:")
  (sly-agent-q-tui-wait "Eval:" 10 "the M-: prompt")
  (sly-agent-q-tui-type (prin1-to-string form))
  (sly-agent-q-tui-keys "Enter")
  (let ((deadline (+ (float-time) 10)))
    (while (and (string-match-p "Eval:" (sly-agent-q-tui-screen)) (< (float-time) deadline))
      (sly-agent-q-test-sleep 0.2)))
  (car (last (cl-remove-if #'string-empty-p (sly-agent-q-tui-lines)))))

(ert-deftest sly-agent-q-tui-no-warnings-window ()
  "make run opens no *Warnings* window (about native compilation or anything else).
Native compilation is made to warn, as it does of a package the user
loads: the warning is logged in *Warnings*, and no window shows it."
  (sly-agent-q-tui-with-run (:layout t :width 160 :height 40)
    ;; Native compilation's warnings come asynchronously, as its jobs end: watch for them a while.
    (let ((deadline (+ (float-time) 30)))
      (while (and (< (float-time) deadline)
                  (not (string-match-p "\\*Warnings\\*" (sly-agent-q-tui-screen))))
        (sly-agent-q-test-sleep 1)))
    (let ((screen (sly-agent-q-tui-snapshot "run-layout")))
      (should-not (string-match-p "\\*Warnings\\*" screen))
      (should (string-match-p "CL-USER>" screen))
      (should (string-match-p "\\[ready\\]" screen))
      ;; Before the first message the server has not been used: nothing says it is not running.
      (should-not (string-match-p "server not running\\|server stopped" screen)))
    ;; A package with a warning, compiled to native code in the background as Emacs does.
    (let* ((dir (make-temp-file "agent-q-tui-package" t))
           (file (expand-file-name "saq-throwaway.el" dir))
           ;; Not typed on the screen: the buffer's name is what the screen is searched for.
           (logged `(let ((b (get-buffer (format "*%s*" "Warnings"))))
                      (intern (concat "saq-warning-"
                                      (if (and b (with-current-buffer b
                                                   (string-search "saq-throwaway-free-variable" (buffer-string))))
                                          "logged" "not-yet"))))))
      (unwind-protect
          (progn
            (with-temp-file file (insert sly-agent-q-chat-screen-test--warning-package))
            ;; A first run queues dozens of the system's files for native
            ;; compilation, one job at a time: the package goes first in the queue
            ;; (the same queue and workers), so that it is compiled within the test.
            (should (equal "saq-compiling"
                           (sly-agent-q-chat-screen-test--eval
                            `(let ((queued comp-files-queue))
                               (setq comp-files-queue nil)
                               (native-compile-async ,file)
                               (setq comp-files-queue (append comp-files-queue queued))
                               'saq-compiling))))
            (let ((deadline (+ (float-time) 120)) (seen nil))
              (while (and (not seen) (< (float-time) deadline))
                (sly-agent-q-test-sleep 2)
                (setq seen (or (string-match-p "\\*Warnings\\*" (sly-agent-q-tui-screen))
                               (string-match-p "saq-warning-logged"
                                               (sly-agent-q-chat-screen-test--eval logged))))))
            ;; The compilation warned (it is in *Warnings*), and no window shows it.
            (let ((screen (sly-agent-q-tui-screen)))
              (should-not (string-match-p "\\*Warnings\\*" screen))
              (should (string-match-p "saq-warning-logged" (sly-agent-q-chat-screen-test--eval logged)))
              (should-not (string-match-p "\\*Warnings\\*" (sly-agent-q-tui-screen)))))
        (delete-directory dir t)))))

(ert-deftest sly-agent-q-tui-approval-shows-the-lisp-form-as-lisp ()
  "An eval_form approval shows its form as Lisp, not a JSON string; C-c C-e edits it in Lisp mode."
  (sly-agent-q-tui-with-run
      (:script `((steps . [,(sly-agent-q-tui-step
                             (sly-agent-q-tui-tool "eval_form" '((form . "(format nil \"~a-~a\" \"forty\" 2)"))))
                           ,(sly-agent-q-tui-step (sly-agent-q-tui-text "It gave {{last_tool_result}}"))])))
    ;; Evaluating asks first (the option a user sets for it): eval_form waits for the approval.
    (sly-agent-q-tui-keys "M-:")
    (sly-agent-q-tui-wait "Eval:" 10 "the M-: prompt")
    (sly-agent-q-tui-type "(progn (setq sly-agent-q-ask-before-evaluating t) (sly-agent-q-server-reconfigure) 'set)")
    (sly-agent-q-tui-keys "Enter")
    (sly-agent-q-tui-wait "^set$" 10 "the option set")
    (sly-agent-q-tui-type "Evaluate it")
    (sly-agent-q-tui-keys "Enter")
    (let* ((screen (sly-agent-q-tui-wait "^ \\[awaiting approval" 60 "the approval"))
           (lines (split-string screen "\n")))
      (sly-agent-q-tui-snapshot "approval-lisp-form-strings")
      ;; The form's own text, its strings' quotes as typed: no JSON string around it.
      (should (cl-some (lambda (l) (string-match-p "(format nil \"~a-~a\" \"forty\" 2)\\s-*$" l)) lines))
      (let ((box (seq-filter (lambda (l) (string-match-p "┃" l)) lines)))
        (should (member "  ┃   ╎ form:" box))
        (should-not (cl-some (lambda (l) (string-match-p "form: \"\\|\\\\\"" l)) box)))
      ;; The chat's line of the call shows the form as Lisp too, not as a JSON string.
      (let ((entry (cl-find-if (lambda (l) (string-search "eval_form (" l)) lines)))
        (should entry)
        (should (string-search "form=(format nil \"~a-~a\" \"forty\" 2)" entry))
        (should-not (string-search "\\\"" entry))))
    (sly-agent-q-tui-keys "C-c" "C-e")
    (let ((screen (sly-agent-q-tui-wait "The Lisp form of eval_form" 20 "the form's editing buffer")))
      (sly-agent-q-tui-snapshot "approval-lisp-edit")
      ;; In Lisp mode, the form as it is.
      (should (string-match-p "(Lisp" screen))
      (should (string-match-p "^(format nil \"~a-~a\" \"forty\" 2)" screen)))
    (sly-agent-q-tui-keys "C-c" "C-k")))

(provide 'sly-agent-q-chat-screen-test)
;;; sly-agent-q-chat-screen-test.el ends here
