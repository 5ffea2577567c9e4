;;; sly-agent-q-faces-test.el --- The chat's faces, as a light and a dark theme draw them  -*- lexical-binding: t; -*-

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

;; A real chat (the bundled server, the scripted model): a tool that
;; runs, a Lisp form waiting for approval, then denied, and a Markdown
;; answer.  At the position of each kind of text, the colour it is drawn
;; in is resolved in Emacs's default theme, `modus-operandi' (light) and
;; `modus-vivendi' (dark), as a frame of a graphic display with
;; millions of colours would draw it: a batch Emacs has no such frame,
;; so its frame is told it has one while the faces are computed.

;;; Code:

(require 'sly-agent-q-test-helper
         (expand-file-name "sly-agent-q-test-helper"
                           (file-name-directory (or load-file-name buffer-file-name))))
(require 'sly-agent-q)
(require 'sly-agent-q-approval)
(load (expand-file-name "scripts/lisp-modes" sly-agent-q-test-root) nil t)

(defconst sly-agent-q-faces-test--themes '(nil modus-operandi modus-vivendi)
  "The themes the faces are checked in: nil is Emacs's default, light.")

(defconst sly-agent-q-faces-test--form "(let ((n 2))\n  (defun twice (x)\n    \"Twice X.\"\n    (* n x)))"
  "The Lisp form the model asks to evaluate.")

(defconst sly-agent-q-faces-test--answer
  (concat "Short answer: yes, it is.\n\n"
          "Some words first.\n"
          "## Plan\n"
          "Set *results* to the list, *then* go.\n\n"
          "```lisp\n(defun square (x)\n  \"Square X.\"\n  (* x x))\n```\n\n"
          "| name | arity |\n|---|---|\n| car | 1 |\n| `mapcar` | 2 or more |\n| 日本 | **0** |\n\n"
          "Done.\n")
  "A Markdown answer with each construct whose faces are checked.")

(defun sly-agent-q-faces-test--text (text)
  "A text content block of TEXT, for the scripted model."
  `((type . "text") (text . ,text)))

(defun sly-agent-q-faces-test--tool (name input)
  "A tool_use content block calling NAME with INPUT (an alist), for the scripted model."
  `((type . "tool_use") (name . ,name) (input . ,(or input (make-hash-table)))))

(defun sly-agent-q-faces-test--script (&rest steps)
  "A script for the model of STEPS, each a list of content blocks."
  `((steps . ,(vconcat (mapcar (lambda (content) `((content . ,(vconcat content)))) steps)))))

