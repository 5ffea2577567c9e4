;;; sly-agent-q-modules-test.el --- The package's modules: no cycles, no borrowed internals  -*- lexical-binding: t; -*-

;;; Commentary:

;; Each lisp-elisp/ file is a module.  A module may use another's public
;; functions and variables, never its internals (names with "--"), and
;; the modules' requires form no cycle.  The files are read with the Lisp
;; reader, so strings and comments do not count.

;;; Code:

(require 'ert)
(require 'cl-lib)

(defconst sly-agent-q-modules-test--dir
  (expand-file-name "../../lisp-elisp/" (file-name-directory (or load-file-name buffer-file-name)))
  "The package's source directory.")

(defun sly-agent-q-modules-test--forms (file)
  "The top-level forms of FILE."
  (with-temp-buffer
    (insert-file-contents file)
    (let (forms)
      (condition-case nil
          (while t (push (read (current-buffer)) forms))
        (end-of-file nil))
      (nreverse forms))))

(defun sly-agent-q-modules-test--modules ()
  "Alist of (MODULE . FORMS), MODULE being a file's feature name."
  (mapcar (lambda (file) (cons (file-name-base file) (sly-agent-q-modules-test--forms file)))
          (directory-files sly-agent-q-modules-test--dir t "\\`sly-agent-q.*\\.el\\'")))

(defun sly-agent-q-modules-test--symbols (tree)
  "Every symbol in TREE."
  (let (out)
    (cl-labels ((walk (x)
                  (cond ((symbolp x) (push x out))
                        ((consp x) (walk (car x)) (walk (cdr x)))
                        ((vectorp x) (mapc #'walk x)))))
      (walk tree))
    out))

(defun sly-agent-q-modules-test--internal-p (symbol)
  "Non-nil if SYMBOL is one of the package's internals."
  (string-match-p "\\`sly-agent-q[a-z-]*?--" (symbol-name symbol)))

(defun sly-agent-q-modules-test--defined (forms)
  "The internal names FORMS define."
  (cl-loop for form in forms
           when (and (consp form)
                     (memq (car form) '(defun defmacro defvar defvar-local defconst defcustom
                                        defsubst cl-defun cl-defmacro define-error defface
                                        cl-defgeneric))
                     (symbolp (cadr form))
                     (sly-agent-q-modules-test--internal-p (cadr form)))
           collect (cadr form)
           ;; A struct's constructor, predicate and accessors.
           when (and (consp form) (eq (car form) 'cl-defstruct))
           append (cl-remove-if-not #'sly-agent-q-modules-test--internal-p
                                    (sly-agent-q-modules-test--symbols (cadr form)))))

(defun sly-agent-q-modules-test--requires (forms)
  "The package modules FORMS require at top level."
  (cl-loop for form in forms
           when (and (eq (car-safe form) 'require)
                     (eq (car-safe (cadr form)) 'quote)
                     (string-prefix-p "sly-agent-q" (symbol-name (cadr (cadr form)))))
           collect (symbol-name (cadr (cadr form)))))

(ert-deftest sly-agent-q-modules-use-no-other-module-internals ()
  "No module names an internal (a \"--\" name) another module defines."
  (let* ((modules (sly-agent-q-modules-test--modules))
         (owner (make-hash-table :test #'eq))
         (borrowed nil))
    (should (> (length modules) 5))
    (pcase-dolist (`(,module . ,forms) modules)
      (dolist (name (sly-agent-q-modules-test--defined forms))
        (puthash name module owner)))
    (pcase-dolist (`(,module . ,forms) modules)
      (dolist (symbol (delete-dups (sly-agent-q-modules-test--symbols forms)))
        (let ((defined-in (gethash symbol owner)))
          (when (and defined-in (not (equal defined-in module)))
            (push (list module symbol defined-in) borrowed)))))
    (should-not (sort borrowed (lambda (a b) (string< (format "%S" a) (format "%S" b)))))))

(ert-deftest sly-agent-q-modules-require-no-cycle ()
  "The modules' requires form no cycle."
  (let* ((graph (mapcar (lambda (m) (cons (car m) (sly-agent-q-modules-test--requires (cdr m))))
                        (sly-agent-q-modules-test--modules)))
         (state (make-hash-table :test #'equal))
         (cycles nil))
    (cl-labels ((visit (module path)
                  (pcase (gethash module state)
                    ('done nil)
                    ('visiting (push (reverse (cons module path)) cycles))
                    (_ (puthash module 'visiting state)
                       (dolist (next (cdr (assoc module graph)))
                         (visit next (cons module path)))
                       (puthash module 'done state)))))
      (dolist (m graph) (visit (car m) nil)))
    (should (assoc "sly-agent-q-chat" graph))
    (should-not cycles)))

(ert-deftest sly-agent-q-modules-project-root-found-in-one-place ()
  "The project root is asked of project.el in one function; every module uses it.
A second lookup elsewhere (the server's root, the MCP config's) would
disagree with the root the file tools confine to."
  (let ((callers nil))
    (pcase-dolist (`(,module . ,forms) (sly-agent-q-modules-test--modules))
      (dolist (form forms)
        (when (and (memq 'project-current (sly-agent-q-modules-test--symbols form))
                   (consp form) (symbolp (cadr form)))
          (push (cons module (cadr form)) callers))))
    (should (equal callers '(("sly-agent-q-files" . sly-agent-q-tools-project-root))))))

(ert-deftest sly-agent-q-modules-handlers-destructure-by-key ()
  "Protocol handlers take their params' keys with `&key', as eglot's do.
A `plist-get' of a handler's params or of its call's params, in the
method itself, is one key the reader has to look for in the body."
  (let ((found nil))
    (pcase-dolist (`(,module . ,forms) (sly-agent-q-modules-test--modules))
      (dolist (form forms)
        (when (and (eq (car-safe form) 'cl-defmethod)
                   (memq (cadr form) '(sly-agent-q-handle-notification sly-agent-q-handle-call)))
          (cl-labels ((walk (x)
                        (when (consp x)
                          (when (and (eq (car x) 'plist-get)
                                     (consp (cdr x))
                                     (or (eq (cadr x) 'params)
                                         (eq (car-safe (cadr x)) 'sly-agent-q-call-params)))
                            (push (list module (nth 2 form) (nth 2 x)) found))
                          (walk (car x)) (walk (cdr x)))))
            (walk (nthcdr 3 form))))))
    (should-not (sort found (lambda (a b) (string< (format "%S" a) (format "%S" b)))))))

(provide 'sly-agent-q-modules-test)
;;; sly-agent-q-modules-test.el ends here
