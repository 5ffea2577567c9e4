;;; sly-agent-q-helpers-load.el --- The helpers' load into the image: early, and said in the chat  -*- lexical-binding: t; -*-

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

;; The image tools need lisp-cl/ loaded into the user's image.  The
;; first time on a Lisp the helpers are compiled (ECL compiles through
;; gcc: half a minute or more), so this file starts the load before the
;; model's first image call:
;;
;; - when a SLY or SLIME connection opens while a chat buffer exists,
;;   and when a chat buffer opens while a Lisp is connected: an image
;;   into which the agent is never used gets nothing;
;; - the load is the bridge's (`sly-agent-q-bridge-start-helpers'), an
;;   asynchronous evaluation: Emacs never waits, a failure is an
;;   answer in the chat, never the user's debugger, and the next image
;;   call tries again;
;; - while it runs, the chat says so and about how long it takes on
;;   this Lisp: the last load's time on the same implementation and
;;   version (kept in `sly-agent-q-helpers-load-times-file'), else a
;;   first compile's usual time (`sly-agent-q-helpers-load-first-seconds');
;;   a line says when it is done, or why it failed;
;; - a tool call that comes meanwhile waits for that load, and its
;;   entry says so.

;;; Code:

(require 'cl-lib)
(require 'subr-x)
(require 'sly-agent-q-bridge)
(require 'sly-agent-q-chat)
(require 'sly-agent-q-chats)
(require 'sly-agent-q-display)

(defcustom sly-agent-q-helpers-load-early t
  "Non-nil means load the helpers into the image before the first image call.
The load starts when a Lisp connects while a chat buffer is open, or
when the chat opens while a Lisp is connected.  nil means at the
first image call, as the call's own wait."
  :type 'boolean
  :group 'sly-agent-q)

(defcustom sly-agent-q-helpers-load-times-file
  (expand-file-name "sly-agent-q/helpers-load-times.eld"
                    (let ((xdg (getenv "XDG_CACHE_HOME")))
                      (if (and xdg (file-name-absolute-p xdg)) xdg "~/.cache")))
  "The file keeping how long the helpers' last load took on each Lisp.
The chat's estimate while they load again; nil keeps nothing."
  :type '(choice (const :tag "Keep nothing" nil) file)
  :group 'sly-agent-q)

(defconst sly-agent-q-helpers-load-first-seconds
  '(("ECL" . 40) ("CLISP" . 10) ("SBCL" . 8) ("Clozure Common Lisp" . 8))
  "About how long the helpers' first load (a compile) takes, by implementation.
The key is how the image names its implementation (`lisp-implementation-type');
others: 20 s.  Rough: ECL compiles through gcc (28 s where issue 45 was
found; 157 s, and SBCL 14 s, on two cores shared by a dozen processes);
after one load on a Lisp, that load's own time is the estimate.")

(defconst sly-agent-q-helpers-load-times-kept 20
  "How many Lisps `sly-agent-q-helpers-load-times-file' remembers.")

;;;; The times of the last loads

(defun sly-agent-q-helpers-load-times ()
  "The recorded load times: an alist of (LISP . SECONDS), newest first.
A missing or unreadable file is no record."
  (let ((file sly-agent-q-helpers-load-times-file))
    (or (and file (file-readable-p file)
             (ignore-errors
               (with-temp-buffer
                 (insert-file-contents file)
                 (let ((data (read (current-buffer))))
                   (and (listp data)
                        (cl-remove-if-not (lambda (e) (and (consp e) (stringp (car e)) (numberp (cdr e))))
                                          data))))))
        nil)))

(defun sly-agent-q-helpers-load-record (lisp seconds)
  "Remember that the helpers' load into LISP took SECONDS.
Written to a temporary file renamed into place: a crash leaves the old
record or the new one, never half of one.  A file that cannot be
written is left alone; only the estimate is lost."
  (let ((file sly-agent-q-helpers-load-times-file))
    (when file
      (let* ((times (cons (cons lisp seconds)
                          (cl-remove lisp (sly-agent-q-helpers-load-times) :key #'car :test #'equal)))
             (times (cl-subseq times 0 (min (length times) sly-agent-q-helpers-load-times-kept))))
        (condition-case err
            (let ((temp nil))
              (make-directory (file-name-directory file) t)
              (setq temp (make-temp-file (expand-file-name ".helpers-load-times-" (file-name-directory file))))
              (unwind-protect
                  (progn
                    (with-temp-file temp
                      (let ((print-length nil) (print-level nil))
                        (insert ";; sly-agent-q: how long loading its helpers took on each Lisp, newest first.\n")
                        (prin1 times (current-buffer))
                        (insert "\n")))
                    (rename-file temp file t)
                    (setq temp nil))
                (when temp (ignore-errors (delete-file temp)))))
          (error (message "sly-agent-q: could not keep the helpers' load time in %s: %s"
                          file (error-message-string err))))))))

(defun sly-agent-q-helpers-load--seconds-text (seconds)
  "SECONDS as a short duration."
  (if (< seconds 10) (format "%.1f s" seconds) (format "%d s" (round seconds))))

(defun sly-agent-q-helpers-load-estimate (lisp)
  "How long loading the helpers into LISP should take, as words.
LISP is \"IMPLEMENTATION VERSION\" as the image says it."
  (let ((last (cdr (assoc lisp (sly-agent-q-helpers-load-times)))))
    (if last
        (format "about %s, as last time" (sly-agent-q-helpers-load--seconds-text last))
      (format "first time: about %d s; compiled once, then cached"
              (or (cdr (cl-find-if (lambda (entry) (string-prefix-p (car entry) lisp))
                                   sly-agent-q-helpers-load-first-seconds))
                  20)))))

;;;; What the chat says

(defconst sly-agent-q-helpers-load-waiting-note
  "waiting for the agent's helpers to load into the image"
  "What the entry of a tool call says while it waits for the helpers' load.")

(defvar sly-agent-q-helpers-load--waiting nil
  "The chat's ids of the tool calls waiting for a load, as (CONNECTION . CALL-ID).")

(defun sly-agent-q-helpers-load--chat-buffers (&optional conn)
  "The live chat buffers talking to the Lisp CONN (nil: every chat)."
  (cl-remove-if-not (lambda (b) (or (null conn) (eq (cdr (sly-agent-q-chats-lisp b)) conn)))
                    (sly-agent-q-chats-list)))

(defvar-local sly-agent-q-helpers-load--lines nil
  "The notice lines of loads in this chat, as (CONNECTION . (SECTION . TEXT-CELL)).
A load's line is drawn when it starts and rewritten in place when it
ends, so that its end never splits an answer being written.")

(defun sly-agent-q-helpers-load--notice (conn text &optional face)
  "Say TEXT, in FACE, in the chats talking to the Lisp CONN.
A chat that shows the line of CONN's load has it rewritten in place;
another gets a new line."
  (dolist (buffer (sly-agent-q-helpers-load--chat-buffers conn))
    (with-current-buffer buffer
      (let* ((line (cdr (assq conn sly-agent-q-helpers-load--lines)))
             (section (car line)))
        (if (and section (buffer-live-p (ewoc-buffer section)))
            (progn (setcar (cdr line) (cons text face))
                   (sly-agent-q-transcript-redraw-section section))
          (let ((cell (list (cons text face))))
            (push (cons conn
                        (cons (sly-agent-q-transcript-insert-section
                               (lambda ()
                                 (insert (propertize
                                          (sly-agent-q-display-line (car (car cell)) 2000)
                                          'face (or (cdr (car cell)) 'sly-agent-q-meta-face))
                                         "\n")))
                              cell))
                  sly-agent-q-helpers-load--lines)))))))

(defun sly-agent-q-helpers-load--forget-line (conn)
  "Forget the notice lines of CONN's load: the next load draws its own."
  (dolist (buffer (sly-agent-q-helpers-load--chat-buffers))
    (with-current-buffer buffer
      (setq sly-agent-q-helpers-load--lines
            (assq-delete-all conn sly-agent-q-helpers-load--lines)))))

(defun sly-agent-q-helpers-load--note (call-id note)
  "Set the NOTE of the tool entry of CALL-ID (nil takes it away), and redraw it."
  (dolist (buffer (sly-agent-q-helpers-load--chat-buffers))
    (with-current-buffer buffer
      (let ((entry (sly-agent-q-entry-of call-id)))
        (when (and entry (not (equal (sly-agent-q-entry-note entry) note)))
          (setf (sly-agent-q-entry-note entry) note)
          (sly-agent-q-transcript-redraw-section (sly-agent-q-entry-section entry)))))))

(defun sly-agent-q-helpers-load--event (event conn &rest args)
  "Show in the chat the EVENT of a load of the helpers on CONN, with ARGS.
See `sly-agent-q-bridge-helpers-functions'."
  (pcase event
    ('started
     (let ((lisp (sly-agent-q-display-line (car args) 80)))
       (sly-agent-q-helpers-load--forget-line conn)
       (sly-agent-q-helpers-load--notice
        conn
        (format "[Loading the agent's helpers into %s (%s)…]"
                lisp (sly-agent-q-helpers-load-estimate (car args))))))
    ('waiting
     (let ((call-id (car args)))
       (when (stringp call-id)
         (push (cons conn call-id) sly-agent-q-helpers-load--waiting)
         (sly-agent-q-helpers-load--note call-id sly-agent-q-helpers-load-waiting-note))))
    ('finished
     (pcase-let ((`(,lisp ,seconds ,error) args))
       (when (and lisp (not error))
         (sly-agent-q-helpers-load-record lisp seconds))
       (let ((in (if lisp (format " into %s" (sly-agent-q-display-line lisp 80)) "")))
         (if error
             (sly-agent-q-helpers-load--notice
              conn
              (format "Error: %s (after %s).  The next image call tries again."
                      error (sly-agent-q-helpers-load--seconds-text seconds))
              'sly-agent-q-error-face)
           (sly-agent-q-helpers-load--notice
            conn
            (format "[The agent's helpers are loaded%s (%s).]"
                    in (sly-agent-q-helpers-load--seconds-text seconds)))))
       (let ((done (cl-remove-if-not (lambda (w) (eq (car w) conn)) sly-agent-q-helpers-load--waiting)))
         (setq sly-agent-q-helpers-load--waiting
               (cl-set-difference sly-agent-q-helpers-load--waiting done))
         (dolist (w done) (sly-agent-q-helpers-load--note (cdr w) nil)))))))

(defun sly-agent-q-helpers-load--entry-note (call-id)
  "The note of a new tool entry of CALL-ID: whether its call waits for a load.
The image call may come before its entry is drawn."
  (and (rassoc call-id sly-agent-q-helpers-load--waiting)
       sly-agent-q-helpers-load-waiting-note))

(add-hook 'sly-agent-q-bridge-helpers-functions #'sly-agent-q-helpers-load--event)
(add-hook 'sly-agent-q-entry-note-functions #'sly-agent-q-helpers-load--entry-note)

;;;; When the load starts

(defun sly-agent-q-helpers-load-start (&optional lisp)
  "Start loading the helpers into LISP, unless loaded or loading.
LISP is (ADAPTER . CONNECTION); nil: the connected Lisp.  Return
non-nil when a load started."
  (let ((cur (or lisp (sly-agent-q-bridge-current))))
    (and cur (sly-agent-q-bridge-start-helpers (car cur) (cdr cur)))))

(defun sly-agent-q-helpers-load--soon (&optional chat)
  "Start the helpers' load once Emacs is back from the hook that asked for it.
Into the Lisp of the chat buffer CHAT, when given (known once the
chat is made), else into the connected Lisp."
  (when sly-agent-q-helpers-load-early
    (run-at-time 0 nil
                 (lambda ()
                   (sly-agent-q-connection-call-safely
                    (lambda ()
                      (sly-agent-q-helpers-load-start
                       (and chat (buffer-live-p chat) (sly-agent-q-chats-lisp chat)))))))))

(defun sly-agent-q-helpers-load--lisp-connected (&rest _)
  "A Lisp connected: load the helpers if the agent is in use (a chat is open)."
  (when (sly-agent-q-helpers-load--chat-buffers)
    (sly-agent-q-helpers-load--soon)))

(defun sly-agent-q-helpers-load--chat-opened ()
  "A chat buffer opened: load the helpers into its Lisp if one is connected."
  (when (sly-agent-q-bridge-current)
    (sly-agent-q-helpers-load--soon (current-buffer))))

(add-hook 'sly-agent-q-chat-mode-hook #'sly-agent-q-helpers-load--chat-opened)
;; As the bridge does: both hooks default to nil, and the hook of a Lisp
;; mode that is not loaded never runs (package-lint refuses
;; `with-eval-after-load' in a package).
(add-hook 'sly-connected-hook #'sly-agent-q-helpers-load--lisp-connected)
(add-hook 'slime-connected-hook #'sly-agent-q-helpers-load--lisp-connected)

(provide 'sly-agent-q-helpers-load)
;;; sly-agent-q-helpers-load.el ends here
