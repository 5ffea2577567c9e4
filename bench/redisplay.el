;;; redisplay.el --- Benchmark figure 7: the chat as a user sees it, in a real terminal  -*- lexical-binding: t; -*-

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

;; emacs -nw -Q -l bench/redisplay.el, inside tmux (200x50), started by
;; bench/redisplay.mjs, which sends keystrokes through tmux and watches
;; the screen for their echo.  Batch Emacs never redisplays; this one
;; does, in a real terminal.
;;
;; It starts the mock LLM and the bundled server through the package's
;; own code (no Lisp image: the cases use Emacs's tools) and runs the
;; cases one after another, each while the chat receives it:
;;
;;   big-line    a tool result of 1 MB on one line (read_file), then the
;;               entry expanded and point moved into the result;
;;   many-lines  a 50,000-line result, the same way;
;;   diff        a 200 KB file's proposed edit, its diff review shown
;;               (the hunks computed by the server, drawn by Emacs);
;;   stream      20,000 deltas of Markdown with code blocks;
;;   long-chat   a chat of 500 turns (built first, not measured),
;;               scrolled from top to bottom a screenful at a time.
;;
;; The size caps of tool results (`sly-agent-q-tools-max-chars',
;; `sly-agent-q-tools-max-lines', the server's maxResultChars) are raised
;; so the whole result reaches the chat: the chat must cope with what a
;; user's settings or an MCP tool let through.
;;
;; Measured during each case: the largest interval between firings of a
;; 10 ms timer (how long input would have waited), and the time of a
;; complete `(redisplay t)' of the frame every 50 ms (what showing the
;; screen as it is then costs).  <f12> is the echo key: it writes "echo N"
;; into a small window at the bottom, which bench/redisplay.mjs looks
;; for on the screen.
;;
;; Protocol with bench/redisplay.mjs, in $BENCH_REDISPLAY_DIR: lines
;; appended to status ("ready", "start CASE", "end CASE", "done",
;; "failed MESSAGE"); rows (JSON lines, bench/report.mjs's format)
;; appended to rows.jsonl.  BENCH_REDISPLAY_ONLY=N runs the Nth case alone.

;;; Code:

(require 'cl-lib)
(require 'json)

(defconst rd-root
  (expand-file-name ".." (file-name-directory (or load-file-name buffer-file-name))))
(add-to-list 'load-path (or (getenv "BENCH_ELISP_DIR") (expand-file-name "lisp-elisp" rd-root)))
(require 'sly-agent-q)

(defconst rd-dir (file-name-as-directory (or (getenv "BENCH_REDISPLAY_DIR") (make-temp-file "rd" t))))
;; Conversations are saved as shipped, but not into the user's own directory.
(setq sly-agent-q-conversation-directory (expand-file-name "conversations/" rd-dir))
(defconst rd-quick (equal (getenv "BENCH_QUICK") "1"))
(defconst rd-turns (if rd-quick 100 500) "Turns of the long chat.")
(defconst rd-hold 2.0 "Seconds each case stays on screen after its last change.")

;;;; Status and rows

(defun rd-status (fmt &rest args)
  "Append a line made of FMT and ARGS to the status file."
  (write-region (concat (apply #'format fmt args) "\n") nil (expand-file-name "status" rd-dir) t 'silent))

(defun rd-row (&rest plist)
  "Append one result row, a plist of JSON fields."
  (write-region (concat (json-encode plist) "\n") nil (expand-file-name "rows.jsonl" rd-dir) t 'silent))

(defun rd-fail (err)
  "Say that the run failed with ERR, and exit."
  (rd-status "failed %s" (replace-regexp-in-string
                          "\n" " | " (if (stringp err) err (error-message-string err))))
  (kill-emacs 1))

;;;; The echo key and the echo window

(defvar rd-echoes 0)

(defun rd-echo ()
  "Show the next echo number in the echo window (the key bench/redisplay.mjs sends)."
  (interactive)
  (with-current-buffer (get-buffer-create "*bench-echo*")
    (erase-buffer)
    (insert (format "echo %d" (cl-incf rd-echoes)))))

(global-set-key (kbd "<f12>") #'rd-echo)

(defun rd-layout ()
  "The chat window above, a dedicated three-line echo window below."
  (delete-other-windows)
  (switch-to-buffer (sly-agent-q-chat-buffer))
  (let ((echo (split-window nil -3 'below)))
    (set-window-buffer echo (get-buffer-create "*bench-echo*"))
    (set-window-dedicated-p echo t)
    (set-window-parameter echo 'no-other-window t)))

;;;; Measuring

(defvar rd-gap 0)
(defvar rd-last 0)
(defvar rd-redisplays nil)
(defvar rd-timers nil)

(defun rd-measure-start ()
  "Start the 10 ms gap timer and the 50 ms redisplay probe."
  (setq rd-gap 0 rd-last (float-time) rd-redisplays nil)
  (setq rd-timers
        (list (run-with-timer 0.01 0.01 (lambda ()
                                          (let ((now (float-time)))
                                            (setq rd-gap (max rd-gap (- now rd-last)) rd-last now))))
              (run-with-timer 0.05 0.05 #'rd-probe))))

(defun rd-probe ()
  "Time one forced redisplay of the whole frame as it is now.
Emacs has usually redisplayed the changes already by the time a timer
runs, so the frame is first marked for a complete redisplay: the figure
is what showing the current screen costs, the bound of any update."
  (force-window-update)
  (let ((t0 (float-time)))
    (redisplay t)
    (push (* 1000 (- (float-time) t0)) rd-redisplays)))

(defconst rd-gap-targets '(("200 KB diff review" . 50))
  "Cases whose largest gap has a target of its own, in ms; the others' is 100 ms.
The diff review's hunks are the server's, so Emacs only draws them: 50 ms.")

(defun rd-gap-target (name)
  "The largest-gap target of case NAME, in ms."
  (or (cdr (assoc name rd-gap-targets)) 100))

(defun rd-measure-end (name what)
  "Stop measuring; write CASE NAME's rows (WHAT says what happened)."
  (mapc #'cancel-timer rd-timers)
  (setq rd-gap (max rd-gap (- (float-time) rd-last)))
  (let ((slowest (apply #'max 0 rd-redisplays))
        (target (rd-gap-target name)))
    (rd-row :figure (format "7. %s: largest gap" name) :unit "ms" :value (* 1000 rd-gap)
            :target (format "<= %d ms" target) :ratio (/ (* 1000 rd-gap) target)
            :pass (if (<= (* 1000 rd-gap) target) t :json-false)
            :note (format "%s; largest interval between firings of a 10 ms timer in emacs -nw (tmux 200x50)" what))
    (rd-row :figure (format "7. %s: full redisplay" name) :unit "ms" :samples (vconcat rd-redisplays)
            :spread "min-max" :target "max <= 50 ms" :ratio (/ slowest 50.0) :pass (if (<= slowest 50) t :json-false)
            :note "(force-window-update) then (redisplay t) every 50 ms while the case ran: what redrawing the whole screen as it is costs"))
  (rd-status "end %s" name))

(defmacro rd-case (name &rest body)
  "Run BODY as case NAME; BODY calls (funcall done WHAT) when the case is over."
  (declare (indent 1))
  `(progn
     (rd-status "start %s" ,name)
     (rd-measure-start)
     (let ((done (lambda (what) (rd-measure-end ,name what) (rd-next))))
       (condition-case err (progn ,@body) (error (rd-fail err))))))

