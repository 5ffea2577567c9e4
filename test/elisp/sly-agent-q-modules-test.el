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
    (should (equal callers '(("sly-agent-q-files" . sly-agent-q-files-project-root))))))

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

;;;; Each file defines only names of its own prefix

(defun sly-agent-q-modules-test--definitions (forms)
  "The names FORMS define, as (KIND . NAME), top level or in a `progn'.
A `defvar' with no value only declares a name another file defines;
an obsolete alias keeps an old name working and is not a definition
of its own."
  (cl-loop
   for form in forms
   append
   (when (consp form)
     (pcase form
       (`(,(or 'progn 'eval-and-compile 'eval-when-compile) . ,body)
        (sly-agent-q-modules-test--definitions body))
       (`(defvar ,(pred symbolp)) nil)
       (`(,(and kind (or 'defun 'defmacro 'defvar 'defvar-local 'defconst 'defcustom 'defsubst
                         'cl-defun 'cl-defmacro 'cl-defsubst 'define-error 'defface 'cl-defgeneric
                         'define-minor-mode 'define-derived-mode 'defgroup 'define-button-type
                         'define-inline 'transient-define-prefix 'transient-define-suffix
                         'transient-define-infix 'transient-define-argument 'defalias 'defvaralias))
          ,name . ,_)
        (let ((name (if (eq (car-safe name) 'quote) (cadr name) name)))
          (and (symbolp name) (list (cons kind name)))))
       (`(cl-defstruct ,spec . ,_)
        (let ((name (if (consp spec) (car spec) spec)))
          (cons (cons 'cl-defstruct name)
                ;; Its constructors and predicate, when named apart.
                (cl-loop for option in (and (consp spec) (cdr spec))
                         when (and (memq (car-safe option) '(:constructor :predicate :copier))
                                   (cadr option) (symbolp (cadr option)))
                         collect (cons (car option) (cadr option))))))))))

(defun sly-agent-q-modules-test--owner (name modules)
  "The module NAME belongs to by its prefix: the longest of MODULES' names it starts with."
  (let ((best nil) (name (symbol-name name)))
    (dolist (module modules)
      (when (and (or (string= name module) (string-prefix-p (concat module "-") name))
                 (> (length module) (length (or best ""))))
        (setq best module)))
    best))

(defun sly-agent-q-modules-test--misnamed (modules)
  "The definitions of MODULES (an alist of (MODULE . FORMS)) named for another file.
A file sly-agent-q-foo.el defines `sly-agent-q-foo-*' and
`sly-agent-q-foo--*'.  Besides those, any file may define the
package's public names that no file's prefix claims
\(`sly-agent-q-WORD...': commands such as `sly-agent-q-approve',
shared entry points such as `sly-agent-q-tool-fail'), never an
internal of the main prefix (`sly-agent-q--*'); and any file user
options (`defcustom') and faces (`defface'), which keep the names
users set whichever file groups them.  Return (MODULE NAME OWNER)
for each other name, OWNER being the module its prefix names."
  (let ((names (mapcar #'car modules)) (found nil))
    (pcase-dolist (`(,module . ,forms) modules)
      (pcase-dolist (`(,kind . ,name) (sly-agent-q-modules-test--definitions forms))
        (let ((owner (sly-agent-q-modules-test--owner name names)))
          (unless (or (null owner)
                      (equal owner module)
                      (memq kind '(defcustom defface))
                      (and (equal owner "sly-agent-q")
                           (not (string-prefix-p "sly-agent-q--" (symbol-name name)))))
            (push (list module name owner) found)))))
    (sort found (lambda (a b) (string< (format "%S" a) (format "%S" b))))))

(defconst sly-agent-q-modules-test--misnamed-still
  '()
  "The names still defined outside the file their prefix names.
Only ever shorter: a name renamed or moved leaves this list, and the
test fails while it is still listed.")

(ert-deftest sly-agent-q-modules-define-only-their-own-names ()
  "Each file defines names of its own prefix (see `sly-agent-q-modules-test--misnamed').
Names of another file's prefix are where a reader does not look for
them: `sly-agent-q-tools--*' defined in four files, the tool error in
sly-agent-q-files.el.  The few still misnamed are listed, and the list
only shrinks."
  (let ((misnamed (sly-agent-q-modules-test--misnamed (sly-agent-q-modules-test--modules))))
    ;; No new one.
    (should-not (cl-set-difference misnamed sly-agent-q-modules-test--misnamed-still :test #'equal))
    ;; None listed that was set right.
    (should-not (cl-set-difference sly-agent-q-modules-test--misnamed-still misnamed :test #'equal))))

(ert-deftest sly-agent-q-modules-misnamed-definitions-are-found ()
  "The check of names finds a definition planted in the wrong file, of every kind."
  (let* ((modules (sly-agent-q-modules-test--modules))
         (planted
          (mapcar
           (lambda (m)
             (if (equal (car m) "sly-agent-q-files")
                 (append m '((defun sly-agent-q-tools--sneaked () nil)
                             (progn (defvar sly-agent-q-diff--sneaked 1))
                             (define-error 'sly-agent-q-tool-error "Tool error")
                             (defun sly-agent-q--sneaked () nil)
                             (cl-defstruct (sly-agent-q-files-thing (:constructor sly-agent-q--make-thing)))
                             ;; Not definitions of another's name: allowed.
                             (defvar sly-agent-q-tools-declared)
                             (define-obsolete-function-alias 'sly-agent-q-tools-old #'ignore "0")
                             (defun sly-agent-q-some-command () (interactive))
                             (defcustom sly-agent-q-tools-some-option nil "An option." :type 'boolean)))
               m))
           modules))
         (misnamed (cl-set-difference (sly-agent-q-modules-test--misnamed planted)
                                      (sly-agent-q-modules-test--misnamed modules)
                                      :test #'equal)))
    (should (equal (sort (mapcar (lambda (m) (symbol-name (nth 1 m))) misnamed) #'string<)
                   '("sly-agent-q--make-thing" "sly-agent-q--sneaked" "sly-agent-q-diff--sneaked"
                     "sly-agent-q-tool-error" "sly-agent-q-tools--sneaked")))
    ;; The tool error belongs to its own file now.
    (should (member '("sly-agent-q-files" sly-agent-q-tool-error "sly-agent-q-tool-error") misnamed))))

(provide 'sly-agent-q-modules-test)
;;; sly-agent-q-modules-test.el ends here
