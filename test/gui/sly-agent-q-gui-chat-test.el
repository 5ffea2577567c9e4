;;; sly-agent-q-gui-chat-test.el --- The chat as drawn in a GUI frame, light and dark  -*- lexical-binding: t; -*-

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

;; A real chat (the bundled server, the scripted model) in a graphic
;; frame, in the light and the dark theme that ship with Emacs
;; (`modus-operandi', `modus-vivendi'): a tool that ran, a Lisp form
;; waiting for approval, then denied, and a Markdown answer.  Each kind
;; of text is checked twice: the colour its faces resolve to in the
;; frame, and the colour of the pixels drawn there on the screen.

;;; Code:

(require 'sly-agent-q-gui-helper
         (expand-file-name "sly-agent-q-gui-helper"
                           (file-name-directory (or load-file-name buffer-file-name))))
(require 'sly-agent-q)
(require 'sly-agent-q-approval)

(defconst sly-agent-q-gui-chat-test--themes '(modus-operandi modus-vivendi)
  "The themes the chat is drawn in: light, then dark.")

(defconst sly-agent-q-gui-chat-test--form
  (concat "(let ((n 2))\n  (defun twice (x)\n"
          "    \"Twice X: X added to itself, a doc string long enough to wrap in this window's width.\"\n"
          "    (* n x)))")
  "The Lisp form the model asks to evaluate; its doc string's line is wider than the window.")

(defconst sly-agent-q-gui-chat-test--answer
  (concat "## Plan\n"
          "Evaluate the definition once you agree:\n\n"
          "```lisp\n(defun square (x)\n  \"Square X.\"\n  (* x x))\n```\n\n"
          "| name | arity |\n|---|---|\n| car | 1 |\n| `mapcar` | 2 or more |\n")
  "The model's Markdown answer: a heading, a code block, a table.")

(defun sly-agent-q-gui-chat-test--script ()
  "The model's script: a tool that runs and a form to approve, then the answer."
  `((steps . [((content . [((type . "text") (text . "Let me look. "))
                           ((type . "tool_use") (name . "current_directory") (input . ,(make-hash-table)))
                           ((type . "tool_use") (name . "eval_form")
                            (input . ((form . ,sly-agent-q-gui-chat-test--form))))]))
              ((content . [((type . "text") (text . ,sly-agent-q-gui-chat-test--answer))]))])))

(defun sly-agent-q-gui-chat-test--name (theme)
  "The screenshots' suffix for THEME."
  (if (eq theme 'modus-vivendi) "dark" "light"))

(defun sly-agent-q-gui-chat-test--color (face)
  "FACE's foreground in this frame, red, green and blue."
  (sly-agent-q-gui-rgb (face-attribute face :foreground nil t)))

(defun sly-agent-q-gui-chat-test--drawn-in (shot pos face &optional what)
  "Check the character at POS is drawn in FACE's colour on the screen SHOT, nearer it than the default's.
The colour at point (the faces at POS, resolved in the frame) is FACE's
too.  WHAT names the check in a failure."
  (let* ((want (sly-agent-q-gui-chat-test--color face))
         (box (sly-agent-q-gui-char-box pos))
         (ink (sly-agent-q-gui-ink shot box))
         (body (sly-agent-q-gui-chat-test--color 'default)))
    (should (equal (list what (save-excursion (goto-char pos) (sly-agent-q-gui-rgb (foreground-color-at-point))))
                   (list what want)))
    ;; Glyphs are anti-aliased: the pixel of most ink is near the colour, nearer than any other.
    (should (equal (list what box ink want (< (sly-agent-q-gui-distance ink want) 60))
                   (list what box ink want t)))
    (unless (equal want body)
      (should (equal (list what ink (< (sly-agent-q-gui-distance ink want) (sly-agent-q-gui-distance ink body)))
                     (list what ink t))))
    ink))

(defun sly-agent-q-gui-chat-test--faces (pos)
  "The faces of the text at POS, a list."
  (let ((face (get-text-property pos 'face)))
    (if (and (listp face) (not (keywordp (car face)))) face (list face))))

(defun sly-agent-q-gui-chat-test--check-approval (theme)
  "Check the chat with the approval waiting, drawn in THEME."
  (let* ((window (sly-agent-q-gui-show (current-buffer) (sly-agent-q-gui-at "^You:")))
         (end (sly-agent-q-gui-at "C-c C-r anywhere in the chat)"))
         (_ (should (pos-visible-in-window-p end window)))
         (shot (sly-agent-q-gui-screenshot (concat "chat-approval-" (sly-agent-q-gui-chat-test--name theme))))
         (success (sly-agent-q-gui-chat-test--color 'success))
         (failure (sly-agent-q-gui-chat-test--color 'error)))
    (should (equal (list theme (sly-agent-q-gui-dominant shot (sly-agent-q-gui-char-box (sly-agent-q-gui-at "^You"))))
                   (list theme (sly-agent-q-gui-rgb (face-attribute 'default :background nil t)))))
    ;; The success mark: drawn in the success colour, nowhere near the error's.
    (let ((ink (sly-agent-q-gui-chat-test--drawn-in
                shot (sly-agent-q-gui-at "current_directory (safe).*  \\(✓\\) [0-9]+ ms" 1) 'success
                (list theme "the success mark"))))
      (should (< (sly-agent-q-gui-distance ink success) (sly-agent-q-gui-distance ink failure))))
    ;; Waiting is drawn as waiting; the frame in its one colour, corner and bar alike: the
    ;; theme's colour of what waits for the user (`warning'), checked against that face, not
    ;; against the frame's own (which would pass whatever it inherits).
    (sly-agent-q-gui-chat-test--drawn-in shot (sly-agent-q-gui-at "… waiting for approval") 'warning
                                         (list theme "waiting"))
    (sly-agent-q-gui-chat-test--drawn-in shot (sly-agent-q-gui-at "^  \\(┏\\)" 1) 'warning
                                         (list theme "the frame's corner"))
    (sly-agent-q-gui-chat-test--drawn-in shot (sly-agent-q-gui-at "^  \\(┃\\) tool:" 1) 'warning
                                         (list theme "the frame's bar"))
    ;; What the user decides on is body text; the form is in Lisp's faces.
    (sly-agent-q-gui-chat-test--drawn-in shot (sly-agent-q-gui-at "┃ tool: \\(eval_form\\)" 1) 'default
                                         (list theme "the approval's text"))
    (let ((keyword (sly-agent-q-gui-at "╎ +(\\(defun\\) twice" 1)))
      (should (memq 'font-lock-keyword-face (sly-agent-q-gui-chat-test--faces keyword)))
      (sly-agent-q-gui-chat-test--drawn-in shot keyword 'font-lock-keyword-face (list theme "the form's defun")))
    (let ((doc (1+ (sly-agent-q-gui-at "╎ +\\(\"Twice X\\)" 1))))
      (should (cl-intersection '(font-lock-doc-face font-lock-string-face) (sly-agent-q-gui-chat-test--faces doc)))
      (sly-agent-q-gui-chat-test--drawn-in shot doc (car (cl-intersection '(font-lock-doc-face font-lock-string-face)
                                                                          (sly-agent-q-gui-chat-test--faces doc)))
                                           (list theme "the form's doc string")))
    ;; The doc string's line is wider than the window: it wraps, its frame drawn again on the
    ;; continuation, whose text starts where the line's does, not at the left edge.
    (let* ((line (save-excursion (goto-char (sly-agent-q-gui-at "╎ +\"Twice X")) (line-beginning-position)))
           (prefix (get-text-property line 'wrap-prefix))
           (continuation (save-excursion (goto-char line) (vertical-motion 1 window) (point)))
           (bar (save-excursion (goto-char line) (search-forward "┃") (1- (point)))))
      (should (stringp prefix))
      (should (string-prefix-p prefix (buffer-substring-no-properties line (+ line (length prefix)))))
      (should (< continuation (save-excursion (goto-char line) (line-end-position))))
      (pcase-let ((`(,x ,_ ,_ ,_) (sly-agent-q-gui-char-box (+ line (length prefix))))
                  (`(,cx ,cy ,_ ,_) (sly-agent-q-gui-char-box continuation))
                  (`(,bx ,_ ,bw ,bh) (sly-agent-q-gui-char-box bar)))
        (should (equal (list theme "the continuation's left" cx) (list theme "the continuation's left" x)))
        (let ((ink (sly-agent-q-gui-ink shot (list bx cy bw bh))))
          (should (equal (list theme "the bar on the continuation" ink
                               (< (sly-agent-q-gui-distance
                                   ink (sly-agent-q-gui-chat-test--color 'sly-agent-q-approval-frame-face))
                                  60))
                         (list theme "the bar on the continuation" ink t))))))))

(defun sly-agent-q-gui-chat-test--check-answer (theme)
  "Check the chat after the denial and the answer, drawn in THEME."
  (let* ((window (sly-agent-q-gui-show (current-buffer) (sly-agent-q-gui-at "^Agent:")))
         (_ (should (pos-visible-in-window-p (sly-agent-q-gui-at "^(1 tool step") window)))
         (table-end (save-excursion (goto-char (sly-agent-q-gui-at "^| name")) (forward-line 4) (point)))
         (_ (should (pos-visible-in-window-p table-end window)))
         (shot (sly-agent-q-gui-screenshot (concat "chat-answer-" (sly-agent-q-gui-chat-test--name theme))))
         (success (sly-agent-q-gui-chat-test--color 'success))
         (failure (sly-agent-q-gui-chat-test--color 'error)))
    ;; Success and failure, each in its own colour.
    (let ((ink (sly-agent-q-gui-chat-test--drawn-in
                shot (sly-agent-q-gui-at "current_directory (safe).*  \\(✓\\)" 1) 'success
                (list theme "the success mark"))))
      (should (< (sly-agent-q-gui-distance ink success) (sly-agent-q-gui-distance ink failure))))
    (let ((ink (sly-agent-q-gui-chat-test--drawn-in
                shot (sly-agent-q-gui-at "eval_form ([a-z]+).*  \\(✗\\)" 1) 'error (list theme "the failure mark"))))
      (should (< (sly-agent-q-gui-distance ink failure) (sly-agent-q-gui-distance ink success))))
    (sly-agent-q-gui-chat-test--drawn-in shot (sly-agent-q-gui-at "^(1 tool step") 'shadow (list theme "the usage"))
    ;; The heading: taller than body text and than the label "Agent:", in a colour of its own.
    (let ((heading (sly-agent-q-gui-char-box (sly-agent-q-gui-at "^## \\(P\\)lan" 1)))
          (label (sly-agent-q-gui-char-box (sly-agent-q-gui-at "^Agent:")))
          (body (sly-agent-q-gui-char-box (sly-agent-q-gui-at "^Evaluate"))))
      (should (equal (list theme "heading taller" (> (nth 3 heading) (nth 3 body)) (> (nth 3 heading) (nth 3 label)))
                     (list theme "heading taller" t t)))
      (should-not (equal (sly-agent-q-gui-ink shot heading) (sly-agent-q-gui-ink shot label))))
    ;; The code block's band: under every character of its lines, fences and tokens included, the
    ;; pixels are the band's colour, and the band runs on to the window's right edge.
    (let* ((start (sly-agent-q-gui-at "^```lisp"))
           (end (save-excursion (goto-char start) (forward-line 5) (point)))
           (band (sly-agent-q-gui-rgb (face-attribute 'sly-agent-q-code-block-face :background nil t)))
           (page (sly-agent-q-gui-rgb (face-attribute 'default :background nil t)))
           (right (nth 2 (window-inside-absolute-pixel-edges window))))
      (should (equal (buffer-substring-no-properties start end)
                     "```lisp\n(defun square (x)\n  \"Square X.\"\n  (* x x))\n```\n"))
      (should-not (equal band page))
      (cl-loop for pos from start below end
               for box = (sly-agent-q-gui-char-box pos)
               do (should (equal (list theme pos (buffer-substring-no-properties pos (1+ pos))
                                       (save-excursion (goto-char pos) (sly-agent-q-gui-rgb (background-color-at-point)))
                                       (sly-agent-q-gui-dominant shot box))
                                 (list theme pos (buffer-substring-no-properties pos (1+ pos)) band band)))
               when (eq (char-after pos) ?\n)
               do (pcase-let ((`(,x ,y ,_ ,h) box))
                    (should (equal (list theme pos "to the edge" (sly-agent-q-gui-dominant shot (list x y (- right x) h)))
                                   (list theme pos "to the edge" band)))))
      (sly-agent-q-gui-chat-test--drawn-in shot (sly-agent-q-gui-at "^(\\(defun\\) square" 1) 'font-lock-keyword-face
                                           (list theme "the code's defun")))
    ;; The table: its rows' right edges one above the other on the screen.
    (let* ((start (sly-agent-q-gui-at "^| name"))
           (edges (save-excursion
                    (goto-char start)
                    (cl-loop repeat 4
                             collect (pcase-let ((`(,x ,_ ,w ,_) (sly-agent-q-gui-char-box (1- (line-end-position)))))
                                       (+ x w))
                             do (forward-line 1)))))
      (should (equal (list theme edges) (list theme (make-list 4 (car edges))))))))

(ert-deftest sly-agent-q-gui-chat-in-light-and-dark-themes ()
  "The chat in a GUI frame: each kind of text drawn in the colour of its meaning, light and dark.
On the screen: a success mark in the success colour, not an error's; a
failure in the error colour; waiting in the warning colour; the
approval's frame in one colour, drawn again where a line wraps; its form
in Lisp's colours; a heading taller than a label; a code block's band
whole under its tokens; a table's rows of one width.  The screens are
the README's captures."
  (let* ((sly-agent-q-trust-levels '(("eval_form" . dangerous)))
         (root (make-temp-file "agent-q-gui" t))
         (sly-agent-q-project-root root))
    (cl-letf (((symbol-function 'sly-agent-q-bridge-current) #'ignore))
      (unwind-protect
          (sly-agent-q-test-with-server (sly-agent-q-gui-chat-test--script)
            (let (outcome)
              (sly-agent-q-send "Define twice" (lambda (p) (setq outcome p)))
              (with-current-buffer (sly-agent-q-chat-buffer)
                (sly-agent-q-test-wait (lambda () (string-match-p "needs your approval" (sly-agent-q-test-chat-text)))
                                       20 "the approval")
                (dolist (theme sly-agent-q-gui-chat-test--themes)
                  (sly-agent-q-gui-use-theme theme)
                  (sly-agent-q-gui-chat-test--check-approval theme))
                (goto-char (sly-agent-q-gui-at "this call needs your approval"))
                (sly-agent-q-deny (get-text-property (point) 'sly-agent-q-approval) "")
                (sly-agent-q-test-wait (lambda () outcome) 30 "the turn to end")
                (should (eq (plist-get outcome :status) 'finished))
                (sly-agent-q-test-wait (lambda () (sly-agent-q-stream-rendered-p)) 10 "the rendering")
                (sly-agent-q-test-wait (lambda () (string-match-p "\\`ready\\|\\[ready\\]" (format-mode-line header-line-format)))
                                       10 "the header line to say the chat is ready")
                (dolist (theme sly-agent-q-gui-chat-test--themes)
                  (sly-agent-q-gui-use-theme theme)
                  (sly-agent-q-gui-chat-test--check-answer theme)))))
        (mapc #'disable-theme custom-enabled-themes)
        (delete-directory root t)))))

(provide 'sly-agent-q-gui-chat-test)
;;; sly-agent-q-gui-chat-test.el ends here
