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
  "Keep OBJECT for inspect_value; return its id."
  (call-with-state-lock
   (lambda ()
     (let ((id (incf *inspect-counter*)))
       (push (cons id object) *inspectables*)
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

(defun object-parts (object)
  "The parts of OBJECT as (LABEL . VALUE), and a title line."
  (typecase object
    (hash-table
     (values (let ((parts '()))
               (maphash (lambda (k v) (push (cons (print-bounded k :limit 100) v) parts)) object)
               (nreverse parts))
             (format nil "a hash table, test ~A, ~D entr~:@P"
                     (hash-table-test object) (hash-table-count object))))
    (cons
     (let ((length (ignore-errors (list-length object))))
       (if (and length (null (cdr (last object))))
           (values (loop for x in object for i from 0 collect (cons (format nil "~D" i) x))
                   (format nil "a list of ~D element~:P" length))
           (values (list (cons "car" (car object)) (cons "cdr" (cdr object)))
                   (if length "a dotted list" "a circular list")))))
    ((and array (not string))
     (values (loop for i below (array-total-size object)
                   collect (cons (format nil "~D" i) (row-major-aref object i)))
             (format nil "an array of dimensions ~A, element type ~A"
                     (array-dimensions object) (array-element-type object))))
    ((or standard-object structure-object condition)
     (let* ((class (class-of object))
            (slots (ignore-errors
                    (unless (mop "CLASS-FINALIZED-P" class) (mop "FINALIZE-INHERITANCE" class))
                    (mop "CLASS-SLOTS" class))))
       (values (loop for slot in slots
                     for name = (mop "SLOT-DEFINITION-NAME" slot)
                     collect (cons (symbol-label name *package*)
                                   (if (ignore-errors (slot-boundp object name))
                                       (slot-value object name)
                                       '%unbound)))
               (format nil "an instance of ~A with ~D slot~:P"
                       (symbol-label (class-name class) *package*) (length slots)))))
    (t (values '() (format nil "~A" (symbol-label (class-name (class-of object)) *package*))))))

(defun inspection (object id offset limit)
  "The text inspect_value shows for OBJECT (id ID): parts OFFSET on, LIMIT of them."
  (multiple-value-bind (parts title) (object-parts object)
    (let* ((total (length parts))
           (shown (subseq parts (min offset total) (min total (+ offset limit)))))
      (with-output-to-string (out)
        (format out "id ~D: ~A~%Class: ~A~%Value: ~A~%"
                id title (symbol-label (class-name (class-of object)) *package*)
                (print-bounded object :limit 300))
        (if (null parts)
            (format out "No parts to show.~%")
            (progn
              (format out "Parts ~D to ~D of ~D (part number, name: value):~%"
                      (min offset total) (+ (min offset total) (length shown)) total)
              (loop for (label . value) in shown
                    for i from offset
                    do (format out "  [~D] ~A: ~A~%" i label
                               (if (eq value '%unbound) "#<unbound>" (print-bounded value :limit 200))))
              (when (> total (+ offset limit))
                (format out "More: offset ~D. Inspect a part with part=N.~%" (+ offset limit)))))))))

(defun inspect-object (object &key offset limit part)
  "Register OBJECT (or its PART) and return its inspection."
  (let ((offset (or offset 0))
        (limit (or limit 20)))
    (when part
      (let ((parts (object-parts object)))
        (unless (< -1 part (length parts))
          (fail "There is no part ~D: the value has ~D part~:P." part (length parts)))
        (setf object (cdr (nth part parts)))
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
