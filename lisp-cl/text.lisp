;;;; text.lisp --- printing for the model: bounded, never failing.
;;;
;;; Every result goes to a language model with a limited context, so
;;; everything we print is capped, and printing can never fail: user
;;; objects with broken PRINT-OBJECT methods, circular structure or
;;; megabyte strings are all reduced to something short.

(in-package #:sly-agent-q)

(defvar *result-limit* 8000
  "The most characters one tool result (content or error message) may have.
Longer results are cut, with a note saying how much was cut.")

(defvar *value-limit* 2000
  "The most characters one printed value may take.")

(defparameter *print-length-cap* 50
  "*PRINT-LENGTH* while printing for the model.")

(defparameter *print-level-cap* 6
  "*PRINT-LEVEL* while printing for the model.")

(defun cap (string limit &optional (what "text"))
  "STRING cut to at most LIMIT characters, with a note when cut."
  (let ((total (length string)))
    (if (<= total limit)
        string
        (let* ((note-length 80)
               (keep (max 0 (- limit note-length))))
          (format nil "~A~%[... ~A truncated: ~D of ~D characters shown]"
                  (subseq string 0 keep) what keep total)))))

(defmacro with-model-printing ((&optional (package '*package*)) &body body)
  "Run BODY with printer variables set for compact, safe output.
Symbols print relative to PACKAGE, so the model sees the names it
would type there."
  `(let ((*package* ,package)
         (*print-length* *print-length-cap*)
         (*print-level* *print-level-cap*)
         (*print-circle* t)
         (*print-readably* nil)
         (*print-escape* t)
         (*print-pretty* t)
         (*print-right-margin* 100)
         (*print-lines* nil)
         (*print-base* 10)
         (*print-radix* nil)
         (*print-array* t)
         (*print-gensym* t))
     ,@body))

(defun unprintable (object condition)
  "A placeholder for OBJECT whose printing signalled CONDITION."
  (let ((type (ignore-errors (prin1-to-string (type-of object))))
        ;; Its report may never end either (a printer signalling such a condition).
        (why (ignore-errors (bounded-print-to-string condition :limit 1000))))
    (format nil "#<unprintable ~A: ~A>"
            (or type "object")
            (if why (first-line why 100) "error while printing"))))

(defparameter *printing-limit* 1000000
  "The characters printing one value or condition report may write before
it is stopped: a PRINT-OBJECT method or a report that never ends would
otherwise fill the image's memory (ECL reached its heap limit).")

;;;; Bounded output

(defstruct (sink (:constructor make-sink (limit &optional stop)))
  "Where written text goes: the first LIMIT characters are kept, the rest
only counted; with STOP, a catch tag thrown to (with :STOPPED) once the
writer passes the limit."
  (limit 0)
  (buffer (make-string-output-stream))
  (kept 0)
  (dropped 0)
  (stop nil))

(defun sink-write (sink string)
  (let* ((room (max 0 (- (sink-limit sink) (sink-kept sink))))
         (n (length string))
         (keep (min n room)))
    (when (plusp keep)
      (write-string string (sink-buffer sink) :end keep)
      (incf (sink-kept sink) keep))
    (incf (sink-dropped sink) (- n keep))
    (when (and (sink-stop sink) (plusp (sink-dropped sink)))
      (throw (sink-stop sink) :stopped))))

(defun sink-text (sink)
  "The kept text, with a note if some was dropped."
  (let ((text (get-output-stream-string (sink-buffer sink))))
    (if (plusp (sink-dropped sink))
        (format nil "~A~%[... output truncated: ~D more characters not kept]"
                text (sink-dropped sink))
        text)))

(defun make-capture-stream (sink)
  "An output stream writing into SINK.  The backend's stream calls us
with chunks, so nothing beyond the limit is ever kept; without one, a
string stream whose text is cut afterwards."
  (or (and (backend-implemented-p "MAKE-OUTPUT-STREAM")
           (ignore-errors
            (bcall "MAKE-OUTPUT-STREAM" (lambda (string) (sink-write sink string)))))
      (sink-buffer sink)))

(defun finish-capture (stream sink)
  "Flush STREAM into SINK; return the kept text."
  (unless (eq stream (sink-buffer sink))
    (ignore-errors (finish-output stream)))
  (sink-text sink))

(defun bounded-print-to-string (object &key (limit *printing-limit*) (printer #'princ))
  "PRINC-TO-STRING of OBJECT (or with PRINTER, e.g. PRIN1), stopped once it
wrote LIMIT characters (then cut there, with a note).  Written through
the backend's output stream, which hands us its text in chunks; without
one, unbounded."
  (let* ((tag (list 'bounded-printing))
         (sink (make-sink limit tag))
         (stream (make-capture-stream sink))
         (text (catch tag
                 (funcall printer object stream)
                 (finish-capture stream sink))))
    (if (eq text :stopped)
        (format nil "~A~%[... printing stopped after ~D characters: it went on writing]"
                (get-output-stream-string (sink-buffer sink)) limit)
        text)))

(defun print-value (object &key (limit *value-limit*) (pretty t))
  "OBJECT printed as by PRIN1 under WITH-MODEL-PRINTING (the caller
binds the package), at most LIMIT characters.  Never signals."
  (handler-case
      (with-model-printing (*package*)
        (setf *print-pretty* pretty)
        (if (and (stringp object) (> (length object) limit))
            (format nil "~S [a string of ~D characters; first ~D shown]"
                    (subseq object 0 limit) (length object) limit)
            (cap (bounded-print-to-string object :printer #'prin1) limit "value")))
    (trappable-condition (c) (unprintable object c))))

(defun princ-value (object &key (limit *value-limit*))
  "OBJECT printed as by PRINC, at most LIMIT characters.  Never signals."
  (handler-case
      (with-model-printing (*package*)
        (cap (bounded-print-to-string object) limit "value"))
    (trappable-condition (c) (unprintable object c))))

(defun symbol-label (symbol &optional (package (find-package "KEYWORD")))
  "SYMBOL printed as it would be read from PACKAGE.  The default, the
KEYWORD package, gives fully qualified names such as MY-APP::FOO."
  (handler-case
      (let ((*package* package)
            (*print-escape* t)
            (*print-readably* nil)
            (*print-pretty* nil)
            (*print-case* :upcase))
        (prin1-to-string symbol))
    (trappable-condition () (ignore-errors (symbol-name symbol)))))

(defun json-string (string)
  "STRING as a JSON string literal."
  (with-output-to-string (out)
    (write-char #\" out)
    (loop for c across string
          do (case c
               (#\" (write-string "\\\"" out))
               (#\\ (write-string "\\\\" out))
               (#\Newline (write-string "\\n" out))
               (#\Return (write-string "\\r" out))
               (#\Tab (write-string "\\t" out))
               (t (if (or (< (char-code c) 32) (= (char-code c) 127))
                      (format out "\\u~4,'0X" (char-code c))
                      (write-char c out)))))
    (write-char #\" out)))

(defun json-strings (strings)
  "STRINGS as a JSON array of strings."
  (format nil "[~{~A~^,~}]" (mapcar #'json-string strings)))

(defun listing-name (name &optional (max 100))
  "NAME (a package's name or nickname, say) for one line of a listing:
as it is when it is plain (printable ASCII, no space, no quote), else
as a JSON string, so that a hostile name cannot make a line or a row
of its own; cut to MAX characters with \"...\"."
  (let ((name (if (> (length name) max)
                  (concatenate 'string (subseq name 0 max) "...")
                  name)))
    (if (and (plusp (length name))
             (every (lambda (c) (and (< 32 (char-code c) 127) (char/= c #\")))
                    name))
        name
        (json-string name))))

(defun first-line (string &optional (max 120))
  "The first line of STRING, cut to MAX characters."
  (let* ((string (string-trim '(#\Space #\Tab #\Newline #\Return) string))
         (end (or (position #\Newline string) (length string))))
    (if (> end max)
        (concatenate 'string (subseq string 0 (max 0 (- max 3))) "...")
        (subseq string 0 end))))

(defun indent (string &optional (prefix "  "))
  "STRING with PREFIX before every line."
  (with-output-to-string (out)
    (let ((start 0))
      (loop
        (let ((end (position #\Newline string :start start)))
          (write-string prefix out)
          (write-string string out :start start :end end)
          (if end
              (progn (terpri out) (setf start (1+ end)))
              (return)))))))

(defun clean-message (text)
  "TEXT, a condition report, without the stream details reader errors
add (noise to the model, which sent a string) and without blank lines."
  (with-output-to-string (out)
    (let ((first t))
      (dolist (line (split-lines (string-trim '(#\Space #\Newline) text)))
        (let ((trimmed (string-left-trim '(#\Space #\Tab) line)))
          (unless (or (zerop (length trimmed))
                      (and (>= (length trimmed) 7) (string= "Stream:" trimmed :end2 7)))
            (unless first (terpri out))
            (setf first nil)
            (write-string line out)))))))

(defun condition-message (condition)
  "The report of CONDITION, cleaned by CLEAN-MESSAGE.  Never signals."
  (clean-message
   (handler-case (let ((*print-readably* nil)
                       (*print-length* *print-length-cap*)
                       (*print-level* *print-level-cap*))
                   (bounded-print-to-string condition))
     (trappable-condition (c)
       (format nil "[the condition's report failed: ~A]"
               (unprintable condition c))))))

(defun condition-type-label (condition)
  "The qualified name of CONDITION's type, e.g. SB-INT:SIMPLE-PARSE-ERROR."
  (let ((type (type-of condition)))
    (if (symbolp type)
        (symbol-label type)
        (princ-value type))))

(defun split-lines (string)
  "The lines of STRING, as a list."
  (loop for start = 0 then (1+ end)
        for end = (position #\Newline string :start start)
        collect (subseq string start end)
        while end))

(defun plural (n singular &optional plural)
  "\"N SINGULAR\" or \"N PLURAL\"."
  (format nil "~D ~A" n (if (= n 1) singular (or plural (concatenate 'string singular "s")))))
