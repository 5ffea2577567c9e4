;;; resume.el --- Benchmark figure 8: resuming a long saved conversation  -*- lexical-binding: t; -*-

;; Copyright (C) 2026 The sly-agent-q authors

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

;; emacs -Q --batch -l bench/resume.el
;;
;; A saved conversation of 1,000 messages (250 exchanges, each a
;; question, a tool call, its 2,000-character result and an answer) is
;; resumed into the real chat buffer through the real server: from
;; `sly-agent-q-sessions-resume' to the chat drawn, and the Emacs memory
;; the drawn conversation holds.  No Lisp image is needed.
;;
;; Targets: a user reopening a conversation expects it at once, as a
;; file opens; half a second is the most that still reads as "at once"
;; for a command (Nielsen's 0.1 s / 1 s limits: under 1 s keeps the
;; flow), with room for a slower machine.  20 MB: a long conversation
;; must not cost the Emacs of a user who keeps a few open more than a
;; large source file's buffer does.

;;; Code:

(setenv "BENCH_NO_MAIN" "1")
(load (expand-file-name "emacs.el" (file-name-directory (or load-file-name buffer-file-name))) nil t)

(defconst bench-resume-exchanges 250 "Exchanges of four messages each.")
(defconst bench-resume-runs (if bench-quick 3 7) "Resumes measured.")

(defun bench-resume-record (type &rest fields)
  "One record of a conversation file: TYPE and FIELDS (a plist), as a JSON line."
  (concat (json-encode (append (list :v 1 :type type :at "2026-11-23T10:00:00.000Z") fields)) "\n"))

(defun bench-resume-write (dir id)
  "Write conversation ID of 1,000 messages into DIR."
  (let ((result (mapconcat #'identity (make-list 40 "(defun process-data (items) (mapcar #'1+ items)) ") "")))
    (with-temp-file (expand-file-name (concat id ".jsonl") dir)
      (insert (bench-resume-record "header" :id id :created "2026-11-23T10:00:00.000Z"))
      (dotimes (i bench-resume-exchanges)
        (let ((tool-id (format "toolu_%04d" i)))
          (insert (bench-resume-record "message" :message `(:role "user" :content [(:type "text" :text ,(format "Question %d: what does process-data do?" i))]))
                  (bench-resume-record "message" :message `(:role "assistant" :content [(:type "text" :text "Let me look. ")
                                                                                      (:type "tool_use" :id ,tool-id :name "describe_symbol"
                                                                                             :input (:symbol "process-data"))]))
                  (bench-resume-record "message" :message `(:role "user" :content [(:type "tool_result" :toolUseId ,tool-id
                                                                                             :content ,result :isError :json-false)]))
                  (bench-resume-record "message" :message `(:role "assistant" :content [(:type "text" :text ,(format "Answer %d: it adds one to each item.\n\n```lisp\n(process-data '(1 2 3))\n```\n" i))]))))))))

(defun bench-resume-main ()
  (let* ((dir (file-name-as-directory (make-temp-file "bench-conversations" t)))
         (id "c-bench-resume")
         times live)
    (setq sly-agent-q-conversation-directory dir)
    (bench-resume-write dir id)
    (bench-start-mock)
    (bench-start-server)
    (dotimes (_ bench-resume-runs)
      (when (get-buffer sly-agent-q-chat-buffer-name)
        (let ((kill-buffer-query-functions nil)) (kill-buffer sly-agent-q-chat-buffer-name)))
      (let ((before (bench-emacs-live-mb))
            (t0 (float-time))
            shown)
        (sly-agent-q-sessions-resume id (lambda (b) (setq shown b)))
        (bench-wait (lambda () shown) 60 "the resumed conversation")
        (push (bench-ms t0) times)
        (push (- (bench-emacs-live-mb) before) live)))
    (with-current-buffer sly-agent-q-chat-buffer-name
      (unless (string-match-p "Answer 249" (buffer-string)) (error "The chat does not show the whole conversation")))
    (bench-record :figure "8. resume a 1,000-message conversation into the chat" :unit "ms"
                  :samples (vconcat times) :target "<= 500 ms" :pass (bench-pass-p (<= (bench-median times) 500))
                  :note "sly-agent-q-sessions-resume to the chat drawn: the server reads the file, sends the history, Emacs draws 250 exchanges with their tool entries")
    (bench-record :figure "8. Emacs memory held by the resumed conversation" :unit "MB"
                  :samples (vconcat live) :target "<= 20 MB" :pass (bench-pass-p (<= (bench-median live) 20))
                  :note "live Lisp data after a full GC, minus before; buffer text not counted")
    (sly-agent-q-server-stop)
    (when (process-live-p bench-mock) (process-send-eof bench-mock))
    (delete-directory dir t)))

(bench-resume-main)

;;; resume.el ends here
