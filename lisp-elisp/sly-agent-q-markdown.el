;;; sly-agent-q-markdown.el --- Markdown of the model's answers, rendered in the chat  -*- lexical-binding: t; -*-

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

;; The model writes Markdown.  The chat shows it rendered: headings,
;; emphasis, inline code, lists, block quotes, rules, tables and links,
;; the markup hidden.  The text itself is never changed: the markup is
;; made invisible (or displayed as something else), so copying, saving
;; and exporting see what the model wrote.
;;
;; When markdown-mode is installed its font lock is used (a soft
;; dependency, as gptel has one): the text is fontified in a scratch
;; buffer and its faces and hidden markup are copied over.  Otherwise a
;; small renderer of this file's own does the common constructs.  Either
;; way lines are rendered as they complete, so a streamed answer is
;; rendered while it streams.
;;
;; What is hidden is markup only: a link shows its address beside its
;; text, so an answer cannot dress one address up as another.

;;; Code:

(require 'cl-lib)
(require 'subr-x)
(require 'sly-agent-q-faces)

(declare-function markdown-mode "markdown-mode" ())
(defvar markdown-hide-markup)
(defvar markdown-hide-urls)
(defvar markdown-fontify-code-blocks-natively)

(defgroup sly-agent-q-markdown nil
  "How the chat renders the model's Markdown."
  :group 'sly-agent-q)

(defcustom sly-agent-q-markdown-render t
  "Non-nil to render the Markdown of the model's answers in the chat."
  :type 'boolean
  :group 'sly-agent-q-markdown)

(defcustom sly-agent-q-markdown-use-markdown-mode t
  "Non-nil to render with markdown-mode's font lock when it is installed.
Otherwise, or when it is not installed, the chat's own renderer is used."
  :type 'boolean
  :group 'sly-agent-q-markdown)

(defcustom sly-agent-q-markdown-context-chars 1000
  "How much text before a new line markdown-mode sees to render it, at most.
It sees the line's paragraph, no further back than this: an emphasis
that started earlier in the paragraph is rendered right when its start
is within this many characters.  Each streamed line costs markdown-mode
this much again, so a long answer costs this times its lines.  (Code
blocks are found from the answer's start, whatever this says.)"
  :type 'natnum
  :group 'sly-agent-q-markdown)

(defcustom sly-agent-q-markdown-max-line-chars 2000
  "Longest line whose inline Markdown is rendered.
A longer line is shown as it was written: its emphasis would cost time
growing with the square of its length, and Emacs must not freeze on
what a model sends."
  :type 'natnum
  :group 'sly-agent-q-markdown)

(define-obsolete-face-alias 'sly-agent-q-markdown-heading-face 'sly-agent-q-heading-1-face "0.1.0")

(defface sly-agent-q-markdown-code-face '((t :inherit font-lock-constant-face))
  "Face of inline code in the model's text."
  :group 'sly-agent-q-markdown)

(defface sly-agent-q-markdown-markup-face '((t :inherit shadow))
  "Face of markup drawn in place of Markdown (bullets, rules, table borders)."
  :group 'sly-agent-q-markdown)

(defface sly-agent-q-markdown-link-face '((t :inherit link))
  "Face of a link's text in the model's text."
  :group 'sly-agent-q-markdown)

(defconst sly-agent-q-markdown-invisible 'sly-agent-q-markup
  "The `invisible' value of hidden markup.
A buffer shows the markup again when it removes this from
`buffer-invisibility-spec'.")

(defconst sly-agent-q-markdown-fence-regexp "^[ \t]*\\(```\\|~~~\\)"
  "A line that opens or closes a fenced code block.")

;;;; Entry points

(defun sly-agent-q-markdown-setup ()
  "Make the current buffer hide rendered Markdown's markup."
  (add-to-invisibility-spec sly-agent-q-markdown-invisible))

(defun sly-agent-q-markdown-render-region (context start end)
  "Render the Markdown of the text between START and END.
CONTEXT (no later than START) is where the text began: what lies
between it and START tells whether START is inside a code block.
START should be at a line's start.  Returns END."
  (when (and sly-agent-q-markdown-render (< start end))
    (with-silent-modifications
      (if (and sly-agent-q-markdown-use-markdown-mode
               (not (sly-agent-q-markdown--long-line-p start end))
               (sly-agent-q-markdown-mode-available-p))
          (sly-agent-q-markdown--with-markdown-mode context start end)
        (sly-agent-q-markdown--render-own context start end))
      (sly-agent-q-markdown--show-words start end)
      (sly-agent-q-markdown--show-earmuffs start end)
      ;; Last: a cell's width is what shows of it once the rest is rendered.
      (sly-agent-q-markdown--align-tables context start end)))
  end)

(defun sly-agent-q-markdown--show-words (start end)
  "Show again what was hidden or drawn over between START and END, if a word.
Markup is punctuation; a letter or a digit hidden (a link's address,
its title, a reference's label) is text the user should see.
Where each property changes next is asked once per change: asked at
each run, it walked every run to END while the other changed first."
  (let ((pos start) (invisible start) (display start))
    (while (< pos end)
      (when (<= invisible pos) (setq invisible (next-single-property-change pos 'invisible nil end)))
      (when (<= display pos) (setq display (next-single-property-change pos 'display nil end)))
      (let ((next (min invisible display)))
        (when (and (or (get-text-property pos 'invisible) (get-text-property pos 'display))
                   (save-excursion
                     (goto-char pos)
                     (re-search-forward "[[:alnum:]]" next t)))
          (remove-text-properties pos next '(invisible nil display nil)))
        (setq pos next)))))

(defun sly-agent-q-markdown--show-earmuffs (start end)
  "Show the asterisks of the Lisp names between START and END.
*PRINT-CIRCLE* is a special variable, not an emphasized word: with its
asterisks hidden the screen would show another symbol.  A word between
single asterisks (no space in it) keeps them, and is not slanted."
  (save-excursion
    (goto-char start)
    (while (re-search-forward
            "\\(?:^\\|[^[:alnum:]*\\\\]\\)\\(\\*\\)[[:alnum:]+/<>=!?%&$^~.:-]+\\(\\*\\)\\(?:[^[:alnum:]*]\\|$\\)"
            end t)
      (remove-text-properties (match-beginning 1) (match-end 1) '(invisible nil display nil))
      (remove-text-properties (match-beginning 2) (match-end 2) '(invisible nil display nil))
      ;; A name, not emphasis: not slanted either.
      (sly-agent-q-faces-remove (match-beginning 1) (match-end 2) '(italic markdown-italic-face))
      (goto-char (match-end 2)))))

(defun sly-agent-q-markdown--long-line-p (start end)
  "Non-nil if a line between START and END is longer than the longest rendered."
  (save-excursion
    (goto-char start)
    (let ((long nil))
      (while (and (not long) (< (point) end))
        (setq long (> (- (line-end-position) (point)) sly-agent-q-markdown-max-line-chars))
        (forward-line 1)
        (when (eobp) (goto-char end)))
      long)))

(defun sly-agent-q-markdown-render-string (string)
  "STRING, rendered as the chat renders the model's Markdown."
  (with-temp-buffer
    (insert string)
    (sly-agent-q-markdown-render-region (point-min) (point-min) (point-max))
    (buffer-string)))

(defun sly-agent-q-markdown-show-fences (start end)
  "Show the fence lines of the code blocks between START and END whole.
A code block's fences say where its code starts and ends; whatever a
renderer hid of them while the block streamed in is shown again."
  (with-silent-modifications
    (save-excursion
      (goto-char start)
      (while (re-search-forward sly-agent-q-markdown-fence-regexp end t)
        (remove-text-properties (line-beginning-position) (min end (1+ (line-end-position)))
                                '(invisible nil display nil))
        (forward-line 1)))))

;;;; With markdown-mode

(defvar sly-agent-q-markdown--missing-for nil
  "The `load-path' markdown-mode was last looked for in, not found.")

(defun sly-agent-q-markdown-mode-available-p ()
  "Return non-nil when markdown-mode is loaded, or could be loaded now.
A search that failed is not made again while `load-path' is the same:
each searched every directory of it, for every piece rendered."
  (or (featurep 'markdown-mode)
      (and (not (eq load-path sly-agent-q-markdown--missing-for))
           (or (require 'markdown-mode nil t)
               (progn (setq sly-agent-q-markdown--missing-for load-path) nil)))))

(defun sly-agent-q-markdown--with-markdown-mode (answer start end)
  "Render START..END with markdown-mode; the answer's text began at ANSWER.
markdown-mode sees `sly-agent-q-markdown-context-chars' before START."
  (let* ((context (save-excursion
                    (let ((limit (max answer (- start sly-agent-q-markdown-context-chars))))
                      (goto-char start)
                      ;; Emphasis does not cross a blank line: the paragraph is context enough.
                      (if (re-search-backward "^[ \t]*\n" limit t)
                          (match-end 0)
                        (goto-char limit)
                        ;; Not back past LIMIT: the line there may be a long one
                        ;; (100,000 backticks) that markdown-mode takes minutes on.
                        (if (bolp) (point) (min start (line-beginning-position 2)))))))
         (text (buffer-substring-no-properties context end))
        (offset (- start context))
        props)
    (with-temp-buffer
      ;; Two blank lines first: markdown-mode reads the lines at a buffer's
      ;; start up to a blank line as a document's metadata ("Short answer:
      ;; yes" as a key and its value), and a "---" there as YAML's.
      (insert "\n\n")
      (let ((base (point)))
        (insert text)
        (let ((markdown-hide-markup t)
              (markdown-hide-urls nil)
              (markdown-fontify-code-blocks-natively nil))
          (delay-mode-hooks (markdown-mode))
          (ignore-errors (font-lock-ensure)))
        (dolist (prop '(face invisible display))
          (let ((pos (+ base offset)))
            (while (< pos (point-max))
              (let ((next (next-single-property-change pos prop nil (point-max)))
                    (value (get-text-property pos prop)))
                (when value (push (list prop (- pos base) (- next base) value) props))
                (setq pos next)))))))
    (pcase-dolist (`(,prop ,from ,to ,value) (nreverse props))
      (let ((from (+ context from)) (to (+ context to)))
        (pcase prop
          ('face (add-face-text-property from to value))
          ;; markdown-mode hides its markup under its own symbol; the chat's is ours.
          ('invisible (when (memq value '(markdown-markup t))
                        (put-text-property from to 'invisible sly-agent-q-markdown-invisible)))
          ;; A bullet drawn as a bullet; nothing else markdown-mode displays is taken.
          ('display (when (stringp value) (put-text-property from to 'display value))))))
    ;; markdown-mode gives a table faces only; its borders are drawn as the own renderer draws them.
    (save-excursion
      (goto-char start)
      (let ((fenced (sly-agent-q-markdown--in-fence-p answer start)))
        (while (< (point) end)
          (cond ((or fenced (looking-at sly-agent-q-markdown-fence-regexp))
                 ;; Code is the code fontifier's: markdown-mode, seeing a
                 ;; block not closed yet, would read Markdown in it.
                 (when (looking-at sly-agent-q-markdown-fence-regexp) (setq fenced (not fenced)))
                 (remove-text-properties (point) (min end (1+ (line-end-position)))
                                         '(invisible nil display nil)))
                ((looking-at "[ \t]*|.*|[ \t]*$")
                 (sly-agent-q-markdown--render-table-row (point) (line-end-position)))
                (t (let ((eol (line-end-position)))
                     (when (looking-at "\\(#\\{1,6\\}\\)[ \t]+")
                       (sly-agent-q-markdown--heading answer (point) (match-end 0) eol
                                                      (- (match-end 1) (match-beginning 1))))
                     (sly-agent-q-markdown--render-links (point) eol)
                     ;; An underscore inside a name (snake_case) is no markup.
                     (while (re-search-forward "[[:alnum:]]\\(_\\)[[:alnum:]]" eol t)
                       (remove-text-properties (match-beginning 1) (match-end 1) '(invisible nil))
                       (goto-char (match-end 1))))))
          (forward-line 1))))))


;;;; The chat's own renderer

(defun sly-agent-q-markdown--in-fence-p (context start)
  "Non-nil if START is inside a code block opened after CONTEXT."
  (save-excursion
    (goto-char context)
    (let ((inside nil))
      (while (re-search-forward sly-agent-q-markdown-fence-regexp start t)
        (setq inside (not inside))
        (forward-line 1))
      inside)))

(defun sly-agent-q-markdown--hide (start end)
  "Hide the markup between START and END."
  (put-text-property start end 'invisible sly-agent-q-markdown-invisible))

(defun sly-agent-q-markdown--draw (start end string)
  "Show STRING in place of the text between START and END."
  (put-text-property start end 'display
                     (propertize string 'face 'sly-agent-q-markdown-markup-face)))

(defun sly-agent-q-markdown--render-own (context start end)
  "Render START..END with the chat's own renderer; CONTEXT as for the region."
  (save-excursion
    (goto-char start)
    (let ((fenced (sly-agent-q-markdown--in-fence-p context start)))
      (while (< (point) end)
        (let ((bol (point))
              (eol (min end (line-end-position))))
          (cond ((looking-at sly-agent-q-markdown-fence-regexp)
                 (setq fenced (not fenced)))
                (fenced)
                ((> (- eol bol) sly-agent-q-markdown-max-line-chars))
                (t (sly-agent-q-markdown--render-line context bol eol)))
          (goto-char eol)
          (forward-line 1)
          (when (= (point) eol) (goto-char end)))))))

(defun sly-agent-q-markdown--render-line (context bol eol)
  "Render the Markdown line between BOL and EOL (not in a code block).
CONTEXT is where the text began."
  (goto-char bol)
  (let ((inline-start bol))
    (cond
     ;; # Heading
     ((looking-at "\\(#\\{1,6\\}[ \t]+\\)\\(.*?\\)\\([ \t]+#+\\)?[ \t]*$")
      (sly-agent-q-markdown--hide (match-beginning 1) (match-end 1))
      (when (match-beginning 3) (sly-agent-q-markdown--hide (match-beginning 3) (match-end 3)))
      (let ((text (match-beginning 2)))
        (sly-agent-q-markdown--heading context bol text (match-end 2)
                                       (save-excursion (skip-chars-forward "#") (- (point) bol)))
        (setq inline-start text)))
     ;; | a | b |   (a table's row; |---|---| its rule)
     ((looking-at "[ \t]*|.*|[ \t]*$")
      (sly-agent-q-markdown--render-table-row bol eol))
     ;; ---  (a rule)
     ((looking-at "[ \t]*\\([-*_]\\)\\([ \t]*\\1\\)\\{2,\\}[ \t]*$")
      (sly-agent-q-markdown--draw bol eol (make-string 40 ?─))
      (setq inline-start eol))
     ;; > quote
     ((looking-at "\\(>[ \t]?\\)")
      (sly-agent-q-markdown--draw (match-beginning 1) (match-end 1) "▌ ")
      (add-face-text-property (match-end 1) eol 'italic)
      (setq inline-start (match-end 1)))
     ;; - item, * item, + item
     ((looking-at "\\([ \t]*\\)\\([-*+]\\)[ \t]+")
      (sly-agent-q-markdown--draw (match-beginning 2) (match-end 2) "•")
      (setq inline-start (match-end 0)))
     ;; 1. item
     ((looking-at "[ \t]*\\([0-9]+[.)]\\)[ \t]+")
      (add-face-text-property (match-beginning 1) (match-end 1) 'bold)
      (setq inline-start (match-end 0))))
    (sly-agent-q-markdown--render-inline inline-start eol)))

(defconst sly-agent-q-markdown--address-regexp
  (let* ((plain "[^()\n[:space:]\\]\\|\\\\.")
         (inner (concat "(\\(?:" plain "\\)*)"))
         (nested (concat "(\\(?:" plain "\\|" inner "\\)*)")))
    (concat "<[^>\n]*>\\|\\(?:" plain "\\|" nested "\\)+"))
  "A link's address: in <>, or with parentheses in it balanced.
As CommonMark reads it, an address may hold balanced parentheses
\(Lisp_(language)) and escaped ones; the link ends at the parenthesis
that closes it.  Two levels of nesting are read, which addresses do not
go past.")

(defun sly-agent-q-markdown--render-links (start end)
  "Render the links [text](address) between START and END.
The text is shown as a link and the address after it: the text alone
could pass for another address."
  (goto-char start)
  (while (re-search-forward
          (concat "\\(\\[\\)\\([^]\n]+\\)\\(](\\)\\(" sly-agent-q-markdown--address-regexp "\\)"
                  ;; An optional title: shown too, after the address.
                  "\\(?:[ \t]+\\(?:\"[^\"\n]*\"\\|'[^'\n]*'\\)\\)?[ \t]*\\()\\)")
          end t)
    (unless (sly-agent-q-markdown--code-span-p (match-beginning 0))
      (remove-text-properties (match-beginning 0) (match-end 0) '(invisible nil display nil))
      (sly-agent-q-markdown--hide (match-beginning 1) (match-end 1))
      (add-face-text-property (match-beginning 2) (match-end 2) 'sly-agent-q-markdown-link-face)
      (sly-agent-q-markdown--draw (match-beginning 3) (match-end 3) " <")
      (sly-agent-q-markdown--draw (match-beginning 5) (match-end 5) ">"))))

(defun sly-agent-q-markdown--heading (context bol start end level)
  "Draw the heading of LEVEL whose text is between START and END.
Its line starts at BOL; the text began at CONTEXT.  It gets the
heading face of its level, put over any other (markdown-mode's is the
face of a label such as \"Agent:\"), and a blank line is drawn above
it unless it starts the text or follows a blank line: the text is not
changed, its first # is drawn as a line break."
  (add-face-text-property start end (sly-agent-q-faces-heading level))
  (when (and (> bol context)
             (save-excursion
               (goto-char bol)
               (forward-line -1)
               (not (looking-at-p "[ \t]*$"))))
    (remove-text-properties bol (1+ bol) '(invisible nil))
    (put-text-property bol (1+ bol) 'display "\n")))

(defun sly-agent-q-markdown--render-table-row (bol eol)
  "Mark the line between BOL and EOL as a table's row.
It is drawn once the rest of the text is rendered, padded to its
table's columns (`sly-agent-q-markdown--align-tables')."
  (put-text-property bol eol 'sly-agent-q-markdown-table t))

(defconst sly-agent-q-markdown--table-max-rows 200
  "Most rows of a table aligned together.
Each row that streams in aligns the rows above it again: a table of a
hostile length would cost the square of its length.  Rows further up
keep the widths they were last drawn with.")

(defun sly-agent-q-markdown--table-row-p (pos)
  "Non-nil if the line at POS was marked as a table's row."
  (get-text-property pos 'sly-agent-q-markdown-table))

(defun sly-agent-q-markdown--align-tables (context start end)
  "Draw the tables whose rows are between START and END, aligned.
Each table is drawn again from its first row (no further up than
CONTEXT, nor than `sly-agent-q-markdown--table-max-rows' rows): a
new row may widen a column."
  (save-excursion
    (goto-char start)
    (while (< (point) end)
      (if (not (sly-agent-q-markdown--table-row-p (point)))
          (forward-line 1)
        (let ((first (point)) (rows 0))
          ;; Up to the table's first row.
          (while (and (< rows sly-agent-q-markdown--table-max-rows)
                      (> (point) context)
                      (save-excursion (and (zerop (forward-line -1))
                                           (>= (point) context)
                                           (sly-agent-q-markdown--table-row-p (point)))))
            (forward-line -1)
            (setq first (point) rows (1+ rows)))
          (goto-char first)
          ;; Down to its last row rendered.
          (let ((lines nil))
            (while (and (not (eobp)) (sly-agent-q-markdown--table-row-p (point)))
              (push (cons (point) (line-end-position)) lines)
              (forward-line 1))
            (sly-agent-q-markdown--draw-table (nreverse lines))
            (when (< (point) end) (forward-line 0))))))))

(defun sly-agent-q-markdown--shown-width (start end)
  "Return the width of the text between START and END, as drawn.
Hidden markup counts nothing, a `display' string its own width."
  (let ((pos start) (width 0))
    (while (< pos end)
      (let* ((display (get-text-property pos 'display))
             (next (min (next-single-property-change pos 'invisible nil end)
                        (next-single-property-change pos 'display nil end))))
        (cond ((stringp display) (setq width (+ width (string-width display))))
              ((get-text-property pos 'invisible))
              (t (setq width (+ width (string-width (buffer-substring-no-properties pos next))))))
        (setq pos next)))
    width))

(defun sly-agent-q-markdown--table-cells (bol eol)
  "The cells of the table row between BOL and EOL: a list of (START . END).
Each is a cell's text without the spaces around it; the bars are the
row's | not escaped."
  (let ((bars nil))
    (save-excursion
      (goto-char bol)
      (while (search-forward "|" eol t)
        (unless (eq (char-before (1- (point))) ?\\)
          (push (1- (point)) bars)))
      (setq bars (nreverse bars))
      (cl-loop for (left right) on bars
               while right
               collect (let ((from (1+ left)) (to right))
                         (goto-char from)
                         (skip-chars-forward " \t" to)
                         (setq from (point))
                         (goto-char to)
                         (skip-chars-backward " \t" from)
                         (cons from (point)))))))

(defun sly-agent-q-markdown--draw-table (lines)
  "Draw the table of LINES, each (BOL . EOL), its columns padded alike.
A column is as wide as its widest cell as shown (`string-width' of
what is not hidden); the rule row is drawn as a rule of the same
widths.  The text is not changed: its bars and the spaces around
cells are drawn as something else."
  (let* ((rule-re "[ \t]*|\\([ \t]*:?-+:?[ \t]*|\\)+[ \t]*$")
         (rows (mapcar (lambda (line)
                         (save-excursion
                           (goto-char (car line))
                           (list (car line) (cdr line) (looking-at-p rule-re)
                                 (sly-agent-q-markdown--table-cells (car line) (cdr line)))))
                       lines))
         (widths nil))
    (pcase-dolist (`(,_ ,_ ,rule ,cells) rows)
      (unless rule
        (let ((i 0))
          (dolist (cell cells)
            (let ((w (sly-agent-q-markdown--shown-width (car cell) (cdr cell))))
              (if (nth i widths)
                  (setf (nth i widths) (max w (nth i widths)))
                (setq widths (append widths (list w)))))
            (setq i (1+ i))))))
    (pcase-dolist (`(,bol ,eol ,rule ,cells) rows)
      (cond
       ((or rule (null cells))
        (sly-agent-q-markdown--draw
         bol eol (concat "├" (mapconcat (lambda (w) (make-string (+ w 2) ?─)) widths "┼") "┤")))
       (t
        (let ((from bol) (i 0))
          (dolist (cell cells)
            (let ((pad (and (> i 0)
                            (make-string (- (nth (1- i) widths)
                                            (sly-agent-q-markdown--shown-width
                                             (car (nth (1- i) cells)) (cdr (nth (1- i) cells))))
                                         ?\s))))
              (remove-text-properties from (car cell) '(invisible nil))
              (sly-agent-q-markdown--draw from (car cell) (concat pad (if pad " │ " "│ ")))
              (setq from (cdr cell) i (1+ i))))
          (let* ((last (car (last cells)))
                 (pad (make-string (- (nth (1- i) widths)
                                      (sly-agent-q-markdown--shown-width (car last) (cdr last)))
                                   ?\s))
                 ;; A row of fewer cells than its table: empty ones drawn after.
                 (missing (mapconcat (lambda (w) (concat (make-string (1+ w) ?\s) " │"))
                                     (nthcdr i widths) "")))
            (remove-text-properties from eol '(invisible nil))
            (sly-agent-q-markdown--draw from eol (concat pad " │" missing)))))))))

(defun sly-agent-q-markdown--code-span-p (pos)
  "Non-nil if POS is in inline code already rendered."
  (eq (get-text-property pos 'sly-agent-q-markdown) 'code))

(defun sly-agent-q-markdown--render-inline (start end)
  "Render the inline Markdown (code, links, emphasis) between START and END."
  ;; Code first: what is inside a code span is not markup.
  (goto-char start)
  (while (re-search-forward "\\(`+\\)\\([^`\n]\\(?:.*?[^`\n]\\)?\\)\\(\\1\\)" end t)
    (sly-agent-q-markdown--hide (match-beginning 1) (match-end 1))
    (sly-agent-q-markdown--hide (match-beginning 3) (match-end 3))
    (add-face-text-property (match-beginning 2) (match-end 2) 'sly-agent-q-markdown-code-face)
    (put-text-property (match-beginning 1) (match-end 3) 'sly-agent-q-markdown 'code))
  (sly-agent-q-markdown--render-links start end)
  (dolist (emphasis '(("\\*\\*" . bold) ("__" . bold) ("\\*" . italic) ("_" . italic)))
    (goto-char start)
    (let* ((mark (car emphasis))
           ;; Not a word's inner underscore (snake_case), not a list's "* ".
           (re (concat "\\(?:^\\|[^[:alnum:]*_\\\\]\\)\\(" mark "\\)"
                       "\\([^[:space:]*_]\\(?:[^\n]*?[^[:space:]\\\\]\\)?\\)"
                       "\\(" mark "\\)\\(?:[^[:alnum:]*_]\\|$\\)")))
      (while (re-search-forward re end t)
        (let ((open (match-beginning 1)) (close (match-end 3)))
          (unless (or (sly-agent-q-markdown--code-span-p open)
                      (get-text-property open 'invisible))
            (sly-agent-q-markdown--hide open (match-end 1))
            (sly-agent-q-markdown--hide (match-beginning 3) close)
            (add-face-text-property (match-beginning 2) (match-end 2) (cdr emphasis)))
          (goto-char (match-end 3)))))))

(provide 'sly-agent-q-markdown)
;;; sly-agent-q-markdown.el ends here
