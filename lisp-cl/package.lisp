;;;; package.lisp --- the SLY-AGENT-Q package.
;;;
;;; sly-agent-q's helpers run inside the user's Lisp image.  Emacs
;;; calls one entry point, CALL-TOOL (or CALL-TOOLS for several calls
;;; at once), through the SLY or SLIME connection; everything else is
;;; internal.  The package is kept
;;; small on purpose: it uses only COMMON-LISP, and reaches SLYNK or
;;; SWANK at run time (see backend.lisp), so that the same fasls work
;;; with either.

(defpackage #:sly-agent-q
  (:use #:common-lisp)
  (:export
   ;; The entry point.
   #:call-tool
   #:call-tools
   #:cancel-call
   #:tool-names
   #:debugger-call
   ;; Knobs the user (or the Emacs side) may set.
   #:*eval-timeout*
   #:*result-limit*
   #:*output-limit*
   #:*history-limit*
   ;; Which backend is in use, for diagnostics.
   #:backend-name))
