;;; sly-agent-q-tools-test.el --- Tests of the buffer and file tools  -*- lexical-binding: t; -*-

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

;; ERT tests of sly-agent-q-tools.el and sly-agent-q-files.el.  Each
;; test works in a fresh temporary directory used as the project root.
;; Run with (from the repository root):
;;
;;   test/elisp/run.sh test/elisp/sly-agent-q-tools-test.el
;;
;; which runs Emacs -Q in batch mode with -L lisp-elisp -L test/elisp.

;;; Code:

(require 'ert)
(require 'cl-lib)
(require 'sly-agent-q-tools)

(defvar sly-agent-q-approval-function)

(defvar sly-agent-q-tools-test--root nil
  "The project root of the running test.")

(defun sly-agent-q-tools-test--cleanup (root)
  "Kill the buffers visiting files under ROOT and delete ROOT."
  (dolist (b (buffer-list))
    (let ((file (buffer-local-value 'buffer-file-name b)))
      (when (and file (string-prefix-p (file-truename root) (file-truename file)))
        (with-current-buffer b (set-buffer-modified-p nil))
        (kill-buffer b))))
  (dolist (b (buffer-list))
    (when (string-prefix-p "saq-test" (buffer-name b))
      (with-current-buffer b (set-buffer-modified-p nil))
      (kill-buffer b)))
  (when (file-directory-p root)
    (set-file-modes root #o700)
    (delete-directory root t)))

(defmacro sly-agent-q-tools-test--with-project (&rest body)
  "Run BODY with a fresh temporary project root in `sly-agent-q-tools-test--root'."
  (declare (indent 0) (debug t))
  `(let* ((sly-agent-q-tools-test--root
           (file-name-as-directory (file-truename (make-temp-file "saq-root-" t))))
          (sly-agent-q-project-root sly-agent-q-tools-test--root)
          (sly-agent-q-allowed-directories nil)
          (sly-agent-q-read-only-paths '(".git"))
          (sly-agent-q-approval-function nil)
          (sly-agent-q-tools-max-chars 20000)
          (sly-agent-q-tools-max-lines 2000)
          (sly-agent-q-files-default-buffer-function
           #'sly-agent-q-files-last-user-buffer)
          (default-directory sly-agent-q-tools-test--root))
     (unwind-protect
         (progn ,@body)
       (sly-agent-q-tools-test--cleanup sly-agent-q-tools-test--root))))

(defun sly-agent-q-tools-test--file (name)
  "Return the absolute name of NAME in the test root."
  (expand-file-name name sly-agent-q-tools-test--root))

(defun sly-agent-q-tools-test--write (name text &optional coding)
  "Write TEXT to NAME in the test root, encoded in CODING (default utf-8-unix)."
  (let ((file (sly-agent-q-tools-test--file name)))
    (make-directory (file-name-directory file) t)
    (let ((coding-system-for-write (or coding 'utf-8-unix)))
      (write-region text nil file nil 'silent))
    file))

(defun sly-agent-q-tools-test--contents (name &optional coding)
  "Return the text of NAME in the test root, decoded with CODING."
  (with-temp-buffer
    (let ((coding-system-for-read coding))
      (insert-file-contents (sly-agent-q-tools-test--file name)))
    (buffer-string)))

(defun sly-agent-q-tools-test--bytes (name)
  "Return the raw bytes of NAME in the test root as a unibyte string."
  (with-temp-buffer
    (set-buffer-multibyte nil)
    (insert-file-contents-literally (sly-agent-q-tools-test--file name))
    (buffer-string)))

(defun sly-agent-q-tools-test--call (capability &rest args)
  "Call CAPABILITY with ARGS; check the callback ran once; return (CONTENT ERROR).
A capability that answers later (the hunks of an edit come from the
server) is waited for."
  (let ((calls 0) content error
        (deadline (+ (float-time) 20)))
    (sly-agent-q-tool-call-run capability args
                            (lambda (c e) (cl-incf calls) (setq content c error e)))
    (while (and (= calls 0) (< (float-time) deadline))
      (accept-process-output nil 0.05))
    (should (= calls 1))
    (if error
        (progn (should (stringp error)) (should (null content)))
      (should (stringp content)))
    (list content error)))

(defun sly-agent-q-tools-test--ok (capability &rest args)
  "Call CAPABILITY with ARGS, check it succeeded and return its content."
  (let ((result (apply #'sly-agent-q-tools-test--call capability args)))
    (should-not (cadr result))
    (car result)))

(defun sly-agent-q-tools-test--fails (capability &rest args)
  "Call CAPABILITY with ARGS, check it failed and return the message."
  (let ((result (apply #'sly-agent-q-tools-test--call capability args)))
    (should (cadr result))
    (cadr result)))

(defun sly-agent-q-tools-test--temp-files ()
  "Return the agent's temporary files left anywhere under the test root."
  (cl-remove-if-not (lambda (f) (string-match-p "\\.sly-agent-q-" f))
                    (directory-files-recursively sly-agent-q-tools-test--root "" t)))

(defun sly-agent-q-tools-test--lines (n &optional fmt)
  "Return N lines \"line I\" (or FMT with I) each ending in a newline."
  (mapconcat (lambda (i) (format (or fmt "line %d\n") i)) (number-sequence 1 n) ""))

;;;; Dispatch

(ert-deftest sly-agent-q-tools-test-unknown-capability ()
  (sly-agent-q-tools-test--with-project
    (should (string-match-p "no tool capability \"frobnicate\""
                            (sly-agent-q-tools-test--fails "frobnicate")))
    (let ((calls 0) error)
      (sly-agent-q-tool-call-run "read_file" 42 (lambda (_c e) (cl-incf calls) (setq error e)))
      (should (= calls 1))
      (should (string-match-p "JSON object" error)))))

(ert-deftest sly-agent-q-tools-test-callback-errors-do-not-escape ()
  (sly-agent-q-tools-test--with-project
    (sly-agent-q-tools-test--write "a.txt" "hello\n")
    (let ((calls 0))
      (should-not (sly-agent-q-tool-call-run "read_file" '(:path "a.txt")
                                          (lambda (_c _e) (cl-incf calls) (error "Boom"))))
      (should (= calls 1)))))

(ert-deftest sly-agent-q-tools-test-internal-errors-become-messages ()
  (sly-agent-q-tools-test--with-project
    (cl-letf (((symbol-function 'sly-agent-q-tools--current-directory)
               (lambda (&rest _) (error "Something broke"))))
      (should (string-match-p "current_directory failed in Emacs: Something broke"
                              (sly-agent-q-tools-test--fails "current_directory"))))))

(ert-deftest sly-agent-q-tools-test-arguments-by-name ()
  "Handlers take the catalog's parameters by name; the server checked their types.
A wrong type or a missing parameter is refused by the server before
it reaches Emacs (test/server/catalog-validation.test.ts)."
  (sly-agent-q-tools-test--with-project
    (sly-agent-q-tools-test--write "a.txt" "one\ntwo\nthree\n")
    (should (string-match-p "\\[a.txt: lines 2-2 of 3\\]\ntwo"
                            (car (sly-agent-q-tools-test--call "read_file" :path "a.txt"
                                                               :offset 2 :limit 1))))
    ;; A name the handler does not take is refused, naming those it takes.
    (should (string-match-p "read_file failed in Emacs: .*:nonsense.*(:path :offset :limit)"
                            (sly-agent-q-tools-test--fails "read_file" :path "a.txt" :nonsense 1)))
    ;; JSON false arrives as :json-false and means nil.
    (should (string-match-p "Wrote"
                            (car (sly-agent-q-tools-test--call "write_file" :path "b.txt"
                                                               :content "x" :append :json-false))))
    (should (equal (sly-agent-q-tools-test--contents "b.txt") "x"))))

;;;; Confinement

(ert-deftest sly-agent-q-tools-test-path-escapes-refused ()
  (sly-agent-q-tools-test--with-project
    (let ((outside (file-name-as-directory (make-temp-file "saq-outside-" t))))
      (unwind-protect
          (progn
            (with-temp-file (expand-file-name "secret.txt" outside) (insert "secret\n"))
            (sly-agent-q-tools-test--write "sub/a.txt" "inside\n")
            ;; `..' leaving the root.
            (should (string-match-p "outside the project root"
                                    (sly-agent-q-tools-test--fails "read_file" :path "../x.txt")))
            (should (string-match-p "outside the project root"
                                    (sly-agent-q-tools-test--fails "read_file" :path "sub/../../x.txt")))
            ;; `..' staying inside is fine.
            (should (string-match-p "inside" (sly-agent-q-tools-test--ok "read_file" :path "sub/../sub/a.txt")))
            ;; Absolute paths outside.
            (should (string-match-p "outside the project root"
                                    (sly-agent-q-tools-test--fails
                                     "read_file" :path (expand-file-name "secret.txt" outside))))
            (should (string-match-p "outside the project root"
                                    (sly-agent-q-tools-test--fails "write_file" :path "/tmp/saq-nope.txt"
                                                            :content "x")))
            (should-not (file-exists-p "/tmp/saq-nope.txt"))
            ;; Absolute paths inside are fine.
            (should (string-match-p "inside" (sly-agent-q-tools-test--ok
                                              "read_file" :path (sly-agent-q-tools-test--file "sub/a.txt"))))
            ;; A symbolic link to a file outside.
            (make-symbolic-link (expand-file-name "secret.txt" outside)
                                (sly-agent-q-tools-test--file "link.txt"))
            (let ((msg (sly-agent-q-tools-test--fails "read_file" :path "link.txt")))
              (should (string-match-p "outside the project root" msg))
              (should (string-match-p "resolves to" msg)))
            (should (sly-agent-q-tools-test--fails "write_file" :path "link.txt" :content "pwned"))
            ;; A symbolic link to a directory outside, and a new file through it.
            (make-symbolic-link outside (sly-agent-q-tools-test--file "out"))
            (should (sly-agent-q-tools-test--fails "read_file" :path "out/secret.txt"))
            (should (sly-agent-q-tools-test--fails "write_file" :path "out/new.txt" :content "x"))
            (should-not (file-exists-p (expand-file-name "new.txt" outside)))
            ;; A dangling link pointing outside is not followed for a write.
            (make-symbolic-link (expand-file-name "dangling.txt" outside)
                                (sly-agent-q-tools-test--file "dangle.txt"))
            (should (sly-agent-q-tools-test--fails "write_file" :path "dangle.txt" :content "x"))
            (should-not (file-exists-p (expand-file-name "dangling.txt" outside)))
            (should (sly-agent-q-tools-test--fails "file_exists" :path "out/secret.txt"))
            (should (sly-agent-q-tools-test--fails "directory_list" :directory_path ".."))
            (should (equal "secret\n" (with-temp-buffer
                                        (insert-file-contents (expand-file-name "secret.txt" outside))
                                        (buffer-string))))
            ;; `~' is the home directory, outside the root, and said so.
            (should (string-match-p "~/x.txt is outside the project root.*`~' is the home directory"
                                    (sly-agent-q-tools-test--fails "read_file" :path "~/x.txt")))
            ;; Allowed directories widen the roots.
            (let ((sly-agent-q-allowed-directories (list outside)))
              (should (string-match-p "secret" (sly-agent-q-tools-test--ok
                                                "read_file" :path (expand-file-name "secret.txt" outside))))
              (should (string-match-p "secret" (sly-agent-q-tools-test--ok "read_file" :path "link.txt")))))
        (delete-directory outside t)))))

(ert-deftest sly-agent-q-tools-test-private-files-and-root ()
  (sly-agent-q-tools-test--with-project
    (sly-agent-q-tools-test--write ".ssh/id_ed25519" "PRIVATE KEY\n")
    (sly-agent-q-tools-test--write ".authinfo" "machine x password y\n")
    (should (string-match-p "credentials"
                            (sly-agent-q-tools-test--fails "read_file" :path ".ssh/id_ed25519")))
    (should (string-match-p "credentials"
                            (sly-agent-q-tools-test--fails "read_file" :path ".authinfo")))
    (should (sly-agent-q-tools-test--fails "write_file" :path ".ssh/authorized_keys" :content "x"))
    (should-not (file-exists-p (sly-agent-q-tools-test--file ".ssh/authorized_keys")))
    ;; Nor through a buffer visiting it.
    (with-current-buffer (find-file-noselect (sly-agent-q-tools-test--file ".authinfo"))
      (should (string-match-p "credentials"
                              (sly-agent-q-tools-test--fails "read_buffer" :buffer (buffer-name))))
      (should (sly-agent-q-tools-test--fails "search_in_buffer" :buffer (buffer-name)
                                             :pattern "password"))))
  ;; A root of / is refused.
  (let ((sly-agent-q-project-root "/"))
    (should (string-match-p "The project root is /"
                            (sly-agent-q-tools-test--fails "read_file" :path "etc/hostname")))))

(ert-deftest sly-agent-q-tools-test-read-only-paths ()
  (sly-agent-q-tools-test--with-project
    (sly-agent-q-tools-test--write ".git/config" "[core]\n")
    (should (string-match-p "read-only" (sly-agent-q-tools-test--fails "write_file" :path ".git/config"
                                                                :content "x")))
    (should (equal "[core]\n" (sly-agent-q-tools-test--contents ".git/config")))
    (should (string-match-p "\\[core\\]" (sly-agent-q-tools-test--ok "read_file" :path ".git/config")))
    (let ((sly-agent-q-read-only-paths '("vendor")))
      (should (sly-agent-q-tools-test--fails "write_file" :path "vendor/lib/x.lisp" :content "x"))
      (should-not (file-exists-p (sly-agent-q-tools-test--file "vendor"))))))

(ert-deftest sly-agent-q-tools-test-project-root-default ()
  (let ((sly-agent-q-project-root nil)
        (dir (file-name-as-directory (file-truename (make-temp-file "saq-root-" t)))))
    (unwind-protect
        (with-temp-buffer
          (setq default-directory dir)
          (let ((sly-agent-q-files-default-buffer-function
                 (let ((b (current-buffer))) (lambda () b))))
            (should (equal dir (sly-agent-q-files-project-root)))
            (make-directory (expand-file-name ".git" dir))
            (make-directory (expand-file-name "src" dir))
            (setq default-directory (expand-file-name "src/" dir))
            (should (equal dir (file-truename (sly-agent-q-files-project-root))))))
      (delete-directory dir t))))

;;;; read_file

(ert-deftest sly-agent-q-tools-test-read-file ()
  (sly-agent-q-tools-test--with-project
    (sly-agent-q-tools-test--write "src/a.lisp" "(defun a ()\n  1)\n")
    (let ((out (sly-agent-q-tools-test--ok "read_file" :path "src/a.lisp")))
      (should (string-match-p "\\`\\[src/a.lisp: lines 1-2 of 2\\]\n(defun a ()\n  1)\n\\'" out)))
    (should (string-match-p "does not exist" (sly-agent-q-tools-test--fails "read_file" :path "nope.lisp")))
    (should (string-match-p "is a directory" (sly-agent-q-tools-test--fails "read_file" :path "src")))
    (sly-agent-q-tools-test--write "empty.txt" "")
    (should (string-match-p "empty file" (sly-agent-q-tools-test--ok "read_file" :path "empty.txt")))
    (let ((coding-system-for-write 'binary))
      (write-region (string 0 1 2 255) nil (sly-agent-q-tools-test--file "bin.dat") nil 'silent))
    (should (string-match-p "binary" (sly-agent-q-tools-test--fails "read_file" :path "bin.dat")))))

(ert-deftest sly-agent-q-tools-test-read-file-paging ()
  (sly-agent-q-tools-test--with-project
    (sly-agent-q-tools-test--write "big.txt" (sly-agent-q-tools-test--lines 50))
    (let ((out (sly-agent-q-tools-test--ok "read_file" :path "big.txt" :offset 10 :limit 5)))
      (should (string-match-p "lines 10-14 of 50" out))
      (should (string-match-p "^line 10$" out))
      (should (string-match-p "^line 14$" out))
      (should-not (string-match-p "^line 15$" out))
      (should (string-match-p "36 more lines; call read_file with offset 15 and limit 5" out)))
    (let ((out (sly-agent-q-tools-test--ok "read_file" :path "big.txt" :offset 48)))
      (should (string-match-p "lines 48-50 of 50" out))
      (should-not (string-match-p "more line" out)))
    (should (string-match-p "offset 51 is past the end"
                            (sly-agent-q-tools-test--fails "read_file" :path "big.txt" :offset 51)))
    ;; The line cap.
    (let* ((sly-agent-q-tools-max-lines 20)
           (out (sly-agent-q-tools-test--ok "read_file" :path "big.txt")))
      (should (string-match-p "lines 1-20 of 50" out))
      (should (string-match-p "30 more lines; call read_file with offset 21 to continue" out)))
    ;; The character cap: "line N\n" is 7 or 8 characters.
    (let* ((sly-agent-q-tools-max-chars 40)
           (out (sly-agent-q-tools-test--ok "read_file" :path "big.txt")))
      (should (string-match-p "lines 1-5 of 50" out))
      (should (string-match-p "45 more lines; call read_file with offset 6" out)))
    ;; A single line longer than the cap is cut.
    (sly-agent-q-tools-test--write "long.txt" (concat (make-string 100 ?x) "\nshort\n"))
    (let* ((sly-agent-q-tools-max-chars 30)
           (out (sly-agent-q-tools-test--ok "read_file" :path "long.txt")))
      (should (string-match-p "Line 1 is longer than 30 characters and was cut" out))
      (should-not (string-match-p (make-string 31 ?x) out))
      (should (string-match-p "offset 2" out)))))

(ert-deftest sly-agent-q-tools-test-read-file-pages-as-the-lines-are ()
  "Every page of read_file holds exactly the lines the text splits into, whatever the caps."
  (sly-agent-q-tools-test--with-project
    (dolist (text '("a\nbb\nccc\ndddd\n" "a\nbb\nccc\nno newline at the end" "\n\n\nx\n\n"
                    "one line without a newline"))
      (sly-agent-q-tools-test--write "t.txt" text)
      (let ((lines (append (sly-agent-q-files-split-lines text) nil)))
        (dolist (max-chars '(1 3 6 1000))
          (dolist (limit '(nil 1 2))
            (let ((offset 1) (seen nil)
                  (sly-agent-q-tools-max-chars max-chars))
              ;; Follow the pages as the model would, from the first to the last.
              (while offset
                (let* ((out (apply #'sly-agent-q-tools-test--ok "read_file" :path "t.txt" :offset offset
                                   (and limit (list :limit limit))))
                       (header (progn (string-match "\\`\\[t.txt: lines \\([0-9]+\\)-\\([0-9]+\\) of \\([0-9]+\\)\\]\n" out)
                                      (list (string-to-number (match-string 1 out))
                                            (string-to-number (match-string 2 out))
                                            (string-to-number (match-string 3 out)))))
                       (body (substring out (match-end 0)))
                       (body (replace-regexp-in-string "\n\\[\\(Line\\|[0-9]+ more\\) .*\\]\\'" "" body))
                       (body (replace-regexp-in-string "\n\\[Line .*\\]\\'" "" body))
                       (expected (apply #'concat (seq-subseq lines (1- (nth 0 header)) (nth 1 header)))))
                  (should (= (nth 2 header) (length lines)))
                  (should (equal body (if (string-match-p "was cut" out)
                                          (substring expected 0 max-chars)
                                        expected)))
                  ;; A page stops early only when the next line would pass the cap.
                  (when (and (< (nth 1 header) (length lines))
                             (not (string-match-p "was cut" out))
                             (or (null limit) (< (- (nth 1 header) (nth 0 header) -1) limit)))
                    (should (> (+ (length expected) (length (nth (nth 1 header) lines))) max-chars)))
                  (push (cons (nth 0 header) (nth 1 header)) seen)
                  (setq offset (and (string-match "offset \\([0-9]+\\)" out)
                                    (string-to-number (match-string 1 out))))))
              ;; The pages cover every line once, in order.
              (should (equal (mapcar #'car (reverse seen))
                             (cons 1 (butlast (mapcar (lambda (p) (1+ (cdr p))) (reverse seen))))))
              (should (= (cdar seen) (length lines))))))))))

(ert-deftest sly-agent-q-tools-test-read-file-from-modified-buffer ()
  (sly-agent-q-tools-test--with-project
    (let ((file (sly-agent-q-tools-test--write "a.lisp" "on disk\n")))
      (with-current-buffer (find-file-noselect file)
        (should (string-match-p "read from buffer a.lisp\\]"
                                (sly-agent-q-tools-test--ok "read_file" :path "a.lisp")))
        (goto-char (point-max))
        (insert "unsaved\n")
        (let ((out (sly-agent-q-tools-test--ok "read_file" :path "a.lisp")))
          (should (string-match-p "on disk\nunsaved\n" out))
          (should (string-match-p "which has unsaved changes" out)))))))

;;;; write_file

(ert-deftest sly-agent-q-tools-test-no-question-when-userlock-loads-during-a-write ()
  "A write's questions stay refused when Emacs loads userlock.el (whose functions ask) during it.
Emacs calls the autoloaded `userlock--ask-user-about-supersession-threat' itself; loading its
file then would put the asking `ask-user-about-supersession-threat' back in the middle of a write."
  (sly-agent-q-tools-test--with-project
    (let ((file (sly-agent-q-tools-test--write "a.lisp" "(on disk)\n"))
          (unloaded '(autoload "userlock" nil nil nil)))
      (cl-letf (((symbol-function 'ask-user-about-supersession-threat) unloaded)
                ((symbol-function 'ask-user-about-lock) unloaded)
                ((symbol-function 'userlock--ask-user-about-supersession-threat) unloaded))
        (with-temp-buffer
          (insert "(in the buffer)\n")
          (setq buffer-file-name file buffer-file-truename file)
          (let ((err (should-error (sly-agent-q-files--without-questions
                                     (userlock--ask-user-about-supersession-threat file))
                                   :type 'sly-agent-q-tool-error)))
            (should (string-match-p "Saving would have asked the user \".*a\\.lisp changed on disk; really edit the buffer\\?\", so it was stopped"
                                    (cadr err))))
          (set-buffer-modified-p nil)
          (setq buffer-file-name nil))))))

(ert-deftest sly-agent-q-tools-test-buffer-older-than-its-file-is-not-edited ()
  "An unmodified buffer whose file changed on disk behind Emacs is not edited by the buffer tools:
editing it would ask the user whether to go on from inside the handler.  The answer says why and
what to do; buffer and file are as they were."
  (sly-agent-q-tools-test--with-project
    (let* ((file (sly-agent-q-tools-test--write "a.lisp" "(a)\n"))
           (buffer (find-file-noselect file)))
      (unwind-protect
          (progn
            (sly-agent-q-tools-test--write "a.lisp" "(b)\n")
            ;; Later than the visit, whatever the clock's resolution.
            (set-file-times file (time-add nil 10))
            (dolist (call `(("buffer_edit" :buffer_name ,(buffer-name buffer) :old_text "(a)" :new_text "(c)")
                            ("write_to_buffer" :buffer ,(buffer-name buffer) :content "(c)")
                            ("buffer_append" :buffer_name ,(buffer-name buffer) :text "(c)")))
              (let ((msg (apply #'sly-agent-q-tools-test--fails call)))
                (should (string-match-p "\\`Buffer a\\.lisp is older than a\\.lisp, which changed on disk since it was visited, so nothing was changed" msg))
                (should (string-match-p "revert" msg))))
            (should (equal "(a)\n" (with-current-buffer buffer (buffer-string))))
            (should-not (buffer-modified-p buffer))
            (should (equal "(b)\n" (sly-agent-q-tools-test--contents "a.lisp"))))
        (with-current-buffer buffer (set-buffer-modified-p nil))
        (kill-buffer buffer)))))

(ert-deftest sly-agent-q-tools-test-write-file-new-in-new-directory ()
  (sly-agent-q-tools-test--with-project
    (let ((out (sly-agent-q-tools-test--ok "write_file" :path "new/deep/b.lisp" :content "(b)\n")))
      (should (string-match-p "a new file" out))
      (should (string-match-p "created directory new/deep/" out)))
    (should (equal "(b)\n" (sly-agent-q-tools-test--contents "new/deep/b.lisp")))
    (should (= (logand #o666 (default-file-modes))
               (file-modes (sly-agent-q-tools-test--file "new/deep/b.lisp"))))
    (should-not (sly-agent-q-tools-test--temp-files))))

(ert-deftest sly-agent-q-tools-test-write-file-overwrite-and-append ()
  (sly-agent-q-tools-test--with-project
    (let ((file (sly-agent-q-tools-test--write "a.txt" "one\n")))
      (set-file-modes file #o640)
      (should (string-match-p "Wrote 4 characters to a.txt (1 line"
                              (sly-agent-q-tools-test--ok "write_file" :path "a.txt" :content "two\n")))
      (should (equal "two\n" (sly-agent-q-tools-test--contents "a.txt")))
      (should (= #o640 (file-modes file)))
      (should (string-match-p "Appended"
                              (sly-agent-q-tools-test--ok "write_file" :path "a.txt" :content "three\n"
                                                   :append t)))
      (should (equal "two\nthree\n" (sly-agent-q-tools-test--contents "a.txt")))
      ;; JSON false is false.
      (sly-agent-q-tools-test--ok "write_file" :path "a.txt" :content "four\n" :append :json-false)
      (should (equal "four\n" (sly-agent-q-tools-test--contents "a.txt")))
      (should (string-match-p "is a directory"
                              (progn (make-directory (sly-agent-q-tools-test--file "d"))
                                     (sly-agent-q-tools-test--fails "write_file" :path "d" :content "x"))))
      (should-not (sly-agent-q-tools-test--temp-files)))))

(ert-deftest sly-agent-q-tools-test-write-file-keeps-coding-system ()
  (sly-agent-q-tools-test--with-project
    (sly-agent-q-tools-test--write "latin.txt" "caf\u00e9\n" 'iso-latin-1-unix)
    (should (equal (unibyte-string ?c ?a ?f #xe9 ?\n) (sly-agent-q-tools-test--bytes "latin.txt")))
    (let ((out (sly-agent-q-tools-test--ok "write_file" :path "latin.txt" :content "na\u00efve \u00e9t\u00e9\n")))
      (should (string-match-p "kept encoding iso-latin-1" out)))
    (should (equal (unibyte-string ?n ?a #xef ?v ?e ?\s #xe9 ?t #xe9 ?\n)
                   (sly-agent-q-tools-test--bytes "latin.txt")))
    ;; A character latin-1 cannot hold is refused; the file is intact.
    (should (string-match-p "cannot represent"
                            (sly-agent-q-tools-test--fails "write_file" :path "latin.txt"
                                                    :content "\u03bb\n")))
    (should (equal (unibyte-string ?n ?a #xef ?v ?e ?\s #xe9 ?t #xe9 ?\n)
                   (sly-agent-q-tools-test--bytes "latin.txt")))
    ;; DOS line ends are kept.
    (sly-agent-q-tools-test--write "dos.txt" "a\nb\n" 'utf-8-dos)
    (sly-agent-q-tools-test--ok "write_file" :path "dos.txt" :content "c\nd\n")
    (should (equal "c\r\nd\r\n" (sly-agent-q-tools-test--bytes "dos.txt")))
    ;; New files are UTF-8.
    (sly-agent-q-tools-test--ok "write_file" :path "new.txt" :content "\u03bb\n")
    (should (equal (encode-coding-string "\u03bb\n" 'utf-8) (sly-agent-q-tools-test--bytes "new.txt")))))

(ert-deftest sly-agent-q-tools-test-write-file-modified-buffer-not-clobbered ()
  (sly-agent-q-tools-test--with-project
    (let ((file (sly-agent-q-tools-test--write "a.lisp" "disk\n")))
      (with-current-buffer (find-file-noselect file)
        (goto-char (point-max))
        (insert "user's unsaved work\n")
        (let ((msg (sly-agent-q-tools-test--fails "write_file" :path "a.lisp" :content "agent\n")))
          (should (string-match-p "has unsaved changes" msg)))
        (should (equal "disk\nuser's unsaved work\n" (buffer-string)))
        (should (buffer-modified-p))
        (should (equal "disk\n" (sly-agent-q-tools-test--contents "a.lisp")))))))

(ert-deftest sly-agent-q-tools-test-write-file-reverts-unmodified-buffer ()
  (sly-agent-q-tools-test--with-project
    (let ((file (sly-agent-q-tools-test--write "a.lisp" "old\n")))
      (with-current-buffer (find-file-noselect file)
        (should (string-match-p "buffer a.lisp reverted"
                                (sly-agent-q-tools-test--ok "write_file" :path "a.lisp" :content "new\n")))
        (should (equal "new\n" (buffer-string)))
        (should-not (buffer-modified-p))))))

(ert-deftest sly-agent-q-tools-test-write-file-atomic-on-failure ()
  (sly-agent-q-tools-test--with-project
    (sly-agent-q-tools-test--write "a.txt" "precious\n")
    ;; The rename fails: the target is intact and no temporary file is left.
    (cl-letf (((symbol-function 'rename-file)
               (lambda (&rest _) (signal 'file-error '("Renaming" "injected failure")))))
      (let ((msg (sly-agent-q-tools-test--fails "write_file" :path "a.txt" :content "garbage\n")))
        (should (string-match-p "Could not write a.txt.*injected failure.*Nothing was changed" msg))))
    (should (equal "precious\n" (sly-agent-q-tools-test--contents "a.txt")))
    (should-not (sly-agent-q-tools-test--temp-files))
    ;; Writing the temporary file fails half-way.
    (let ((real (symbol-function 'write-region)))
      (cl-letf (((symbol-function 'write-region)
                 (lambda (string start file &rest rest)
                   ;; A save passes nil: the text is the current buffer's.
                   (apply real (substring (or string (buffer-string)) 0 3) nil file rest)
                   (signal 'file-error '("Writing" "disk full")))))
        (should (string-match-p "disk full"
                                (sly-agent-q-tools-test--fails "write_file" :path "a.txt"
                                                        :content "garbage\n")))))
    (should (equal "precious\n" (sly-agent-q-tools-test--contents "a.txt")))
    (should-not (sly-agent-q-tools-test--temp-files))))

(ert-deftest sly-agent-q-tools-test-write-file-unwritable-directory ()
  (skip-unless (not (zerop (user-uid))))
  (sly-agent-q-tools-test--with-project
    (let ((file (sly-agent-q-tools-test--write "ro/a.txt" "precious\n")))
      (set-file-modes (file-name-directory file) #o500)
      (unwind-protect
          (should (string-match-p "Could not write"
                                  (sly-agent-q-tools-test--fails "write_file" :path "ro/a.txt"
                                                          :content "x\n")))
        (set-file-modes (file-name-directory file) #o700))
      (should (equal "precious\n" (sly-agent-q-tools-test--contents "ro/a.txt")))
      (should-not (sly-agent-q-tools-test--temp-files)))))

;;;; Buffers

(ert-deftest sly-agent-q-tools-test-read-region ()
  "read_region gives the text between point and mark, whole even where narrowing hides part of it."
  (sly-agent-q-tools-test--with-project
    (with-current-buffer (get-buffer-create "saq-test-region")
      (insert (sly-agent-q-tools-test--lines 10))
      (should (string-match-p "no region: the mark is not set"
                              (sly-agent-q-tools-test--fails "read_region" :buffer "saq-test-region")))
      (goto-char (point-min))
      (forward-line 2)
      (push-mark (point) t)
      (forward-line 2)
      (let ((out (sly-agent-q-tools-test--ok "read_region" :buffer "saq-test-region")))
        (should (string-match-p "the region.*characters 15-28, lines 3-4\\]\n" out))
        (should (string-suffix-p "]\nline 3\nline 4\n" out)))
      ;; Narrowed to lines 4-10, the region's first line is hidden: it is read all the same.
      (save-excursion
        (forward-line -1)
        (narrow-to-region (point) (point-max)))
      (should (string-suffix-p "]\nline 3\nline 4\n"
                               (sly-agent-q-tools-test--ok "read_region" :buffer "saq-test-region")))
      (should (equal (buffer-narrowed-p) t))
      (widen)
      (let* ((sly-agent-q-tools-max-chars 4)
             (out (sly-agent-q-tools-test--ok "read_region" :buffer "saq-test-region")))
        (should (string-match-p "\\]\nline\n\\[Cut at position 19 by the 4-character limit: 10 more characters; call read_buffer with start 19 and end 29" out)))
      ;; It changes nothing: no rewind snapshot, no approval preview.
      (should-not (sly-agent-q-tool-preview "read_region" '(:buffer "saq-test-region"))))))

(ert-deftest sly-agent-q-tools-test-read-buffer ()
  (sly-agent-q-tools-test--with-project
    (with-current-buffer (get-buffer-create "saq-test-read")
      (insert (sly-agent-q-tools-test--lines 10))
      (let ((out (sly-agent-q-tools-test--ok "read_buffer" :buffer "saq-test-read")))
        (should (string-match-p "characters 1-71 of 71, lines 1-10 of 10" out))
        (should (string-suffix-p (concat "]\n" (sly-agent-q-tools-test--lines 10)) out)))
      (let ((out (sly-agent-q-tools-test--ok "read_buffer" :buffer "saq-test-read" :start 8 :end 15)))
        (should (string-match-p "\\]\nline 2\n\\'" out)))
      ;; max_lines, as buffer_get_content sends it.
      (let ((out (sly-agent-q-tools-test--ok "read_buffer" :buffer "saq-test-read" :max_lines 3)))
        (should (string-match-p "line 3\n" out))
        (should-not (string-match-p "line 4" out))
        (should (string-match-p "Cut at position 22 by max_lines 3.*call read_buffer with start 22" out)))
      (let* ((sly-agent-q-tools-max-chars 10)
             (out (sly-agent-q-tools-test--ok "read_buffer" :buffer "saq-test-read")))
        (should (string-match-p "\\]\nline 1\nlin\n\\[Cut at position 11 by the 10-character limit: 61 more characters; call read_buffer with start 11 to read on" out)))
      (should (string-match-p "past the end"
                              (sly-agent-q-tools-test--fails "read_buffer" :buffer "saq-test-read" :start 500)))
      ;; Narrowing is ignored.
      (narrow-to-region 1 5)
      (should (string-match-p "line 10" (sly-agent-q-tools-test--ok "read_buffer" :buffer "saq-test-read")))
      (widen))
    (should (string-match-p "no buffer named \"saq-test-none\""
                            (sly-agent-q-tools-test--fails "read_buffer" :buffer "saq-test-none")))
    (let ((hidden (get-buffer-create " saq-test-hidden")))
      (unwind-protect
          (progn
            (should (string-match-p "internal" (sly-agent-q-tools-test--fails "read_buffer" :buffer " saq-test-hidden")))
            (let ((sly-agent-q-files-allow-hidden-buffers t))
              (sly-agent-q-tools-test--ok "read_buffer" :buffer " saq-test-hidden")))
        (kill-buffer hidden)))))

(ert-deftest sly-agent-q-tools-test-default-buffer ()
  (sly-agent-q-tools-test--with-project
    (let* ((b (get-buffer-create "saq-test-default"))
           (sly-agent-q-files-default-buffer-function (lambda () b)))
      (with-current-buffer b (insert "the user's text"))
      (should (string-match-p "\\`\\[buffer saq-test-default .*\\]\nthe user's text\\'"
                              (sly-agent-q-tools-test--ok "read_buffer")))
      (sly-agent-q-tools-test--ok "write_to_buffer" :content "!")
      (should (equal "the user's text!" (with-current-buffer b (buffer-string))))
      (should (string-match-p "1 match" (sly-agent-q-tools-test--ok "search_in_buffer" :pattern "user"))))
    ;; The default default skips the agent's and internal buffers.
    (let ((chat (get-buffer-create "*sly-agent-q-chat*")))
      (unwind-protect
          (progn
            (switch-to-buffer chat)
            (should-not (eq chat (sly-agent-q-files-last-user-buffer))))
        (kill-buffer chat)))))

(ert-deftest sly-agent-q-tools-test-write-to-buffer ()
  (sly-agent-q-tools-test--with-project
    (with-current-buffer (get-buffer-create "saq-test-w")
      (insert "abcdef")
      (goto-char 2)
      (should (string-match-p "Inserted 3 characters at position 4 (line 1)"
                              (sly-agent-q-tools-test--ok "write_to_buffer" :buffer "saq-test-w"
                                                   :content "XYZ" :position 4)))
      (should (equal "abcXYZdef" (buffer-string)))
      (should (= 2 (point)))
      (sly-agent-q-tools-test--ok "write_to_buffer" :buffer "saq-test-w" :content "END")
      (should (equal "abcXYZdefEND" (buffer-string)))
      (should (string-match-p "past the end"
                              (sly-agent-q-tools-test--fails "write_to_buffer" :buffer "saq-test-w"
                                                      :content "x" :position 100)))
      (setq buffer-read-only t)
      (should (string-match-p "read-only" (sly-agent-q-tools-test--fails "write_to_buffer" :buffer "saq-test-w"
                                                                  :content "x")))
      (setq buffer-read-only nil))
    (let ((chat (get-buffer-create "*sly-agent-q-chat*"))
          (mine (get-buffer-create "saq-test-protected")))
      (with-current-buffer mine (setq sly-agent-q-protected-buffer t))
      (unwind-protect
          (progn
            (should (string-match-p "agent's own" (sly-agent-q-tools-test--fails "write_to_buffer" :buffer "*sly-agent-q-chat*"
                                                                          :content "x")))
            (should (sly-agent-q-tools-test--fails "buffer_append" :buffer_name "saq-test-protected" :text "x"))
            (should (equal "" (with-current-buffer chat (buffer-string))))
            (should (string-match-p "internal"
                                    (sly-agent-q-tools-test--fails "buffer_append" :buffer_name " *temp*"
                                                            :text "x"))))
        (kill-buffer chat)))))

(ert-deftest sly-agent-q-tools-test-buffer-append-and-edit ()
  (sly-agent-q-tools-test--with-project
    (with-current-buffer (get-buffer-create "saq-test-e")
      (insert "(defun f (x)\n  (+ x 1))\n")
      (sly-agent-q-tools-test--ok "buffer_append" :buffer_name "saq-test-e" :text "(f 2)\n")
      (should (equal "(defun f (x)\n  (+ x 1))\n(f 2)\n" (buffer-string)))
      (should (string-match-p "at line 2 of buffer saq-test-e"
                              (sly-agent-q-tools-test--ok "buffer_edit" :buffer_name "saq-test-e"
                                                   :old_text "(+ x 1)" :new_text "(* x 2)")))
      (should (equal "(defun f (x)\n  (* x 2))\n(f 2)\n" (buffer-string)))
      (should (string-match-p "not found"
                              (sly-agent-q-tools-test--fails "buffer_edit" :buffer_name "saq-test-e"
                                                      :old_text "(+ x 1)" :new_text "y")))
      (should (string-match-p "occurs 2 times .*lines 1, 3"
                              (sly-agent-q-tools-test--fails "buffer_edit" :buffer_name "saq-test-e"
                                                      :old_text "f " :new_text "g ")))
      (should (equal "(defun f (x)\n  (* x 2))\n(f 2)\n" (buffer-string)))
      ;; Deleting with an empty new_text.
      (sly-agent-q-tools-test--ok "buffer_edit" :buffer_name "saq-test-e" :old_text "(f 2)\n" :new_text "")
      (should (equal "(defun f (x)\n  (* x 2))\n" (buffer-string))))))

(ert-deftest sly-agent-q-tools-test-buffer-create ()
  (sly-agent-q-tools-test--with-project
    (should (string-match-p "Created buffer saq-test-c (lisp-mode, 2 lines)"
                            (sly-agent-q-tools-test--ok "buffer_create" :buffer_name "saq-test-c"
                                                 :content "(a)\n(b)\n" :mode "lisp-mode")))
    (with-current-buffer "saq-test-c"
      (should (eq major-mode 'lisp-mode))
      (should (equal "(a)\n(b)\n" (buffer-string))))
    (should (string-match-p "already exists"
                            (sly-agent-q-tools-test--fails "buffer_create" :buffer_name "saq-test-c"
                                                    :content "x")))
    (should (equal "(a)\n(b)\n" (with-current-buffer "saq-test-c" (buffer-string))))
    (should (string-match-p "not a major mode"
                            (sly-agent-q-tools-test--fails "buffer_create" :buffer_name "saq-test-d"
                                                    :content "x" :mode "delete-file")))
    (should (string-match-p "not a major mode"
                            (sly-agent-q-tools-test--fails "buffer_create" :buffer_name "saq-test-d"
                                                    :content "x" :mode "auto-fill-mode")))
    (should-not (get-buffer "saq-test-d"))
    (should (string-match-p "reserved"
                            (sly-agent-q-tools-test--fails "buffer_create" :buffer_name "*sly-agent-q-x*"
                                                    :content "x")))
    ;; The mode follows the name when none is given.
    (sly-agent-q-tools-test--ok "buffer_create" :buffer_name "saq-test-e.lisp" :content "")
    (should (eq 'lisp-mode (buffer-local-value 'major-mode (get-buffer "saq-test-e.lisp"))))))

(ert-deftest sly-agent-q-tools-test-buffer-save ()
  (sly-agent-q-tools-test--with-project
    ;; A new buffer saved to a new file then visits it.
    (sly-agent-q-tools-test--ok "buffer_create" :buffer_name "saq-test-hello.lisp" :content "(hello)\n")
    (let ((out (sly-agent-q-tools-test--ok "buffer_save" :buffer_name "saq-test-hello.lisp"
                                    :file_path "src/hello.lisp")))
      (should (string-match-p "Saved buffer saq-test-hello.lisp to src/hello.lisp" out))
      (should (string-match-p "now visits src/hello.lisp and is named hello.lisp" out)))
    (should (equal "(hello)\n" (sly-agent-q-tools-test--contents "src/hello.lisp")))
    (let ((buffer (find-buffer-visiting (sly-agent-q-tools-test--file "src/hello.lisp"))))
      (should buffer)
      (should-not (buffer-modified-p buffer))
      ;; Save to its own file.
      (with-current-buffer buffer
        (goto-char (point-max))
        (insert "(world)\n"))
      (should (string-match-p "Saved" (sly-agent-q-tools-test--ok "buffer_save" :buffer_name (buffer-name buffer))))
      (should (equal "(hello)\n(world)\n" (sly-agent-q-tools-test--contents "src/hello.lisp")))
      (should-not (buffer-modified-p buffer))
      (should (string-match-p "no unsaved changes"
                              (sly-agent-q-tools-test--ok "buffer_save" :buffer_name (buffer-name buffer))))
      ;; Outside the project: refused.
      (should (string-match-p "outside"
                              (sly-agent-q-tools-test--fails "buffer_save" :buffer_name (buffer-name buffer)
                                                      :file_path "../escape.lisp")))
      ;; Changed on disk since visited: refused.
      (with-current-buffer buffer (insert ";; edit\n"))
      (sleep-for 0.01)
      (sly-agent-q-tools-test--write "src/hello.lisp" "changed elsewhere\n")
      (set-file-times (sly-agent-q-tools-test--file "src/hello.lisp") (time-add nil 10))
      (should (string-match-p "changed on disk"
                              (sly-agent-q-tools-test--fails "buffer_save" :buffer_name (buffer-name buffer))))
      (should (equal "changed elsewhere\n" (sly-agent-q-tools-test--contents "src/hello.lisp")))
      (should-not (sly-agent-q-tools-test--temp-files)))
    ;; A buffer visiting no file needs a file_path.
    (get-buffer-create "saq-test-nofile")
    (should (string-match-p "visits no file"
                            (sly-agent-q-tools-test--fails "buffer_save" :buffer_name "saq-test-nofile")))
    ;; A buffer visiting a file outside the project cannot save itself.
    (let* ((outside (make-temp-file "saq-outside-" nil ".txt" "x\n"))
           (buffer (find-file-noselect outside)))
      (unwind-protect
          (progn
            (with-current-buffer buffer (insert "y"))
            (should (string-match-p "outside"
                                    (sly-agent-q-tools-test--fails "buffer_save"
                                                            :buffer_name (buffer-name buffer))))
            (should (equal "x\n" (with-temp-buffer (insert-file-contents outside) (buffer-string)))))
        (with-current-buffer buffer (set-buffer-modified-p nil))
        (kill-buffer buffer)
        (delete-file outside)))))

(ert-deftest sly-agent-q-tools-test-buffer-list ()
  (sly-agent-q-tools-test--with-project
    (let ((file (sly-agent-q-tools-test--write "src/a.lisp" "(a)\n"))
          (hidden (get-buffer-create " saq-test-hidden")))
      (unwind-protect
          (with-current-buffer (find-file-noselect file)
            (insert "x")
            (let ((out (sly-agent-q-tools-test--ok "buffer_list")))
              (should (string-match-p "^a.lisp | src/a.lisp | lisp-mode | modified | 5$" out))
              (should-not (string-match-p "saq-test-hidden" out)))
            (should (string-match-p "^ saq-test-hidden | - | fundamental-mode | internal | 0$"
                                    (sly-agent-q-tools-test--ok "buffer_list" :include_hidden t)))
            (should-not (string-match-p "saq-test-hidden"
                                        (sly-agent-q-tools-test--ok "buffer_list" :include_hidden :json-false))))
        (kill-buffer hidden)))))

(ert-deftest sly-agent-q-tools-test-search-in-buffer ()
  (sly-agent-q-tools-test--with-project
    (with-current-buffer (get-buffer-create "saq-test-s")
      (insert "(defun foo ()\n  (bar))\n(defun Foo-2 ()\n  (FOO))\n")
      ;; The parameter names the model most often uses: pattern, buffer, regex, all_matches.
      (let ((out (sly-agent-q-tools-test--ok "search_in_buffer" :pattern "(defun \\(\\w+\\)" :buffer "saq-test-s"
                                      :regex t :all_matches t)))
        (should (string-match-p "2 matches for regexp" out))
        (should (string-match-p "line 1, column 0: (defun foo ()" out))
        (should (string-match-p "line 3, column 0: (defun Foo-2 ()" out)))
      (let ((out (sly-agent-q-tools-test--ok "search_in_buffer" :pattern "foo" :buffer "saq-test-s")))
        (should (string-match-p "3 matches for text \"foo\"" out))
        (should (string-match-p "the first shown" out))
        (should (string-match-p "line 1, column 7" out))
        (should-not (string-match-p "line 3" out)))
      ;; case_sensitive; the server sends the other names (buffer_name, search_text) as these.
      (let ((out (sly-agent-q-tools-test--ok "search_in_buffer" :buffer "saq-test-s" :pattern "FOO"
                                      :case_sensitive t :all_matches t)))
        (should (string-match-p "1 match for text \"FOO\"" out))
        (should (string-match-p "line 4, column 3:   (FOO))" out)))
      (should (string-match-p "3 matches"
                              (sly-agent-q-tools-test--ok "search_in_buffer" :buffer "saq-test-s"
                                                   :pattern "FOO" :case_sensitive :json-false)))
      (should (string-match-p "No match for text \"zork\""
                              (sly-agent-q-tools-test--ok "search_in_buffer" :buffer "saq-test-s"
                                                   :pattern "zork")))
      ;; The other names never reach Emacs: given, they are refused, not half-used.
      (should (sly-agent-q-tools-test--fails "search_in_buffer" :buffer_name "saq-test-s" :search_text "FOO"))
      ;; Regexp metacharacters are literal unless regex is true.
      (should (string-match-p "No match"
                              (sly-agent-q-tools-test--ok "search_in_buffer" :buffer "saq-test-s" :pattern "f.o")))
      (should (string-match-p "not a valid Emacs regexp"
                              (sly-agent-q-tools-test--fails "search_in_buffer" :buffer "saq-test-s"
                                                      :pattern "\\(" :regex t)))
      ;; An empty match does not loop.
      (should (string-match-p "5 matches"
                              (sly-agent-q-tools-test--ok "search_in_buffer" :buffer "saq-test-s" :pattern "^"
                                                   :regex t :all_matches t)))
      (should (sly-agent-q-tools-test--fails "search_in_buffer" :buffer "saq-test-s"))
      (should (sly-agent-q-tools-test--fails "search_in_buffer" :buffer "saq-test-nope" :pattern "x")))))

(ert-deftest sly-agent-q-tools-test-goto-line ()
  (sly-agent-q-tools-test--with-project
    (let ((b (get-buffer-create "saq-test-g")))
      (with-current-buffer b (insert (sly-agent-q-tools-test--lines 30)) (goto-char (point-min)))
      (let ((out (sly-agent-q-tools-test--ok "goto_line" :buffer_name "saq-test-g" :line_number 12)))
        (should (string-match-p "line 12 of buffer saq-test-g (shown to the user): line 12" out)))
      (with-current-buffer b
        (should (= 12 (line-number-at-pos))))
      (let ((window (get-buffer-window b)))
        (should window)
        (should (= 12 (with-current-buffer b (line-number-at-pos (window-point window))))))
      (should (string-match-p "has only 31 lines"
                              (sly-agent-q-tools-test--fails "goto_line" :buffer_name "saq-test-g"
                                                      :line_number 99))))))

;;;; Directories

(ert-deftest sly-agent-q-tools-test-directory-list ()
  (sly-agent-q-tools-test--with-project
    (sly-agent-q-tools-test--write "a.lisp" "(a)\n")
    (sly-agent-q-tools-test--write "README" "hi\n")
    (sly-agent-q-tools-test--write "src/b.lisp" "(b)\n")
    (sly-agent-q-tools-test--write "src/deep/c.lisp" "(c)\n")
    (sly-agent-q-tools-test--write ".git/HEAD" "ref\n")
    (let ((out (sly-agent-q-tools-test--ok "directory_list")))
      (should (string-match-p "^a.lisp  4$" out))
      (should (string-match-p "^src/$" out))
      (should-not (string-match-p "b.lisp" out)))
    (let ((out (sly-agent-q-tools-test--ok "directory_list" :recursive t)))
      (should (string-match-p "^src/deep/c.lisp  4$" out))
      (should (string-match-p "^.git/ (not listed)$" out))
      (should-not (string-match-p "HEAD" out)))
    (let ((out (sly-agent-q-tools-test--ok "directory_list" :recursive t :pattern "*.lisp")))
      (should (string-match-p "3 entries" out))
      (should-not (string-match-p "README" out)))
    (let ((out (sly-agent-q-tools-test--ok "directory_list" :directory_path "src")))
      (should (string-match-p "^src/b.lisp  4$" out)))
    (let* ((sly-agent-q-tools-max-entries 2)
           (out (sly-agent-q-tools-test--ok "directory_list" :recursive t)))
      (should (string-match-p "more entries not shown" out)))
    (should (string-match-p "not a directory"
                            (sly-agent-q-tools-test--fails "directory_list" :directory_path "a.lisp")))))

(ert-deftest sly-agent-q-tools-test-current-directory-and-file-exists ()
  (sly-agent-q-tools-test--with-project
    (should (string-match-p (regexp-quote sly-agent-q-tools-test--root)
                            (sly-agent-q-tools-test--ok "current_directory")))
    (sly-agent-q-tools-test--write "src/a.lisp" "(a)\n")
    (should (string-match-p "Yes: src/a.lisp is a file of 4 bytes"
                            (sly-agent-q-tools-test--ok "file_exists" :path "src/a.lisp")))
    (should (string-match-p "Yes: src/ is a directory"
                            (sly-agent-q-tools-test--ok "file_exists" :path "src")))
    (should (string-match-p "No: nope.lisp does not exist"
                            (sly-agent-q-tools-test--ok "file_exists" :path "nope.lisp")))
    (should (string-match-p "outside" (sly-agent-q-tools-test--fails "file_exists" :path "/etc/passwd")))))

;;;; replace_definition and insert_form

(ert-deftest sly-agent-q-tools-test-one-form-check ()
  "The new form of a definition edit must be one balanced form, by Emacs's sexp scanner."
  (sly-agent-q-tool-preview-check-one-form "(defun f (x)\n  \"a (string\" #\\( (list x)) ; done\n")
  (dolist (case '(("(defun f (x) (list x)" . "1 ( not closed")
                  ("(defun f (x) x))" . "1 ) too many")
                  ("(defun f (x) \"open)" . "inside a string")
                  ("(defun f ()) (defun g ())" . "more than one form")
                  ("  ; only a comment\n" . "no form")
                  ("f" . "not a parenthesized form")))
    (let ((message (cadr (should-error (sly-agent-q-tool-preview-check-one-form (car case))
                                       :type 'sly-agent-q-tool-error))))
      (should (string-match-p "refused" message))
      (should (string-match-p (regexp-quote (cdr case)) message)))))

(ert-deftest sly-agent-q-tools-test-definition-edit-preview ()
  "The approval of replace_definition previews the server's edit as a diff; bad text or a path outside is refused."
  (sly-agent-q-tools-test--with-project
    (sly-agent-q-tools-test--write "src/a.lisp" "(defun f (x)\n  x)\n")
    (let* ((file (sly-agent-q-tools-test--file "src/a.lisp"))
           ;; The server sends the form's text as :form, beside the edit it computed.
           (args (list :symbol "f" :new_text "(defun f (x)\n  (1+ x))"
                       :form "(defun f (x)\n  (1+ x))"
                       :edit (list :path file :old_text "(defun f (x)\n  x)"
                                   :new_text "(defun f (x)\n  (1+ x))")))
           (preview (sly-agent-q-tool-preview "replace_definition" args "form")))
      (should (equal (plist-get preview :path) "src/a.lisp"))
      (should (equal (plist-get preview :new) "(defun f (x)\n  (1+ x))\n"))
      (should-error (sly-agent-q-tool-preview "replace_definition"
                                               (plist-put (copy-sequence args) :form "(defun f (x)")
                                               "form")
                    :type 'sly-agent-q-tool-error)
      (should-error (sly-agent-q-tool-preview
                     "replace_definition"
                     (plist-put (copy-sequence args) :edit
                                (list :path "/etc/passwd" :old_text "root" :new_text "(x)"))
                     "form")
                    :type 'sly-agent-q-tool-error)
      (should (equal (sly-agent-q-tools-test--contents "src/a.lisp") "(defun f (x)\n  x)\n")))))

;;;; A large result, through the real server

(require 'sly-agent-q-test-helper nil t)
(declare-function sly-agent-q-test-send "sly-agent-q-test-helper" (text &optional timeout))
(declare-function sly-agent-q-test-tool-results "sly-agent-q-test-helper" ())
(declare-function sly-agent-q-test-mock-requests "sly-agent-q-test-helper" ())
(defvar sly-agent-q-extra-configuration)
(defvar sly-agent-q-events-buffer-size)

(ert-deftest sly-agent-q-tools-test-large-result-goes-whole-and-in-order ()
  "A result of hundreds of KB goes to the server in pieces, between which
Emacs reads keys: the model gets every character of it, multibyte ones
too, and a notification sent meanwhile arrives after it, intact."
  (skip-unless (fboundp 'sly-agent-q-test-send))
  (sly-agent-q-tools-test--with-project
    (let ((text (mapconcat (lambda (i) (format "line %d λ é — %s" i (make-string 60 ?x)))
                           (number-sequence 1 4000) "\n"))
          (sly-agent-q-tools-max-chars 1000000)
          (sly-agent-q-tools-max-lines 100000)
          (sly-agent-q-extra-configuration '(:maxResultChars 1000000))
          (sly-agent-q-events-buffer-size 100000)
          (script '((steps . [((content . [((type . "tool_use") (name . "read_file")
                                            (input . ((path . "big.txt") (limit . 5000))))])
                               (stop_reason . "tool_use"))
                              ((content . [((type . "text") (text . "Done."))]))
                              ((content . [((type . "text") (text . "Again."))]))]))))
      (sly-agent-q-tools-test--write "big.txt" text)
      (cl-flet ((meanwhile (&rest _)
                  ;; Sent once the first piece of the reply is out, the rest not.
                  (run-at-time 0 nil #'sly-agent-q-server-notify
                               'context/change (list :currentPackage "SAQ-ORDER"))))
        (advice-add 'sly-agent-q-call-reply :after #'meanwhile '((name . saq-meanwhile)))
        (unwind-protect
            (eval
             `(sly-agent-q-test-with-server ',script
                (let ((outcome (sly-agent-q-test-send "Read big.txt")))
                  (should (eq (plist-get outcome :status) 'finished))
                  ;; The mock's record is read as UTF-8: the text must be the file's
                  ;; (a piece cut inside a character, or encoded twice, is not).
                  (let ((result (car (car (sly-agent-q-test-tool-results)))))
                    (should (> (length result) (length ,text)))
                    (should (string-match-p "line 1 λ é — x" result))
                    (should (string-match-p "line 4000 λ é — x\\{60\\}" result)))
                  ;; The notification sent meanwhile reached the server whole: the
                  ;; next turn's request names its package (in a note before the
                  ;; user's text, so that the system prompt stays cached).
                  (should (eq (plist-get (sly-agent-q-test-send "Again") :status) 'finished))
                  (let ((last (car (last (append (sly-agent-q-test-mock-requests) nil)))))
                    (should (string-match-p "SAQ-ORDER" (format "%s" (alist-get 'messages (alist-get 'body last))))))
                  (with-current-buffer (jsonrpc-events-buffer sly-agent-q-current-connection)
                    (should (string-match-p "emacs/reply: [0-9]+ bytes, sent in pieces" (buffer-string))))))
             t)
          (advice-remove 'sly-agent-q-call-reply 'saq-meanwhile))))))

(ert-deftest sly-agent-q-tools-write-to-buffer-bound-to-the-text-at-position ()
  "write_to_buffer at a position is approved for the text it lands in.
The user types above that position while the approval waits: the
position now falls elsewhere, so the target is no longer the same."
  (let ((buffer (get-buffer-create "bound-notes.lisp"))
        (args '(:content "(the-model-s-form)" :buffer "bound-notes.lisp" :position 14)))
    (unwind-protect
        (progn
          (with-current-buffer buffer (insert "(defun a ())\n(defun b ())\n"))
          (let ((approved (sly-agent-q-tool-preview-target "write_to_buffer" args)))
            (should (equal approved (sly-agent-q-tool-preview-target "write_to_buffer" args)))
            (with-current-buffer buffer
              (goto-char (point-min))
              (insert ";; typed while the approval waited\n"))
            (should-not (equal approved (sly-agent-q-tool-preview-target "write_to_buffer" args)))))
      (kill-buffer buffer))))

(provide 'sly-agent-q-tools-test)
;;; sly-agent-q-tools-test.el ends here
