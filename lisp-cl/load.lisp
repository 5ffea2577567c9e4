;;;; load.lisp --- compile once, then load, sly-agent-q's image helpers.
;;;
;;;   (load "/path/to/sly-agent-q/lisp-cl/load.lisp")
;;;
;;; into an image that has SLYNK (SLY) or SWANK (SLIME) loaded.  The
;;; sources are compiled the first time and the fasls cached in
;;;
;;;   $XDG_CACHE_HOME/sly-agent-q/  (default ~/.cache/sly-agent-q/)
;;;
;;; or, if that is not writable, in a cache/ directory next to this
;;; file; with neither writable the sources are loaded uncompiled.  The
;;; cache is keyed by implementation, its version, the machine type and
;;; this directory, and a fasl is recompiled when it is older than its
;;; source, an earlier source or this file.  Loading again is harmless:
;;; state (history, last error) survives, definitions are refreshed.
;;;
;;; Everything here is one form, so that nothing is defined in the
;;; package this file is loaded into.

(let* ((files '("package" "clisp-file-stat" "backend" "text" "errors" "guard" "interrupt" "protocol" "symbols" "reader"
                "describe" "xref" "clos" "eval" "compile" "macroexpand"
                "source" "locations" "image-changes" "systems" "testing"
                "debugger" "inspect" "threads" "trace" "profile"))
       (source-directory (make-pathname :name nil :type nil :version nil
                                        :defaults (or *load-truename* *load-pathname*)))
       (loader (or *load-truename* *load-pathname*))
       (getenv (lambda (name)
                 (declare (ignorable name))
                 #+sbcl (sb-ext:posix-getenv name)
                 #+ccl (ccl:getenv name)
                 #+ecl (ext:getenv name)
                 #+clisp (ext:getenv name)
                 #+lispworks (lw:environment-variable name)
                 #+allegro (sys:getenv name)
                 #+abcl (ext:getenv name)
                 #-(or sbcl ccl ecl clisp lispworks allegro abcl) nil))
       (sanitize (lambda (string)
                   (substitute-if #\- (lambda (c) (not (or (alphanumericp c) (member c '(#\. #\_)))))
                                  (string-downcase (string-trim " " (or string "unknown"))))))
       ;; Implementation, version and machine: fasls are not portable
       ;; across any of them.  The directory hash keeps two checkouts of
       ;; this project from sharing (and clobbering) fasls.
       (key (format nil "~A-~A-~A-~36R"
                    (funcall sanitize (lisp-implementation-type))
                    (funcall sanitize (lisp-implementation-version))
                    (funcall sanitize (machine-type))
                    (sxhash (namestring source-directory))))
       (writable-p (lambda (directory)
                     (ignore-errors
                      (ensure-directories-exist directory)
                      (let ((probe (merge-pathnames "write-probe.tmp" directory)))
                        (with-open-file (out probe :direction :output :if-exists :supersede)
                          (write-line "probe" out))
                        (delete-file probe)
                        t))))
       (cache-roots
         (remove nil
                 (list (let ((xdg (funcall getenv "XDG_CACHE_HOME")))
                         (and xdg (plusp (length xdg))
                              (ignore-errors
                               (merge-pathnames
                                (make-pathname :directory '(:relative "sly-agent-q"))
                                (pathname (concatenate 'string (string-right-trim "/" xdg) "/"))))))
                       (ignore-errors
                        (merge-pathnames (make-pathname :directory '(:relative ".cache" "sly-agent-q"))
                                         (user-homedir-pathname)))
                       (merge-pathnames (make-pathname :directory '(:relative "cache"))
                                        source-directory))))
       (cache-directory
         (some (lambda (root)
                 (let ((directory (merge-pathnames (make-pathname :directory (list :relative key))
                                                   root)))
                   (and (funcall writable-p directory) directory)))
               cache-roots))
       (newest-so-far (or (ignore-errors (file-write-date loader)) 0)))
  (with-compilation-unit ()
    (dolist (name files)
      (let ((source (merge-pathnames (make-pathname :name name :type "lisp") source-directory)))
        (setf newest-so-far (max newest-so-far (or (file-write-date source) 0)))
        (let ((*package* (find-package "COMMON-LISP-USER"))
              (*readtable* (copy-readtable nil))
              (*read-eval* t)
              (*print-readably* nil)
              (*compile-verbose* nil) (*compile-print* nil)
              (*load-verbose* nil) (*load-print* nil))
          (if (null cache-directory)
              (load source)
              (let* ((fasl (compile-file-pathname
                            (merge-pathnames (make-pathname :name name :type "lisp")
                                             cache-directory)))
                     (compile
                       (lambda ()
                         ;; Compile to a private name and rename, so
                         ;; that another image loading at the same time
                         ;; never sees half a fasl.
                         (let* ((temporary (make-pathname
                                            :name (format nil "~A-~36R" name
                                                          (random (expt 36 8) (make-random-state t)))
                                            :defaults fasl))
                                (log (make-string-output-stream)))
                           (multiple-value-bind (output warnings-p failure-p)
                               (let ((*standard-output* log) (*error-output* log))
                                 (compile-file source :output-file temporary))
                             (declare (ignore warnings-p))
                             (when (or (null output) failure-p)
                               (ignore-errors (delete-file temporary))
                               (error "sly-agent-q: compiling ~A failed:~%~A"
                                      source (get-output-stream-string log)))
                             ;; CLISP and ECL refuse to rename onto an
                             ;; existing file unless told to replace it.
                             #+(or clisp ecl) (rename-file output fasl :if-exists :supersede)
                             #-(or clisp ecl) (rename-file output fasl)))))
                     (load-it
                       (lambda ()
                         ;; Reloading redefines everything; that is expected.
                         (handler-bind ((style-warning #'muffle-warning))
                           (load fasl)))))
                (cond ((or (not (probe-file fasl))
                           (< (or (ignore-errors (file-write-date fasl)) 0) newest-so-far))
                       (funcall compile)
                       (funcall load-it))
                      (t
                       ;; A cached fasl the implementation rejects (say,
                       ;; another build with the same version string)
                       ;; is rebuilt once.
                       (handler-case (funcall load-it)
                         (error ()
                           (funcall compile)
                           (funcall load-it)))))))))))
  ;; Tell the helpers where their cache is (for temporary files).
  (let ((variable (find-symbol "*CACHE-DIRECTORY*" "SLY-AGENT-Q")))
    (when variable (setf (symbol-value variable) cache-directory)))
  (values))
