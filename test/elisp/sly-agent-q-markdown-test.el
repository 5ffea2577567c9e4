;;; sly-agent-q-markdown-test.el --- The chat's screen: Markdown, prompt, header line  -*- lexical-binding: t; -*-

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

;; What the chat shows, read as the screen shows it: text made invisible
;; is left out and a `display' string stands for the text under it.  The
;; Markdown is fed through the real notification handler in chunks, as a
;; stream comes; both renderers (markdown-mode's, the chat's own) run.

;;; Code:

(require 'sly-agent-q-test-helper
         (expand-file-name "sly-agent-q-test-helper"
                           (file-name-directory (or load-file-name buffer-file-name))))
(require 'sly-agent-q)
(load (expand-file-name "scripts/lisp-modes" sly-agent-q-test-root) nil t)

(defconst sly-agent-q-markdown-test--answer
  (concat "## Plan\n"
          "Use **MAPCAR** and *not ever* `loop`; see [the spec](http://127.0.0.1/clhs).\n"
          "- first item\n"
          "- second item\n"
          "| fn | arity |\n|----|-------|\n| car | 1 |\n"
          "```lisp\n## (defun f (x) x)\n```\n"
          "Done.")
  "A model's answer with each construct the chat renders.")

(defun sly-agent-q-markdown-test--visible (start end)
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

(defmacro sly-agent-q-markdown-test--with-chat (&rest body)
  "Run BODY in a fresh chat buffer with a running turn t1."
  (declare (indent 0) (debug t))
  `(let ((sly-agent-q-chat-buffer-name "*sly-agent-q markdown test*")
         (sly-agent-q-stream-flush-interval 0))
     (when (get-buffer sly-agent-q-chat-buffer-name) (kill-buffer sly-agent-q-chat-buffer-name))
     (unwind-protect
         (with-current-buffer (sly-agent-q-chat-buffer)
           (setf (sly-agent-q-turn-chat-running sly-agent-q-turn--chat) (sly-agent-q-turn-create :id "t1" :state 'running))
           ,@body)
       (kill-buffer sly-agent-q-chat-buffer-name))))

(defun sly-agent-q-markdown-test--whole-answer (id text)
  "Turn ID answers TEXT in one piece and ends, as the server tells the chat."
  (setf (sly-agent-q-turn-chat-running sly-agent-q-turn--chat) (sly-agent-q-turn-create :id id :state 'running))
  (sly-agent-q-handle-notification nil 'chat/textDelta (list :turnId id :text text))
  (sly-agent-q-stream-flush)
  (sly-agent-q-handle-notification nil 'chat/turnFinished
                                   (list :turnId id :text "" :stopReason "end_turn")))

(defun sly-agent-q-markdown-test--stream (text chunk)
  "Feed TEXT to the chat as chat/textDelta notifications of CHUNK characters."
  (let ((i 0))
    (while (< i (length text))
      (sly-agent-q-handle-notification
       nil 'chat/textDelta (list :turnId "t1" :text (substring text i (min (length text) (+ i chunk)))))
      (sly-agent-q-stream-flush)
      (setq i (+ i chunk)))))

(defun sly-agent-q-markdown-test--check-rendering ()
  "Stream the answer into a chat and check what the screen shows."
  (sly-agent-q-markdown-test--with-chat
    (goto-char (point-max))
    (insert "my draft")
    (goto-char (- (point-max) 3))
    (let ((point (- (point) (sly-agent-q-transcript-input-start))))
      (sly-agent-q-markdown-test--stream sly-agent-q-markdown-test--answer 7)
      ;; Rendered while streaming: the heading's line is complete, so it is drawn already.
      (should (string-match-p "^Plan$" (sly-agent-q-markdown-test--visible (point-min) (sly-agent-q-transcript-end))))
      (sly-agent-q-handle-notification nil 'chat/turnFinished '(:turnId "t1" :text "" :stopReason "end_turn"))
      ;; Point stayed where the user left it in the input, which is unchanged.
      (should (= (- (point) (sly-agent-q-transcript-input-start)) point))
      (should (equal (sly-agent-q-input-text) "my draft")))
    (let ((screen (sly-agent-q-markdown-test--visible (point-min) (sly-agent-q-transcript-end)))
          (text (buffer-substring-no-properties (point-min) (sly-agent-q-transcript-end))))
      ;; The text is the model's, unchanged: only its display is rendered.
      (should (string-match-p (regexp-quote sly-agent-q-markdown-test--answer) text))
      (should (string-match-p "^Plan$" screen))
      (should (string-match-p "Use MAPCAR and not ever loop; see the spec <http://127.0.0.1/clhs>\\." screen))
      (should (string-match-p "^[•●] first item$" screen))
      (should (string-match-p "^│ fn  │ arity │$" screen))
      (should (string-match-p "^├─────┼───────┤$" screen))
      (should (string-match-p "^│ car │ 1     │$" screen))
      (should-not (string-match-p "|" screen))
      ;; Inside a code block nothing is Markdown.
      (should (string-match-p "^## (defun f (x) x)$" screen))
      (should (string-match-p "^```\nDone\.$" screen))
      (should-not (string-match-p "\\*\\*\\|`loop`" screen))
      ;; Faces: the heading, the bold, the code in Lisp's faces.
      (goto-char (point-min))
      (search-forward "Plan")
      (should (cl-find-if (lambda (f) (string-match-p "heading\\|header" (symbol-name f)))
                          (ensure-list (get-text-property (1- (point)) 'face))))
      (search-forward "MAPCAR")
      (let ((face (ensure-list (get-text-property (1- (point)) 'face))))
        (should (or (memq 'bold face) (memq 'markdown-bold-face face))))
      (search-forward "(defun")
      (should (get-text-property (1- (point)) 'face)))))

(defun sly-agent-q-markdown-test--at-once (text)
  "TEXT streamed in one piece and its turn ended; return the screen once rendered.
Check that a step's worth was rendered before the turn's end returned,
and the rest after."
  (sly-agent-q-markdown-test--with-chat
    (sly-agent-q-markdown-test--whole-answer "t1" text)
    (let ((screen (sly-agent-q-markdown-test--visible (point-min) (sly-agent-q-transcript-end))))
      (if (> (length text) sly-agent-q-stream--render-step-chars)
          (progn
            ;; The first heading is drawn, the last answer's markup still shows.
            (should (string-match-p "^Plan$" screen))
            (should (string-match-p "\\*\\*MAPCAR\\*\\*" screen)))
        (should (sly-agent-q-stream-rendered-p))))
    (sly-agent-q-test-wait (lambda () (sly-agent-q-stream-rendered-p)) 10 "the rendering")
    (goto-char (point-max))
    (search-backward "(defun")
    ;; The last code block is fontified too.
    (should (get-text-property (1+ (point)) 'face))
    (sly-agent-q-markdown-test--visible (point-min) (sly-agent-q-transcript-end))))

(ert-deftest sly-agent-q-markdown-long-answer-rendered-in-steps ()
  "A long answer that came at once is rendered a step at a time, as it would be at once.
100,000 characters rendered in the filter that read them held Emacs
over 100 ms; the rest is rendered from timers."
  (let* ((sly-agent-q-markdown-use-markdown-mode nil)
         (text (mapconcat #'identity (make-list 500 sly-agent-q-markdown-test--answer) "\n"))
         (in-steps (sly-agent-q-markdown-test--at-once text))
         (at-once (let ((sly-agent-q-stream--render-step-chars most-positive-fixnum))
                    (sly-agent-q-markdown-test--at-once text))))
    (should (> (length text) (* 4 sly-agent-q-stream--render-step-chars)))
    (should (equal in-steps at-once))
    (should-not (string-match-p "\\*\\*" in-steps))))

(ert-deftest sly-agent-q-markdown-dense-answer-rendered-in-linear-work ()
  "Rendering a region asks where each property changes next once per change.
Showing words again asked, at each run of hidden text, where the next
`display' change was: with none after it, each question walked every
run of text to the region's end.  A step of dense Markdown (16,000
characters, a heading and emphasis on every line) held Emacs 130-360 ms.
The work is counted as the distance those questions walk, not timed."
  (let* ((sly-agent-q-markdown-use-markdown-mode nil)
         (walked 0)
         (count (lambda (result pos) (setq walked (+ walked (- (or result pos) pos))) result)))
    (with-temp-buffer
      (dotimes (i 500) (insert (format "## H%d\nUse **MAPCAR** and `x`.\n" i)))
      (let ((orig (symbol-function 'next-single-property-change)))
        (cl-letf (((symbol-function 'next-single-property-change)
                   (lambda (pos prop &optional object limit)
                     (funcall count (funcall orig pos prop object limit) pos))))
          (sly-agent-q-markdown-render-region (point-min) (point-min) (point-max))))
      ;; Rendered all the same: the stars are hidden, the words shown, a
      ;; space drawn above each heading that follows a line of text.
      (should (equal (sly-agent-q-markdown-test--visible (point-min) (point-max))
                     (mapconcat (lambda (i) (format "%sH%d\nUse MAPCAR and x.\n" (if (> i 0) "\n" "") i))
                                (number-sequence 0 499) "")))
      (should (< walked (* 4 (buffer-size)))))))

(define-derived-mode sly-agent-q-markdown-test--broken-mode prog-mode "Broken"
  "A mode whose setup fails after it is named the buffer's mode."
  (error "This mode fails to set up"))

(ert-deftest sly-agent-q-markdown-failing-step-leaves-the-rest-rendered ()
  "A rendering step that fails leaves its run of text as written; later text is rendered.
Rendering runs from timers: an error there stopped every later step of
the buffer, its timer never asked for again."
  (let ((sly-agent-q-markdown-use-markdown-mode nil)
        (render (symbol-function 'sly-agent-q-markdown-render-region))
        (failed 0))
    (cl-letf (((symbol-function 'sly-agent-q-markdown-render-region)
               (lambda (context start end)
                 (if (save-excursion (goto-char start) (looking-at-p "Poison"))
                     (progn (cl-incf failed) (error "Injected fault"))
                   (funcall render context start end)))))
      (sly-agent-q-markdown-test--with-chat
        (sly-agent-q-markdown-test--whole-answer "t1" "Poison **here**.\n")
        (sly-agent-q-markdown-test--whole-answer "t2" "Next **answer**.\n")
        (sly-agent-q-test-wait (lambda () (sly-agent-q-stream-rendered-p)) 10 "the rendering")
        (let ((screen (sly-agent-q-markdown-test--visible (point-min) (sly-agent-q-transcript-end))))
          (should (= failed 1))
          (should (string-match-p "^Poison \\*\\*here\\*\\*\\.$" screen))
          (should (string-match-p "^Next answer\\.$" screen)))))))

(ert-deftest sly-agent-q-markdown-code-mode-failing-to-set-up ()
  "A code block whose mode fails to set up is shown plain; the rest is rendered.
The block's mode is set up in a kept buffer, from a timer: the failure
stopped that step, and every later one of the buffer (the timer was
never asked for again), and the kept buffer, named in the mode, passed
for set up after."
  (let ((sly-agent-q-markdown-use-markdown-mode nil)
        (code-mode (symbol-function 'sly-agent-q-stream--code-mode))
        (text (concat "```broken\n(a b)\n```\n"
                      (mapconcat #'identity (make-list 300 sly-agent-q-markdown-test--answer) "\n")
                      "\n```broken\n(c d)\n```\nLast **word**.")))
    (should (> (length text) (* 2 sly-agent-q-stream--render-step-chars)))
    (cl-letf (((symbol-function 'sly-agent-q-stream--code-mode)
               (lambda (lang) (if (equal lang "broken") #'sly-agent-q-markdown-test--broken-mode
                                (funcall code-mode lang)))))
      (sly-agent-q-markdown-test--with-chat
        (sly-agent-q-markdown-test--whole-answer "t1" text)
        (sly-agent-q-test-wait (lambda () (sly-agent-q-stream-rendered-p)) 20 "the rendering")
        ;; The next answer is rendered too.
        (sly-agent-q-markdown-test--whole-answer "t2" "Next **answer**.\n```lisp\n(defun g ())\n```\n")
        (sly-agent-q-test-wait (lambda () (sly-agent-q-stream-rendered-p)) 20 "the rendering")
        (let ((screen (sly-agent-q-markdown-test--visible (point-min) (sly-agent-q-transcript-end))))
          (should (string-match-p "^Last word\\.$" screen))
          (should (string-match-p "^Next answer\\.$" screen))
          (should (string-match-p "^(c d)$" screen)))
        (goto-char (point-max))
        (search-backward "(defun g")
        (should (get-text-property (1+ (point)) 'face))
        (search-backward "(c d)")
        ;; Plain: in the block's band, no face of a token.
        (should (equal (ensure-list (get-text-property (1+ (point)) 'face)) '(sly-agent-q-code-block-face)))))))

(ert-deftest sly-agent-q-markdown-markdown-mode-renders-small-steps ()
  "With markdown-mode, a step hands it a small piece: its font lock costs far more.
A step of 16,000 characters of ordinary Markdown held Emacs 0.7 s with
markdown-mode, a long paragraph tens of seconds (a 700 KB answer froze
the terminal for minutes).  The work is counted as the text markdown-mode
is given in each step, not timed; the answer ends rendered all the same."
  (unless (or (require 'markdown-mode nil t)
              (progn (sly-agent-q-dev-system-packages) (require 'markdown-mode nil t)))
    (ert-skip "markdown-mode is not installed (Debian: elpa-markdown-mode)"))
  (let* ((sly-agent-q-markdown-use-markdown-mode t)
         (text (mapconcat #'identity (make-list 100 sly-agent-q-markdown-test--answer) "\n\n"))
         (given 0) (most 0)
         (count (lambda (answer start end)
                  (ignore answer)
                  (setq given (+ given (- end start))))))
    (advice-add 'sly-agent-q-markdown--with-markdown-mode :before count)
    (advice-add 'sly-agent-q-stream--render-some :around
                (lambda (orig) (setq given 0) (funcall orig) (setq most (max most given)))
                '((name . sly-agent-q-markdown-test--step)))
    (unwind-protect
        (let ((screen (sly-agent-q-markdown-test--at-once text)))
          (should-not (string-match-p "\\*\\*" screen))
          (should (> most 0))
          (should (<= most 2000)))
      (advice-remove 'sly-agent-q-markdown--with-markdown-mode count)
      (advice-remove 'sly-agent-q-stream--render-some 'sly-agent-q-markdown-test--step))))

(ert-deftest sly-agent-q-markdown-markdown-mode-never-sees-a-long-line-before ()
  "The text after a very long line is rendered without markdown-mode seeing that line.
A line longer than the longest rendered is left as written, but the
next piece's context went back to its start: markdown-mode was given
100,000 backticks, and took minutes (a step, or a streamed line, held
Emacs that long).  Counted as the text markdown-mode is given, not timed."
  (unless (or (require 'markdown-mode nil t)
              (progn (sly-agent-q-dev-system-packages) (require 'markdown-mode nil t)))
    (ert-skip "markdown-mode is not installed (Debian: elpa-markdown-mode)"))
  (let* ((sly-agent-q-markdown-use-markdown-mode t)
         (most 0)
         (count (lambda (&rest _)
                 (when (derived-mode-p 'markdown-mode) (setq most (max most (buffer-size)))))))
    (advice-add 'font-lock-ensure :before count)
    (unwind-protect
        (with-temp-buffer
          (insert "x " (make-string 100000 ?`) "\n")
          (let ((after (point)))
            (insert "Last **word**.\n")
            (sly-agent-q-markdown-render-region (point-min) (point-min) after)
            (sly-agent-q-markdown-render-region (point-min) after (point-max))
            (should (equal (sly-agent-q-markdown-test--visible after (point-max)) "Last word.\n"))
            (should (<= most (+ sly-agent-q-markdown-context-chars (- (point-max) after))))))
      (advice-remove 'font-lock-ensure count))))

(ert-deftest sly-agent-q-markdown-missing-markdown-mode-looked-for-once ()
  "Without markdown-mode, it is looked for once, not at every piece rendered.
Each search went through every directory of `load-path': resuming a
conversation of 1,000 messages took 1.4 s instead of 0.4 s.  Run in an
Emacs of its own, where markdown-mode was never loaded; a file name
handler on the one directory of its `load-path' counts the looks."
  (let* ((dir (make-temp-file "agent-q-no-markdown" t))
         (form
          `(progn
             (require 'sly-agent-q-markdown)
             (let* ((looked 0)
                    (sly-agent-q-markdown-use-markdown-mode t)
                    (count (lambda (operation &rest args)
                             (setq looked (1+ looked))
                             (let ((inhibit-file-name-handlers
                                    (cons (cdar file-name-handler-alist) inhibit-file-name-handlers))
                                   (inhibit-file-name-operation operation))
                               (apply operation args))))
                    (render (lambda ()
                              ;; Rendered all the same: the stars are hidden.
                              (get-text-property
                               4 'invisible (sly-agent-q-markdown-render-string "Use **MAPCAR**.\n"))))
                    (counts nil))
               (let ((load-path (list ,dir))
                     (file-name-handler-alist (list (cons ,(regexp-quote dir) count))))
                 (dotimes (_ 3) (push (list (funcall render) looked) counts))
                 ;; A new `load-path' (a package installed since) is looked through again.
                 (let ((load-path (cons ,dir load-path)))
                   (push (list (funcall render) looked) counts)))
               (princ (format "%S" (reverse counts))))))
         (out (with-temp-buffer
                (call-process (expand-file-name invocation-name invocation-directory) nil t nil
                              "-Q" "--batch" "-L" (file-name-directory (locate-library "sly-agent-q-markdown"))
                              "--eval" (prin1-to-string form))
                (buffer-string))))
    (delete-directory dir t)
    (let ((counts (car (read-from-string (substring out (string-match "((" out))))))
      (should (cl-every #'car counts))
      (pcase-let ((`((,_ ,once) (,_ ,twice) (,_ ,thrice) (,_ ,after)) counts))
        (should (> once 0))
        (should (= once twice thrice))
        (should (> after thrice))))))

(ert-deftest sly-agent-q-markdown-own-renderer ()
  "Without markdown-mode: headings, emphasis, code, links, lists and tables rendered as they stream."
  (let ((sly-agent-q-markdown-use-markdown-mode nil))
    (sly-agent-q-markdown-test--check-rendering)))

(ert-deftest sly-agent-q-markdown-with-markdown-mode ()
  "With markdown-mode installed its font lock renders; the link still shows its address."
  (unless (or (require 'markdown-mode nil t)
              (progn (sly-agent-q-dev-system-packages) (require 'markdown-mode nil t)))
    (ert-skip "markdown-mode is not installed (Debian: elpa-markdown-mode)"))
  (let ((sly-agent-q-markdown-use-markdown-mode t))
    (sly-agent-q-markdown-test--check-rendering)))

(ert-deftest sly-agent-q-markdown-hides-no-text-but-markup ()
  "A hostile answer cannot hide words: only markup characters are hidden."
  (dolist (mm '(nil t))
    (let* ((sly-agent-q-markdown-use-markdown-mode mm)
           (text "[click](http://127.0.0.1/evil) **a** `b` _c_ snake_case_name\n")
           (rendered (sly-agent-q-markdown-render-string text))
           (hidden ""))
      (dotimes (i (length rendered))
        (when (or (get-text-property i 'invisible rendered) (get-text-property i 'display rendered))
          (setq hidden (concat hidden (substring-no-properties rendered i (1+ i))))))
      ;; The address is never hidden, nor a name's underscores.
      (should-not (string-match-p "[a-z0-9]" hidden)))))

(ert-deftest sly-agent-q-markdown-lisp-names-keep-their-earmuffs ()
  "*PRINT-CIRCLE* is shown with its asterisks: hidden, the screen showed another symbol.
Emphasis of more than one word, and bold, are still rendered."
  (dolist (mm (if (or (require 'markdown-mode nil t)
                     (progn (sly-agent-q-dev-system-packages) (require 'markdown-mode nil t)))
                 '(nil t)
               '(nil)))
    (let* ((sly-agent-q-markdown-use-markdown-mode mm)
           (rendered (sly-agent-q-markdown-render-string
                      "  (DEFVAR *RT27C*)  source unknown; set *print-circle* to T, *really* now.\n*two words* and **bold**\n"))
           (shown ""))
      (dotimes (i (length rendered))
        (unless (or (get-text-property i 'invisible rendered) (get-text-property i 'display rendered))
          (setq shown (concat shown (substring-no-properties rendered i (1+ i))))))
      (should (string-match-p "(DEFVAR \\*RT27C\\*)" shown))
      (should (string-match-p "set \\*print-circle\\* to T, \\*really\\* now" shown))
      (should (string-match-p "^two words and bold$" shown)))))

(ert-deftest sly-agent-q-markdown-fences-shown-whole ()
  "Whatever hid a code block's fence while it streamed, the block's end shows it again."
  (with-temp-buffer
    (insert "Code:\n```lisp\n(car x)\n```\nafter\n")
    (put-text-property (point-min) (point-max) 'invisible 'sly-agent-q-markup)
    (sly-agent-q-markdown-show-fences (point-min) (point-max))
    (add-to-invisibility-spec 'sly-agent-q-markup)
    (should (equal (sly-agent-q-markdown-test--visible (point-min) (point-max)) "```lisp\n```\n"))))

(ert-deftest sly-agent-q-markdown-long-line-shown-as-written ()
  "A line longer than `sly-agent-q-markdown-max-line-chars' is not rendered (its cost grows as its
square), by either renderer; shorter lines around it still are."
  (dolist (mm '(nil t))
    (let* ((sly-agent-q-markdown-use-markdown-mode mm)
           (long (concat "**b** " (apply #'concat (make-list 2000 "*a ")) "\n"))
           (rendered (sly-agent-q-markdown-render-string (concat "## Title\n" long "**c**\n"))))
      (with-temp-buffer
        (insert rendered)
        (add-to-invisibility-spec 'sly-agent-q-markup)
        (let ((screen (sly-agent-q-markdown-test--visible (point-min) (point-max))))
          (should (string-prefix-p "Title\n**b** *a *a" screen))
          (should (string-suffix-p "\nc\n" screen)))))))

(ert-deftest sly-agent-q-markdown-link-address-never-hidden ()
  "A link with a title or an address in <> still shows its address, by either renderer.
markdown-mode hides such a link's address and title, so the text
\"https://bank.example\" could stand alone for another address."
  (unless (or (require 'markdown-mode nil t)
              (progn (sly-agent-q-dev-system-packages) (require 'markdown-mode nil t)))
    (ert-skip "markdown-mode is not installed (Debian: elpa-markdown-mode)"))
  (dolist (mm '(nil t))
    (dolist (text '("See [https://bank.example/](http://127.0.0.1/evil \"Bank\") now\n"
                    "See [https://bank.example/](<http://127.0.0.1/evil>) now\n"
                    "See [https://bank.example/][r] now\n\n[r]: http://127.0.0.1/evil\n"))
      (let ((sly-agent-q-markdown-use-markdown-mode mm))
        (with-temp-buffer
          (insert (sly-agent-q-markdown-render-string text))
          (add-to-invisibility-spec 'sly-agent-q-markup)
          (let ((screen (sly-agent-q-markdown-test--visible (point-min) (point-max))))
            (should (string-match-p "See \\[?https://bank\\.example/" screen))
            (should (string-match-p "127\\.0\\.0\\.1/evil" screen))
            ;; Nothing but markup is hidden: no letter or digit.
            (should-not (string-match-p "[[:alnum:]]"
                                        (cl-loop for i from (point-min) below (point-max)
                                                 when (or (invisible-p i) (get-text-property i 'display))
                                                 concat (buffer-substring-no-properties i (1+ i)))))))))))

(ert-deftest sly-agent-q-markdown-link-address-with-parentheses ()
  "A link's address with balanced parentheses is shown whole, by either renderer: the link ends
at the parenthesis that closes it, not at the address's first one; no letter or digit is hidden."
  (unless (or (require 'markdown-mode nil t)
              (progn (sly-agent-q-dev-system-packages) (require 'markdown-mode nil t)))
    (ert-skip "markdown-mode is not installed (Debian: elpa-markdown-mode)"))
  (dolist (mm '(nil t))
    (pcase-dolist (`(,text . ,shown)
                   '(("See [x](https://en.wikipedia.org/wiki/Lisp_(language)) now\n"
                      . "See x <https://en.wikipedia.org/wiki/Lisp_(language)> now\n")
                     ;; In a parenthesis of the prose: the last ")" is the prose's.
                     ("(see [Lisp](http://127.0.0.1/Lisp_(lang)))\n"
                      . "(see Lisp <http://127.0.0.1/Lisp_(lang)>)\n")
                     ;; Nested, and a title after it.
                     ("A [f](http://127.0.0.1/f(a(b))c \"T\") b\n"
                      . "A f <http://127.0.0.1/f(a(b))c \"T\"> b\n")
                     ;; Unbalanced: the address ends at its first \")\", the rest is prose.
                     ("B [y](http://127.0.0.1/a) b) c\n"
                      . "B y <http://127.0.0.1/a> b) c\n")))
      (let ((sly-agent-q-markdown-use-markdown-mode mm))
        (with-temp-buffer
          (insert (sly-agent-q-markdown-render-string text))
          (add-to-invisibility-spec 'sly-agent-q-markup)
          (should (equal (list mm (sly-agent-q-markdown-test--visible (point-min) (point-max)))
                         (list mm shown)))
          (should-not (string-match-p "[[:alnum:]]"
                                      (cl-loop for i from (point-min) below (point-max)
                                               when (or (invisible-p i) (get-text-property i 'display))
                                               concat (buffer-substring-no-properties i (1+ i))))))))))

(ert-deftest sly-agent-q-markdown-streaming-cost-grows-with-the-answer ()
  "Rendering an answer line by line as it streams gives markdown-mode each line's paragraph,
not thousands of characters before it again and again (4000 characters of prose took markdown-mode
a third of a second: a long answer froze Emacs for minutes)."
  (unless (or (require 'markdown-mode nil t)
              (progn (sly-agent-q-dev-system-packages) (require 'markdown-mode nil t)))
    (ert-skip "markdown-mode is not installed (Debian: elpa-markdown-mode)"))
  (let ((sly-agent-q-markdown-use-markdown-mode t)
        (seen 0)
        (answer (apply #'concat (make-list 150 "Some **prose** with `code`,\nover two lines.\n\n"))))
    (advice-add 'font-lock-ensure :before (lambda (&rest _) (setq seen (+ seen (buffer-size))))
                '((name . rt-count)))
    (unwind-protect
        (with-temp-buffer
          (insert answer)
          (goto-char (point-min))
          (while (not (eobp))
            (let ((start (point)))
              (forward-line 1)
              (sly-agent-q-markdown-render-region (point-min) start (point)))))
      (advice-remove 'font-lock-ensure 'rt-count))
    ;; Each line is fontified with its paragraph's earlier lines only.
    (should (< seen (* 4 (length answer))))))

(ert-deftest sly-agent-q-chat-prompt-on-its-own-line ()
  "Streamed text that ends mid-line does not run into the prompt, and no state is in the transcript."
  (sly-agent-q-markdown-test--with-chat
    (sly-agent-q-handle-notification nil 'chat/turnState
                                     '(:conversationId "k1" :turnId "t1" :state "requesting"))
    (sly-agent-q-handle-notification nil 'chat/turnState
                                     '(:conversationId "k1" :turnId "t1" :state "streaming" :previous "requesting"))
    (sly-agent-q-markdown-test--stream "It wou" 3)
    ;; The buffer: the model's text, then the plain prompt; the state is in the header line only.
    (should (string-match-p "It wou> \\'" (buffer-substring-no-properties (point-min) (point-max))))
    (should-not (string-match-p "answering" (buffer-substring-no-properties (point-min) (point-max))))
    (should (string-match-p "\\` \\[answering" (sly-agent-q-chat--header-line)))
    ;; The screen: a line break is drawn before the prompt.
    (let ((breaks (cl-loop for ov in (overlays-in (1- (sly-agent-q-transcript-end)) (1+ (sly-agent-q-transcript-end)))
                           for s = (overlay-get ov 'before-string)
                           when s collect s)))
      (should (equal breaks '("\n"))))
    (sly-agent-q-markdown-test--stream "ld.\n" 10)
    (should-not (cl-loop for ov in (overlays-in (1- (sly-agent-q-transcript-end)) (1+ (sly-agent-q-transcript-end)))
                         thereis (overlay-get ov 'before-string)))))

(ert-deftest sly-agent-q-chat-header-state-first-within-80-columns ()
  "The header line starts with the state, and the state fits in 80 columns with a long model name."
  (sly-agent-q-markdown-test--with-chat
    (setf (sly-agent-q-turn-chat-model sly-agent-q-turn--chat) (make-string 120 ?m))
    (sly-agent-q-handle-notification nil 'chat/turnState
                                     '(:conversationId "k1" :turnId "t1" :state "requesting"))
    (let ((header (sly-agent-q-chat--header-line)))
      (should (string-match-p "\\` \\[waiting for the model · C-c C-k cancels\\]" header))
      (should (string-match-p "C-c C-k cancels\\]" (substring header 0 80))))))

(ert-deftest sly-agent-q-chat-header-says-no-server-news-before-first-use ()
  "Before the first message no \"server not running\"; after the server died, it says so."
  (sly-agent-q-markdown-test--with-chat
    (setf (sly-agent-q-turn-chat-running sly-agent-q-turn--chat) nil)
    (should-not (sly-agent-q-connection-live-p))
    (should-not (string-match-p "server" (sly-agent-q-chat--header-line)))
    (should (string-match-p "\\` \\[ready\\]" (sly-agent-q-chat--header-line)))
    (sly-agent-q-turn--on-server-died "The server exited.")
    (should (string-match-p "\\` \\[server stopped" (sly-agent-q-chat--header-line)))))

(ert-deftest sly-agent-q-chat-cancelling-is-cleared ()
  "C-c C-k shows \"cancelling…\" in the header line, not the echo area; the turn's end clears it."
  (sly-agent-q-markdown-test--with-chat
    (let ((messages nil))
      (cl-letf (((symbol-function 'sly-agent-q-turn--send-cancel) #'ignore)
                ((symbol-function 'message)
                 (lambda (fmt &rest args) (when fmt (push (apply #'format fmt args) messages)))))
        (sly-agent-q-cancel))
      (should-not (cl-find-if (lambda (m) (string-match-p "cancelling" m)) messages))
      (should (string-match-p "\\` \\[cancelling…\\]" (sly-agent-q-chat--header-line)))
      (sly-agent-q-handle-notification nil 'chat/turnFailed '(:turnId "t1" :kind "cancelled" :message "cancelled"))
      (should-not (string-match-p "cancelling" (sly-agent-q-chat--header-line))))))

(provide 'sly-agent-q-markdown-test)
;;; sly-agent-q-markdown-test.el ends here
