;;; sly-agent-q-install-test.el --- Installing the server with npm, and the version handshake  -*- lexical-binding: t; -*-

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

;; `sly-agent-q-install-server' runs the real npm on a tarball made by
;; `npm pack' of this checkout (no network), into a temporary
;; `sly-agent-q-install-directory'; the installed server is then run.
;; Node or npm missing or too old gives a clear error.  The version
;; handshake: a server of another version is reported with what to run.

;;; Code:

(require 'sly-agent-q-test-helper
         (expand-file-name "sly-agent-q-test-helper"
                           (file-name-directory (or load-file-name buffer-file-name))))

(defun sly-agent-q-install-test--install (tarball dir)
  "Install TARBALL into DIR through the command; return (PROCESS . ERROR)."
  (let* ((sly-agent-q-install-directory dir)
         (result 'waiting)
         (proc (sly-agent-q-install-server tarball (lambda (err) (setq result err)))))
    ;; Asynchronous: the command returned before anything was decided.
    (should (processp proc))
    (should (eq result 'waiting))
    (sly-agent-q-test-wait (lambda () (not (eq result 'waiting))) 120 "npm install to finish")
    (cons proc result)))

(ert-deftest sly-agent-q-install-version-is-package-json-version ()
  "The version the Elisp needs is the npm package's version."
  (let ((pkg (json-read-file (expand-file-name "package.json" sly-agent-q-test-root))))
    (should (equal sly-agent-q-install-server-version (cdr (assq 'version pkg))))
    (should (equal sly-agent-q-install-npm-name (cdr (assq 'name pkg))))
    ;; What npm installs is what the server runs.
    (should (equal (cdr (assq 'sly-agent-q-server (cdr (assq 'bin pkg)))) "dist/sly-agent-q-server.js"))))

(ert-deftest sly-agent-q-install-server-from-npm-pack-tarball ()
  "The command installs the packed server with npm; that server runs and is found."
  (unless (and (executable-find "npm") (sly-agent-q-test-mock-available-p))
    (ert-skip "npm, node or the bundle (make build) is missing"))
  (let* ((tarball (sly-agent-q-test-npm-pack))
         (dir (file-name-as-directory (make-temp-file "agent-q-install" t)))
         (sly-agent-q-install-directory dir))
    (unwind-protect
        (progn
          (should-not (sly-agent-q-install-server-file))
          (should (equal (cdr (sly-agent-q-install-test--install tarball dir)) nil))
          (let ((file (sly-agent-q-install-server-file)))
            (should (string-prefix-p (file-truename dir) (file-truename file)))
            (should (equal (sly-agent-q-install-installed-version) sly-agent-q-install-server-version))
            ;; npm linked the bin, and the installed server runs and says its version.
            (should (file-executable-p (expand-file-name "bin/sly-agent-q-server" dir)))
            (should (string-match-p (concat "sly-agent-q " (regexp-quote sly-agent-q-install-server-version))
                                    (car (process-lines "node" file "--help")))))
          (with-current-buffer sly-agent-q-install-buffer-name
            (should (string-match-p "npm install\\|\\$ .*npm" (buffer-string)))
            (should (string-match-p "^Done: server 0\\.1\\.0 installed" (buffer-string)))))
      (delete-directory dir t)
      (delete-directory (file-name-directory tarball) t))))

(ert-deftest sly-agent-q-install-server-without-npm ()
  "No npm: a clear error naming the option, and nothing started."
  (let ((sly-agent-q-npm-program "sly-agent-q-test-no-such-npm")
        (sly-agent-q-install-directory (make-temp-file "agent-q-install" t)))
    (unwind-protect
        (let ((err (should-error (sly-agent-q-install-server) :type 'user-error)))
          (should (string-match-p "Cannot find npm (.sly-agent-q-npm-program. is \"sly-agent-q-test-no-such-npm\")"
                                  (cadr err))))
      (delete-directory sly-agent-q-install-directory t))))

(ert-deftest sly-agent-q-install-server-node-too-old ()
  "A Node.js older than 20: a clear error, and npm never runs."
  (let* ((dir (make-temp-file "agent-q-install" t))
         (old-node (expand-file-name "node" dir))
         (sly-agent-q-install-directory (expand-file-name "prefix/" dir))
         (sly-agent-q-node-program old-node))
    (unwind-protect
        (progn
          ;; What an old Node says to --version.
          (with-temp-file old-node (insert "#!/bin/sh\necho v18.19.0\n"))
          (set-file-modes old-node #o755)
          (let ((result (cdr (sly-agent-q-install-test--install "sly-agent-q@0.1.0" sly-agent-q-install-directory))))
            (should (stringp result))
            (should (string-match-p "Node.js v18.19.0 (.*/node) is too old: the server needs Node.js 20 or newer"
                                    result)))
          (should-not (file-exists-p (expand-file-name "lib" sly-agent-q-install-directory)))
          (with-current-buffer sly-agent-q-install-buffer-name
            (should-not (string-match-p "npm" (buffer-string)))))
      (delete-directory dir t))))

(ert-deftest sly-agent-q-install-server-install-buffer-killed ()
  "Killing *sly-agent-q install* while npm runs ends the install cleanly.
Killing the buffer ends npm; the end is still reported (the callback
gets a message), the staging directory is removed and the install
already in place is left as it was."
  (let* ((dir (make-temp-file "agent-q-install" t))
         (slow-npm (expand-file-name "npm" dir))
         (prefix (expand-file-name "prefix/" dir))
         (old-server (expand-file-name "lib/node_modules/sly-agent-q/dist/sly-agent-q-server.js" prefix))
         (sly-agent-q-install-directory prefix)
         (sly-agent-q-npm-program slow-npm)
         (result 'waiting))
    (unwind-protect
        (progn
          (with-temp-file slow-npm (insert "#!/bin/sh\necho fetching\nexec sleep 60\n"))
          (set-file-modes slow-npm #o755)
          (make-directory (file-name-directory old-server) t)
          (with-temp-file old-server (insert "// the install in place\n"))
          (sly-agent-q-install-server "sly-agent-q@0.1.0" (lambda (err) (setq result err)))
          (sly-agent-q-test-wait (lambda () (and (process-live-p sly-agent-q-install--process)
                                                 (equal (process-name sly-agent-q-install--process)
                                                        "sly-agent-q-npm-install")))
                                 30 "npm to start")
          (kill-buffer sly-agent-q-install-buffer-name)
          (sly-agent-q-test-wait (lambda () (not (eq result 'waiting))) 30 "the install to end")
          (should (stringp result))
          (should (string-match-p "npm install sly-agent-q@0.1.0 failed" result))
          (should-not (process-live-p sly-agent-q-install--process))
          (should (equal (directory-files dir nil "installing") nil))
          (should (equal (sly-agent-q-install-server-file) old-server)))
      (delete-directory dir t))))

(ert-deftest sly-agent-q-install-server-directory-not-writable ()
  "An install directory that cannot be made: a user-error naming the option, nothing started."
  (let* ((dir (make-temp-file "agent-q-install" t))
         ;; Its parent is a file, so not even root can make it.
         (file (expand-file-name "a-file" dir))
         (sly-agent-q-install-directory (expand-file-name "sly-agent-q/" file))
         (sly-agent-q-install--process nil))
    (unwind-protect
        (progn
          (with-temp-file file (insert "not a directory\n"))
          (let ((err (should-error (sly-agent-q-install-server "sly-agent-q@0.1.0") :type 'user-error)))
            (should (string-match-p "Cannot install the server beside .*a-file/sly-agent-q"
                                    (error-message-string err)))
            (should (string-match-p "sly-agent-q-install-directory" (error-message-string err))))
          (should-not sly-agent-q-install--process))
      (delete-directory dir t))))

(ert-deftest sly-agent-q-install-server-version-not-on-registry ()
  "The registry has the package but not this version (npm's ETARGET, what a
registry answers once an older release is published): said as such, with the ways out."
  (let* ((dir (make-temp-file "agent-q-install" t))
         (npm (expand-file-name "npm" dir))
         (sly-agent-q-install-directory (expand-file-name "prefix/" dir))
         (sly-agent-q-npm-program npm))
    (unwind-protect
        (progn
          ;; What npm 10 prints when the registry has sly-agent-q but not this version.
          (with-temp-file npm
            (insert "#!/bin/sh\necho 'npm error code ETARGET' >&2\n"
                    "echo 'npm error notarget No matching version found for sly-agent-q@9.9.9.' >&2\n"
                    "exit 1\n"))
          (set-file-modes npm #o755)
          (let ((result (cdr (sly-agent-q-install-test--install "sly-agent-q@9.9.9" sly-agent-q-install-directory))))
            (should (stringp result))
            (should (string-match-p "The npm registry has no sly-agent-q@9\\.9\\.9" result))
            (should (string-match-p "C-u M-x sly-agent-q-install-server" result))
            (should (string-match-p "npm pack" result))))
      (delete-directory dir t))))

(ert-deftest sly-agent-q-install-server-not-found-names-the-command ()
  "No server anywhere: the error says which command installs it."
  (let ((sly-agent-q-server-file nil)
        (sly-agent-q-install-directory (make-temp-file "agent-q-install" t)))
    (unwind-protect
        (cl-letf (((symbol-function 'sly-agent-q-locate-package-files) #'ignore))
          (should-not (sly-agent-q-locate-find-server))
          (let ((err (should-error (sly-agent-q-locate-server) :type 'user-error)))
            (should (string-match-p "M-x sly-agent-q-install-server installs it with npm (version 0\\.1\\.0"
                                    (cadr err)))))
      (delete-directory sly-agent-q-install-directory t))))

(ert-deftest sly-agent-q-install-version-handshake ()
  "A server of another version: the user is told what to run."
  (let ((sly-agent-q-install-server-version "9.9.9"))
    (sly-agent-q-test-with-server '((steps . []))
      (let ((problem (sly-agent-q-server-version-problem)))
        ;; The server said its real version at initialize; this checkout's bundle is a `package' one.
        (should (string-match-p "is version 0\\.1\\.0, but this sly-agent-q needs 9\\.9\\.9" problem))
        (should (string-match-p "run `make build'" problem))
        (with-current-buffer "*Warnings*"
          (should (string-search problem (buffer-string))))))
    (should (string-match-p
             "Run M-x sly-agent-q-install-server to install 9\\.9\\.9, then M-x sly-agent-q-restart-server"
             (sly-agent-q-locate-version-advice "0.1.0" '("/x/sly-agent-q-server.js" . installed))))
    (should (string-match-p "Point `sly-agent-q-server-file' at a 9\\.9\\.9 server"
                            (sly-agent-q-locate-version-advice "0.1.0" '("/x/s.js" . setting)))))
  ;; The right version: nothing to say.
  (sly-agent-q-test-with-server '((steps . []))
    (should-not (sly-agent-q-server-version-problem))))

(ert-deftest sly-agent-q-install-left-by-a-kill-is-recovered ()
  "An install moved aside (`.old-') by an Emacs killed before the new one took its place is
found again, and staging directories an old killed install left are removed by the next one,
while a fresh one (another Emacs's install under way) is left alone."
  (let* ((home (file-name-as-directory (make-temp-file "agent-q-install-home" t)))
         (dir (expand-file-name "server/" home))
         (sly-agent-q-install-directory dir)
         (aside (concat (directory-file-name dir) ".old-k1ll3d"))
         (script (expand-file-name "lib/node_modules/sly-agent-q/dist/sly-agent-q-server.js" aside))
         (stale (concat (directory-file-name dir) ".installing-st4le"))
         (fresh (concat (directory-file-name dir) ".installing-fr3sh")))
    (unwind-protect
        (progn
          (make-directory (file-name-directory script) t)
          (write-region "// server" nil script)
          (should (equal (sly-agent-q-install-server-file)
                         (expand-file-name "lib/node_modules/sly-agent-q/dist/sly-agent-q-server.js" dir)))
          (should (file-directory-p dir))
          (should-not (file-exists-p aside))
          (make-directory stale) (make-directory fresh)
          (set-file-times stale (time-subtract nil (* 3 3600)))
          ;; The next install sweeps first (here it then stops: no npm).
          (let ((sly-agent-q-npm-program "saq-no-such-npm"))
            (should-error (sly-agent-q-install-server) :type 'user-error))
          (should-not (file-exists-p stale))
          (should (file-exists-p fresh)))
      (delete-directory home t))))

(provide 'sly-agent-q-install-test)
;;; sly-agent-q-install-test.el ends here
