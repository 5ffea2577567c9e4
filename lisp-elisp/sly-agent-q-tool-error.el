;;; sly-agent-q-tool-error.el --- The error a tool call gives the model  -*- lexical-binding: t; -*-

;; Copyright (C) 2026  The sly-agent-q authors

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

;; A failure the model can fix (a path outside the project, text not
;; found, a buffer it may not change) is signalled as
;; `sly-agent-q-tool-error', whose message is the call's result for the
;; model; any other error is a fault of Emacs, reported as such.  Every
;; layer that refuses a call (the paths of sly-agent-q-files.el, the
;; tools, their previews) signals it; `sly-agent-q-tool-call-run' turns
;; it into the call's error.

;;; Code:

(define-error 'sly-agent-q-tool-error "Tool error")

(defun sly-agent-q-tool-fail (format-string &rest args)
  "Signal `sly-agent-q-tool-error' with a message for the model.
The message is (apply #\\='format FORMAT-STRING ARGS)."
  (signal 'sly-agent-q-tool-error
          (list (apply #'format format-string args))))

(provide 'sly-agent-q-tool-error)
;;; sly-agent-q-tool-error.el ends here
