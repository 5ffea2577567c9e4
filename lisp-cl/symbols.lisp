;;;; symbols.lisp --- find symbols the way the reader would, without interning.
;;;
;;; The model names symbols as text: "process-data", "my-app:process-data",
;;; "MY-APP::split-on-commas", "|Mixed Case|".  We parse that text as
;;; the reader parses a token (escapes, package markers, READTABLE-CASE)
;;; but look it up with FIND-PACKAGE and FIND-SYMBOL only: a lookup
;;; never interns a symbol into the user's packages.  When nothing is
;;; found the error names what and where, and the closest matches.

(in-package #:sly-agent-q)

;;;; Packages

(defun package-name-candidates (name)
  "Spellings of the package NAME to try: as given, upcased, and as the
reader would convert it."
  (remove-duplicates (list name (string-upcase name) (reader-case name))
                     :test #'string= :from-end t))

(defun find-package-leniently (name &optional (relative-to *package*))
  "The package NAME (a string) names, trying the spellings of
PACKAGE-NAME-CANDIDATES, with package-local nicknames of RELATIVE-TO."
  (let ((*package* relative-to))
    (some #'find-package (package-name-candidates name))))

(defun all-package-names ()
  "Names and nicknames of all packages."
  (loop for package in (list-all-packages)
        append (cons (package-name package) (package-nicknames package))))

(defun closest-package-names (name &key (limit 5))
  "Package names close to NAME."
  (closest-strings name (all-package-names) :limit limit))

(defun resolve-package (name &key (what "Package") (relative-to *package*))
  "The package NAME names (package-local nicknames of RELATIVE-TO
included), or a FAIL listing the closest package names."
  (or (find-package-leniently name relative-to)
      (let ((close (closest-package-names name)))
        (fail "~A ~A not found.~@[ Closest package names: ~{~A~^, ~}.~]~:[~; ~
               Use list_package_symbols or apropos_search to explore.~]"
              what (print-value name :limit 200) close (null close)))))

(defun tool-package (name &key (what "Package"))
  "The package a tool works in: NAME (the tool's \"package\" argument)
if given, else the REPL's package passed to CALL-TOOL, else CL-USER."
  (cond (name (resolve-package name :what what))
        (*repl-package-name*
         (or (find-package-leniently *repl-package-name*)
             (fail "The REPL's current package ~S no longer exists; pass a \"package\" argument."
                   *repl-package-name*)))
        (t (find-package "COMMON-LISP-USER"))))


;;;; Tokens

(defun reader-case (string &optional (escaped (make-list (length string))))
  "STRING with its unescaped letters converted as (READTABLE-CASE
*READTABLE*) dictates.  ESCAPED is a list of booleans, one per character."
  (let ((mode (readtable-case *readtable*)))
    (flet ((convert (fn)
             (map 'string (lambda (char escaped-p) (if escaped-p char (funcall fn char)))
                  string escaped)))
      (ecase mode
        (:upcase (convert #'char-upcase))
        (:downcase (convert #'char-downcase))
        (:preserve string)
        (:invert
         (let ((letters (loop for char across string
                              for escaped-p in escaped
                              when (and (not escaped-p) (alpha-char-p char))
                                collect char)))
           (cond ((every #'upper-case-p letters) (convert #'char-downcase))
                 ((every #'lower-case-p letters) (convert #'char-upcase))
                 (t string))))))))

(defun split-token (text)
  "Split TEXT, a symbol token, at its unescaped package markers.
Returns a list of segments, each (STRING . ESCAPED-FLAGS), and the list
of marker runs (the number of colons in each)."
  (let ((segments '()) (markers '())
        (chars '()) (flags '())
        (multiple-escape nil)
        (i 0) (n (length text)))
    (flet ((end-segment ()
             (push (cons (coerce (reverse chars) 'string) (reverse flags)) segments)
             (setf chars '() flags '())))
      (loop while (< i n)
            do (let ((char (char text i)))
                 (cond ((char= char #\|)
                        (setf multiple-escape (not multiple-escape))
                        (incf i))
                       ((char= char #\\)
                        (when (>= (1+ i) n)
                          (fail "The name ~S ends with a lone backslash." text))
                        (push (char text (1+ i)) chars)
                        (push t flags)
                        (incf i 2))
                       (multiple-escape
                        (push char chars)
                        (push t flags)
                        (incf i))
                       ((char= char #\:)
                        (let ((run (or (position #\: text :start i :test-not #'char=) n)))
                          (end-segment)
                          (push (- run i) markers)
                          (setf i run)))
                       (t
                        (push char chars)
                        (push nil flags)
                        (incf i)))))
      (when multiple-escape
        (fail "The name ~S has an unterminated |...| escape." text))
      (end-segment)
      (values (nreverse segments) (nreverse markers)))))

(defun parse-symbol-name (text)
  "Parse TEXT as the reader would parse a symbol token.
Returns the package name (or NIL for an unqualified name), the symbol
name, and whether the token used a single colon."
  (let ((text (string-trim '(#\Space #\Tab #\Newline #\Return) text)))
    ;; The model sometimes quotes names the way it would in code.
    (cond ((and (> (length text) 2) (string= "#'" text :end2 2))
           (setf text (subseq text 2)))
          ((and (> (length text) 1) (char= (char text 0) #\'))
           (setf text (subseq text 1))))
    (when (zerop (length text))
      (fail "The name is empty."))
    (when (and (> (length text) 1) (string= "#:" text :end2 2))
      (fail "~A is an uninterned symbol: it cannot be looked up by name." text))
    (when (find-if (lambda (c) (member c '(#\( #\) #\" #\; #\' #\` #\,))) text)
      (fail "~S is not a symbol name." text))
    (multiple-value-bind (segments markers) (split-token text)
      (flet ((segment-name (segment) (reader-case (car segment) (cdr segment))))
        (cond
          ((null markers)
           (values nil (segment-name (first segments)) nil))
          ((or (> (length markers) 1)
               (> (first markers) 2)
               (zerop (length (car (second segments)))))
           (fail "~S is not a valid symbol name (misplaced package markers)." text))
          ((zerop (length (car (first segments))))
           ;; :FOO (and ::FOO, which the reader also accepts) => keyword.
           (values "KEYWORD" (segment-name (second segments)) nil))
          (t
           (values (segment-name (first segments))
                   (segment-name (second segments))
                   (= (first markers) 1))))))))


;;;; Closest matches

(defun edit-distance (a b)
  "The Levenshtein distance between strings A and B, ignoring case."
  (let* ((n (length b))
         (previous (make-array (1+ n)))
         (current (make-array (1+ n))))
    (dotimes (j (1+ n)) (setf (aref previous j) j))
    (dotimes (i (length a) (aref previous n))
      (setf (aref current 0) (1+ i))
      (dotimes (j n)
        (setf (aref current (1+ j))
              (min (1+ (aref previous (1+ j)))
                   (1+ (aref current j))
                   (+ (aref previous j)
                      (if (char-equal (char a i) (char b j)) 0 1)))))
      (rotatef previous current))))

(defun closeness (name candidate)
  "A score (lower is closer) of CANDIDATE as a correction of NAME, or NIL
if it is not close at all."
  (let* ((length (length name))
         (threshold (max 2 (floor length 3))))
    (cond ((string-equal name candidate) 0)
          ((and (>= length 3) (search name candidate :test #'char-equal))
           (+ 1 (/ (- (length candidate) length) 100)))
          ;; A candidate inside NAME counts only if it is most of it:
          ;; "INTERN" is no correction of "SAQ-NEVER-INTERNED".
          ((and (>= (length candidate) (max 3 (* 3/5 length)))
                (search candidate name :test #'char-equal))
           (+ 2 (/ (- length (length candidate)) 100)))
          ((> (abs (- length (length candidate))) threshold) nil)
          (t (let ((distance (edit-distance name candidate)))
               (and (<= distance threshold) (+ 2 distance)))))))

(defun closest-strings (name candidates &key (limit 5))
  "The strings of CANDIDATES closest to NAME, best first."
  (let ((scored '()))
    (dolist (candidate (remove-duplicates candidates :test #'string=))
      (let ((score (closeness name candidate)))
        (when score (push (cons score candidate) scored))))
    (mapcar #'cdr (subseq (sort scored #'< :key #'car)
                          0 (min limit (length scored))))))

(defun closest-symbols (name package &key (limit 6) (test (constantly t)))
  "Symbols accessible in PACKAGE whose names are close to NAME and which
satisfy TEST, best first."
  (let ((scored '()))
    (do-symbols (symbol package)
      (let ((score (closeness name (symbol-name symbol))))
        (when (and score (ignore-errors (funcall test symbol)))
          (pushnew (cons score symbol) scored :key #'cdr))))
    (mapcar #'cdr (subseq (sort scored #'< :key #'car)
                          0 (min limit (length scored))))))

(defun name-as-read (name text)
  "NAME (a symbol name read from TEXT) shown as a symbol would print:
plain when that reads back, else |escaped|; with TEXT when it differs."
  (let ((shown (if (and (plusp (length name))
                        (every (lambda (c) (and (graphic-char-p c)
                                                (not (lower-case-p c))
                                                (not (find c "()|\\\"';:`,# "))))
                               name))
                   name
                   (format nil "|~A|" name))))
    (if (string-equal shown (string-trim " " text))
        shown
        (format nil "~A (from ~S)" shown (string-trim " " text)))))

(defun not-found-message (text name package &key (what "Symbol") (test (constantly t)))
  "The error message for TEXT (naming NAME) not found in PACKAGE."
  (let* ((elsewhere (remove-if-not (lambda (symbol)
                                     (and (not (eq (find-symbol name package) symbol))
                                          (ignore-errors (funcall test symbol))))
                                   (find-all-symbols name)))
         (close (closest-symbols name package :test test)))
    (with-output-to-string (out)
      (format out "~A ~A not found in package ~A."
              what (name-as-read name text) (package-name package))
      (when elsewhere
        (format out " A symbol with that name exists in ~:[other packages~;another package~]: ~
                     ~{~A~^, ~} (write it package-qualified, or pass its package)."
                (null (rest elsewhere))
                (mapcar #'symbol-label (subseq elsewhere 0 (min 8 (length elsewhere))))))
      (when close
        (format out " Closest matches in ~A: ~{~A~^, ~}."
                (package-name package)
                (mapcar (lambda (symbol) (symbol-label symbol package)) close)))
      (unless (or elsewhere close)
        (format out " No similar names there; try apropos_search.")))))

(defun resolve-symbol (text package &key (what "Symbol") (test (constantly t)) test-description)
  "The symbol TEXT names, read relative to PACKAGE; TEST must hold for it.
Signals a TOOL-ERROR naming the closest matches otherwise."
  (multiple-value-bind (package-name name) (parse-symbol-name text)
    (let ((home (if package-name
                    (resolve-package package-name :what "Package" :relative-to package)
                    package)))
      (multiple-value-bind (symbol status) (find-symbol name home)
        (cond ((null status)
               (fail "~A" (not-found-message text name home :what what :test test)))
              ((not (ignore-errors (funcall test symbol)))
               (let ((close (closest-symbols name home :test test)))
                 (fail "~A does not name ~A~@[ (it names: ~{~A~^, ~})~].~@[ Close names in ~A that do: ~
                        ~{~A~^, ~}.~]"
                       (symbol-label symbol package)
                       (or test-description "a suitable definition")
                       (symbol-kinds symbol)
                       (and close (package-name home))
                       (mapcar (lambda (s) (symbol-label s package)) close))))
              (t symbol))))))


;;;; What a symbol names

(defun special-variable-p (symbol)
  "True if SYMBOL is proclaimed special."
  #+sbcl (eq (sb-int:info :variable :kind symbol) :special)
  #-sbcl (and (boundp symbol) (not (constantp symbol))))

(defun symbol-macro-p (symbol)
  "True if SYMBOL is a global symbol macro."
  (and (not (keywordp symbol))
       (nth-value 1 (ignore-errors (macroexpand-1 symbol)))))

(defun generic-function-p (symbol)
  "True if SYMBOL names a generic function."
  (and (fboundp symbol)
       (not (macro-function symbol))
       (not (special-operator-p symbol))
       (typep (fdefinition symbol) 'generic-function)))

(defun type-name-p (symbol)
  "True if SYMBOL names a type that is not a class (a DEFTYPE)."
  (and (not (find-class symbol nil))
       (not (keywordp symbol))
       (backend-implemented-p "TYPE-SPECIFIER-P")
       (ignore-errors (bcall "TYPE-SPECIFIER-P" symbol))
       t))

(defun symbol-kinds (symbol)
  "Short descriptions of what SYMBOL names, e.g. (\"function\" \"class\")."
  (let ((kinds '()))
    (flet ((add (kind) (push kind kinds)))
      (ignore-errors
       (cond ((special-operator-p symbol) (add "special operator"))
             ((macro-function symbol) (add "macro"))
             ((generic-function-p symbol) (add "generic function"))
             ((fboundp symbol) (add "function"))))
      (ignore-errors
       (when (fboundp (list 'setf symbol)) (add "setf function")))
      (ignore-errors
       (cond ((keywordp symbol) (add "keyword"))
             ((constantp symbol) (add "constant"))
             ((special-variable-p symbol)
              (add (if (boundp symbol) "special variable" "special variable (unbound)")))
             ((boundp symbol) (add "global variable"))
             ((symbol-macro-p symbol) (add "symbol macro"))))
      (ignore-errors
       (let ((class (find-class symbol nil)))
         (when class
           (add (cond ((typep class 'structure-class) "structure")
                      ((subtypep class 'condition) "condition class")
                      (t "class"))))))
      (ignore-errors (when (type-name-p symbol) (add "type"))))
    (nreverse kinds)))
