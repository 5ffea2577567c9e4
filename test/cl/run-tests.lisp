;;;; run-tests.lisp --- run lisp-cl/'s tests in a batch Lisp.
;;;
;;; Started by test/cl/run.sh in SBCL, ECL, CLISP or ABCL, without init files,
;;; as the one file the Lisp loads (what differs between Lisps is in
;;; portable.lisp, loaded first).
;;;
;;; with the environment:
;;;
;;;   SAQ_BACKEND         swank or slynk
;;;   SAQ_BACKEND_LOADER  swank-loader.lisp or slynk/slynk-loader.lisp
;;;   SAQ_WORK            a scratch directory (fasls of the backend)
;;;
;;; Loads the backend (without starting a server), lisp-cl/load.lisp,
;;; the MY-APP fixture, FiveAM and tests.lisp, runs the tests and ends
;;; with the line "cl-<backend>: N passed, N failed", exiting non-zero
;;; on any failure.

(load (merge-pathnames "portable.lisp" (or *load-truename* *load-pathname*)))

(defpackage #:sly-agent-q-test-runner
  (:use #:common-lisp))

(in-package #:sly-agent-q-test-runner)

(defvar *here* (make-pathname :name nil :type nil :version nil
                              :defaults (or *load-truename* *load-pathname*)))

(defun env (name &optional default)
  (let ((value (saq-portable:getenv name)))
    (if (and value (plusp (length value))) value default)))

(defun die (control &rest args)
  (format t "~&~?~%" control args)
  (format t "~A: 0 passed, 1 failed~%"
          (env "SAQ_SUITE" (format nil "cl-~A" (env "SAQ_BACKEND" "unknown"))))
  (saq-portable:quit 1))

(defun call-quietly (what function)
  "Call FUNCTION with its output captured; print it only if it fails."
  (let ((log (make-string-output-stream)))
    (handler-case
        (let ((*standard-output* log) (*error-output* log) (*trace-output* log))
          (handler-bind ((warning #'muffle-warning))
            (funcall function)))
      (serious-condition (c)
        (die "Could not ~A: ~A~%~A" what c (get-output-stream-string log))))))

(defun directory-pathname (namestring)
  (pathname (concatenate 'string (string-right-trim "/" namestring) "/")))

(defun load-backend (backend loader work)
  "Load SWANK or SLYNK from LOADER without starting a server, its fasls
going under WORK."
  (unless (probe-file loader)
    (die "The ~A loader ~A does not exist." backend loader))
  (let ((package (if (string= backend "swank") "SWANK-LOADER" "SLYNK-LOADER"))
        (fasls (merge-pathnames (make-pathname :directory (list :relative "fasl" backend))
                                (directory-pathname work))))
    (call-quietly (format nil "load ~A" backend)
                  (lambda ()
                    (load loader)
                    (setf (symbol-value (find-symbol "*FASL-DIRECTORY*" package)) fasls)
                    ;; :SETUP NIL: no user init files, no contribs.
                    (funcall (find-symbol "INIT" package) :setup nil)
                    (let ((init (find-symbol "INIT" (if (string= backend "swank") "SWANK" "SLYNK"))))
                      (when (and init (fboundp init)) (funcall init)))))))

(defun main ()
  (let* ((backend (string-downcase (env "SAQ_BACKEND" "swank")))
         (loader (or (env "SAQ_BACKEND_LOADER") (die "SAQ_BACKEND_LOADER is not set.")))
         (work (env "SAQ_WORK" (namestring (merge-pathnames "../.work/" *here*))))
         (root (merge-pathnames "../../" *here*)))
    (saq-portable:keep-lisps-own-asdf)
    (load-backend backend loader work)
    (call-quietly "load lisp-cl/load.lisp"
                  (lambda () (load (merge-pathnames "lisp-cl/load.lisp" root))))
    (call-quietly "load the MY-APP fixture"
                  (lambda () (load (merge-pathnames "test/fixtures/my-app/load.lisp" root))))
    (call-quietly "load FiveAM"
                  (lambda ()
                    (require "asdf")
                    (funcall (find-symbol "LOAD-SYSTEM" "ASDF") :fiveam)))
    (call-quietly "load tests.lisp"
                  (lambda () (load (merge-pathnames "tests.lisp" *here*))))
    (call-quietly "load debugger-tests.lisp"
                  (lambda () (load (merge-pathnames "debugger-tests.lisp" *here*))))
    (let ((run (find-symbol "RUN-TESTS" "SLY-AGENT-Q-TESTS")))
      (multiple-value-bind (passed failed skipped)
          (funcall run :backend backend :root root :suite (env "SAQ_SUITE" (format nil "cl-~A" backend)))
        (format t "~&~A: ~D passed, ~D failed~:[~;~:*, ~D skipped~]~%"
                (env "SAQ_SUITE" (format nil "cl-~A" backend)) passed failed
                (and (plusp skipped) skipped))
        (saq-portable:quit (if (zerop failed) 0 1))))))

(handler-case (main)
  (serious-condition (c)
    (die "Test run aborted: ~A" c)))
