;;; sly-agent-q-resume-screen-test.el --- A resumed conversation on a real terminal  -*- lexical-binding: t; -*-

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

;; A conversation with a tool call and a Markdown answer, resumed from the
;; list in a fresh chat: the screen is the live one's, up to the times.

;;; Code:

(require 'sly-agent-q-tui-helper
         (expand-file-name "sly-agent-q-tui-helper"
                           (file-name-directory (or load-file-name buffer-file-name))))

(defun sly-agent-q-resume-screen-test--transcript (screen)
  "The transcript on SCREEN, from \"You:\" to the prompt, each run time as N."
  (let* ((start (string-match "^You:" screen))
         (end (string-match "^>$" screen start)))
    (replace-regexp-in-string "✓ [0-9.,]+ ms" "✓ N ms" (substring screen start end))))

(ert-deftest sly-agent-q-tui-resumed-as-live ()
  "Resumed from the list, the conversation's screen is the live one's up to times.
Text, tool entries with their trust levels and the turn's footer are compared."
  (sly-agent-q-tui-with-run
      (:script `((steps . [,(sly-agent-q-tui-step (sly-agent-q-tui-text "Let me look it up.")
                                                  (sly-agent-q-tui-tool "describe_symbol" '((symbol . "mapcar"))))
                           ,(sly-agent-q-tui-step (sly-agent-q-tui-text "## Mapping\nUse **MAPCAR** for the results. That is all."))])))
    (sly-agent-q-tui-type "How do I map over a list?")
    (sly-agent-q-tui-keys "Enter")
    (sly-agent-q-tui-wait "That is all\\." 60 "the answer")
    (sly-agent-q-tui-wait "^ \\[ready\\]" 10 "the turn's end")
    (let* ((screen (sly-agent-q-tui-wait "^(1 tool step · .* in / .* out · \\$[0-9.]+)" 10 "the turn's footer"))
           (live (sly-agent-q-resume-screen-test--transcript screen)))
      (should (string-match-p "▸ describe_symbol (safe) symbol=\"mapcar\"  ✓ N ms" live))
      (sly-agent-q-tui-keys "C-c" "C-n")
      (sly-agent-q-tui-command "sly-agent-q-resume")
      (sly-agent-q-tui-wait "^ [0-9-]+ [0-9:]+ +1 .*How do I map over a list" 20 "the list of saved conversations")
      (should-not (string-match-p "(empty)" (sly-agent-q-tui-screen)))
      (sly-agent-q-tui-keys "Enter")
      (sly-agent-q-tui-wait "resumed: How do I map" 20 "the resumed conversation")
      (sly-agent-q-tui-keys "C-x" "1")
      (let ((resumed (sly-agent-q-tui-wait "out · \\$[0-9.]+)\n\\(.*\n\\)?>" 10 "the chat alone")))
        (sly-agent-q-tui-snapshot "chat-resumed")
        (should-not (string-match-p "(saved)\\|✓ \\? ms" resumed))
        (should (equal (sly-agent-q-resume-screen-test--transcript resumed) live))))))

(provide 'sly-agent-q-resume-screen-test)
;;; sly-agent-q-resume-screen-test.el ends here
