;;;; inspect.lisp --- inspect_value: a value's class, slots or elements.
;;;
;;; Values worth inspecting get an id: those eval_form returns (its
;;; result says "inspect_value id N"), a debugger frame's local
;;; (debugger_inspect_local), a part of an inspected value.  The last
;;; *INSPECT-KEPT* are kept, so inspecting never holds on to much.
;;; Parts are paged (OFFSET, LIMIT) and each printed within
;;; *PRINT-SECONDS* (debugger.lisp), so a hostile PRINT-OBJECT cannot
;;; hang the call.

(in-package #:sly-agent-q)

(defparameter *inspect-kept* 50
  "The most inspectable values kept.")

(defvar *inspectables* '()
  "(ID . OBJECT) of the values that can be inspected, newest first.")

(defvar *inspect-counter* 0
  "The id of the newest inspectable value.")

(defun inspectable-id (object)
  "Keep OBJECT for inspect_value; return its id.  A value kept already
keeps its id and becomes the newest: paging through one value must not
push the others out."
  (call-with-state-lock
   (lambda ()
     (let* ((kept (rassoc object *inspectables* :test #'eq))
            (id (if kept (car kept) (incf *inspect-counter*))))
       (setf *inspectables* (cons (cons id object) (remove kept *inspectables*)))
       (when (> (length *inspectables*) *inspect-kept*)
         (setf *inspectables* (subseq *inspectables* 0 *inspect-kept*)))
       id))))

(defun inspectable (id)
  "The object kept under ID, or a FAIL."
  (let ((entry (call-with-state-lock (lambda () (assoc id *inspectables*)))))
    (unless entry
      (fail "No value has inspect id ~A (the last ~D are kept; eval_form results give ids)."
            id *inspect-kept*))
    (cdr entry)))

(defun worth-inspecting-p (object)
  (not (typep object '(or number character symbol string))))

(defun with-inspect-ids (text values)
  "TEXT, the printed VALUES of an evaluation, with the inspect ids of
those worth inspecting appended."
  (let ((ids (loop for value in values
                   for i from 1
                   when (worth-inspecting-p value)
                     collect (list i (inspectable-id value)))))
    (if (null ids)
        text
        (format nil "~A~%(inspect_value: ~{~{value ~D is id ~D~}~^, ~})" text ids))))

(defparameter *inspect-page-limit* 100
  "The most parts one inspect_value page shows, whatever LIMIT asks:
each is printed in the image and the whole page crosses the connection
\(the server keeps 8,000 characters of it).")

(defun list-shape (list)
  "How LIST ends: :PROPER, :DOTTED or :CIRCULAR, and its number of
conses (for a proper or dotted list).  Walks it once, conses nothing."
  (loop for slow = list then (cdr slow)
        for fast = list then (cddr fast)
        for n from 0 by 2
        do (cond ((null fast) (return (values :proper n)))
                 ((atom fast) (return (values :dotted n)))
                 ((null (cdr fast)) (return (values :proper (1+ n))))
                 ((atom (cdr fast)) (return (values :dotted (1+ n))))
                 ((and (plusp n) (eq fast slow)) (return (values :circular nil))))))

(defun object-view (object)
  "How OBJECT's parts are paged: a title line, the exact number of its
parts, and a function of START and END that returns the parts from
START below END as (LABEL . VALUE).  Only those parts are labelled
\(printed): a page of a big table or list costs what the page costs."
  (typecase object
    (hash-table
     (values (format nil "a hash table, test ~A, ~D entr~:@P"
                     (hash-table-test object) (hash-table-count object))
             (hash-table-count object)
             (lambda (start end)
               (let ((parts '()) (i 0))
                 (with-hash-table-iterator (next object)
                   (loop (multiple-value-bind (more key value) (next)
                           (unless (and more (< i end)) (return))
                           (when (>= i start)
                             (push (cons (print-bounded key :limit 100) value) parts))
                           (incf i))))
                 (nreverse parts)))))
    (cons
     (multiple-value-bind (shape length) (list-shape object)
       (if (eq shape :proper)
           (values (format nil "a list of ~D element~:P" length) length
                   (lambda (start end)
                     (loop for x in (nthcdr start object)
                           for i from start below end
                           collect (cons (format nil "~D" i) x))))
           (values (if (eq shape :dotted) "a dotted list" "a circular list") 2
                   (lambda (start end)
                     (subseq (list (cons "car" (car object)) (cons "cdr" (cdr object))) start end))))))
    ((and array (not string))
     (values (format nil "an array of dimensions ~A, element type ~A"
                     (array-dimensions object) (array-element-type object))
             (array-total-size object)
             (lambda (start end)
               (loop for i from start below end
                     collect (cons (format nil "~D" i) (row-major-aref object i))))))
    ((or standard-object structure-object condition)
     (let* ((class (class-of object))
            (slots (ignore-errors
                    (unless (mop "CLASS-FINALIZED-P" class) (mop "FINALIZE-INHERITANCE" class))
                    (mop "CLASS-SLOTS" class))))
       (values (format nil "an instance of ~A with ~D slot~:P"
                       (symbol-label (class-name class) *package*) (length slots))
               (length slots)
               (lambda (start end)
                 (loop for slot in (subseq slots start end)
                       for name = (mop "SLOT-DEFINITION-NAME" slot)
                       collect (cons (symbol-label name *package*)
                                     (if (ignore-errors (slot-boundp object name))
                                         (slot-value object name)
                                         '%unbound)))))))
    (t (values (format nil "~A" (symbol-label (class-name (class-of object)) *package*))
               0 (lambda (start end) (declare (ignore start end)) '())))))

(defun inspection (object id offset limit)
  "The text inspect_value shows for OBJECT (id ID): parts OFFSET on, LIMIT
of them (at most *INSPECT-PAGE-LIMIT*)."
  (multiple-value-bind (title total parts) (object-view object)
    (let* ((page (min limit *inspect-page-limit*))
           (start (min offset total))
           (shown (funcall parts start (min total (+ start page)))))
      (with-output-to-string (out)
        (format out "id ~D: ~A~%Class: ~A~%Value: ~A~%"
                id title (symbol-label (class-name (class-of object)) *package*)
                (print-bounded object :limit 300))
        (cond ((zerop total) (format out "No parts to show.~%"))
              ((>= offset total)
               (format out "No parts from offset ~D: the value has ~D part~:P (0 to ~D).~%"
                       offset total (1- total)))
              (t
               (when (> limit page)
                 (format out "A page shows at most ~D parts: ~D shown of the ~D asked for.~%"
                         page (length shown) limit))
               (format out "Parts ~D to ~D of ~D (part number, name: value):~%"
                       start (+ start (length shown)) total)
               (loop for (label . value) in shown
                     for i from start
                     do (format out "  [~D] ~A: ~A~%" i label
                                (if (eq value '%unbound) "#<unbound>" (print-bounded value :limit 200))))
               (when (> total (+ start (length shown)))
                 (format out "More: offset ~D. Inspect a part with part=N.~%" (+ start (length shown))))))))))

(defun inspect-object (object &key offset limit part)
  "Register OBJECT (or its PART) and return its inspection."
  (let ((offset (or offset 0))
        (limit (or limit 20)))
    (when part
      (multiple-value-bind (title total parts) (object-view object)
        (declare (ignore title))
        (unless (< -1 part total)
          (fail "There is no part ~D: the value has ~D part~:P." part total))
        (setf object (cdr (first (funcall parts part (1+ part)))))
        (when (eq object '%unbound) (fail "Part ~D is an unbound slot." part))))
    (inspection object (inspectable-id object) offset limit)))

(define-tool "inspect_value" (&key id part offset limit)
  "Inspect the value of ID, or its PART; parts from OFFSET, LIMIT of them."
  (let ((*package* (tool-package nil)))
    (inspect-object (inspectable id) :offset offset :limit limit :part part)))

(define-debugger-operation "inspect_local" (&key frame local)
  "Inspect the local variable LOCAL (its number) of FRAME."
  (frame-at frame)
  (let ((locals (bcall "FRAME-LOCALS" frame)))
    (unless (and (integerp local) (< -1 local (length locals)))
      (fail "Frame ~D has no local ~A; debugger_frame_locals numbers them." frame local))
    (inspect-object (getf (nth local locals) :value))))
