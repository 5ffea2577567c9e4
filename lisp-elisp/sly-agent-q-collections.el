;;; sly-agent-q-collections.el --- Holding off garbage collections while the server talks  -*- lexical-binding: t; -*-

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

;; While the server's traffic lasts, `gc-cons-threshold' is raised, and
;; given back when the server and the user have been quiet for a while:
;; a few collections in a burst instead of one every 800 KB, and the one
;; after it made while the user is idle.

;;; Code:

(require 'sly-agent-q-options)

;; Obsolete names (issue 46): these were named sly-agent-q-server-* before
;; sly-agent-q-server.el was split; kept for users who call them.
(define-obsolete-function-alias 'sly-agent-q-server-hold-collections
  #'sly-agent-q-collections-hold "0.2.0")
(define-obsolete-function-alias 'sly-agent-q-server-release-collections
  #'sly-agent-q-collections-release "0.2.0")


(defcustom sly-agent-q-gc-cons-threshold (* 16 1024 1024)
  "The `gc-cons-threshold' while the server's traffic lasts, or nil.
A message of the server raises `gc-cons-threshold' to this (never
lowers it) until the server has been quiet for
`sly-agent-q-gc-quiet-time' seconds; then the user's value is back,
unless something else changed it meanwhile.  A model's burst of tool
calls, with their results for the chat, the image's answers and the
replies, conses megabytes: with Emacs's default threshold that was a
garbage collection every 800 KB, each one marking the whole heap, at
20-25 ms each in batch Emacs with SLIME loaded, and together most of the
time a burst took (benchmarks, figures 2 and 7).  Held off, they are
a few collections instead.  Not more: a collection sweeps all the
garbage made since the last one, and after 64 MB of it Emacs stopped
for several times as long as after 16 MB, a pause the user saw once
the burst ended.  nil leaves `gc-cons-threshold' alone."
  :type '(choice (const :tag "Leave gc-cons-threshold alone" nil) integer)
  :group 'sly-agent-q)

(defcustom sly-agent-q-gc-quiet-time 0.5
  "Seconds without server traffic, then without input, that end the hold.
The collection held off is made then, while the user is idle.
See `sly-agent-q-gc-cons-threshold'."
  :type 'number
  :group 'sly-agent-q)

(defvar sly-agent-q-collections--gc-held nil
  "While collections are held off, (USER-VALUE . RAISED-VALUE).
Of `gc-cons-threshold': USER-VALUE is the one given back.")

(defvar sly-agent-q-collections--gc-last-traffic 0.0
  "When the server's traffic was last seen, a `float-time'.")

(defvar sly-agent-q-collections--gc-timer nil
  "The one timer that ends the holding off of collections.")

(defun sly-agent-q-collections-hold ()
  "Hold garbage collections off while the server's traffic lasts.
See `sly-agent-q-gc-cons-threshold'.  The global (top-level) value is
the one changed: a `let' of `gc-cons-threshold' around the caller is
neither changed nor restored by mistake."
  (setq sly-agent-q-collections--gc-last-traffic (float-time))
  (when (and sly-agent-q-gc-cons-threshold (not sly-agent-q-collections--gc-held))
    (let ((user (default-toplevel-value 'gc-cons-threshold)))
      (when (< user sly-agent-q-gc-cons-threshold)
        (setq sly-agent-q-collections--gc-held (cons user sly-agent-q-gc-cons-threshold))
        (set-default-toplevel-value 'gc-cons-threshold sly-agent-q-gc-cons-threshold)
        (sly-agent-q-collections--gc-arm sly-agent-q-gc-quiet-time)))))

(defun sly-agent-q-collections--gc-arm (seconds)
  "Check in SECONDS whether the server has gone quiet."
  (when sly-agent-q-collections--gc-timer (cancel-timer sly-agent-q-collections--gc-timer))
  (setq sly-agent-q-collections--gc-timer (run-with-timer seconds nil #'sly-agent-q-collections--gc-check)))

(defun sly-agent-q-collections--gc-check ()
  "Release collections once the server and the user have been quiet long enough.
Until then, check again later: one timer, re-armed, as a timer per
message would cost more than it saves.  The collection held off
marks the whole heap (tens of milliseconds): it is made while the
user is idle, not on the key they type next."
  (setq sly-agent-q-collections--gc-timer nil)
  (let ((quiet (- (float-time) sly-agent-q-collections--gc-last-traffic))
        (idle (if noninteractive
                  sly-agent-q-gc-quiet-time
                (let ((time (current-idle-time))) (if time (float-time time) 0)))))
    (cond ((< quiet sly-agent-q-gc-quiet-time)
           (sly-agent-q-collections--gc-arm (- sly-agent-q-gc-quiet-time quiet)))
          ((< idle sly-agent-q-gc-quiet-time)
           (sly-agent-q-collections--gc-arm (- sly-agent-q-gc-quiet-time idle)))
          (t (when sly-agent-q-collections--gc-held
               (sly-agent-q-collections-release)
               (garbage-collect))))))

(defun sly-agent-q-collections-release ()
  "Give `gc-cons-threshold' back its value from before the server's traffic.
A value that something else set meanwhile is left as it is.  The
collection held off happens at Emacs's next allocation check."
  (when sly-agent-q-collections--gc-timer
    (cancel-timer sly-agent-q-collections--gc-timer)
    (setq sly-agent-q-collections--gc-timer nil))
  (pcase-let ((`(,user . ,raised) sly-agent-q-collections--gc-held))
    (setq sly-agent-q-collections--gc-held nil)
    (when (and raised (eql (default-toplevel-value 'gc-cons-threshold) raised))
      (set-default-toplevel-value 'gc-cons-threshold user))))

(provide 'sly-agent-q-collections)
;;; sly-agent-q-collections.el ends here
