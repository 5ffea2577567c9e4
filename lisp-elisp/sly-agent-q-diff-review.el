;;; sly-agent-q-diff-review.el --- Hunk-by-hunk review of the agent's file edits  -*- lexical-binding: t; -*-

;; Copyright (C) 2026  The sly-agent-q authors

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

;; The review of a propose_file_edit (or of the edit of a Lisp form):
;; a renderer of the approval's request, never a decider of its own.
;; The approval (sly-agent-q-approval.el) computes the proposal and its
;; hunks (sly-agent-q-diff.el, the server's), makes the one request and,
;; when the user decides, calls `sly-agent-q-diff-review-show'.  The
;; review shows the hunks in a `sly-agent-q-diff-review-mode' buffer
;; (derived from `diff-mode'), where the user accepts or rejects each
;; hunk, then finishes (C-c C-c) or aborts (C-c C-k).  Its answer goes
;; back to the approval as a user's approval function would give it:
;; (:accepted_hunks [N ...]), or a denial with its reason; the
;; approval's one normalizer makes the decision of it.

;;; Code:

(require 'cl-lib)
(require 'diff-mode)
;; Loaded with the package: the first hunk refined would otherwise load it.
(require 'smerge-mode)
(require 'button)
(require 'ewoc)
(require 'sly-agent-q-files)
(require 'sly-agent-q-display)
(require 'sly-agent-q-diff)

;; The review's names before they carried its file's prefix.
(define-obsolete-variable-alias 'sly-agent-q-diff-display-function
  'sly-agent-q-diff-review-display-function "0.2.0")
(define-obsolete-function-alias 'sly-agent-q-diff-abort
  #'sly-agent-q-diff-review-abort "0.2.0")
(define-obsolete-function-alias 'sly-agent-q-diff-accept-all
  #'sly-agent-q-diff-review-accept-all "0.2.0")
(define-obsolete-function-alias 'sly-agent-q-diff-accept-hunk
  #'sly-agent-q-diff-review-accept-hunk "0.2.0")
(define-obsolete-function-alias 'sly-agent-q-diff-finish
  #'sly-agent-q-diff-review-finish "0.2.0")
(define-obsolete-function-alias 'sly-agent-q-diff-goto-source
  #'sly-agent-q-diff-review-goto-source "0.2.0")
(define-obsolete-function-alias 'sly-agent-q-diff-next-hunk
  #'sly-agent-q-diff-review-next-hunk "0.2.0")
(define-obsolete-function-alias 'sly-agent-q-diff-previous-hunk
  #'sly-agent-q-diff-review-previous-hunk "0.2.0")
(define-obsolete-function-alias 'sly-agent-q-diff-quit
  #'sly-agent-q-diff-review-quit "0.2.0")
(define-obsolete-function-alias 'sly-agent-q-diff-redisplay
  #'sly-agent-q-diff-review-redisplay "0.2.0")
(define-obsolete-function-alias 'sly-agent-q-diff-reject-all
  #'sly-agent-q-diff-review-reject-all "0.2.0")
(define-obsolete-function-alias 'sly-agent-q-diff-reject-hunk
  #'sly-agent-q-diff-review-reject-hunk "0.2.0")

(defcustom sly-agent-q-diff-review-display-function #'pop-to-buffer
  "Function called with the review buffer to show it to the user."
  :type 'function
  :group 'sly-agent-q-tools)

(cl-defstruct (sly-agent-q-diff-review--review
               (:constructor sly-agent-q-diff-review--make-review)
               (:copier nil))
  "A review of a proposed edit in progress; EWOC shows its first DRAWN hunks.
ANSWER gets the user's answer, once."
  proposal states answer done ewoc (drawn 0))

(defvar-local sly-agent-q-diff-review--current nil
  "The `sly-agent-q-diff-review--review' shown in this buffer.")

(defun sly-agent-q-diff-review--answer (review answer)
  "End REVIEW, giving its ANSWER to the approval, unless it ended already."
  (unless (sly-agent-q-diff-review--review-done review)
    (setf (sly-agent-q-diff-review--review-done review) t)
    (funcall (sly-agent-q-diff-review--review-answer review) answer)))

(defvar sly-agent-q-diff-review-mode-map
  (let ((map (make-sparse-keymap)))
    (set-keymap-parent map special-mode-map)
    (define-key map "a" #'sly-agent-q-diff-review-accept-hunk)
    (define-key map "r" #'sly-agent-q-diff-review-reject-hunk)
    (define-key map "A" #'sly-agent-q-diff-review-accept-all)
    (define-key map "R" #'sly-agent-q-diff-review-reject-all)
    (define-key map "n" #'sly-agent-q-diff-review-next-hunk)
    (define-key map "p" #'sly-agent-q-diff-review-previous-hunk)
    (define-key map "\t" #'forward-button)
    (define-key map [backtab] #'backward-button)
    (define-key map "g" #'sly-agent-q-diff-review-redisplay)
    (define-key map (kbd "RET") #'sly-agent-q-diff-review-goto-source)
    (define-key map "o" #'sly-agent-q-diff-review-goto-source)
    (define-key map "q" #'sly-agent-q-diff-review-quit)
    (define-key map (kbd "C-c C-c") #'sly-agent-q-diff-review-finish)
    (define-key map (kbd "C-c C-k") #'sly-agent-q-diff-review-abort)
    map)
  "Keymap of `sly-agent-q-diff-review-mode'.")

(define-derived-mode sly-agent-q-diff-review-mode diff-mode "Agent-Q-Review"
  "Review a change the agent proposes, hunk by hunk.
\\<sly-agent-q-diff-review-mode-map>
\\[sly-agent-q-diff-review-accept-hunk] accepts the hunk at point,
\\[sly-agent-q-diff-review-reject-hunk] rejects it.
\\[sly-agent-q-diff-review-accept-all] accepts every hunk,
\\[sly-agent-q-diff-review-reject-all] rejects every hunk.
\\[sly-agent-q-diff-review-finish] sends the accepted hunks to the agent;
undecided hunks count as rejected.
\\[sly-agent-q-diff-review-abort] rejects the whole edit;
\\[sly-agent-q-diff-review-quit] does too, asking first when hunks were accepted.

\\{sly-agent-q-diff-review-mode-map}"
  ;; `diff-mode' binds `diff-mode-shared-map' over the local map in
  ;; read-only buffers; it would shadow the review's own keys.
  (setq minor-mode-overriding-map-alist
        (cl-remove 'buffer-read-only minor-mode-overriding-map-alist :key #'car))
  (font-lock-add-keywords
   nil '(("^## Hunk [0-9]+ of [0-9]+: \\(ACCEPTED\\)" 1 'success t)
         ("^## Hunk [0-9]+ of [0-9]+: \\(REJECTED\\)" 1 'error t)
         ("^## Hunk [0-9]+ of [0-9]+: \\(PENDING\\)" 1 'warning t)))
  (setq-local diff-update-on-the-fly nil)
  (setq-local diff-font-lock-syntax 'hunk-only)
  ;; diff-mode refines the words of every hunk redisplay shows, running
  ;; `diff' for each inside redisplay: a large edit held Emacs for the
  ;; whole screen.  The review refines the hunks in view from timers instead.
  (setq-local diff-refine nil)
  (add-hook 'window-scroll-functions #'sly-agent-q-diff-review--refine-later nil t)
  (setq-local revert-buffer-function
              (lambda (&rest _) (sly-agent-q-diff-review-redisplay)))
  (setq-local sly-agent-q-protected-buffer t)
  (setq buffer-read-only t)
  (add-hook 'kill-buffer-query-functions #'sly-agent-q-diff-review--kill-query nil t)
  (add-hook 'kill-buffer-hook #'sly-agent-q-diff-review--killed nil t))

;; `define-derived-mode' gave the map `diff-mode-map' as parent, whose
;; editing keys would corrupt the review; keep only `special-mode-map'.
(set-keymap-parent sly-agent-q-diff-review-mode-map special-mode-map)

(defun sly-agent-q-diff-review-buffer (rel)
  "A new review buffer for the edit of REL, empty until its hunks are there.
The approval makes it before the hunks come, to close it if the
call is cancelled meanwhile (`sly-agent-q-diff-review-cancel')."
  (let ((buffer (generate-new-buffer (format "*sly-agent-q-diff: %s*" rel))))
    (with-current-buffer buffer
      ;; The review's text is the product's: diff-mode must not fix up its hunk
      ;; headers as they are redrawn.  `diff-mode' reads this option when it
      ;; starts (Emacs 28 installs its change hooks, Emacs 30 its change tracker).
      (let ((diff-update-on-the-fly nil))
        (sly-agent-q-diff-review-mode))
      ;; Its text is drawn, never typed: undo would copy each redraw of a
      ;; large edit, megabytes of garbage.
      (buffer-disable-undo)
      (setq default-directory (sly-agent-q-files-project-root)))
    buffer))

(defconst sly-agent-q-diff-review--syntax-max-chars 10000
  "The longest hunk, in characters, of a review shown with code colors.
`diff-mode' colors a hunk's code by running its language's font-lock
on the whole hunk, inside redisplay, each time the hunk is shown or
redrawn: a hunk of 2,000 lines of Lisp took 350 ms, one of 20,000 four
seconds.  A review holding a longer hunk (a new file, or the one hunk
of a large edit the server could not diff in time) shows its lines
without them.")

(defun sly-agent-q-diff-review-show (buffer proposal answer display)
  "Show PROPOSAL's hunks in the review BUFFER with DISPLAY.
The review draws; the approval decides: ANSWER gets, once, the
user's answer, (:accepted_hunks [N ...]) when the user finishes, or
\(:decision \"denied\" :reason ...) when the user aborts or closes the
review (see `sly-agent-q-approval--normalize')."
  (with-current-buffer buffer
    (when (cl-some (lambda (h) (> (length (plist-get h :text)) sly-agent-q-diff-review--syntax-max-chars))
                   (plist-get proposal :hunks))
      (setq-local diff-font-lock-syntax nil))
    (setq sly-agent-q-diff-review--current
          (sly-agent-q-diff-review--make-review
           :proposal proposal :answer answer
           :states (make-vector (length (plist-get proposal :hunks)) 'pending)))
    (sly-agent-q-diff-review-redisplay)
    (goto-char (point-min))
    (sly-agent-q-diff-review-next-hunk))
  ;; Shown on a timer step of its own: drawing a large review and its
  ;; first redisplay, one after the other, held Emacs longer than a key
  ;; should wait.
  (run-with-timer 0 nil (lambda ()
                          (when (and (buffer-live-p buffer)
                                     (buffer-local-value 'sly-agent-q-diff-review--current buffer))
                            (funcall display buffer)
                            (with-current-buffer buffer (sly-agent-q-diff-review--refine-later)))))
  buffer)

(defun sly-agent-q-diff-review--review-here ()
  "Return the review of the current buffer, or signal a user error."
  (let ((review sly-agent-q-diff-review--current))
    (unless (and review (not (sly-agent-q-diff-review--review-done review)))
      (user-error "No review in progress in this buffer"))
    review))

(defun sly-agent-q-diff-review--button (label action help)
  "Insert a button LABEL calling ACTION with no argument, with tooltip HELP."
  (insert-text-button label 'action (lambda (_) (funcall action))
                      'follow-link t 'help-echo help))

(defun sly-agent-q-diff-review--width ()
  "Columns a line of the review may take without wrapping in its window."
  (1- (window-body-width (or (get-buffer-window (current-buffer)) (selected-window)))))

(defun sly-agent-q-diff-review--fill (items width)
  "ITEMS, strings, joined by two spaces into lines of at most WIDTH columns."
  (let ((lines nil) (line ""))
    (dolist (item items)
      (cond ((string-empty-p line) (setq line item))
            ((<= (+ (string-width line) 2 (string-width item)) width)
             (setq line (concat line "  " item)))
            (t (push line lines) (setq line item))))
    (unless (string-empty-p line) (push line lines))
    (mapconcat (lambda (l) (concat l "\n")) (nreverse lines) "")))

(defun sly-agent-q-diff-review--insert-read-eval (forms width)
  "Insert a warning naming FORMS (each #.FORM), in WIDTH columns, if any.
Such a form is code the Lisp reader runs as it reads the text: accepting
the edit runs it when the form is compiled, and at every load of the file."
  (when forms
    (insert (propertize (truncate-string-to-width
                         (format "READ-TIME EVALUATION: %d new #. form%s, code run as the text is read"
                                 (length forms) (if (cdr forms) "s" ""))
                         width nil nil "…")
                        'face 'warning)
            "\n"
            (propertize (truncate-string-to-width
                         "(when compiled, once you accept, and at each load of the file):"
                         width nil nil "…")
                        'face 'warning)
            "\n")
    ;; The forms are the model's: drawn as data, each whole (what runs is what is shown),
    ;; every line indented so that none can pass for a line of the review's own.
    (dolist (form forms)
      (insert "  " (replace-regexp-in-string "\n" "\n  " (sly-agent-q-display-text form)) "\n"))))

(defun sly-agent-q-diff-review--insert-preamble (proposal)
  "Insert the title, keys and buttons above the diff of PROPOSAL's review.
Each line fits the window: a wrapped header would push the hunks down
and split the keys from what they name."
  (let* ((width (sly-agent-q-diff-review--width))
         (title (concat (format "Proposed edit of %s" (sly-agent-q-display-line (plist-get proposal :rel)))
                        (if (plist-get proposal :description)
                            (concat ": " (sly-agent-q-display-line (plist-get proposal :description)))
                          ""))))
    ;; The path and the description are the model's: drawn as data, cut to the window.
    (insert (propertize (truncate-string-to-width title width nil nil "…") 'face 'bold) "\n")
    (sly-agent-q-diff-review--insert-read-eval (plist-get proposal :read-eval) width)
    (when (plist-get (plist-get proposal :current) :modified)
      (insert (truncate-string-to-width
               (concat "(computed against the unsaved text of buffer "
                       (sly-agent-q-display-line
                        (buffer-name (plist-get (plist-get proposal :current) :buffer)))
                       ")")
               width nil nil "…")
              "\n"))
    (insert (sly-agent-q-diff-review--fill
             (mapcar #'substitute-command-keys
                     '("\\<sly-agent-q-diff-review-mode-map>\\[sly-agent-q-diff-review-accept-hunk] accept hunk"
                       "\\<sly-agent-q-diff-review-mode-map>\\[sly-agent-q-diff-review-reject-hunk] reject hunk"
                       "\\<sly-agent-q-diff-review-mode-map>\\[sly-agent-q-diff-review-accept-all] accept all"
                       "\\<sly-agent-q-diff-review-mode-map>\\[sly-agent-q-diff-review-reject-all] reject all"
                       "\\<sly-agent-q-diff-review-mode-map>\\[sly-agent-q-diff-review-next-hunk]/\\[sly-agent-q-diff-review-previous-hunk] move"
                       "\\<sly-agent-q-diff-review-mode-map>\\[sly-agent-q-diff-review-finish] finish"
                       "\\<sly-agent-q-diff-review-mode-map>\\[sly-agent-q-diff-review-abort] reject the edit"
                       "\\<sly-agent-q-diff-review-mode-map>\\[sly-agent-q-diff-review-quit] quit (asks first)"))
             width)))
  (sly-agent-q-diff-review--button "[Accept all]" #'sly-agent-q-diff-review-accept-all "Accept every hunk")
  (insert " ")
  (sly-agent-q-diff-review--button "[Reject all]" #'sly-agent-q-diff-review-reject-all "Reject every hunk")
  (insert " ")
  (sly-agent-q-diff-review--button "[Finish]" #'sly-agent-q-diff-review-finish
                                   "Send the decision; undecided hunks count as rejected")
  (insert " ")
  (sly-agent-q-diff-review--button "[Abort]" #'sly-agent-q-diff-review-abort "Reject the whole edit")
  (insert "\n\n"))

(defun sly-agent-q-diff-review--insert-hunk (review index)
  "Insert hunk INDEX of REVIEW: its status line with buttons, then its diff.
The pretty-printer of the review's ewoc, one node per hunk."
  (let* ((hunks (plist-get (sly-agent-q-diff-review--review-proposal review) :hunks))
         (hunk (nth (1- index) hunks))
         (state (aref (sly-agent-q-diff-review--review-states review) (1- index)))
         (start (point)))
    (insert (propertize (format "## Hunk %d of %d: %s " index (length hunks)
                                (upcase (symbol-name state)))
                        'face (pcase state
                                ('accepted 'success)
                                ('rejected 'error)
                                (_ 'warning))))
    (sly-agent-q-diff-review--button "[Accept]" (lambda () (sly-agent-q-diff-review-accept-hunk index))
                                     "Accept this hunk")
    (insert " ")
    (sly-agent-q-diff-review--button "[Reject]" (lambda () (sly-agent-q-diff-review-reject-hunk index))
                                     "Reject this hunk")
    (insert "\n" (plist-get hunk :header) "\n" (sly-agent-q-display-text (plist-get hunk :text)))
    (put-text-property start (point) 'sly-agent-q-diff-hunk index)))

(defun sly-agent-q-diff-review--summary (review)
  "The line under the hunks of REVIEW: how many are decided and accepted."
  (let ((states (sly-agent-q-diff-review--review-states review)))
    (format "\n## %d of %d hunks decided, %d accepted.\n"
            (cl-count 'pending states :test-not #'eq) (length states)
            (cl-count 'accepted states))))

(defun sly-agent-q-diff-review--file-header (review)
  "The ---/+++ lines of REVIEW's diff."
  (let ((rel (sly-agent-q-display-line (plist-get (sly-agent-q-diff-review--review-proposal review) :rel))))
    (format "--- a/%s\n+++ b/%s\n" rel rel)))

(defvar sly-agent-q-diff-review--hunks-per-step 20
  "Hunks of a review drawn in one step, some 5 ms of drawing.
A large edit has hundreds of hunks: drawn at once, 143 of them held
Emacs 50 ms, more on a busy machine.  They are drawn in steps, the
first ones at once, the rest from timers, with keys read between.")

(defun sly-agent-q-diff-review--insert-hunks (review)
  "Insert REVIEW's diff at point as an ewoc, one node per hunk.
The ewoc is kept in REVIEW.  Its header is the file header; its last
node, the count of decisions; so deciding a hunk redraws that hunk and
the count alone.  The hunks are drawn in steps (see
`sly-agent-q-diff-review--hunks-per-step'); those drawn are counted in REVIEW."
  (let ((ewoc (ewoc-create (lambda (node)
                             (if (eq node :summary)
                                 (insert (sly-agent-q-diff-review--summary review))
                               (sly-agent-q-diff-review--insert-hunk review node)))
                           (sly-agent-q-diff-review--file-header review) "" t)))
    (ewoc-enter-last ewoc :summary)
    (setf (sly-agent-q-diff-review--review-ewoc review) ewoc
          (sly-agent-q-diff-review--review-drawn review) 0)
    (sly-agent-q-diff-review--draw-more review ewoc)))

(defun sly-agent-q-diff-review--draw-more (review ewoc)
  "Draw the next hunks of REVIEW into its EWOC for a step; the rest later.
Nothing is drawn once the review ended or was drawn again."
  (when (and (eq (sly-agent-q-diff-review--review-ewoc review) ewoc)
             (not (sly-agent-q-diff-review--review-done review)))
    (let ((count (length (sly-agent-q-diff-review--review-states review)))
          (summary (ewoc-nth ewoc -1))
          (inhibit-read-only t))
      (dotimes (_ (min sly-agent-q-diff-review--hunks-per-step
                       (- count (sly-agent-q-diff-review--review-drawn review))))
        (ewoc-enter-before ewoc summary (cl-incf (sly-agent-q-diff-review--review-drawn review))))
      (when (< (sly-agent-q-diff-review--review-drawn review) count)
        (sly-agent-q-display-next-step #'sly-agent-q-diff-review--draw-more review ewoc))
      (sly-agent-q-diff-review--refine-later))))

(defun sly-agent-q-diff-review--redraw-hunks (review &optional indexes)
  "Redraw the hunks INDEXES (default: all) of REVIEW, and the count of decisions.
Hunks not drawn yet are drawn with their state when their turn comes."
  (let ((ewoc (sly-agent-q-diff-review--review-ewoc review))
        (drawn (sly-agent-q-diff-review--review-drawn review)))
    (apply #'ewoc-invalidate ewoc
           (append (mapcar (lambda (i) (ewoc-nth ewoc (1- i)))
                           (cl-remove-if (lambda (i) (> i drawn))
                                         (or indexes (number-sequence 1 drawn))))
                   (list (ewoc-nth ewoc -1)))))
  (sly-agent-q-diff-review--refine-later))

(defun sly-agent-q-diff-review-redisplay ()
  "Redraw the whole review buffer, keeping point on the same line."
  (interactive)
  (let* ((review (sly-agent-q-diff-review--review-here))
         (line (line-number-at-pos))
         (column (current-column))
         (inhibit-read-only t))
    (erase-buffer)
    (sly-agent-q-diff-review--insert-preamble (sly-agent-q-diff-review--review-proposal review))
    (sly-agent-q-diff-review--insert-hunks review)
    (goto-char (point-min))
    (forward-line (1- line))
    (move-to-column column)
    (sly-agent-q-diff-review--refine-later)))

;;;; Word refinement

(defvar-local sly-agent-q-diff-review--refine-timer nil
  "The timer that refines the next hunk in view, if one is due.")

(defconst sly-agent-q-diff-review--refine-max-chars 5000
  "The longest hunk, in characters, whose changed words are shown.
Refining runs `diff' on the hunk's words, and its time grows faster
than the hunk: a hunk of 5,000 characters took some 60 ms, one of
50,000 most of a second, one line of 500,000 seventeen seconds, all
that time in one timer holding Emacs.  A longer hunk shows its lines
changed without its words.")

(defun sly-agent-q-diff-review--refine-later (&rest _)
  "Refine the hunks in view of the current review, one per timer run.
Each run refines one hunk (`diff-refine-hunk' runs `diff'), so Emacs
answers between them however many hunks show."
  (unless sly-agent-q-diff-review--refine-timer
    (setq sly-agent-q-diff-review--refine-timer
          (run-with-timer 0 nil #'sly-agent-q-diff-review--refine-next (current-buffer)))))

(defun sly-agent-q-diff-review--unrefined-in-view (window)
  "The start of the first hunk in WINDOW not refined yet, or nil."
  (let* ((start (window-start window))
         (end (save-excursion (goto-char start)
                              (forward-line (window-body-height window))
                              (point)))
         (pos start) (found nil))
    (while (and (not found) (< pos end))
      (let ((next (next-single-property-change pos 'sly-agent-q-diff-hunk nil end)))
        (when (and (get-text-property pos 'sly-agent-q-diff-hunk)
                   (not (get-text-property pos 'sly-agent-q-diff-refined)))
          (setq found (or (previous-single-property-change (1+ pos) 'sly-agent-q-diff-hunk)
                          (point-min))))
        (setq pos next)))
    found))

(defun sly-agent-q-diff-review--refine-next (buffer)
  "Refine the first hunk in view of the review BUFFER not refined yet.
Then ask for the next."
  (when (buffer-live-p buffer)
    (with-current-buffer buffer
      (setq sly-agent-q-diff-review--refine-timer nil)
      (let ((start (cl-some #'sly-agent-q-diff-review--unrefined-in-view
                            (get-buffer-window-list buffer nil t))))
        (when start
          (let ((end (next-single-property-change start 'sly-agent-q-diff-hunk nil (point-max))))
            (save-excursion
              (goto-char start)
              ;; Without a `diff' program the words are not refined: the
              ;; review goes on, saying nothing of it for every hunk.
              (when (and (<= (- end start) sly-agent-q-diff-review--refine-max-chars)
                         (executable-find diff-command)
                         (re-search-forward "^@@ " end t))
                (with-demoted-errors "Refining a hunk: %S"
                  (diff-refine-hunk))))
            (with-silent-modifications
              (put-text-property start end 'sly-agent-q-diff-refined t)))
          (sly-agent-q-diff-review--refine-later))))))

(defun sly-agent-q-diff-review--hunk-at-point ()
  "Return the number of the hunk at point, or signal a user error."
  (or (get-text-property (point) 'sly-agent-q-diff-hunk)
      (user-error "Point is not on a hunk")))

(defun sly-agent-q-diff-review--set (index state)
  "Set hunk INDEX (nil: the one at point) to STATE and redisplay."
  (let* ((review (sly-agent-q-diff-review--review-here))
         (index (or index (sly-agent-q-diff-review--hunk-at-point)))
         (states (sly-agent-q-diff-review--review-states review)))
    (unless (and (integerp index) (<= 1 index (length states)))
      (user-error "No hunk %s" index))
    (aset states (1- index) state)
    (sly-agent-q-diff-review--redraw-hunks review (list index))
    index))

(defun sly-agent-q-diff-review--goto-hunk (index)
  "Move point to the status line of hunk INDEX; return non-nil if found."
  (let* ((ewoc (and sly-agent-q-diff-review--current
                    (sly-agent-q-diff-review--review-ewoc sly-agent-q-diff-review--current)))
         (node (and ewoc (integerp index)
                    (<= 1 index (sly-agent-q-diff-review--review-drawn sly-agent-q-diff-review--current))
                    (ewoc-nth ewoc (1- index)))))
    (when node
      (goto-char (ewoc-location node)))))

(defun sly-agent-q-diff-review-accept-hunk (&optional index)
  "Accept hunk INDEX, by default the hunk at point, and move to the next."
  (interactive)
  (let ((index (sly-agent-q-diff-review--set index 'accepted)))
    (sly-agent-q-diff-review--goto-hunk index)
    (sly-agent-q-diff-review-next-hunk)))

(defun sly-agent-q-diff-review-reject-hunk (&optional index)
  "Reject hunk INDEX, by default the hunk at point, and move to the next."
  (interactive)
  (let ((index (sly-agent-q-diff-review--set index 'rejected)))
    (sly-agent-q-diff-review--goto-hunk index)
    (sly-agent-q-diff-review-next-hunk)))

(defun sly-agent-q-diff-review-goto-source ()
  "Show the file of the review at the line of the hunk at point."
  (interactive)
  (let* ((review (sly-agent-q-diff-review--review-here))
         (proposal (sly-agent-q-diff-review--review-proposal review))
         (index (sly-agent-q-diff-review--hunk-at-point))
         (hunk (nth (1- index) (plist-get proposal :hunks)))
         (file (plist-get proposal :file))
         (buffer (or (sly-agent-q-files-visiting-buffer file)
                     (and (file-exists-p file) (find-file-noselect file))
                     (user-error "%s does not exist yet" (plist-get proposal :rel))))
         (window (display-buffer buffer)))
    (with-current-buffer buffer
      (save-restriction
        (widen)
        (goto-char (point-min))
        (forward-line (plist-get hunk :old-start))
        (when window (set-window-point window (point)))))))

(defun sly-agent-q-diff-review-accept-all ()
  "Accept every hunk."
  (interactive)
  (let ((review (sly-agent-q-diff-review--review-here)))
    (fillarray (sly-agent-q-diff-review--review-states review) 'accepted)
    (sly-agent-q-diff-review--redraw-hunks review)))

(defun sly-agent-q-diff-review-reject-all ()
  "Reject every hunk."
  (interactive)
  (let ((review (sly-agent-q-diff-review--review-here)))
    (fillarray (sly-agent-q-diff-review--review-states review) 'rejected)
    (sly-agent-q-diff-review--redraw-hunks review)))

(defun sly-agent-q-diff-review-next-hunk ()
  "Move to the next hunk's status line; return its number."
  (interactive)
  (let ((here (get-text-property (point) 'sly-agent-q-diff-hunk)))
    (if here
        (unless (sly-agent-q-diff-review--goto-hunk (1+ here))
          (message "No more hunks"))
      (let ((next (next-single-property-change (point) 'sly-agent-q-diff-hunk)))
        (if next (goto-char next) (message "No more hunks"))))
    (get-text-property (point) 'sly-agent-q-diff-hunk)))

(defun sly-agent-q-diff-review-previous-hunk ()
  "Move to the previous hunk's status line."
  (interactive)
  (let ((here (get-text-property (point) 'sly-agent-q-diff-hunk)))
    (unless (sly-agent-q-diff-review--goto-hunk (max 1 (1- (or here 2))))
      (message "No previous hunk"))))

(defun sly-agent-q-diff-review-showing-p (buffer)
  "Non-nil when the hunks of the review BUFFER came and are drawn."
  (and (buffer-live-p buffer) (buffer-local-value 'sly-agent-q-diff-review--current buffer) t))

(defun sly-agent-q-diff-review--end (answer)
  "End the review of the current buffer with ANSWER and close it."
  (let* ((review (sly-agent-q-diff-review--review-here))
         (buffer (current-buffer)))
    (sly-agent-q-diff-review--answer review answer)
    (when (buffer-live-p buffer)
      (let ((window (get-buffer-window buffer)))
        (if window
            (quit-window t window)
          (kill-buffer buffer))))))

(defun sly-agent-q-diff-review-finish ()
  "Send the accepted hunks to the agent; undecided hunks count as rejected."
  (interactive)
  (let* ((review (sly-agent-q-diff-review--review-here))
         (states (sly-agent-q-diff-review--review-states review))
         (accepted (cl-loop for i from 1 to (length states)
                            when (eq (aref states (1- i)) 'accepted) collect i)))
    (sly-agent-q-diff-review--end (list :accepted_hunks (vconcat accepted)))))

(defun sly-agent-q-diff-review-abort ()
  "Reject the whole proposed edit, and say so."
  (interactive)
  (let ((rel (plist-get (sly-agent-q-diff-review--review-proposal (sly-agent-q-diff-review--review-here)) :rel)))
    (sly-agent-q-diff-review--end
     (list :decision "denied" :reason "The user aborted the review of the proposed edit"))
    (message "sly-agent-q: rejected the whole proposed edit of %s" (sly-agent-q-display-line rel))))

(defun sly-agent-q-diff-review-quit ()
  "Leave the review rejecting the whole edit, asking first if hunks were accepted.
Accepted hunks are the user's work: they are not thrown away without
a yes; declined, the review stays as it is."
  (interactive)
  (let* ((review (sly-agent-q-diff-review--review-here))
         (accepted (cl-count 'accepted (sly-agent-q-diff-review--review-states review))))
    (if (or (zerop accepted)
            (y-or-n-p (format "Discard the %d accepted hunk%s and reject the whole edit? "
                              accepted (if (= accepted 1) "" "s"))))
        (sly-agent-q-diff-review-abort)
      (message "%s" (substitute-command-keys
                     "Review kept: \\<sly-agent-q-diff-review-mode-map>\\[sly-agent-q-diff-review-finish] sends the accepted hunks")))))

(defun sly-agent-q-diff-review--kill-query ()
  "Before the review buffer is killed undecided: ask if hunks were accepted.
As \\<sly-agent-q-diff-review-mode-map>\\[sly-agent-q-diff-review-quit] does: accepted hunks are
not thrown away without a yes."
  (let* ((review sly-agent-q-diff-review--current)
         (accepted (and review (not (sly-agent-q-diff-review--review-done review))
                        (cl-count 'accepted (sly-agent-q-diff-review--review-states review)))))
    (or (null accepted) (zerop accepted)
        (y-or-n-p (format "Discard the %d accepted hunk%s and reject the whole edit? "
                          accepted (if (= accepted 1) "" "s"))))))

(defun sly-agent-q-diff-review--killed ()
  "Deny the edit when its review buffer is killed before a decision; say so."
  (let ((review sly-agent-q-diff-review--current))
    (when (and review (not (sly-agent-q-diff-review--review-done review)))
      (sly-agent-q-diff-review--answer review (list :decision "denied"
                                                    :reason "The user closed the review without deciding"))
      (message "sly-agent-q: rejected the whole proposed edit of %s"
               (sly-agent-q-display-line
                (plist-get (sly-agent-q-diff-review--review-proposal review) :rel))))))

(defun sly-agent-q-diff-review-cancel (buffer)
  "Close review BUFFER without answering (the server gave up waiting).
The approval forgets the review it made."
  (when (buffer-live-p buffer)
    (with-current-buffer buffer
      (let ((review sly-agent-q-diff-review--current))
        (when review
          (setf (sly-agent-q-diff-review--review-done review) t))))
    (kill-buffer buffer)))

(provide 'sly-agent-q-diff-review)
;;; sly-agent-q-diff-review.el ends here
