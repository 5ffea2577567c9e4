;;;; reader.lisp --- reading code the model sends, safely.
;;;
;;; Tools that only look at code (macroexpand_form) read it with
;;; *READ-EVAL* bound to NIL, so "#." is refused instead of run.  The
;;; tools that run code first scan the whole text with *READ-SUPPRESS*
;;; (which interns nothing and evaluates no "#."), so that unbalanced
;;; parentheses are reported before the first form has run.  #S, which
;;; calls a structure's constructor even with *READ-EVAL* NIL, is refused
;;; wherever such text is read unsuppressed (MODEL-TEXT-READTABLE).

(in-package #:sly-agent-q)

(defun blank-char-p (char)
  (member char '(#\Space #\Tab #\Newline #\Return #\Linefeed #\Page)))

(defun skip-blank (text start)
  "The index of the first character at or after START in TEXT that is
neither whitespace nor inside a comment.  Second value: true if TEXT
ends inside a #| comment."
  (let ((i start) (n (length text)))
    (loop
      (cond ((>= i n) (return (values n nil)))
            ((blank-char-p (char text i)) (incf i))
            ((char= (char text i) #\;)
             (setf i (or (position #\Newline text :start i) n)))
            ((and (char= (char text i) #\#) (< (1+ i) n) (char= (char text (1+ i)) #\|))
             ;; #| ... |# nests.
             (let ((depth 1))
               (incf i 2)
               (loop while (and (< i n) (plusp depth))
                     do (cond ((and (< (1+ i) n) (char= (char text i) #\|)
                                    (char= (char text (1+ i)) #\#))
                               (decf depth) (incf i 2))
                              ((and (< (1+ i) n) (char= (char text i) #\#)
                                    (char= (char text (1+ i)) #\|))
                               (incf depth) (incf i 2))
                              (t (incf i))))
               (when (plusp depth) (return (values n t)))))
            (t (return (values i nil)))))))

(defun line-of (text position)
  "The 1-based line of the 0-based POSITION in TEXT."
  (1+ (count #\Newline text :end (min position (length text)))))

(defun form-excerpt (text start end &optional (max 80))
  "The first line of the form between START and END in TEXT, shortened."
  (first-line (subseq text start (min end (length text))) max))

(defun skip-feature-conditionals (text start)
  "Where the form at START in TEXT begins once the #+ and #- before it
are decided: past a conditional that keeps its form, past the form of
one that does not.  Under *READ-SUPPRESS* ECL's reader skips every
conditional form, so the scan decides them itself, as the reader would
without it (the feature expression is read in the keyword package)."
  (loop
    (unless (and (< (1+ start) (length text)) (char= (char text start) #\#)
                 (member (char text (1+ start)) '(#\+ #\-)))
      (return start))
    (multiple-value-bind (feature after)
        (let ((*package* (find-package "KEYWORD")) (*read-suppress* nil))
          (read-from-string text t nil :start (+ start 2)))
      (setf start (skip-blank text (if (eq (feature-true-p feature) (char= (char text (1+ start)) #\+))
                                        after
                                        (nth-value 1 (read-from-string text t nil :start after))))))))

(defun feature-true-p (expression)
  "True if the feature EXPRESSION holds in this Lisp."
  (if (atom expression)
      (and (member expression *features*) t)
      (let ((operator (string (first expression))) (rest (rest expression)))
        (cond ((string= operator "OR") (some #'feature-true-p rest))
              ((string= operator "AND") (every #'feature-true-p rest))
              ((string= operator "NOT") (not (feature-true-p (first rest))))
              (t (error "~S is not a feature expression." expression))))))

(defun refuse-constructing-reads (readtable)
  "READTABLE, changed so that #S refuses to read unless suppressed: #S
calls a structure's constructor, whose slot initforms are code, even
with *READ-EVAL* NIL, and SBCL reads a #+ feature expression without
*READ-SUPPRESS* even inside a suppressed read.  Suppressed, #S reads
its list as the standard one does, constructing nothing."
  (set-dispatch-macro-character
   #\# #\S (lambda (stream char arg)
             (declare (ignore char arg))
             (if *read-suppress*
                 (progn (read stream t nil t) nil)
                 (fail "#S(...) calls a structure's constructor as it is read (its slots' ~
                        initforms run): text from the model is not read with it. Write ~
                        (make-NAME ...) instead.")))
   readtable)
  readtable)

(defun model-text-readtable ()
  "A copy of the current readtable for reading text from the model in a
tool that must not run code: #. never runs (with *READ-EVAL* NIL) and
#S refuses (REFUSE-CONSTRUCTING-READS)."
  (refuse-constructing-reads (copy-readtable)))

(defun scan-forms (text)
  "Find the top-level forms of TEXT without interning or evaluating.
Returns a list of (START . END) spans, and, if the scan stopped early,
the reader condition and the start of the form it stopped in.  #S
constructs nothing (MODEL-TEXT-READTABLE)."
  (let ((*readtable* (model-text-readtable))
        (*read-suppress* t)
        (*read-eval* nil)
        (spans '())
        (position 0))
    (loop
      (multiple-value-bind (start in-comment) (skip-blank text position)
        (when in-comment
          (return (values (nreverse spans)
                          (make-condition 'end-of-file :stream nil)
                          start)))
        (when (>= start (length text))
          (return (values (nreverse spans) nil nil)))
        (handler-case
            (multiple-value-bind (object end)
                (read-from-string text nil text :start (skip-feature-conditionals text start))
              ;; The end of the text where a form was expected: what
              ;; was left the reader skipped, as #+(or) (...) at the
              ;; end.  The text is balanced; that was not a form.
              (when (eq object text)
                (return (values (nreverse spans) nil nil)))
              ;; READ may consume the whitespace after a form (ECL's
              ;; does): a span ends with its form.
              (loop while (and (> end (1+ start)) (blank-char-p (char text (1- end)))
                               (char/= #\\ (char text (- end 2)))) ; not #\<space>
                    do (decf end))
              (push (cons start end) spans)
              (setf position end))
          (error (c)
            (return (values (nreverse spans) c start))))))))

(defun scan-forms-plainly (text)
  "SCAN-FORMS of TEXT with the standard readtable: for bookkeeping that
must not run the user's reader macros (one that never returns would
hang it outside any time limit).  Spans only."
  (let ((*readtable* (copy-readtable nil)))
    (values (scan-forms text))))

(defun unbalanced-message (text start form-number)
  "The message for TEXT ending inside the form FORM-NUMBER starting at START."
  (format nil "The code ends inside form ~D (starting at line ~D: ~A): unbalanced ~
               parentheses, or an unterminated string, |symbol| or #| comment."
          form-number (line-of text start) (form-excerpt text start (length text) 60)))

(defun read-error-message (condition text start)
  "The message for CONDITION, signalled while reading the form at START."
  (format nil "~:[The code~;~:*~A~] does not read: ~A: ~A"
          (and start (format nil "The form at line ~D (~A)"
                             (line-of text start) (form-excerpt text start (length text) 60)))
          (condition-type-label condition)
          (condition-message condition)))

(defun read-form-for-inspection (text package &key (tool "This tool"))
  "Read exactly one form from TEXT in PACKAGE, with *READ-EVAL* NIL.
\"#.\" is refused: this reader is for tools that promise not to
evaluate.  Reading may intern the symbols of the form in PACKAGE, as
the REPL's reader would."
  (let ((start (skip-blank text 0)))
    (when (>= start (length text))
      (fail "The form is empty: give one Lisp form as text."))
    (multiple-value-bind (form end)
        (call-reading-code
         (lambda ()
           (handler-case
               (let ((*package* package)
                     (*readtable* (model-text-readtable))
                     (*read-eval* nil)
                     (*read-suppress* nil))
                 (read-from-string text t nil :start start))
             (tool-error (c) (error c))
             (end-of-file ()
               (fail "~A" (unbalanced-message text start 1)))
             (reader-error (c)
               (if (search "#." text)
                   (fail "~A refuses #. (read-time evaluation): it reads code without ~
                          evaluating it. Remove the #. (write the form it would produce), or ~
                          use eval_form if evaluating is what you want."
                         tool)
                   (fail "~A" (read-error-message c text start))))
             (error (c)
               (fail "~A" (read-error-message c text start))))))
      (let ((rest (skip-blank text end)))
        (when (< rest (length text))
          (fail "~A takes exactly one form, but there is more after the first: ~A"
                tool (form-excerpt text rest (length text) 60))))
      form)))

;;;; The #. forms of a text, found without evaluating them

(defun read-eval-forms (text &key partial unconditional)
  "The texts of the #. forms in TEXT (what follows each #., exactly as
written but for the blanks around it), in the order the reader meets
them, found by reading TEXT as the reader would but with
*READ-SUPPRESS*: nothing is interned or evaluated.  Both branches of
every #+ and #- are read, so that a #. behind a feature test counts
whether or not this Lisp would read it (ECL's reader skips every
conditional under *READ-SUPPRESS*); with UNCONDITIONAL, a #. in a
feature test or its form is left out (for the form an edit replaces: a
dormant #+nil #. there was never evaluated).  Where TEXT stops reading,
FAILs, unless PARTIAL: then the forms found so far (a #. missed would
run unshown; one missed in the form an edit replaces is shown)."
  (let ((found '())
        (conditional 0)
        (*readtable* (model-text-readtable)))
    (set-dispatch-macro-character
     #\# #\. (lambda (stream char arg)
               (declare (ignore char arg))
               ;; FILE-POSITION of a WITH-INPUT-FROM-STRING stream read from
               ;; its start is the index in TEXT on SBCL, ECL and CLISP.
               (let ((start (file-position stream)))
                 (read stream t nil t)
                 (unless (and unconditional (plusp conditional))
                   (push (trim-form-text (subseq text start (file-position stream))) found)))
               nil))
    (dolist (sign '(#\+ #\-))
      (set-dispatch-macro-character
       #\# sign (lambda (stream char arg)
                  (declare (ignore char arg))
                  (incf conditional)
                  (unwind-protect
                       (progn (read stream t nil t) ; the feature expression
                              (read stream t nil t)) ; the form, read whatever the feature says
                    (decf conditional))
                  (values))))
    (let ((*read-suppress* t) (*read-eval* nil))
      (handler-case
          (with-input-from-string (in text)
            (loop until (eq (read in nil in) in)))
        (error (c)
          (unless partial
            (fail "The new text is refused: its #. forms (read-time evaluation) cannot be told ~
                   apart, reading it stopped: ~A" (condition-message c))))))
    (nreverse found)))

(defun trim-form-text (text)
  "TEXT without the blanks before and after it, but for an escaped one
(\\<space> is part of a symbol)."
  (let ((start (or (position-if-not #'blank-char-p text) (length text)))
        (end (length text)))
    (loop while (and (> end (1+ start)) (blank-char-p (char text (1- end)))
                     (char/= #\\ (char text (- end 2))))
          do (decf end))
    (subseq text start end)))

(defun new-read-eval-forms (new old)
  "The #. forms of the text NEW that the text OLD does not evaluate, as
written in NEW: each of OLD's forms outside #+ and #- matches one of
NEW's once, when their texts are the same character for character.  A
form laid out anew counts as new: shown once more, never missed (a
comment's end or an escaped character makes text that looks alike read
differently)."
  (let ((left (read-eval-forms old :partial t :unconditional t)))
    (loop for form in (read-eval-forms new)
          if (member form left :test #'string=)
            do (setf left (remove form left :test #'string= :count 1))
          else collect form)))
