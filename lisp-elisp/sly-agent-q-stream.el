;;; sly-agent-q-stream.el --- The agent's streamed text and reasoning in the chat  -*- lexical-binding: t; -*-

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

;; The agent's text as it streams into a chat's transcript: deltas are
;; coalesced and inserted on a short timer, their Markdown rendered line
;; by line, a bounded step at a time (the render queue), and the code
;; blocks of a run of text fontified once it is complete.  The model's
;; reasoning goes to a folded section above the answer it leads to.

;;; Code:

(require 'cl-lib)
(require 'subr-x)
(require 'button)
(require 'sly-agent-q-display)
(require 'sly-agent-q-markdown)
(require 'sly-agent-q-faces)
(require 'sly-agent-q-transcript)

(defcustom sly-agent-q-stream-flush-interval 0.05
  "Seconds between insertions of streamed text.
Deltas arriving in between are inserted together."
  :type 'number
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

(cl-defstruct (sly-agent-q-stream (:constructor sly-agent-q-stream--make) (:copier nil))
  "The agent's text of a chat buffer, on its way into the transcript.
PENDING is the streamed text not inserted yet, FLUSH-TIMER the timer
that inserts it.  SEGMENT is a marker at the start of the agent's
current run of text, or nil; RENDERED a marker up to which that text
was queued for rendering.  RENDER-QUEUE is the text inserted but not
rendered yet, oldest first: each a list (CONTEXT FROM TO CODE) of
markers at the start of its run of text, at what is still to render
and at its end, and CODE, a marker at the start of a run of text now
complete, whose code blocks are fontified once the text is rendered,
or nil; RENDER-TIMER renders the rest of it.  THINKING is the model's
reasoning last shown: (HEADER . OVERLAY), HEADER a marker at the start
of its header line, OVERLAY covering its text, hidden until TAB on the
header shows it; or nil."
  (pending "") flush-timer segment rendered render-queue render-timer thinking)

(defvar-local sly-agent-q-stream--state nil
  "The current chat buffer's `sly-agent-q-stream'.")

(defvar sly-agent-q-stream--render-step-chars 16000
  "Most characters of the agent's text rendered in one step.
Rendering 100,000 characters that came at once held Emacs over 100 ms;
the rest is rendered from timers, with keys read between.")

(defun sly-agent-q-stream-setup ()
  "Give the current chat buffer an empty stream."
  (setq sly-agent-q-stream--state (sly-agent-q-stream--make)))

(defun sly-agent-q-stream-stop ()
  "Stop inserting the current chat buffer's streamed text (it is being killed)."
  (when sly-agent-q-stream--state
    (sly-agent-q-stream--cancel-timer)))

(defun sly-agent-q-stream-end ()
  "Insert the text streamed so far and end its run of text.
Its code blocks are fontified.  Run before anything else is written
to the transcript (`sly-agent-q-transcript-end-text-hook')."
  (when sly-agent-q-stream--state
    (sly-agent-q-stream-flush)
    (sly-agent-q-stream-end-segment)))

(add-hook 'sly-agent-q-transcript-end-text-hook #'sly-agent-q-stream-end)

(defun sly-agent-q-stream-rendered-p ()
  "Non-nil when all the agent's text inserted in the current chat is rendered."
  (null (sly-agent-q-stream-render-queue sly-agent-q-stream--state)))

;;;; Streaming

(defun sly-agent-q-stream--cancel-timer ()
  "Cancel the flush timer of the current buffer."
  (let ((stream sly-agent-q-stream--state))
    (when (sly-agent-q-stream-flush-timer stream)
      (cancel-timer (sly-agent-q-stream-flush-timer stream))
      (setf (sly-agent-q-stream-flush-timer stream) nil))))

(defun sly-agent-q-stream-add-text (text)
  "Queue streamed TEXT; it is inserted by the next flush.
TEXT comes from the model: it is drawn as data (`sly-agent-q-display-text')."
  (let ((stream sly-agent-q-stream--state))
    (setf (sly-agent-q-stream-pending stream)
          (concat (sly-agent-q-stream-pending stream) (sly-agent-q-display-text text)))
    (unless (sly-agent-q-stream-flush-timer stream)
      (let ((buf (current-buffer)))
        (setf (sly-agent-q-stream-flush-timer stream)
              (run-with-timer sly-agent-q-stream-flush-interval nil
                              (lambda ()
                                (when (buffer-live-p buf)
                                  (with-current-buffer buf
                                    (setf (sly-agent-q-stream-flush-timer stream) nil)
                                    (sly-agent-q-stream-flush))))))))))

(defun sly-agent-q-stream-flush ()
  "Insert the queued streamed text now."
  (sly-agent-q-stream--cancel-timer)
  (let ((stream sly-agent-q-stream--state))
    (unless (string-empty-p (sly-agent-q-stream-pending stream))
      (let ((text (sly-agent-q-stream-pending stream)))
        (setf (sly-agent-q-stream-pending stream) "")
        (unless (sly-agent-q-stream-segment stream)
          (sly-agent-q-transcript-fresh-line)
          (setf (sly-agent-q-stream-segment stream) (copy-marker (sly-agent-q-transcript-end) nil)
                (sly-agent-q-stream-rendered stream) (copy-marker (sly-agent-q-transcript-end) nil)))
        (sly-agent-q-transcript-insert text)
        ;; The lines complete now are rendered now; the last, partial one waits.
        (let ((end (save-excursion
                     (goto-char (sly-agent-q-transcript-end))
                     (and (search-backward "\n" (sly-agent-q-stream-rendered stream) t) (1+ (point))))))
          (when end (sly-agent-q-stream--render (sly-agent-q-stream-rendered stream) end)))))))

(defun sly-agent-q-stream--render (start end &optional complete)
  "Render the Markdown of the agent's text from START to END.
With COMPLETE, the run of text ends at END: its code blocks are
fontified after.  What is more than a step's worth is rendered later
\=(`sly-agent-q-stream--render-step-chars'), in order."
  (let* ((stream sly-agent-q-stream--state)
         (segment (sly-agent-q-stream-segment stream)))
    (setf (sly-agent-q-stream-render-queue stream)
          (nconc (sly-agent-q-stream-render-queue stream)
                 (list (list (copy-marker segment) (copy-marker start) (copy-marker end)
                             (and complete (copy-marker segment))))))
    (set-marker (sly-agent-q-stream-rendered stream) end)
    (unless (sly-agent-q-stream-render-timer stream)
      (sly-agent-q-stream--render-some))))

(defvar sly-agent-q-stream--markdown-mode-step-chars 1000
  "Most characters rendered in one step when markdown-mode renders.
Its font lock costs about ten times the chat's own renderer's (and
more in a long paragraph): 16,000 characters of ordinary Markdown held
Emacs 0.7 s, of one long paragraph tens of seconds.")

(defun sly-agent-q-stream--render-some ()
  "Render a step's worth of the render queue; ask for the rest."
  (let ((budget (if (and sly-agent-q-markdown-use-markdown-mode sly-agent-q-markdown-render
                         (sly-agent-q-markdown-mode-available-p))
                    (min sly-agent-q-stream--render-step-chars sly-agent-q-stream--markdown-mode-step-chars)
                  sly-agent-q-stream--render-step-chars))
        (inhibit-read-only t)
        (buffer-undo-list t))
    (while (and (sly-agent-q-stream-render-queue sly-agent-q-stream--state) (> budget 0))
      (condition-case err
          (setq budget (sly-agent-q-stream--render-job budget))
        (error
         ;; That run of text stays as written; the rest is still rendered.
         (message "sly-agent-q: rendering the agent's text failed: %s" (error-message-string err))
         (sly-agent-q-stream--drop-render-job))))
    (setf (sly-agent-q-stream-render-timer sly-agent-q-stream--state)
          (and (sly-agent-q-stream-render-queue sly-agent-q-stream--state)
               (sly-agent-q-display-next-step #'sly-agent-q-stream--render-some)))))

(defun sly-agent-q-stream--render-job (budget)
  "Render up to BUDGET characters of the first job of the render queue.
Return the budget left; a job done leaves the queue."
  (pcase-let ((`(,context ,from ,to ,code) (car (sly-agent-q-stream-render-queue sly-agent-q-stream--state))))
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
        (let ((next (sly-agent-q-stream--fontify-next-code-block code to)))
          (cl-decf budget (- next code))
          (set-marker code next)))
      (when (or (null code) (not sly-agent-q-fontify-code-blocks) (>= code to))
        (sly-agent-q-stream--drop-render-job)))
    budget))

(defun sly-agent-q-stream--drop-render-job ()
  "Take the first job off the render queue, its markers freed."
  (dolist (m (pop (sly-agent-q-stream-render-queue sly-agent-q-stream--state))) (and m (set-marker m nil))))

(defun sly-agent-q-stream-end-segment ()
  "The agent's current run of text is complete: fontify its code blocks."
  (let ((stream sly-agent-q-stream--state))
    (when (sly-agent-q-stream-segment stream)
      (sly-agent-q-stream--render (sly-agent-q-stream-rendered stream) (sly-agent-q-transcript-end) t)
      (set-marker (sly-agent-q-stream-rendered stream) nil)
      (set-marker (sly-agent-q-stream-segment stream) nil)
      (setf (sly-agent-q-stream-segment stream) nil))))

;;;; Code blocks

(defun sly-agent-q-stream--code-mode (lang)
  "The major mode for code blocks tagged LANG, or nil for none."
  (let ((l (downcase (or lang ""))))
    (cond ((member l '("" "lisp" "common-lisp" "cl" "commonlisp" "lsp")) #'lisp-mode)
          ((member l '("elisp" "emacs-lisp" "el")) #'emacs-lisp-mode)
          ((member l '("scheme")) #'scheme-mode))))

(defun sly-agent-q-stream--fontify-next-code-block (start end)
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
             (mode (sly-agent-q-stream--code-mode (match-string 1)))
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
                (sly-agent-q-stream--fontify-as mode code-start code-end)
              (error (message "sly-agent-q: %s could not fontify a code block: %s"
                              mode (error-message-string err))))))
        (add-face-text-property fence-start band-end 'sly-agent-q-code-block-face t)
        fence-end))))

(defun sly-agent-q-stream--fontify-buffer (mode)
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

(defun sly-agent-q-stream--fontify-as (mode start end)
  "Give the text between START and END the faces MODE's font lock gives it."
  (let* ((code (buffer-substring-no-properties start end))
         (faces (with-current-buffer (sly-agent-q-stream--fontify-buffer mode)
                  (sly-agent-q-faces-fontify code))))
    (dolist (f faces)
      (put-text-property (+ start (nth 0 f)) (+ start (nth 1 f)) 'face (nth 2 f)))))

;;;; The model's reasoning

;; Obsolete name (issue 46), kept for users who name it.
(define-obsolete-variable-alias 'sly-agent-q-chat-thinking-map
  'sly-agent-q-stream-thinking-map "0.2.0")
(defvar sly-agent-q-stream-thinking-map
  (let ((map (make-sparse-keymap)))
    (set-keymap-parent map button-map)
    (define-key map (kbd "TAB") #'sly-agent-q-stream-toggle-thinking)
    (define-key map (kbd "<tab>") #'sly-agent-q-stream-toggle-thinking)
    map)
  "Keymap on the header of the model's reasoning.")

(define-button-type 'sly-agent-q-thinking
  'action (lambda (button) (goto-char button) (sly-agent-q-stream-toggle-thinking))
  'keymap sly-agent-q-stream-thinking-map
  'follow-link t
  'help-echo "TAB or RET: show or hide the model's reasoning")

(defun sly-agent-q-stream-add-thinking (text &optional redacted)
  "Add TEXT, a piece of the model's reasoning, to its folded section.
The section is started above the answer it leads to; REDACTED: the
API encrypted that reasoning, shown as \"(redacted)\".  TEXT comes
from the model: drawn as data (`sly-agent-q-display-text')."
  (let ((piece (if redacted "(redacted)\n" (sly-agent-q-display-text (or text ""))))
        (section (sly-agent-q-stream-thinking sly-agent-q-stream--state)))
    ;; A section goes on only while nothing else was written after it.
    (unless (and section (= (overlay-end (cdr section)) (sly-agent-q-transcript-end)))
      (sly-agent-q-transcript-end-text)
      (let ((header (copy-marker (sly-agent-q-transcript-end)))
            (body (progn (sly-agent-q-transcript-insert "\n")
                         (marker-position (sly-agent-q-transcript-end)))))
        ;; The text ends with a newline of its own, hidden with it: what follows starts a line.
        (sly-agent-q-transcript-insert "\n")
        (let ((overlay (make-overlay body (sly-agent-q-transcript-end)))
              (frame (propertize sly-agent-q-display-outside-frame
                                 'face 'sly-agent-q-display-frame-face)))
          (overlay-put overlay 'invisible t)
          (overlay-put overlay 'sly-agent-q-frame frame)
          (setf section (cons header overlay)
                (sly-agent-q-stream-thinking sly-agent-q-stream--state) section))))
    (let* ((overlay (cdr section))
           (inhibit-read-only t) (buffer-undo-list t)
           (at (1- (overlay-end overlay))))
      (save-excursion
        (goto-char at)
        ;; Redacted reasoning stands on a line of its own.
        (when (and redacted (> at (overlay-start overlay)) (not (eq (char-before) ?\n)))
          (setq piece (concat "\n" piece)))
        (insert (propertize piece 'face 'sly-agent-q-meta-face))
        (add-text-properties at (point) sly-agent-q-transcript-read-only))
      (sly-agent-q-stream--draw-thinking-header (car section) overlay))))

(defun sly-agent-q-stream--draw-thinking-header (header overlay)
  "Write the header line at HEADER of the reasoning OVERLAY folds."
  (let* ((open (not (overlay-get overlay 'invisible)))
         (frame (and open (overlay-get overlay 'sly-agent-q-frame))))
    ;; Opened, every line of it (wrapped ones too) is drawn after the frame of
    ;; text from outside: without colours it still never reads as the chat's
    ;; own.  Folded, no prefix: a line starting in hidden text takes that
    ;; text's prefix, which framed the tool entry or answer after it.
    (overlay-put overlay 'line-prefix frame)
    (overlay-put overlay 'wrap-prefix frame)
    (sly-agent-q-stream--draw-thinking-header-line header overlay open)))

(defun sly-agent-q-stream--draw-thinking-header-line (header overlay open)
  "Write the header line at HEADER of OVERLAY, OPEN or folded."
  (let* ((inhibit-read-only t) (buffer-undo-list t)
         (body (overlay-start overlay))
         ;; Counted before the old header goes, which moves the overlay.
         (tokens (max 1 (/ (+ (- (overlay-end overlay) body) 3) 4))))
    (save-excursion
      (delete-region header (1- body))
      (goto-char header)
      (insert (propertize (format "%s Thinking… %s tokens" (if open "▾" "▸")
                                  (sly-agent-q-transcript-format-tokens tokens))
                          'face 'sly-agent-q-meta-face))
      (make-text-button header (point) :type 'sly-agent-q-thinking 'sly-agent-q-thinking overlay)
      (add-face-text-property header (1+ header) 'sly-agent-q-toggle-face)
      (add-text-properties header (point) sly-agent-q-transcript-read-only))))

(defun sly-agent-q-stream-toggle-thinking ()
  "Show or hide the model's reasoning whose header is at point."
  (interactive)
  (let* ((button (button-at (point)))
         (overlay (and button (button-get button 'sly-agent-q-thinking))))
    (when (overlayp overlay)
      (overlay-put overlay 'invisible (not (overlay-get overlay 'invisible)))
      (sly-agent-q-stream--draw-thinking-header (button-start button) overlay))))

;; Obsolete names (issue 46): these were sly-agent-q-chat-* before the
;; chat was split into a file per concept; kept for users who name them.
(define-obsolete-function-alias 'sly-agent-q-chat-toggle-thinking
  #'sly-agent-q-stream-toggle-thinking "0.2.0")

(provide 'sly-agent-q-stream)
;;; sly-agent-q-stream.el ends here
