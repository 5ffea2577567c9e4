;;; sly-agent-q-package-test.el --- The package archive, installed as a user would  -*- lexical-binding: t; -*-

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

;; dist/sly-agent-q-VERSION.tar (built by `make package' from the recipe)
;; is installed with `package-install-file' into an empty
;; `package-user-dir' by a fresh `emacs -Q --batch' that knows nothing of
;; this checkout; that Emacs opens the chat and completes one turn
;; against the mock LLM, using the server and helpers from the installed
;; package.

;;; Code:

(require 'sly-agent-q-test-helper
         (expand-file-name "../elisp/sly-agent-q-test-helper"
                           (file-name-directory (or load-file-name buffer-file-name))))

(defun e2e-package-archive ()
  "The archive `make package' built."
  (car (last (file-expand-wildcards (expand-file-name "dist/sly-agent-q-*.tar" sly-agent-q-test-root)))))

(ert-deftest e2e-package-install-file-and-one-turn ()
  "package-install-file into an empty package-user-dir, then a turn that uses an Emacs tool."
  (let ((archive (e2e-package-archive)))
    (unless archive (ert-fail "No dist/sly-agent-q-*.tar: run make package"))
    (unless (sly-agent-q-test-mock-available-p) (ert-skip "the mock LLM is missing"))
    (let* ((home (file-name-as-directory (make-temp-file "agent-q-user" t)))
           (elpa (expand-file-name "elpa" home))
           (project (file-name-as-directory (expand-file-name "project" home)))
           (url (sly-agent-q-test-start-mock
                 (json-read-file (expand-file-name "test/e2e/scripts/package-install.json" sly-agent-q-test-root))))
           (script (expand-file-name "user.el" home)))
      (make-directory project t)
      (unwind-protect
          (progn
            (with-temp-file script
              (prin1 `(progn
                        (setq package-user-dir ,elpa)
                        (require 'package)
                        ;; The user's conversations stay in this user's directory, not the tester's.
                        (setq sly-agent-q-conversation-directory ,(expand-file-name "conversations/" home))
                        (package-initialize)
                        (package-install-file ,archive)
                        (require 'sly-agent-q)
                        (setq sly-agent-q-provider "anthropic"
                              sly-agent-q-base-url ,url
                              sly-agent-q-api-key "test-key"
                              sly-agent-q-project-root ,project)
                        (sly-agent-q)
                        (let ((deadline (+ (float-time) 60)) outcome)
                          (sly-agent-q-send "Where am I?" (lambda (o) (setq outcome o)))
                          (while (and (not outcome) (< (float-time) deadline))
                            (accept-process-output nil 0.05))
                          (princ (format "STATUS=%s\nLIBRARY=%s\nSERVER=%s\nHELPERS=%s\nTEXT=%s\n"
                                         (plist-get outcome :status)
                                         (locate-library "sly-agent-q")
                                         (sly-agent-q-locate-server)
                                         (file-exists-p (expand-file-name
                                                         "lisp-cl/load.lisp"
                                                         (file-name-directory (locate-library "sly-agent-q"))))
                                         (plist-get outcome :text)))
                          (sly-agent-q-server-stop)))
                     (current-buffer)))
            (let* ((out (with-temp-buffer
                          (call-process (expand-file-name invocation-name invocation-directory)
                                        nil t nil "-Q" "--batch" "-l" script)
                          (buffer-string)))
                   (field (lambda (name)
                            (and (string-match (format "^%s=\\(.*\\)$" name) out) (match-string 1 out)))))
              (should (equal (funcall field "STATUS") "finished"))
              (should (string-prefix-p (file-truename elpa) (file-truename (funcall field "LIBRARY"))))
              (should (string-prefix-p (file-truename elpa) (file-truename (funcall field "SERVER"))))
              (should (equal (funcall field "HELPERS") "t"))
              ;; current_directory ran in the installed package's Emacs tools.
              (should (string-match-p (regexp-quote (directory-file-name project)) out))))
        (sly-agent-q-test-stop-mock)
        (delete-directory home t)))))

;;;; Built from the git tree alone, the server installed with npm

(defvar e2e-package-git-build nil
  "The archive built from a clean `git archive' of HEAD, once per run.")

(defun e2e-package-from-git ()
  "Build the package from a clean `git archive' of HEAD with the recipe; return the archive."
  (or (and e2e-package-git-build (file-exists-p e2e-package-git-build) e2e-package-git-build)
      (let* ((default-directory (file-name-as-directory sly-agent-q-test-root))
             (work (make-temp-file "agent-q-git-archive" t))
             (src (expand-file-name "src" work)))
        (unless (zerop (call-process "git" nil nil nil "rev-parse" "--verify" "HEAD"))
          (ert-skip "not a git checkout"))
        (make-directory src)
        (unless (zerop (call-process-shell-command
                        (format "git archive --format=tar HEAD | tar -xf - -C %s" (shell-quote-argument src))))
          (error "git archive failed"))
        ;; Nothing built is in a clean tree: the package must come from tracked files only.
        (should-not (file-exists-p (expand-file-name "dist" src)))
        (with-temp-buffer
          (unless (zerop (call-process (expand-file-name invocation-name invocation-directory) nil t nil
                                       "-Q" "--batch" "-l" (expand-file-name "scripts/make-package.el" src)
                                       "--eval" (format "(sly-agent-q-make-package-build %S %S)"
                                                        src (expand-file-name "out" work))))
            (error "Building the package from the git archive failed: %s" (buffer-string))))
        (setq e2e-package-git-build
              (car (file-expand-wildcards (expand-file-name "out/sly-agent-q-*.tar" work)))))))

(defun e2e-package-run-user (forms)
  "Run FORMS in a fresh `emacs -Q --batch'; return its output.
Conversations it holds are saved into a directory of its own."
  (let ((script (make-temp-file "agent-q-user" nil ".el"))
        (conversations (file-name-as-directory (make-temp-file "agent-q-conversations" t))))
    (unwind-protect
        (progn
          (with-temp-file script
            (prin1 `(progn (setq sly-agent-q-conversation-directory ,conversations) ,@forms)
                   (current-buffer)))
          (with-temp-buffer
            (call-process (expand-file-name invocation-name invocation-directory)
                          nil t nil "-Q" "--batch" "-l" script)
            (buffer-string)))
      (delete-file script)
      (delete-directory conversations t))))

(defun e2e-package-field (name out)
  "The value of the line NAME=VALUE in OUT."
  (and (string-match (format "^%s=\\(.*\\)$" name) out) (match-string 1 out)))

(defconst e2e-package-wait-form
  '(defun e2e-wait (pred seconds)
     (let ((deadline (+ (float-time) seconds)))
       (while (and (not (funcall pred)) (< (float-time) deadline))
         (accept-process-output nil 0.05))))
  "The form defining, in the user's Emacs, a wait for PRED of at most SECONDS.")

(defun e2e-package-install-form (spec label)
  "The form installing the server from SPEC in the user's Emacs and printing LABEL=its result."
  `(let ((result 'waiting))
     (sly-agent-q-install-server ,spec (lambda (e) (setq result e)))
     (e2e-wait (lambda () (not (eq result 'waiting))) 120)
     (princ (format "%s=%S\n" ,label result))))

(defun e2e-package-user-setup (elpa install-dir archive)
  "Forms installing ARCHIVE into ELPA and setting the server's install directory INSTALL-DIR."
  `(;; Before package.el loads, so that its other directories (gnupg) are the user's of this test too.
    (setq package-user-dir ,elpa)
    (require 'package)
    (package-initialize)
    (package-install-file ,archive)
    (require 'sly-agent-q)
    (setq sly-agent-q-install-directory ,install-dir)
    ,e2e-package-wait-form))

(ert-deftest e2e-package-from-git-archive-installs-server-and-one-turn ()
  "The recipe's package, built from a clean git archive, has no server; the install command
installs it from an npm pack tarball, and a turn completes against the mock."
  (unless (and (executable-find "npm") (sly-agent-q-test-mock-available-p))
    (ert-skip "npm, node or the bundle (make build) is missing"))
  (let* ((archive (e2e-package-from-git))
         (tarball (sly-agent-q-test-npm-pack))
         (home (file-name-as-directory (make-temp-file "agent-q-user" t)))
         (elpa (expand-file-name "elpa" home))
         (install-dir (file-name-as-directory (expand-file-name "server" home)))
         (project (file-name-as-directory (expand-file-name "project" home)))
         (url (sly-agent-q-test-start-mock
               (json-read-file (expand-file-name "test/e2e/scripts/package-install.json" sly-agent-q-test-root)))))
    (make-directory project t)
    (unwind-protect
        (let ((out (e2e-package-run-user
                    (append
                     (e2e-package-user-setup elpa install-dir archive)
                     `((setq sly-agent-q-provider "anthropic"
                             sly-agent-q-base-url ,url
                             sly-agent-q-api-key "test-key"
                             sly-agent-q-project-root ,project)
                       ;; No server yet: the error says what to run.
                       (let (before)
                         (sly-agent-q-server-ensure (lambda (_c e) (setq before e)))
                         (princ (format "BEFORE=%s\n" before)))
                       ,(e2e-package-install-form tarball "INSTALL")
                       (sly-agent-q)
                       (let (outcome)
                         (sly-agent-q-send "Where am I?" (lambda (o) (setq outcome o)))
                         (e2e-wait (lambda () outcome) 60)
                         (princ (format "STATUS=%s\nLIBRARY=%s\nFOUND=%S\nPROBLEM=%S\nHELPERS=%s\nTEXT=%s\n"
                                        (plist-get outcome :status)
                                        (locate-library "sly-agent-q")
                                        (sly-agent-q-locate-find-server)
                                        (sly-agent-q-server-version-problem)
                                        (file-exists-p (expand-file-name
                                                        "lisp-cl/load.lisp"
                                                        (file-name-directory (locate-library "sly-agent-q"))))
                                        (plist-get outcome :text))))
                       (sly-agent-q-server-stop))))))
          (should (string-match-p "BEFORE=The sly-agent-q server is not installed: M-x sly-agent-q-install-server" out))
          (should (equal (e2e-package-field "INSTALL" out) "nil"))
          (should (equal (e2e-package-field "STATUS" out) "finished"))
          (should (string-prefix-p (file-truename elpa) (file-truename (e2e-package-field "LIBRARY" out))))
          ;; The server that ran is the installed one, of the version the Elisp needs.
          (should (string-match-p (concat "^FOUND=(\"" (regexp-quote (file-truename install-dir)) ".*sly-agent-q-server\\.js\" \\. installed)$")
                                  out))
          (should (equal (e2e-package-field "PROBLEM" out) "nil"))
          (should (equal (e2e-package-field "HELPERS" out) "t"))
          (should (string-match-p (regexp-quote (directory-file-name project)) out)))
      (sly-agent-q-test-stop-mock)
      (delete-directory home t)
      (delete-directory (file-name-directory tarball) t))))

(ert-deftest e2e-package-installed-server-of-another-version ()
  "The installed server reports another version at initialize: the user is told what to run."
  (unless (and (executable-find "npm") (sly-agent-q-test-mock-available-p))
    (ert-skip "npm, node or the bundle (make build) is missing"))
  (let* ((archive (e2e-package-from-git))
         (tarball (sly-agent-q-test-npm-pack "0.0.9"))
         (home (file-name-as-directory (make-temp-file "agent-q-user" t)))
         (elpa (expand-file-name "elpa" home))
         (install-dir (file-name-as-directory (expand-file-name "server" home))))
    (unwind-protect
        (let ((out (e2e-package-run-user
                    (append
                     (e2e-package-user-setup elpa install-dir archive)
                     `(,(e2e-package-install-form tarball "INSTALL")
                       (princ (format "INSTALLED=%s\n" (sly-agent-q-install-installed-version)))
                       (let (ready)
                         (sly-agent-q-server-ensure (lambda (c e) (setq ready (or c e))))
                         (e2e-wait (lambda () ready) 30))
                       (princ (format "PROBLEM=%s\n" (sly-agent-q-server-version-problem)))
                       (princ (format "WARNINGS=%s\n"
                                      (with-current-buffer (get-buffer-create "*Warnings*")
                                        (replace-regexp-in-string "\n" " " (buffer-string)))))
                       (sly-agent-q-server-stop))))))
          (should (equal (e2e-package-field "INSTALL" out) "nil"))
          (should (equal (e2e-package-field "INSTALLED" out) "0.0.9"))
          (let ((problem (e2e-package-field "PROBLEM" out)))
            ;; The version came from the running server, and the advice names the command.
            (should (string-match-p "is version 0\\.0\\.9, but this sly-agent-q needs 0\\.1\\.0\\." problem))
            (should (string-match-p "Run M-x sly-agent-q-install-server to install 0\\.1\\.0, then M-x sly-agent-q-restart-server\\."
                                    problem))
            (should (string-search problem (e2e-package-field "WARNINGS" out)))))
      (delete-directory home t)
      (delete-directory (file-name-directory tarball) t))))

;;;; What the chat says about the server, before and after its install

(ert-deftest e2e-package-chat-after-install-says-installed ()
  "The chat opened before the server was installed said it is not installed; once
`sly-agent-q-install-server' installed it, the chat no longer says so, but that it is installed,
and the next message runs against it."
  (unless (and (executable-find "npm") (sly-agent-q-test-mock-available-p))
    (ert-skip "npm, node or the bundle (make build) is missing"))
  (let* ((archive (e2e-package-from-git))
         (tarball (sly-agent-q-test-npm-pack))
         (home (file-name-as-directory (make-temp-file "agent-q-user" t)))
         (elpa (expand-file-name "elpa" home))
         (install-dir (file-name-as-directory (expand-file-name "server" home)))
         (project (file-name-as-directory (expand-file-name "project" home)))
         (url (sly-agent-q-test-start-mock
               (json-read-file (expand-file-name "test/e2e/scripts/package-install.json" sly-agent-q-test-root)))))
    (make-directory project t)
    (unwind-protect
        (let* ((chat-text '(with-current-buffer "*sly-agent-q*"
                             (replace-regexp-in-string "\n" "\\\\n" (buffer-substring-no-properties
                                                                     (point-min) (point-max)))))
               (out (e2e-package-run-user
                     (append
                      (e2e-package-user-setup elpa install-dir archive)
                      `((setq sly-agent-q-provider "anthropic" sly-agent-q-base-url ,url
                              sly-agent-q-api-key "test-key" sly-agent-q-project-root ,project)
                        ;; The chat opened, and a message sent, with no server yet.
                        (sly-agent-q)
                        (let (outcome)
                          (sly-agent-q-send "Where am I?" (lambda (o) (setq outcome o)))
                          (e2e-wait (lambda () outcome) 30)
                          (princ (format "FIRST=%s\n" (plist-get outcome :status))))
                        (princ (format "BEFORE=%s\n" ,chat-text))
                        ,(e2e-package-install-form tarball "INSTALL")
                        (princ (format "AFTER=%s\n" ,chat-text))
                        (let (outcome)
                          (sly-agent-q-send "Where am I now?" (lambda (o) (setq outcome o)))
                          (e2e-wait (lambda () outcome) 60)
                          (princ (format "SECOND=%s\n" (plist-get outcome :status))))
                        (sly-agent-q-server-stop)))))
               (before (e2e-package-field "BEFORE" out))
               (after (e2e-package-field "AFTER" out)))
          (should (equal (e2e-package-field "FIRST" out) "failed"))
          (should (string-match-p "server is not installed" before))
          (should (equal (e2e-package-field "INSTALL" out) "nil"))
          ;; Installed: nothing in the chat says otherwise, and it says what is true now.
          (should-not (string-match-p "not installed" after))
          (should (string-match-p "server 0\\.1\\.0 is installed" after))
          ;; The conversation before the install is still there.
          (should (string-match-p "You: Where am I\\?" after))
          (should (equal (e2e-package-field "SECOND" out) "finished")))
      (sly-agent-q-test-stop-mock)
      (delete-directory home t)
      (delete-directory (file-name-directory tarball) t))))

;;;; The npm route: published to a real registry on loopback, installed as a user installs it

(defun e2e-package-verdaccio ()
  "The verdaccio bin of scripts/ensure-verdaccio.sh (SAQ_VERDACCIO, or .deps/), or nil."
  (let ((bin (or (getenv "SAQ_VERDACCIO")
                 (expand-file-name ".deps/verdaccio/node_modules/.bin/verdaccio" sly-agent-q-test-root))))
    (and (file-executable-p bin) bin)))

(defun e2e-package-start-registry (dir)
  "Start a registry with its storage in DIR; return (PROCESS URL NPMRC)."
  (let* ((out (generate-new-buffer " *registry*"))
         (proc (make-process :name "saq-registry" :buffer out :noquery t :connection-type 'pipe
                             :command (list "node" (expand-file-name "test/fixtures/npm-registry/registry.mjs"
                                                                     sly-agent-q-test-root)
                                            (e2e-package-verdaccio) dir)))
         (deadline (+ (float-time) 90)))
    (while (and (process-live-p proc) (< (float-time) deadline)
                (not (with-current-buffer out (save-excursion (goto-char (point-min))
                                                              (re-search-forward "^READY .*\n" nil t)))))
      (accept-process-output proc 0.2))
    (with-current-buffer out
      (goto-char (point-min))
      (unless (re-search-forward "^READY \\([^ ]+\\) \\(.+\\)$" nil t)
        (error "The registry did not start: %s" (buffer-string)))
      (list proc (match-string 1) (match-string 2)))))

(defun e2e-package-npm (npmrc &rest args)
  "Run npm with ARGS in the checkout, configured by NPMRC; return (STATUS . OUTPUT)."
  (with-temp-buffer
    (let* ((default-directory (file-name-as-directory sly-agent-q-test-root))
           (process-environment (cons (concat "npm_config_userconfig=" npmrc) process-environment))
           (status (apply #'call-process "npm" nil t nil args)))
      (cons status (buffer-string)))))

(defun e2e-package-install-forms (label)
  "Forms that run `sly-agent-q-install-server' with no spec and print LABEL=result and what is installed."
  `((let ((result 'waiting))
      (sly-agent-q-install-server nil (lambda (e) (setq result e)))
      (e2e-wait (lambda () (not (eq result 'waiting))) 180)
      (princ (format "%s=%s\n%s-INSTALLED=%s\n%s-LEFT=%S\n"
                     ,label (if (stringp result) (replace-regexp-in-string "\n" " " result) result)
                     ,label (sly-agent-q-install-installed-version)
                     ,label (directory-files (file-name-directory
                                              (directory-file-name sly-agent-q-install-directory))
                                             nil "\\.\\(installing\\|old\\)-"))))))

(ert-deftest e2e-package-npm-registry-route ()
  "The server's package published to a real npm registry (verdaccio on loopback) as a release
would be; M-x sly-agent-q-install-server with no argument then installs the pinned version from it
and a turn completes. Before the publish, the registry's 404 gives a message naming every other way,
and leaves the server installed before untouched; an unreachable registry says so."
  (unless (and (executable-find "npm") (sly-agent-q-test-mock-available-p) (e2e-package-verdaccio))
    (ert-skip "npm, the bundle or verdaccio (scripts/ensure-verdaccio.sh) is missing"))
  (let* ((archive (e2e-package-from-git))
         (old-tarball (sly-agent-q-test-npm-pack "0.0.9"))
         (home (file-name-as-directory (make-temp-file "agent-q-user" t)))
         (registry-dir (make-temp-file "agent-q-registry" t))
         (registry (e2e-package-start-registry registry-dir))
         (url (nth 1 registry)) (npmrc (nth 2 registry))
         (elpa (expand-file-name "elpa" home))
         (install-dir (file-name-as-directory (expand-file-name "server" home)))
         (project (file-name-as-directory (expand-file-name "project" home)))
         (closed (let* ((p (make-network-process :name "saq-closed" :server t :host "127.0.0.1" :service t))
                        (port (process-contact p :service)))
                   (delete-process p) port))
         (mock (sly-agent-q-test-start-mock
                (json-read-file (expand-file-name "test/e2e/scripts/package-install.json" sly-agent-q-test-root)))))
    (make-directory project t)
    (unwind-protect
        (let* ((process-environment (append (list (concat "npm_config_userconfig=" npmrc)
                                                  ;; The user's npm, pointed at the registry.
                                                  (concat "npm_config_registry=" url)
                                                  "npm_config_fetch_retries=0")
                                            process-environment))
               (before (e2e-package-run-user
                        (append
                         (e2e-package-user-setup elpa install-dir archive)
                         (list (e2e-package-install-form old-tarball "OLD"))
                         (e2e-package-install-forms "MISSING"))))
               (unreachable (let ((process-environment
                                   (cons (format "npm_config_registry=http://127.0.0.1:%d/" closed)
                                         process-environment)))
                              (e2e-package-run-user
                               (append (e2e-package-user-setup elpa install-dir archive)
                                       (e2e-package-install-forms "UNREACHABLE")))))
               (published (e2e-package-npm npmrc "publish"))
               (after (e2e-package-run-user
                       (append
                        (e2e-package-user-setup elpa install-dir archive)
                        (e2e-package-install-forms "REGISTRY")
                        `((setq sly-agent-q-provider "anthropic" sly-agent-q-base-url ,mock
                                sly-agent-q-api-key "test-key" sly-agent-q-project-root ,project)
                          (sly-agent-q)
                          (let (outcome)
                            (sly-agent-q-send "Where am I?" (lambda (o) (setq outcome o)))
                            (e2e-wait (lambda () outcome) 60)
                            (princ (format "STATUS=%s\nFOUND=%S\nPROBLEM=%S\n"
                                           (plist-get outcome :status) (sly-agent-q-locate-find-server)
                                           (sly-agent-q-server-version-problem))))
                          (sly-agent-q-server-stop))))))
          (should (equal (e2e-package-field "OLD" before) "nil"))
          ;; 404: what happened, and every way out; the old install is whole, nothing half-made is left.
          (let ((missing (e2e-package-field "MISSING" before)))
            (should (string-match-p "The npm registry has no sly-agent-q@0\\.1\\.0 (404)" missing))
            (should (string-match-p "C-u M-x sly-agent-q-install-server" missing))
            (should (string-match-p "npm pack" missing))
            (should (string-match-p "make package" missing)))
          (should (equal (e2e-package-field "MISSING-INSTALLED" before) "0.0.9"))
          (should (equal (e2e-package-field "MISSING-LEFT" before) "nil"))
          (should (string-match-p "could not be reached"
                                  (e2e-package-field "UNREACHABLE" unreachable)))
          (should (equal (e2e-package-field "UNREACHABLE-INSTALLED" unreachable) "0.0.9"))
          (should (equal (e2e-package-field "UNREACHABLE-LEFT" unreachable) "nil"))
          ;; Published as a release is, then installed by the command with no argument.
          (should (equal (car published) 0))
          (should (string-match-p "sly-agent-q@0\\.1\\.0" (cdr published)))
          (should (equal (e2e-package-field "REGISTRY" after) "nil"))
          (should (equal (e2e-package-field "REGISTRY-INSTALLED" after) "0.1.0"))
          (should (equal (e2e-package-field "REGISTRY-LEFT" after) "nil"))
          (should (equal (e2e-package-field "STATUS" after) "finished"))
          (should (string-match-p (concat "^FOUND=(\"" (regexp-quote (file-truename install-dir))
                                          ".*sly-agent-q-server\\.js\" \\. installed)$")
                                  after))
          (should (equal (e2e-package-field "PROBLEM" after) "nil")))
      (sly-agent-q-test-stop-mock)
      (when (process-live-p (car registry)) (process-send-eof (car registry)))
      (sleep-for 0.5)
      (when (process-live-p (car registry)) (delete-process (car registry)))
      (delete-directory home t)
      (delete-directory registry-dir t)
      (delete-directory (file-name-directory old-tarball) t))))

;;;; package-vc-install from the repository (Emacs 29 and newer)

(ert-deftest e2e-package-vc-install-from-the-repository ()
  "`package-vc-install' of the repository (here a clone of this checkout's HEAD) with its Lisp in
lisp-elisp/: the package loads, says how to get the server, installs it and completes a turn."
  (unless (fboundp 'package-vc-install)
    (ert-skip "package-vc-install is in Emacs 29 and newer"))
  (unless (and (executable-find "npm") (executable-find "git") (sly-agent-q-test-mock-available-p))
    (ert-skip "npm, git or the bundle (make build) is missing"))
  (let* ((home (file-name-as-directory (make-temp-file "agent-q-user" t)))
         (repo (expand-file-name "repo" home))
         (elpa (expand-file-name "elpa" home))
         (install-dir (file-name-as-directory (expand-file-name "server" home)))
         (project (file-name-as-directory (expand-file-name "project" home)))
         (tarball (sly-agent-q-test-npm-pack))
         (url (sly-agent-q-test-start-mock
               (json-read-file (expand-file-name "test/e2e/scripts/package-install.json" sly-agent-q-test-root)))))
    (make-directory project t)
    ;; The repository as a user's clone source: this checkout's committed HEAD, nothing built.
    (should (zerop (call-process "git" nil nil nil "clone" "--quiet" "--no-hardlinks"
                                 sly-agent-q-test-root repo)))
    (unwind-protect
        (let ((out (e2e-package-run-user
                    `((setq package-user-dir ,elpa)
                      (require 'package)
                      (require 'package-vc)
                      (package-initialize)
                      (package-vc-install '(sly-agent-q :url ,repo :lisp-dir "lisp-elisp"))
                      (require 'sly-agent-q)
                      ,e2e-package-wait-form
                      (setq sly-agent-q-install-directory ,install-dir
                            sly-agent-q-provider "anthropic" sly-agent-q-base-url ,url
                            sly-agent-q-api-key "test-key" sly-agent-q-project-root ,project)
                      (princ (format "LIBRARY=%s\n" (locate-library "sly-agent-q")))
                      (princ (format "BEFORE=%s\n" (condition-case e (sly-agent-q-locate-server)
                                                      (user-error (error-message-string e)))))
                      ,(e2e-package-install-form tarball "INSTALL")
                      (sly-agent-q)
                      (let (outcome)
                        (sly-agent-q-send "Where am I?" (lambda (o) (setq outcome o)))
                        (e2e-wait (lambda () outcome) 60)
                        (princ (format "STATUS=%s\nHELPERS=%s\n" (plist-get outcome :status)
                                       (file-exists-p (expand-file-name
                                                       "../lisp-cl/load.lisp"
                                                       (file-name-directory (locate-library "sly-agent-q")))))))
                      (sly-agent-q-server-stop)))))
          (should (string-prefix-p (file-truename elpa) (file-truename (e2e-package-field "LIBRARY" out))))
          (should (string-match-p "not installed: M-x sly-agent-q-install-server" (e2e-package-field "BEFORE" out)))
          (should (equal (e2e-package-field "INSTALL" out) "nil"))
          (should (equal (e2e-package-field "STATUS" out) "finished"))
          (should (equal (e2e-package-field "HELPERS" out) "t")))
      (sly-agent-q-test-stop-mock)
      (delete-directory home t)
      (delete-directory (file-name-directory tarball) t))))

(provide 'sly-agent-q-package-test)
;;; sly-agent-q-package-test.el ends here
