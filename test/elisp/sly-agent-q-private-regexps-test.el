;;; sly-agent-q-private-regexps-test.el --- The private-file regexps as the server applies them  -*- lexical-binding: t; -*-

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

;; `sly-agent-q-private-file-regexps' reaches the server's project tools
;; translated to JavaScript.  Each translation is run by node itself on
;; file names and must agree with Emacs's own matching; a regexp outside
;; the translated part is sent as untranslated, never dropped.

;;; Code:

(require 'ert)
(require 'json)
(require 'sly-agent-q-files)
(require 'sly-agent-q-configuration)

(defconst sly-agent-q-private-regexps-test--names
  '("/p/.env" "/p/.env.sample" "/p/src/.ENV" "/home/u/.ssh/id_rsa" "/p/.authinfo" "/p/.authinfo.gpg"
    "/p/a.authinfo" "/p/x/.netrc" "/p/netrc" "/p/secrets/key.pem" "/p/k.PEM" "/p/a(b)|c.lisp"
    "/p/$HOME/x" "/p/a]b" "/p/a\\b" "/p/id_rsa.pub" "/p/file9.key" "/p/fileA.key")
  "File names each regexp is tried on, in Emacs and in node.")

(defun sly-agent-q-private-regexps-test--node (pairs)
  "Return node's verdicts on PAIRS, a list of (JS-SOURCE . NAME).
Each JS-SOURCE is compiled as the server compiles it."
  (let* ((script "const p=JSON.parse(require('fs').readFileSync(0,'utf8'));process.stdout.write(JSON.stringify(p.map(([s,n])=>new RegExp(s,'iu').test(n))))")
         (input (json-encode (mapcar (lambda (p) (vector (car p) (cdr p))) pairs))))
    (with-temp-buffer
      (insert input)
      (should (eq 0 (call-process-region (point-min) (point-max) "node" t t nil "-e" script)))
      (goto-char (point-min))
      (append (json-read) nil))))

(ert-deftest sly-agent-q-private-regexps-test-node-agrees-with-emacs ()
  "Every translated regexp matches in node exactly the names it matches in Emacs."
  (skip-unless (executable-find "node"))
  (let* ((regexps (append (default-value 'sly-agent-q-private-file-regexps)
                          '("\\.env\\'" "/secrets/" "\\.pem\\'" "^/p/a(b)|c" "/a\\]b\\'" "[]a]b"
                            "/\\(?:id_rsa\\|id_ed25519\\)\\(\\.pub\\)?\\'" "file[[:digit:]]\\.key"
                            "a\\\\b" "\\$HOME" "/p/[^.]+\\'" "x\\{1,2\\}/")))
         (pairs nil) (expected nil))
    (dolist (re regexps)
      (let ((js (sly-agent-q-files-regexp-to-js re)))
        (should js)
        (dolist (name sly-agent-q-private-regexps-test--names)
          (push (cons js name) pairs)
          (push (list re name (let ((case-fold-search t)) (and (string-match-p re name) t))) expected))))
    (let ((got (sly-agent-q-private-regexps-test--node (nreverse pairs))))
      (cl-loop for (re name want) in (nreverse expected)
               for g in got
               do (should (equal (list re name want) (list re name (eq g t))))))))

(ert-deftest sly-agent-q-private-regexps-test-untranslatable-sent-as-such ()
  "A regexp outside the translated part is sent as untranslated, not dropped."
  (let ((sly-agent-q-private-file-regexps '("\\.env\\'" "\\_<secret\\_>" "\\s-key" "\\bword")))
    (let ((config (sly-agent-q-configuration-for-server)))
      (should (equal (plist-get config :privateFilePatterns) ["\\.env$"]))
      (should (equal (plist-get config :privateFilePatternsUntranslated)
                     ["\\_<secret\\_>" "\\s-key" "\\bword"])))))

(provide 'sly-agent-q-private-regexps-test)
;;; sly-agent-q-private-regexps-test.el ends here
