;;; sly-agent-q-header.el --- The chat's header line  -*- lexical-binding: t; -*-

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

;; The header line of a chat buffer says first what the chat is doing,
;; then the model, the tokens and the cost.  What it says is computed
;; by the chat (`sly-agent-q-header-setup' is given how); this file
;; keeps it, and recomputes it at most a few times a second, whatever
;; asks for it (a turn's events, the input's attachments, the chats).

;;; Code:

(require 'cl-lib)
(require 'sly-agent-q-chats)

(defcustom sly-agent-q-header-refresh-interval 0.25
  "Least seconds between two updates of the chat's header line."
  :type 'number
  :group 'sly-agent-q)

(cl-defstruct (sly-agent-q-header (:constructor sly-agent-q-header--make) (:copier nil))
  "The header line of a chat buffer.
TEXT is the line as last computed, LINE the function of no arguments
that computes it, TIMER the pending refresh, or nil."
  (text "") line timer)

(defvar-local sly-agent-q-header--state nil
  "The current chat buffer's `sly-agent-q-header'.")

(defun sly-agent-q-header-setup (line)
  "Show a header line in the current buffer, its text computed by LINE.
LINE is a function of no arguments, called in the buffer."
  (setq sly-agent-q-header--state (sly-agent-q-header--make :line line :text (funcall line)))
  (setq-local header-line-format '(:eval (sly-agent-q-header-text sly-agent-q-header--state))))

(defun sly-agent-q-header-refresh ()
  "Have the header line show the chat's state, soon.
Updates come at most every `sly-agent-q-header-refresh-interval'
seconds: a stream of events must not recompute and redisplay the
header line each time.  Only the header line says it: the prompt and
the transcript are not touched, so nothing runs into the text being
streamed or into the input.  In a buffer with no header line of the
chat's, nothing is done."
  (let ((header sly-agent-q-header--state))
    (when (and header (null (sly-agent-q-header-timer header)))
      (let ((buffer (current-buffer)))
        (setf (sly-agent-q-header-timer header)
              (run-with-timer sly-agent-q-header-refresh-interval nil
                              (lambda ()
                                (when (buffer-live-p buffer)
                                  (with-current-buffer buffer
                                    (setf (sly-agent-q-header-timer header) nil
                                          (sly-agent-q-header-text header)
                                          (funcall (sly-agent-q-header-line header)))
                                    (force-mode-line-update))))))))))

(add-hook 'sly-agent-q-chats-changed-hook #'sly-agent-q-header-refresh)

(provide 'sly-agent-q-header)
;;; sly-agent-q-header.el ends here
