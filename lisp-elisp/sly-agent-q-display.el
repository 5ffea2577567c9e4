;;; sly-agent-q-display.el --- Text from outside, drawn as data  -*- lexical-binding: t; -*-

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

;; Every string that comes from outside the product (a model, a tool
;; result, the Lisp image, a file name, an MCP client or server, a saved
;; conversation, a provider's error) is drawn through this file, so
;; that what the user reads is what is there:
;;
;; - `sly-agent-q-display-line': one line.  Control characters (C0,
;;   C1, DEL, ESC, newline, tab), bidi controls and other invisible
;;   format characters are shown escaped (\n, \e, \u202E...) in the
;;   face `escape-glyph'; long text is cut with a marker saying how
;;   much was cut; the string's own text properties (a `display' or
;;   `invisible' property could hide or fake anything) are dropped.
;; - `sly-agent-q-display-text': the same, for text of many lines
;;   (an answer, a tool's result): newlines and tabs stay.
;; - `sly-agent-q-display-block': a framed block for a value of many
;;   lines (a form, a diff): every line starts with the frame the
;;   caller gives, so the content can neither end the block nor start
;;   a line of its own.
;; - `sly-agent-q-display-framed': text of many lines from outside (a
;;   tool's result, an MCP server's, a condition report from the image)
;;   where the product draws it outside an approval: each line starts
;;   with the frame `sly-agent-q-display-outside-frame', so no line of
;;   it reads as one the product draws at the transcript's indentation.
;;
;; A frame is kept on the lines a narrow window wraps: every framed
;; line carries it as its `wrap-prefix' (`sly-agent-q-display-keep-frame'),
;; so a continuation starts with the frame, not at column 0.
;;
;; The frame characters (`sly-agent-q-display-frame-characters') are
;; reserved for the product: in text from outside they are escaped too,
;; with every character that looks like them (a lighter or dashed
;; vertical line, another corner), so no line from outside can imitate
;; a line the product draws, such as the lines of an approval the user
;; decides on.

;;; Code:

(require 'cl-lib)
(require 'rx)
(require 'subr-x)

(defcustom sly-agent-q-display-line-chars 300
  "Most characters of text from outside shown on one line.
Longer text is cut, with a marker saying how many characters were cut."
  :type 'integer
  :group 'sly-agent-q)

(defcustom sly-agent-q-display-block-lines 40
  "Most lines of a framed block (a form, a diff) shown in an approval.
The lines left out are counted on a last line of the block."
  :type 'integer
  :group 'sly-agent-q)

(defcustom sly-agent-q-display-name-chars 64
  "Most characters of a name given by an outside party (an MCP client) shown."
  :type 'integer
  :group 'sly-agent-q)

(defconst sly-agent-q-display-frame-characters "┏┃┗╎"
  "Characters that start the lines the product draws for decisions.
They never appear raw in text from outside: it cannot imitate them.")

(defconst sly-agent-q-display-outside-frame "╎ "
  "The frame before each line of text from outside drawn in many lines.
It is the frame of an argument's value in an approval: its character
is reserved (`sly-agent-q-display-frame-characters').")

(defface sly-agent-q-display-frame-face '((t :inherit shadow))
  "Face of the frame before each line of text from outside."
  :group 'sly-agent-q)

;; One list of the characters text from outside never shows raw; the
;; server escapes the same ones (server/text.ts, less the frame
;; characters and raw bytes: test/server/unsafe-characters.test.ts).
(defconst sly-agent-q-display--format-characters
  '(#xAD (#x600 . #x605) #x61C #x6DD #x70F (#x890 . #x891) #x8E2 #x180E
         (#x200B . #x200F) (#x2028 . #x202E) (#x2060 . #x206F)
         #xFEFF (#xFFF9 . #xFFFB) #x110BD #x110CD (#x13430 . #x1343F)
         (#x1BCA0 . #x1BCA3) (#x1D173 . #x1D17A) #xE0001 (#xE0020 . #xE007F))
  "Format characters, which text from outside never shows raw.
Bidi embeddings, overrides, isolates and marks, zero-width
characters, the soft hyphen, the BOM, the tags...")

(defconst sly-agent-q-display--frame-look-alikes
  `(,@(string-to-list sly-agent-q-display-frame-characters)
    ;; Their look-alikes: every vertical line and corner of the box
    ;; drawing characters (a lighter ┃, a dashed ╎, another ┏...),
    ;; vertical bars of other blocks.  The horizontal lines stay.
    #x2502 (#x2506 . #x2507) (#x250A . #x254B) (#x254E . #x254F)
    (#x2551 . #x2573) #x2575 #x2577 #x2579 #x257B #x257D #x257F
    (#x258C . #x2590) #x2595 (#x2758 . #x275A) (#x23B8 . #x23B9) #xFF5C)
  "The frame characters and their look-alikes, which only the product draws.")

(defconst sly-agent-q-display--unsafe-characters
  `((#x00 . #x1F) (#x7F . #x9F)
    ,@sly-agent-q-display--format-characters
    ;; The other invisible characters (Unicode's default ignorables:
    ;; variation selectors, fillers...): a name that differs from a
    ;; trusted one only by them would read the same.
    #x34F (#x115F . #x1160) (#x17B4 . #x17B5) (#x180B . #x180F) #x3164
    (#xFE00 . #xFE0F) #xFFA0 (#xFFF0 . #xFFF8) (#xE0000 . #xE0FFF)
    ;; Raw bytes of undecodable text.
    (#x3FFF80 . #x3FFFFF)
    ,@sly-agent-q-display--frame-look-alikes)
  "The characters drawn escaped in text from outside: chars and ranges.")

(defconst sly-agent-q-display--kept-in-text '(?\t ?\n #xFE0E #xFE0F)
  "Characters of the list above that text of many lines keeps.
Its tabs and newlines, and an emoji's presentation selectors.")

(defconst sly-agent-q-display--unsafe-line
  (rx-to-string `(any ,@sly-agent-q-display--unsafe-characters) t)
  "A character drawn escaped in one line of text from outside.")

(defconst sly-agent-q-display--unsafe-text
  (rx-to-string `(intersection (any ,@sly-agent-q-display--unsafe-characters)
                               (not (any ,@sly-agent-q-display--kept-in-text)))
                t)
  "A character drawn escaped in text of many lines from outside.
Newline and tab stay.")

(defun sly-agent-q-display--escape (char)
  "The visible escape of CHAR."
  (propertize
   (cond ((eq char ?\n) "\\n")
         ((eq char ?\t) "\\t")
         ((eq char ?\r) "\\r")
         ((eq char ?\e) "\\e")
         ((< char #x80) (format "\\x%02X" char))
         ((>= char #x3FFF80) (format "\\x%02X" (- char #x3FFF00)))
         ((< char #x10000) (format "\\u%04X" char))
         (t (format "\\U%08X" char)))
   'face 'escape-glyph))

(defun sly-agent-q-display--string (text)
  "TEXT as a string without text properties."
  (cond ((null text) "")
        ((stringp text) (substring-no-properties text))
        (t (format "%s" text))))

(defun sly-agent-q-display--cut-marker (cut)
  "The marker saying CUT characters were cut."
  (propertize (format "…[%d more character%s cut]" cut (if (= cut 1) "" "s"))
              'face 'escape-glyph))

(defun sly-agent-q-display--sanitize (text max unsafe)
  "TEXT from outside, cut at MAX characters (nil: not cut), UNSAFE escaped."
  (let* ((s (sly-agent-q-display--string text))
         (len (length s))
         (cut (and max (> len max) (- len max)))
         (shown (if cut (substring s 0 max) s))
         (out (replace-regexp-in-string
               unsafe (lambda (m) (sly-agent-q-display--escape (aref m 0))) shown t t)))
    (if cut (concat out (sly-agent-q-display--cut-marker cut)) out)))

(defun sly-agent-q-display-line (text &optional max)
  "TEXT, from outside, as one line safe to draw.
Control, bidi and format characters (and the reserved frame
characters, `sly-agent-q-display-frame-characters') are shown
escaped; the line is cut at MAX characters (default
`sly-agent-q-display-line-chars'; t: never) with a marker saying how
many were cut; TEXT's text properties are dropped.  TEXT may be any
object: it is printed with %s first."
  (sly-agent-q-display--sanitize text (if (eq max t) nil (or max sly-agent-q-display-line-chars))
                                 sly-agent-q-display--unsafe-line))

(defun sly-agent-q-display-text (text &optional max)
  "TEXT, from outside, as text of many lines safe to draw.
As `sly-agent-q-display-line', but newlines and tabs stay, and TEXT
is cut only when MAX is given."
  (sly-agent-q-display--sanitize text max sly-agent-q-display--unsafe-text))

(defun sly-agent-q-display-name (name &optional max)
  "NAME, given by an outside party, as a bounded quoted name safe to draw.
Quotes and backslashes in NAME are escaped, so the name cannot end
its own quotes; at most MAX characters (default
`sly-agent-q-display-name-chars') are shown."
  (concat "\""
          (sly-agent-q-display-line
           (replace-regexp-in-string "[\"\\]" "\\\\\\&" (sly-agent-q-display--string name) t)
           (or max sly-agent-q-display-name-chars))
          "\""))

(defun sly-agent-q-display--add-faces (shown source from faces)
  "Give SHOWN, drawn from SOURCE's line at offset FROM, the FACES of its text.
FACES are runs (START END FACE) of offsets in SOURCE, as
`sly-agent-q-faces-lisp' gives them.  SHOWN is that line drawn as
data: from the first character where it differs from the source (an
escaped or cut character) it has no faces of the source's, and its
text is never changed.  SHOWN is changed and returned."
  (let* ((line-end (or (string-search "\n" source from) (length source)))
         (same (compare-strings shown nil nil source from line-end))
         (same (if (eq same t) (length shown) (1- (abs same)))))
    (when (> same 0)
      (pcase-dolist (`(,start ,end ,face) faces)
        (let ((start (max 0 (- start from))) (end (min same (- end from))))
          (when (< start end)
            (add-face-text-property start end face nil shown)))))
    shown))

(cl-defun sly-agent-q-display-block (text frame &key max-lines max-line-chars faces)
  "TEXT, from outside, as a framed block: lines each starting with FRAME.
FRAME is the product's own prefix (it should hold a character of
`sly-agent-q-display-frame-characters'); each line of TEXT is drawn
with `sly-agent-q-display-line' after it, cut at MAX-LINE-CHARS
characters, so no line of TEXT can close the block or start a line of
its own.  At most MAX-LINES lines (default
`sly-agent-q-display-block-lines') are shown; a last framed line
counts those left out.  FACES, runs (START END FACE) of offsets in
TEXT (its Lisp faces), are given to the text shown as it was written
\=(`sly-agent-q-display--add-faces').  The result ends with a newline."
  (let* ((s (string-trim-right (sly-agent-q-display--string text) "\n"))
         (max-lines (or max-lines sly-agent-q-display-block-lines))
         (len (length s))
         (start 0) (n 0) (out nil))
    ;; Only the lines shown are looked at: a value of megabytes costs
    ;; no more than a short one.
    (while (and (<= start len) (< n max-lines))
      (let ((end (or (string-search "\n" s start) len)))
        (push (sly-agent-q-display-keep-frame
               (concat frame
                       (sly-agent-q-display--add-faces
                        (sly-agent-q-display-line (substring s start end) max-line-chars) s start faces)
                       "\n")
               frame)
              out)
        (setq n (1+ n) start (1+ end))))
    (when (<= start len)
      (let ((left (1+ (cl-count ?\n s :start start))))
        (push (sly-agent-q-display-keep-frame
               (concat frame (propertize (format "…[%d more line%s cut, %d characters in all]"
                                                left (if (= left 1) "" "s") len)
                                        'face 'escape-glyph)
                      "\n")
               frame)
              out)))
    (apply #'concat (nreverse out))))

(defun sly-agent-q-display-keep-frame (line frame)
  "Draw LINE, which begins with FRAME, with FRAME on each line it wraps to.
FRAME becomes LINE's `wrap-prefix': in a window too narrow for LINE,
every continuation starts with the frame too, never at column 0,
where text from outside would read as a line of the product's.
LINE is changed and returned."
  (put-text-property 0 (length line) 'wrap-prefix frame line)
  line)

(defun sly-agent-q-display-keep-place (start end prefix &optional object)
  "Give the text from START to END that has no `wrap-prefix' PREFIX as its own.
A line a narrow window wraps then goes on at PREFIX (the product's
indentation), not at column 0; text with a frame of its own keeps
it.  OBJECT is a string, or nil for the current buffer."
  (let ((pos start))
    (while (< pos end)
      (let ((next (next-single-property-change pos 'wrap-prefix object end)))
        (unless (get-text-property pos 'wrap-prefix object)
          (put-text-property pos next 'wrap-prefix prefix object))
        (setq pos next)))))

(defun sly-agent-q-display-framed (text indent &optional max faces)
  "TEXT, from outside, of many lines, framed: each line after INDENT and a frame.
The product draws INDENT (spaces) then `sly-agent-q-display-outside-frame'
in `sly-agent-q-display-frame-face' before every line of TEXT, drawn as
data by `sly-agent-q-display-text' (cut at MAX characters when MAX is
given): no line of TEXT can start at the product's own indentation
or imitate a line the product draws (a decision, a status), and each
line keeps its frame where a narrow window wraps it
\=(`sly-agent-q-display-keep-frame').  The text of TEXT is marked with
the property `sly-agent-q-outside'.  FACES, runs (START END FACE) of
offsets in TEXT (its Lisp faces), are given to the text shown as it
was written (`sly-agent-q-display--add-faces').  The result has no
final newline; TEXT's trailing newlines are dropped."
  (let* ((source (sly-agent-q-display--string text))
         (shown (string-trim-right (sly-agent-q-display-text source max) "\n"))
         (frame (concat indent (propertize sly-agent-q-display-outside-frame
                                           'face 'sly-agent-q-display-frame-face)))
         (len (length shown))
         (start 0) (from 0) (out nil))
    (while (<= start len)
      (let* ((end (or (string-search "\n" shown start) len))
             (line (substring shown start end)))
        ;; Drawing keeps the newlines: the shown line is the source's line of the same rank.
        (when (and faces from) (sly-agent-q-display--add-faces line source from faces))
        (put-text-property 0 (length line) 'sly-agent-q-outside t line)
        (push (sly-agent-q-display-keep-frame (concat frame line) frame) out)
        (setq start (1+ end)
              from (and from (let ((nl (string-search "\n" source from))) (and nl (1+ nl)))))))
    (mapconcat #'identity (nreverse out) "\n")))

(defun sly-agent-q-display-editable-buffer ()
  "Show text from outside that the user edits as it is, in the current buffer.
Text being edited cannot be escaped without changing it; instead
the buffer is shown left to right without bidi reordering, and
format characters (bidi controls, zero-width characters...) are
drawn as their hex codes, as Emacs draws other control characters
\(^[ for ESC)."
  (setq-local bidi-display-reordering nil)
  (setq-local bidi-paragraph-direction 'left-to-right)
  (let ((table (copy-sequence glyphless-char-display)))
    (dolist (range sly-agent-q-display--format-characters)
      (set-char-table-range table range 'hex-code))
    (setq-local glyphless-char-display table)))

(defun sly-agent-q-display-json (value)
  "VALUE, parsed JSON, as compact JSON text of characters.
Emacs 30's `json-serialize' returns UTF-8 bytes, which a buffer would
show as octal escapes; text to draw or edit needs the characters."
  (condition-case nil
      (cond ((eq value t) "true")
            ((eq value :json-false) "false")
            ((null value) "null")
            (t (let ((json (json-serialize value :false-object :json-false :null-object nil)))
                 (if (multibyte-string-p json) json (decode-coding-string json 'utf-8 t)))))
    (error (format "%S" value))))

;;;; Drawing in steps

(defun sly-agent-q-display-next-step (function &rest args)
  "Call FUNCTION with ARGS in the current buffer on the next step, if it lives.
Drawing that would hold Emacs too long is done a step at a time: keys
are read between steps.  The step is 1 ms away, not 0: timers already
due run one after another before a key is read."
  (let ((buffer (current-buffer)))
    (run-with-timer 0.001 nil
                    (lambda ()
                      (when (buffer-live-p buffer)
                        (with-current-buffer buffer
                          (apply function args)))))))

(provide 'sly-agent-q-display)
;;; sly-agent-q-display.el ends here
