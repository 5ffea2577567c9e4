;;; sly-agent-q-tool-declarations-test.el --- Each Emacs tool declared once, named nowhere else  -*- lexical-binding: t; -*-

;;; Commentary:

;; The server's catalog (the bundle's --tools) and Emacs's declarations
;; (`sly-agent-q-define-tool') name the same Emacs tools; a tool reviewed
;; by its target declares how it is previewed; and no Elisp outside the
;; declarations names a tool or an alias, so that adding, renaming or
;; aliasing a tool never needs a second edit in Emacs.  The files are
;; read with the Lisp reader: comments and docstrings' prose do not
;; count, a string that is a tool's name does.

;;; Code:

(require 'ert)
(require 'cl-lib)
(require 'sly-agent-q-test-helper)
(require 'sly-agent-q)

(defconst sly-agent-q-tool-declarations-test--dir
  (expand-file-name "../../lisp-elisp/" (file-name-directory (or load-file-name buffer-file-name)))
  "The package's source directory.")

(defun sly-agent-q-tool-declarations-test--catalog ()
  "The server's catalog, a list of plists, from the bundle's --tools."
  (sly-agent-q-test-bundle-json "--tools" 'plist))

(ert-deftest sly-agent-q-tool-declarations-match-the-catalog ()
  "Every Emacs tool of the catalog is declared once in Emacs, and nothing else is."
  (let* ((catalog (sly-agent-q-tool-declarations-test--catalog))
         (emacs (cl-remove-if-not (lambda (tool) (equal (plist-get tool :runtime) "emacs")) catalog))
         (wanted (sort (delete-dups (mapcar (lambda (tool) (plist-get tool :implementation)) emacs))
                       #'string<)))
    (should (equal wanted (sly-agent-q-tool-names)))
    ;; A call reviewed by its target is previewed by its declaration; a forgotten
    ;; preview would put the bare arguments to the user.
    (dolist (tool emacs)
      (when (equal (plist-get tool :review) "target")
        (should (functionp (plist-get (sly-agent-q-tool-declaration (plist-get tool :implementation))
                                      :preview)))))))

(defun sly-agent-q-tool-declarations-test--strings (form)
  "The strings in FORM, outside `sly-agent-q-define-tool' forms' names."
  (let (out)
    (cl-labels ((walk (x)
                  (cond ((stringp x) (push x out))
                        ((and (consp x) (eq (car x) 'sly-agent-q-define-tool))
                         (walk (cddr x)))
                        ((consp x) (walk (car x)) (walk (cdr x)))
                        ((vectorp x) (mapc #'walk x)))))
      (walk form))
    out))

(defun sly-agent-q-tool-declarations-test--named (names)
  "Alist (FILE . NAMES-IT-USES) of lisp-elisp files whose code has a string in NAMES.
A `sly-agent-q-define-tool' form's own name does not count."
  (cl-loop for file in (directory-files sly-agent-q-tool-declarations-test--dir t "\\`sly-agent-q.*\\.el\\'")
           for found = (with-temp-buffer
                         (insert-file-contents file)
                         (let (forms)
                           (condition-case nil
                               (while t (push (read (current-buffer)) forms))
                             (end-of-file nil))
                           (cl-intersection (delete-dups (sly-agent-q-tool-declarations-test--strings forms))
                                            names :test #'equal)))
           when found collect (cons (file-name-nondirectory file) (sort found #'string<))))

(ert-deftest sly-agent-q-tool-declarations-no-tool-named-elsewhere ()
  "No Elisp outside the tool declarations names a tool or an alias of the catalog.
Dispatch, rewind and approval read the declarations and the review kind
the server sends; a category that shares a tool's name (xref) is a category."
  (let* ((catalog (sly-agent-q-tool-declarations-test--catalog))
         (categories (delete-dups (cl-mapcan (lambda (tool) (copy-sequence (plist-get tool :categories)))
                                             catalog)))
         (names (cl-set-difference (mapcar (lambda (tool) (plist-get tool :name)) catalog)
                                   categories :test #'equal)))
    (should (> (length names) 40))
    (should-not (sly-agent-q-tool-declarations-test--named names))))

(defun sly-agent-q-tool-declarations-test--parameters (tool)
  "The parameter names catalog entry TOOL's handler gets.
A name TOOL's argumentNames renames reaches the handler as its target."
  (let ((renames (plist-get tool :argumentNames)))
    (delete-dups
     (mapcar (lambda (name) (or (plist-get renames (intern (concat ":" name))) name))
             (copy-sequence (plist-get tool :parameters))))))

(defun sly-agent-q-tool-declarations-test--mismatches (catalog)
  "Where CATALOG's Emacs tools and their handlers' keywords disagree.
See `sly-agent-q-test-handler-mismatches'."
  (sly-agent-q-test-handler-mismatches catalog #'sly-agent-q-tool-declarations-test--parameters))

(ert-deftest sly-agent-q-tool-declarations-handlers-take-the-catalog-parameters ()
  "Each Emacs tool's handler takes the catalog's parameters as its keywords, and no others.
The same check as the e2e suite's, on the bundle's catalog, with no
server or image running."
  (let ((catalog (sly-agent-q-tool-declarations-test--catalog)))
    (should-not (sly-agent-q-tool-declarations-test--mismatches catalog))
    ;; The check sees a disagreement: a parameter renamed in the catalog.
    (let* ((tool (cl-find-if (lambda (tool) (and (equal (plist-get tool :runtime) "emacs")
                                                 (not (plist-get tool :aliasOf))
                                                 (plist-get tool :parameters)))
                             catalog))
           (renamed (cons (concat (car (plist-get tool :parameters)) "_renamed")
                          (cdr (plist-get tool :parameters))))
           (changed (mapcar (lambda (other)
                              (if (eq other tool) (plist-put (copy-sequence tool) :parameters renamed) other))
                            catalog)))
      (should (assoc (plist-get tool :implementation)
                     (sly-agent-q-tool-declarations-test--mismatches changed))))))

(ert-deftest sly-agent-q-tool-declarations-are-checked ()
  "A declaration without :changes, or with no handler, is refused when it is read."
  (let ((sly-agent-q-tool-declarations (copy-hash-table sly-agent-q-tool-declarations)))
    (should-error (sly-agent-q-tool-declare "no_changes" :handler #'ignore))
    (should-error (sly-agent-q-tool-declare "no_handler" :changes nil))
    (should-error (sly-agent-q-tool-declare "Bad-Name" :handler #'ignore :changes nil))
    (should-not (sly-agent-q-tool-declaration "no_changes"))
    (should (equal (sly-agent-q-tool-declare "fine_tool" :handler #'ignore :changes nil) "fine_tool"))))

(provide 'sly-agent-q-tool-declarations-test)
;;; sly-agent-q-tool-declarations-test.el ends here
