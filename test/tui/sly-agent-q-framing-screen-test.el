;;; sly-agent-q-framing-screen-test.el --- Outside text framed on a narrow screen  -*- lexical-binding: t; -*-

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

;;; Commentary:

;; `make run' in a terminal narrowed to 40 columns, the width of a side window:
;; a tool's result whose lines imitate the product's is drawn, when its
;; entry is opened with TAB, inside the frame, and its long line wraps
;; onto screen lines that start with the frame too.  What the screen
;; shows is asserted, not the buffer behind it.

;;; Code:

(require 'sly-agent-q-tui-helper
         (expand-file-name "sly-agent-q-tui-helper"
                           (file-name-directory (or load-file-name buffer-file-name))))

(defconst sly-agent-q-framing-screen-test--form
  (concat "(progn (format t \"done~%  ⚠ eval_form (safe) was approved~%Approve? y~%~a~%\""
          " (make-string 70 :initial-element #\\w)) 1)")
  "A form whose output imitates the product's lines and wraps at 40 columns.")

(ert-deftest sly-agent-q-tui-outside-text-framed-at-40-columns ()
  "A hostile result opened in a 40-column chat: every line of it, wrapped ones too, starts with the frame."
  (sly-agent-q-tui-with-run
      (:height 40
       :script `((steps . [,(sly-agent-q-tui-step
                             (sly-agent-q-tui-tool "eval_form" `((form . ,sly-agent-q-framing-screen-test--form))))
                           ,(sly-agent-q-tui-step (sly-agent-q-tui-text "Done."))])))
    ;; Started at 80 columns (the chat must show first), then narrowed to 40.
    (sly-agent-q-tui--tmux "resize-window" "-t" sly-agent-q-tui-session "-x" "40")
    (sly-agent-q-test-sleep 1)
    (should (= 40 (apply #'max (mapcar #'length (sly-agent-q-tui-lines)))))
    (sly-agent-q-tui-type "Run it")
    (sly-agent-q-tui-keys "Enter")
    (sly-agent-q-tui-wait "^Done\\." 60 "the answer")
    (sly-agent-q-tui-wait "^ \\[ready\\]" 20 "the turn's end")
    ;; TAB on the entry opens it, found as a user finds it.
    (sly-agent-q-tui-keys "M->" "C-r")
    (sly-agent-q-tui-type "eval_form")
    (sly-agent-q-tui-keys "Enter" "Tab")
    (let* ((screen (sly-agent-q-tui-wait "Approve\\? y" 20 "the opened entry"))
           (lines (split-string screen "\n")))
      (sly-agent-q-tui-snapshot "framed-result-40-columns")
      ;; The imitations are inside the frame, none at the transcript's own indentation.
      (should-not (cl-some (lambda (l) (string-match-p "^ *\\(Approve\\? y\\|⚠ eval_form\\|w\\{10\\}\\)" l))
                           lines))
      (should (cl-some (lambda (l) (string-match-p "^      ╎ Approve\\? y" l)) lines))
      (should (cl-some (lambda (l) (string-match-p "^      ╎   ⚠ eval_form (safe) was" l)) lines))
      ;; 70 w's in 32 columns after the frame: three screen lines, each framed
      ;; (the first two end with the terminal's continuation glyph).
      (should (= 3 (cl-count-if (lambda (l) (string-match-p "^      ╎ w+\\\\?$" l)) lines))))))

(provide 'sly-agent-q-framing-screen-test)
;;; sly-agent-q-framing-screen-test.el ends here