(defun rd-hold-then (fn)
  "Call FN after `rd-hold' seconds."
  (run-with-timer rd-hold nil (lambda () (condition-case err (funcall fn) (error (rd-fail err))))))

(defun rd-send (text callback)
  "Send TEXT in the chat; call CALLBACK once the turn finished."
  (sly-agent-q-send text (lambda (outcome)
                           (if (eq (plist-get outcome :status) 'finished)
                               (condition-case err (funcall callback) (error (rd-fail err)))
                             (rd-fail (format "the turn for %S ended: %S" text outcome))))))

;;;; The project, the mock's script

(defconst rd-project (expand-file-name "project/" rd-dir))

(defun rd-lisp-line (i)
  "Line I of the generated Lisp source."
  (format "(defun helper-%05d (x) (list x %d \"helper\")) ; line %d" i (* i 7) i))

(defun rd-make-project ()
  "Write the files the cases read and edit; return the diff case's new content."
  (make-directory rd-project t)
  (with-temp-file (expand-file-name "big-line.txt" rd-project)
    (let ((piece "(:key 12345 :value \"a rather long one-line tool result\") "))
      (dotimes (_ (1+ (/ 1000000 (length piece)))) (insert piece))
      (delete-region (1+ 1000000) (point-max))))
  (with-temp-file (expand-file-name "many-lines.txt" rd-project)
    (dotimes (i 50000) (insert (rd-lisp-line i) "\n")))
  ;; 200 KB of Lisp; the proposed edit changes every 20th line.
  (let (old new)
    (with-temp-buffer
      (cl-loop for i from 0 while (< (buffer-size) 200000) do (insert (rd-lisp-line i) "\n"))
      (setq old (buffer-string))
      (goto-char (point-min))
      (let ((i 0))
        (while (not (eobp))
          (when (zerop (% i 20)) (end-of-line) (insert " ; edited"))
          (forward-line 1) (cl-incf i)))
      (setq new (buffer-string)))
    (with-temp-file (expand-file-name "big.lisp" rd-project) (insert old))
    new))

(defun rd-markdown (chars)
  "About CHARS characters of Markdown with code blocks."
  (let ((block (concat "## Step\n\nThe function `process-data` takes *items* and a **transform**; "
                       "see the [manual](http://127.0.0.1/) and:\n\n"
                       "- first, the items are validated\n- then each is transformed\n\n"
                       "```lisp\n(defun process-data (items &key (transform #'identity))\n"
                       "  \"Transform ITEMS.\"\n  (loop for item in items\n        collect (funcall transform item)))\n```\n\n"
                       "> A quote, and `inline code` again.\n\n")))
    (substring (apply #'concat (make-list (1+ (/ chars (length block))) block)) 0 chars)))

(defun rd-only ()
  "The case run alone (BENCH_REDISPLAY_ONLY, 1-5), or nil when all run."
  (let ((n (string-to-number (or (getenv "BENCH_REDISPLAY_ONLY") ""))))
    (and (<= 1 n 5) n)))

(defun rd-script (diff-content)
  "The mock's steps for every case, in order; DIFF-CONTENT is the diff case's new file."
  (let ((text (lambda (s) `((content . [((type . "text") (text . ,s))]))))
        (tool (lambda (name input) `((content . [((type . "tool_use") (name . ,name) (input . ,input))])))))
    `((steps
       . ,(vconcat
           (nthcdr
            ;; Run alone, a case's steps come first.
            (if (rd-only) (nth (1- (rd-only)) '(0 2 4 6 7)) 0)
            (append
           (list (funcall tool "read_file" '((path . "big-line.txt")))
                 (funcall text "That was one long line.")
                 (funcall tool "read_file" '((path . "many-lines.txt") (limit . 50000)))
                 (funcall text "That was many lines.")
                 (funcall tool "propose_file_edit" `((path . "big.lisp") (new_content . ,diff-content)
                                                     (description . "Mark every 20th helper")))
                 (funcall text "Understood, no edit.")
                 `((content . [((type . "text") (text . ,(rd-markdown 100000)))]) (text_delta_chars . 5)))
           (cl-loop for i below rd-turns
                    collect (funcall text (format "Answer %d: use `helper-%05d`.\n\n```lisp\n%s\n```\n" i i (rd-lisp-line i)))))))))))

(defvar rd-mock nil)

(defun rd-start (then)
  "Start the mock and the server; call THEN when ready."
  (let* ((script (make-temp-file "rd-script" nil ".json" (json-encode (rd-script (rd-make-project)))))
         (buf (generate-new-buffer " *rd-mock*")))
    (setq rd-mock (make-process :name "rd-mock" :buffer buf :noquery t :connection-type 'pipe
                                :command (list "node" (expand-file-name "test/fixtures/mock-llm/cli.mjs" rd-root)
                                               "--script" script)
                                :stderr (get-buffer-create " *rd-mock-stderr*")))
    (let ((deadline (+ (float-time) 20)))
      (while (and (not (with-current-buffer buf (string-match-p "\n" (buffer-string))))
                  (< (float-time) deadline))
        (accept-process-output rd-mock 0.05)))
    (delete-file script)
    (setq sly-agent-q-provider "anthropic"
          sly-agent-q-base-url (with-current-buffer buf (goto-char (point-min)) (cdr (assq 'url (json-read))))
          sly-agent-q-api-key "bench-key"
          sly-agent-q-model "claude-sonnet-4-5"
          sly-agent-q-project-root rd-project
          sly-agent-q-tools-max-chars 2000000
          sly-agent-q-tools-max-lines 100000
          sly-agent-q-extra-configuration '(:maxResultChars 2000000)
          ;; The raised caps make a history of megabytes, which the model's real window would
          ;; have compacted, a request the script does not play: a window that holds it all.
          sly-agent-q-context-window 100000000
          sly-agent-q-approval-function nil)
    (sly-agent-q-server-ensure (lambda (_conn err) (if err (rd-fail err) (funcall then))))))

;;;; The cases

(defun rd-chat-window ()
  "The window showing the chat."
  (get-buffer-window (sly-agent-q-chat-buffer)))

(defun rd-expand-last (tool)
  "Expand the last TOOL entry in the chat (its TAB key) and move point into its result."
  (with-selected-window (rd-chat-window)
    (goto-char (point-max))
    (unless (search-backward tool nil t) (error "No %s entry in the chat" tool))
    (call-interactively (key-binding (kbd "TAB")))
    (forward-line 4)
    (recenter 3)))

(defun rd-tool-case (name tool prompt what)
  "Case NAME: PROMPT makes the model call TOOL; then expand its entry and hold."
  (rd-case name
    (rd-send prompt
             (lambda ()
               (rd-expand-last tool)
               (rd-hold-then (lambda () (funcall done what)))))))

(defun rd-diff-case ()
  "Propose an edit of a 200 KB file; hold its review on screen, then abort it."
  (rd-case "200 KB diff review"
    (let (poll shown)
      ;; A turn that ends before its review shows is a failure of the run, not a wait forever.
      (sly-agent-q-send "Mark the helpers."
                        (lambda (outcome)
                          (unless shown
                            (cancel-timer poll)
                            (rd-fail (format "the turn ended before its review showed: %S; the chat ends with %S"
                                             (plist-get outcome :status)
                                             (with-current-buffer (sly-agent-q-chat-buffer)
                                               (buffer-substring-no-properties
                                                (max (point-min) (- (point-max) 400)) (point-max))))))))
      (setq poll
            (run-with-timer
             0.05 0.05
             (lambda ()
               (let ((review (cl-find-if (lambda (b) (with-current-buffer b (derived-mode-p 'diff-mode)))
                                         (buffer-list))))
                 (when (and review (get-buffer-window review))
                   (setq shown t)
                   (cancel-timer poll)
                   (rd-hold-then
                    (lambda ()
                      ;; Abort the review with its documented key; the turn then ends.
                      (with-selected-window (get-buffer-window review)
                        (execute-kbd-macro (kbd "C-c C-k")))
                      (rd-layout)
                      (funcall done "the proposed edit's review shown, held, aborted")))))))))))

(defun rd-stream-case ()
  "Stream 100,000 characters of Markdown in 20,000 deltas."
  (rd-case "streaming 20,000 deltas of Markdown"
    (rd-send "Explain it all." (lambda () (rd-hold-then (lambda () (funcall done "100,000 characters in 20,000 deltas of 5, with code blocks, sent at once by the mock")))))))

(defun rd-build-chat (n then)
  "Send N more turns (a new conversation every 25: the transcript stays); then THEN."
  (if (<= n 0) (funcall then)
    (when (zerop (% n 25)) (sly-agent-q-new-conversation))
    (rd-send (format "Question %d?" n) (lambda () (rd-build-chat (1- n) then)))))

(defun rd-scroll-case ()
  "Build a chat of `rd-turns' turns in a fresh chat buffer, then scroll it top to bottom."
  (rd-status "prep %d turns" rd-turns)
  (let ((kill-buffer-query-functions nil)) (kill-buffer (sly-agent-q-chat-buffer)))
  (rd-layout)
  (rd-build-chat
   rd-turns
   (lambda ()
     (rd-case (format "chat of %d turns scrolled" rd-turns)
       (with-selected-window (rd-chat-window) (goto-char (point-min)) (recenter 0))
       (let ((pages 0) timer)
         (setq timer
               (run-with-timer
                0.03 0.03
                (lambda ()
                  (if (condition-case nil
                          (with-selected-window (rd-chat-window) (scroll-up-command) (cl-incf pages) nil)
                        (end-of-buffer t))
                      (progn (cancel-timer timer)
                             (funcall done (format "%d screenfuls, one every 30 ms, top to bottom" pages)))
                    (rd-probe))))))))))

(defvar rd-queue nil "The cases still to run (functions).")

(defun rd-next ()
  "Run the next case, or finish."
  (let ((case (pop rd-queue)))
    (if case
        (run-with-timer 0.5 nil (lambda () (condition-case err (funcall case) (error (rd-fail err)))))
      (rd-status "done")
      (sly-agent-q-server-stop)
      (when (process-live-p rd-mock) (process-send-eof rd-mock))
      (kill-emacs 0))))

(defun rd-main ()
  "Lay out the frame, start the mock and the server, run the cases."
  (setq rd-queue
        (list (lambda () (rd-tool-case "1 MB result on one line" "read_file" "Read big-line.txt."
                                       "read_file of a 1,000,000-character line; the entry then expanded, point in the result"))
              (lambda () (rd-tool-case "50,000-line result" "read_file" "Read many-lines.txt."
                                       "read_file of 50,000 lines (3 MB); the entry then expanded, point in the result"))
              #'rd-diff-case
              #'rd-stream-case
              #'rd-scroll-case))
  (when (rd-only)
    (setq rd-queue (list (nth (1- (rd-only)) rd-queue))))
  (rd-layout)
  (rd-start (lambda () (rd-layout) (rd-status "ready") (rd-next))))

(setq inhibit-startup-screen t)
(add-hook 'emacs-startup-hook (lambda () (condition-case err (rd-main) (error (rd-fail err)))))

;;; redisplay.el ends here
