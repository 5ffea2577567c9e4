;;; sly-agent-q-docstring-test.el --- Docstrings show keys, not their markup  -*- lexical-binding: t; -*-

;;; Commentary:

;; A key reference written with one backslash in a docstring (\<, \[, \{
;; in the source string) reads as a plain character: C-h m then prints
;; "[sly-agent-q-...]" literally.  Every command and mode of the package
;; must show keys.

;;; Code:

(require 'sly-agent-q-test-helper
         (expand-file-name "sly-agent-q-test-helper"
                           (file-name-directory (or load-file-name buffer-file-name))))
(require 'sly-agent-q-diff-review)

(ert-deftest sly-agent-q-docstrings-substitute-keys ()
  "No function of the package shows key markup unsubstituted in its documentation."
  (let (bad)
    (mapatoms
     (lambda (sym)
       (when (and (fboundp sym) (string-prefix-p "sly-agent-q-" (symbol-name sym)))
         (let ((doc (ignore-errors (documentation sym))))
           (when (and doc (string-match-p "[[<{]sly-agent-q-[a-z-]+[]>}]" doc))
             (push sym bad))))))
    (should-not bad)
    (should (string-match-p "C-c C-c" (documentation 'sly-agent-q-diff-review-mode)))))

(provide 'sly-agent-q-docstring-test)
;;; sly-agent-q-docstring-test.el ends here