(defun sly-agent-q-faces-test--use-theme (theme)
  "Draw faces as THEME does (nil: no theme) on a graphic display of many colours."
  (mapc #'disable-theme custom-enabled-themes)
  (when theme (load-theme theme t))
  (modify-frame-parameters nil `((display-type . color)
                                 (background-mode . ,(if (eq theme 'modus-vivendi) 'dark 'light))))
  (cl-letf (((symbol-function 'display-color-cells) (lambda (&rest _) 16777216))
            ((symbol-function 'frame-set-background-mode) #'ignore))
    ;; The default face's colours would set the frame's again from the terminal's.
    (dolist (face (delq 'default (face-list)))
      (face-spec-recalc face (selected-frame)))))

(defun sly-agent-q-faces-test--faces (pos)
  "The faces of the text at POS, a list."
  (let ((face (get-text-property pos 'face)))
    (if (and (listp face) (not (keywordp (car face)))) face (list face))))

(defun sly-agent-q-faces-test--attribute (pos attribute)
  "The ATTRIBUTE the text at POS is drawn with: its first face that sets it wins."
  (or (cl-loop for face in (sly-agent-q-faces-test--faces pos)
               for value = (and face (facep face) (face-attribute face attribute nil t))
               when (and value (not (eq value 'unspecified)))
               return value)
      (face-attribute 'default attribute nil t)))

(defun sly-agent-q-faces-test--fg (pos)
  "The colour the text at POS is drawn in."
  (sly-agent-q-faces-test--attribute pos :foreground))

(defun sly-agent-q-faces-test--color (face)
  "FACE's foreground, as it is drawn."
  (face-attribute face :foreground nil t))

(defun sly-agent-q-faces-test--at (regexp &optional group)
  "The start of the first match of REGEXP (its GROUP) in the chat buffer."
  (save-excursion
    (goto-char (point-min))
    (unless (re-search-forward regexp nil t) (ert-fail (list "not in the chat" regexp)))
    (match-beginning (or group 0))))

(defun sly-agent-q-faces-test--visible (start end)
  "The text between START and END as the screen shows it."
  (let ((out nil) (pos start))
    (while (< pos end)
      (let ((next (min (next-single-char-property-change pos 'invisible nil end)
                       (next-single-char-property-change pos 'display nil end)))
            (display (get-text-property pos 'display)))
        (cond ((invisible-p pos))
              ((stringp display) (push display out))
              (t (push (buffer-substring-no-properties pos next) out)))
        (setq pos next)))
    (apply #'concat (nreverse out))))

(defun sly-agent-q-faces-test--check-answer (theme)
  "Check the faces of `sly-agent-q-faces-test--answer' in the chat, drawn by THEME."
  (let ((what (list theme (if (and sly-agent-q-markdown-use-markdown-mode (featurep 'markdown-mode))
                              'markdown-mode 'own))))
    ;; A paragraph's first line is no document's metadata: drawn as body text.
    (let ((short (sly-agent-q-faces-test--at "^Short answer:")))
      (should (equal (list what (sly-agent-q-faces-test--fg short))
                     (list what (face-attribute 'default :foreground nil t))))
      (should-not (cl-find-if (lambda (f) (and f (string-match-p "metadata" (symbol-name f))))
                              (sly-agent-q-faces-test--faces (+ short 2)))))
    ;; The heading: its level's face, not the label's; a blank line drawn above it.
    (let ((plan (sly-agent-q-faces-test--at "^## \\(Plan\\)" 1))
          (agent (sly-agent-q-faces-test--at "^Agent:")))
      (should (memq 'sly-agent-q-heading-2-face (sly-agent-q-faces-test--faces plan)))
      (should-not (equal (mapcar (lambda (a) (sly-agent-q-faces-test--attribute plan a))
                                 '(:foreground :underline :height))
                         (mapcar (lambda (a) (sly-agent-q-faces-test--attribute agent a))
                                 '(:foreground :underline :height))))
      (should (string-match-p "^Some words first\\.\n\nPlan$"
                              (sly-agent-q-faces-test--visible (point-min) (sly-agent-q-transcript-end)))))
    ;; *results* is a Lisp name: its asterisks shown, not slanted; *then* is emphasis.
    (let ((results (sly-agent-q-faces-test--at "\\*results\\*")))
      (should (equal (sly-agent-q-faces-test--visible results (+ results 9)) "*results*"))
      (dotimes (i 9)
        (should-not (cl-intersection '(italic markdown-italic-face)
                                     (sly-agent-q-faces-test--faces (+ results i))))))
    ;; The code block's band: every character, fences and newlines included,
    ;; has the band's face and is drawn on its background.
    (let* ((start (sly-agent-q-faces-test--at "^```lisp"))
           (end (save-excursion (goto-char start) (forward-line 5) (point)))
           (band (face-attribute 'sly-agent-q-code-block-face :background nil t)))
      (should (equal (buffer-substring-no-properties start end)
                     "```lisp\n(defun square (x)\n  \"Square X.\"\n  (* x x))\n```\n"))
      (should (stringp band))
      (should-not (equal band (face-attribute 'default :background nil t)))
      (cl-loop for pos from start below end
               do (should (equal (list what pos (buffer-substring-no-properties pos (1+ pos))
                                       (memq 'sly-agent-q-code-block-face (sly-agent-q-faces-test--faces pos))
                                       (sly-agent-q-faces-test--attribute pos :background))
                                 (list what pos (buffer-substring-no-properties pos (1+ pos))
                                       (memq 'sly-agent-q-code-block-face (sly-agent-q-faces-test--faces pos))
                                       band)))
               do (should (memq 'sly-agent-q-code-block-face (sly-agent-q-faces-test--faces pos))))
      ;; The code in Lisp's faces, on the band.
      (let ((keyword (sly-agent-q-faces-test--at "^(\\(defun\\) square" 1)))
        (should (equal (sly-agent-q-faces-test--fg keyword) (sly-agent-q-faces-test--color 'font-lock-keyword-face)))))
    ;; The table: its rows as wide as each other on the screen.
    (let* ((start (sly-agent-q-faces-test--at "^| name"))
           (end (save-excursion (goto-char start) (forward-line 5) (point)))
           (rows (split-string (sly-agent-q-faces-test--visible start end) "\n" t)))
      (should (= (length rows) 5))
      (should (equal (list what (mapcar #'string-width rows))
                     (list what (make-list 5 (string-width (car rows))))))
      (should (string-match-p "^├─+┼─+┤$" (nth 1 rows)))
      (should (string-match-p "^│ mapcar │ 2 or more │$" (nth 3 rows))))))

(defun sly-agent-q-faces-test--check-tools (theme)
  "Check the faces of the tool entries and the approval in the chat, drawn by THEME."
  (let ((success (sly-agent-q-faces-test--color 'success))
        (failure (sly-agent-q-faces-test--color 'error))
        (warning (sly-agent-q-faces-test--color 'warning)))
    (should (stringp success))
    ;; The success mark in the success colour, never in an error's or a comment's.
    (let ((mark (sly-agent-q-faces-test--at "current_directory (safe).*  \\(✓\\) [0-9]+ ms" 1)))
      (should (equal (list theme (sly-agent-q-faces-test--fg mark)) (list theme success)))
      (should-not (member (sly-agent-q-faces-test--fg mark)
                          (list failure warning (sly-agent-q-faces-test--color 'font-lock-comment-face))))
      ;; Its time is meta text.
      (should (equal (sly-agent-q-faces-test--fg (+ mark 2)) (sly-agent-q-faces-test--color 'shadow))))
    ;; The failure mark in the error colour; the denial too.
    (should (equal (sly-agent-q-faces-test--fg (sly-agent-q-faces-test--at "eval_form ([a-z]+).*  \\(✗\\)" 1))
                   failure))
    (should (equal (sly-agent-q-faces-test--fg (sly-agent-q-faces-test--at "^  \\(✗ denied\\) eval_form" 1))
                   failure))
    ;; The usage line is meta text.
    (should (equal (sly-agent-q-faces-test--fg (sly-agent-q-faces-test--at "^(1 tool step"))
                   (sly-agent-q-faces-test--color 'shadow)))
    ;; The toggles, larger on a graphic display.
    (should (memq 'sly-agent-q-toggle-face
                  (sly-agent-q-faces-test--faces (sly-agent-q-faces-test--at "^  \\(▸\\) current_directory" 1))))))

(defun sly-agent-q-faces-test--check-approval (theme)
  "Check the faces of the approval waiting in the chat, drawn by THEME."
  (let ((frame-color (sly-agent-q-faces-test--color 'sly-agent-q-approval-frame-face)))
    ;; Waiting is drawn as waiting.
    (should (equal (sly-agent-q-faces-test--fg (sly-agent-q-faces-test--at "… waiting for approval"))
                   (sly-agent-q-faces-test--color 'warning)))
    ;; The frame in one face, one colour: its corners and its bars.
    (save-excursion
      (goto-char (point-min))
      (let ((frames 0))
        (while (re-search-forward "^  \\([┏┃┗]\\)" nil t)
          (cl-incf frames)
          (should (equal (list theme (match-string 1)
                               (memq 'sly-agent-q-approval-frame-face
                                     (sly-agent-q-faces-test--faces (match-beginning 1)))
                               (sly-agent-q-faces-test--fg (match-beginning 1)))
                         (list theme (match-string 1)
                               (memq 'sly-agent-q-approval-frame-face
                                     (sly-agent-q-faces-test--faces (match-beginning 1)))
                               frame-color)))
          (should (memq 'sly-agent-q-approval-frame-face (sly-agent-q-faces-test--faces (match-beginning 1)))))
        (should (> frames 6))))
    ;; What the user decides on is body text.
    (should (equal (sly-agent-q-faces-test--fg (sly-agent-q-faces-test--at "┃ tool: \\(eval_form\\)" 1))
                   (face-attribute 'default :foreground nil t)))
    ;; The form is Lisp, in Lisp's faces: its keyword, its doc string.
    (let ((keyword (sly-agent-q-faces-test--at "╎ +(\\(defun\\) twice" 1))
          (doc (sly-agent-q-faces-test--at "╎ +\\(\"Twice X\\.\"\\)" 1)))
      (should (memq 'font-lock-keyword-face (sly-agent-q-faces-test--faces keyword)))
      (should (equal (sly-agent-q-faces-test--fg keyword) (sly-agent-q-faces-test--color 'font-lock-keyword-face)))
      (should (cl-intersection '(font-lock-doc-face font-lock-string-face)
                               (sly-agent-q-faces-test--faces (1+ doc)))))
    ;; Every line of it keeps its place where a narrow window wraps it.
    (let ((start (sly-agent-q-faces-test--at "^  ┏━"))
          (end (sly-agent-q-faces-test--at "C-c C-r anywhere in the chat)\n")))
      (cl-loop for pos from start below end
               unless (get-text-property pos 'wrap-prefix)
               do (ert-fail (list "no wrap-prefix" pos (buffer-substring-no-properties
                                                        (line-beginning-position) (line-end-position))))))))

(ert-deftest sly-agent-q-faces-chat-in-light-and-dark-themes ()
  "Each kind of text of a real chat is drawn in the face of its meaning, in a light and a dark theme.
A success is not drawn in an error's colour nor a comment's; what
waits, in the warning colour; the approval's frame in one face and its
form in Lisp's faces; an opened entry's form as Lisp, not a JSON
string; a code block's band whole; a table's rows of one width; a
paragraph's first line not read as metadata; a heading unlike a label."
  (let* ((sly-agent-q-trust-levels '(("eval_form" . dangerous)))
         (root (make-temp-file "agent-q-faces" t))
         (sly-agent-q-project-root root))
    (cl-letf (((symbol-function 'sly-agent-q-bridge-current) #'ignore))
      (sly-agent-q-test-with-server
          (sly-agent-q-faces-test--script
           (list (sly-agent-q-faces-test--text "Let me look. ")
                 (sly-agent-q-faces-test--tool "current_directory" nil)
                 (sly-agent-q-faces-test--tool "eval_form" `((form . ,sly-agent-q-faces-test--form))))
           (list (sly-agent-q-faces-test--text sly-agent-q-faces-test--answer)))
        (let (outcome)
          (sly-agent-q-send "Define twice" (lambda (p) (setq outcome p)))
          (with-current-buffer (sly-agent-q-chat-buffer)
            (sly-agent-q-test-wait (lambda () (string-match-p "needs your approval" (sly-agent-q-test-chat-text)))
                                   20 "the approval")
            (dolist (theme sly-agent-q-faces-test--themes)
              (sly-agent-q-faces-test--use-theme theme)
              (sly-agent-q-faces-test--check-approval theme))
            (goto-char (sly-agent-q-faces-test--at "this call needs your approval"))
            ;; v shows the arguments whole: the form as Lisp too.
            (with-current-buffer (sly-agent-q-approval-show-arguments
                                  (get-text-property (point) 'sly-agent-q-approval))
              (should (string-search sly-agent-q-faces-test--form (buffer-string)))
              (should (memq 'font-lock-keyword-face
                            (sly-agent-q-faces-test--faces (sly-agent-q-faces-test--at "(\\(defun\\) twice" 1))))
              (kill-buffer))
            (sly-agent-q-deny (get-text-property (point) 'sly-agent-q-approval) "")
            (sly-agent-q-test-wait (lambda () outcome) 30 "the turn to end")
            (should (eq (plist-get outcome :status) 'finished))
            (sly-agent-q-test-wait (lambda () (sly-agent-q-stream-rendered-p)) 10 "the rendering")
            ;; The eval_form entry opened: its form shown as Lisp, in Lisp's faces.
            (goto-char (sly-agent-q-faces-test--at "▸ \\(eval_form\\)" 1))
            (sly-agent-q-entry-toggle)
            (let* ((start (sly-agent-q-faces-test--at "▾ eval_form"))
                   (end (save-excursion (goto-char start) (re-search-forward "^    error:") (point)))
                   (text (buffer-substring-no-properties start end)))
              (should (string-match-p "      ╎ (let ((n 2))\n      ╎   (defun twice (x)\n" text))
              (should-not (string-match-p "\\\\n" text))
              (should (memq 'font-lock-keyword-face
                            (sly-agent-q-faces-test--faces
                             (sly-agent-q-faces-test--at "╎   (\\(defun\\) twice" 1))))
              ;; Every line of the entry keeps its place where it wraps.
              (cl-loop for pos from start below end
                       unless (get-text-property pos 'wrap-prefix)
                       do (ert-fail (list "no wrap-prefix in the entry" pos))))
            (dolist (theme sly-agent-q-faces-test--themes)
              (sly-agent-q-faces-test--use-theme theme)
              (sly-agent-q-faces-test--check-tools theme)
              (sly-agent-q-faces-test--check-answer theme))
            (sly-agent-q-faces-test--use-theme nil)))))))

(ert-deftest sly-agent-q-faces-answer-by-either-renderer ()
  "The Markdown answer's faces are right by markdown-mode's renderer and by the chat's own.
It streams in pieces of 7 characters, through the chat's notification
handler, as a model's answer comes."
  (dolist (markdown-mode (if (or (require 'markdown-mode nil t)
                                 (progn (sly-agent-q-dev-system-packages) (require 'markdown-mode nil t)))
                             '(t nil)
                           '(nil)))
    (let ((sly-agent-q-markdown-use-markdown-mode markdown-mode)
          (sly-agent-q-chat-buffer-name "*sly-agent-q faces test*")
          (sly-agent-q-stream-flush-interval 0))
      (when (get-buffer sly-agent-q-chat-buffer-name) (kill-buffer sly-agent-q-chat-buffer-name))
      (unwind-protect
          (with-current-buffer (sly-agent-q-chat-buffer)
            (setf (sly-agent-q-turn-chat-running sly-agent-q-turn--chat) (sly-agent-q-turn-create :id "t1" :state 'running))
            (sly-agent-q-transcript-user-message "Plan it")
            (let ((text sly-agent-q-faces-test--answer) (i 0))
              (while (< i (length text))
                (sly-agent-q-handle-notification
                 nil 'chat/textDelta (list :turnId "t1" :text (substring text i (min (length text) (+ i 7)))))
                (sly-agent-q-stream-flush)
                (setq i (+ i 7))))
            (sly-agent-q-handle-notification nil 'chat/turnFinished
                                             '(:turnId "t1" :text "" :stopReason "end_turn" :steps 1))
            (sly-agent-q-test-wait (lambda () (sly-agent-q-stream-rendered-p)) 10 "the rendering")
            (dolist (theme sly-agent-q-faces-test--themes)
              (sly-agent-q-faces-test--use-theme theme)
              (sly-agent-q-faces-test--check-answer theme)))
        (sly-agent-q-faces-test--use-theme nil)
        (kill-buffer sly-agent-q-chat-buffer-name)))))

(ert-deftest sly-agent-q-faces-summary-keeps-its-notes ()
  "A tool entry's summary never cuts the note saying how much of an argument it leaves out.
A propose_file_edit summary was cut at 160 characters in the middle
of its own \"…[22 more characters]\"."
  (let* ((args (list :path "src/a-rather-long-directory-name/and-a-file-name.lisp"
                     :old (make-string 62 ?o) :new (make-string 90 ?n) :reason (make-string 50 ?r)))
         (summary (sly-agent-q-entry--summarize-arguments args)))
    (should (<= (string-width summary) 162))
    (should (string-match-p "old=\"o\\{40\\}\"…\\[22 more characters\\]" summary))
    ;; An argument that does not fit is left out whole, and the ellipsis says so.
    (should (string-suffix-p " …" summary))
    (should-not (string-match-p "…\\[[0-9]*\\'\\|…\\[[^]]*\\'" (string-remove-suffix " …" summary)))))

(provide 'sly-agent-q-faces-test)
;;; sly-agent-q-faces-test.el ends here
