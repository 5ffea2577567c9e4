;;;; clisp-file-stat.lisp --- CLISP's POSIX:FILE-STAT kept clear of its
;;;; garbage collector.
;;;
;;; CLISP's POSIX:FILE-STAT (modules/syscalls/calls.c, file_stat_to_STACK)
;;; makes a file's mode a cons of its type and its permissions, and stores
;;; the list of permissions with Cdr(STACK_0) = check_chmod_mode_to_list(..):
;;; Debian 12's build loads the cons's address before that call, which
;;; conses.  When that consing starts a garbage collection, which moves the
;;; cons, the list is written where the cons was: into whatever lives there
;;; now, or into a page the collection gave back, and the image dies of a
;;; SIGSEGV.  UIOP's PROBE-FILE* calls FILE-STAT on CLISP for every file
;;; ASDF probes -- about 500 times in one method_specializers, which maps
;;; fasls back to their sources through ASDF (locations.lisp), and about 100
;;; in a load_system of a loaded system -- so the agent's lookups killed
;;; the user's CLISP now and then.  A loop of FILE-STAT alone kills it.
;;;
;;; POSIX:FILE-STAT is therefore wrapped, on CLISP only: the collection that
;;; would come due during the call is started just before it, so none can
;;; start inside.  The wrapper calls CLISP's own function with the same
;;; arguments and returns its values; this is the one definition these
;;; helpers make outside their package, and it protects the user's own
;;; ASDF calls too.  (POSIX:FILE-TREE-WALK has the same defect in C and is
;;; left alone: nothing here calls it.)

(in-package #:sly-agent-q)

#+clisp
(progn
  (defparameter *file-stat-room* 65536
    "Bytes that must be left to allocate before CLISP's next garbage
collection when its FILE-STAT starts.  It allocates under 2 KB for a
path of ordinary length.")

  (defvar *clisp-file-stat* nil
    "CLISP's own POSIX:FILE-STAT (a SUBR), once wrapped.")

  (defvar *collection-trigger* nil
    "Holds, for an instant, the array whose allocation starts a garbage
collection: a value stored in a special is never optimized away.")

  (defun room-before-collection ()
    "Bytes that can still be allocated before CLISP's next garbage collection."
    (nth-value 1 (system::%room)))

  (defun make-room-for-allocation (bytes)
    "Start now the garbage collection that would come during the next
BYTES of allocation, if one would."
    (let ((room (room-before-collection)))
      (when (< room bytes)
        ;; Asking for more than is left starts the collection that is due,
        ;; the ordinary one any allocation would start.
        (setf *collection-trigger* (make-array (1+ room) :element-type '(unsigned-byte 8)))
        (setf *collection-trigger* nil)
        (when (< (room-before-collection) bytes)
          (ext:gc)))))

  (defun gc-safe-file-stat (file &optional linkp)
    "CLISP's POSIX:FILE-STAT of FILE (LINKP: of a symbolic link itself),
with no garbage collection starting inside it."
    (make-room-for-allocation *file-stat-room*)
    (funcall *clisp-file-stat* file linkp))

  (defun wrap-clisp-file-stat ()
    "Make POSIX:FILE-STAT call GC-SAFE-FILE-STAT.  Loading these helpers
again keeps the SUBR first found: the wrapper is never wrapped."
    (let* ((symbol (and (find-package "POSIX") (find-symbol "FILE-STAT" "POSIX")))
           (current (and symbol (fboundp symbol) (fdefinition symbol))))
      (when (and current (system::subr-info current))
        (setf *clisp-file-stat* current))
      (when (and current *clisp-file-stat*)
        (ext:without-package-lock ("POSIX")
          (setf (fdefinition symbol) #'gc-safe-file-stat)))))

  (wrap-clisp-file-stat))
