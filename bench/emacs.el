;;; emacs.el --- Benchmark figures 1-3: tool round trip, throughput, streaming  -*- lexical-binding: t; -*-

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

;; emacs -Q --batch -l bench/emacs.el
;;
;; Starts SBCL under SLIME, loads lisp-cl/ (through the package's own
;; bridge) and the MY-APP fixture, starts the mock LLM and the bundled
;; server through the package's own connection code, then measures:
;;
;; 1. describe_symbol through the whole path (tools/call -> executor ->
;;    emacs/call -> bridge -> SLIME -> image and back) against a bare
;;    `slime-eval' of the same helper form; then 1,000 full calls in a row.
;; 2. one model message with 100 describe_symbol calls, first chat/toolCall
;;    to last chat/toolResult, against 100 sequential bare evals of the
;;    same 100 calls.
;; 3. 20,000 small text deltas streamed into the real chat buffer.
;;
;; With BENCH_LISP=sly it runs SBCL under SLY instead (SLY from SLY_DIR)
;; and measures figures 1 and 2 against a bare `sly-eval'.
;;
;; With BENCH_EVENTS_LOG=on it measures the same with jsonrpc's events log on
;; (`sly-agent-q-events-buffer-size' 2,000,000, the former default;
;; the package ships with it off).  bench/run.sh runs both, each in a fresh
;; Emacs and SBCL.
;;
;; Rows go to the file named by $BENCH_RESULTS (JSON lines), read by
;; bench/report.mjs.  $BENCH_QUICK=1 runs fewer repetitions.

;;; Code:

(require 'cl-lib)
(require 'json)

(defconst bench-root
  (expand-file-name ".." (file-name-directory (or load-file-name buffer-file-name))))
;; BENCH_ELISP_DIR: the package byte-compiled (bench/run.sh); the source otherwise.
(add-to-list 'load-path (or (getenv "BENCH_ELISP_DIR") (expand-file-name "lisp-elisp" bench-root)))
(require 'sly-agent-q)
(load (expand-file-name "scripts/lisp-modes" bench-root) nil t)

(defconst bench-quick (equal (getenv "BENCH_QUICK") "1"))
;; BENCH_ONLY=13 runs figure 13 alone: emacs -Q --batch -l bench/emacs.el (rows on stdout).
(defconst bench-pairs (if bench-quick 50 200) "Bare/full pairs for figure 1.")
(defconst bench-row-calls (if bench-quick 200 1000) "Full calls in a row for figure 1.")
(defconst bench-batches (if bench-quick 2 5) "Repetitions of figure 2.")
(defconst bench-streams (if bench-quick 1 3) "Repetitions of figure 3.")
(defconst bench-deltas 20000)
(defconst bench-delta-chars 4)

(defvar bench-lisp (if (equal (getenv "BENCH_LISP") "sly") 'sly 'slime)
  "Which of SLY or SLIME connects Emacs to SBCL (BENCH_LISP=sly or slime).")

(defvar bench-log-on (equal (getenv "BENCH_EVENTS_LOG") "on")
  "Non-nil (BENCH_EVENTS_LOG=on): measure with jsonrpc's events log on.")

;;;; Helpers

(defun bench-log (fmt &rest args)
  (princ (concat (apply #'format fmt args) "\n") #'external-debugging-output))

(defun bench-record (&rest plist)
  "Write one result row (a plist of JSON fields); rows with the events log on are marked."
  (when bench-log-on
    (setq plist (plist-put plist :figure (concat (plist-get plist :figure) " (events log on)"))))
  (let ((line (concat (json-encode plist) "\n"))
        (file (getenv "BENCH_RESULTS")))
    (if file (write-region line nil file t 'silent) (princ line))))

(defun bench-median (xs)
  (let* ((s (sort (append xs nil) #'<)) (n (length s)))
    (if (cl-oddp n) (nth (/ n 2) s) (/ (+ (nth (1- (/ n 2)) s) (nth (/ n 2) s)) 2.0))))

(defun bench-pass-p (ok) (if ok t :json-false))

(defun bench-wait (pred &optional timeout what)
  "Process events until PRED is non-nil; fail after TIMEOUT seconds."
  (let ((deadline (+ (float-time) (or timeout 60))) v)
    (while (and (not (setq v (funcall pred))) (< (float-time) deadline))
      (accept-process-output nil 0.01))
    (or v (error "Timed out waiting for %s" (or what pred)))))

(defun bench-cpu ()
  "Seconds of CPU (user + system) this Emacs has used."
  (let ((a (process-attributes (emacs-pid))))
    (float-time (time-add (alist-get 'utime a) (alist-get 'stime a)))))

(defun bench-rss-mb (pid)
  "VmRSS of PID in MB."
  (with-temp-buffer
    (insert-file-contents (format "/proc/%d/status" pid))
    (re-search-forward "VmRSS:[ \t]+\\([0-9]+\\)")
    (/ (string-to-number (match-string 1)) 1024.0)))

(defun bench-ms (start) (* 1000 (- (float-time) start)))

;;;; SLIME, SBCL and the fixture

(declare-function slime-start "ext:slime")
(declare-function slime-connected-p "ext:slime")
(declare-function slime-eval "ext:slime")
(declare-function slime-pid "ext:slime")
(declare-function slime-quit-lisp "ext:slime")
(declare-function sly-start "ext:sly")
(declare-function sly-connected-p "ext:sly")
(declare-function sly-eval "ext:sly")
(declare-function sly-quit-lisp "ext:sly")

(defun bench-eval (form &optional package)
  "Evaluate FORM in the image, waiting, through `sly-eval' or `slime-eval'."
  (if (eq bench-lisp 'sly) (sly-eval form package) (slime-eval form package)))

(defvar bench-helper-form nil "The bridge's call form for describe_symbol, as `slime-eval' gets it.")

(defvar slime-repl-history-file)
(defvar sly-mrepl-history-file-name)

(defun bench-start-lisp ()
  (unless (executable-find "sbcl") (error "sbcl is not installed"))
  ;; The REPL's history is the run's own: one that another Emacs half-wrote in the user's home stops
  ;; SLIME at a question, which batch Emacs answers with an error.
  (let ((dir (make-temp-file "bench-history" t)))
    (setq slime-repl-history-file (expand-file-name "slime-history.eld" dir)
          sly-mrepl-history-file-name (expand-file-name "sly-history.eld" dir)))
  (if (eq bench-lisp 'sly)
      (progn
        (unless (sly-agent-q-dev-require-sly) (error "SLY cannot be found (set SLY_DIR)"))
        (sly-start :program "sbcl" :program-args '("--noinform" "--no-userinit"))
        (bench-wait #'sly-connected-p 120 "SLY to connect"))
    (unless (sly-agent-q-dev-require-slime) (error "SLIME cannot be found"))
    (slime-start :program "sbcl" :program-args '("--noinform" "--no-userinit"))
    (bench-wait #'slime-connected-p 120 "SLIME to connect"))
  (let* ((cur (sly-agent-q-bridge-current)) (err 'waiting))
    (sly-agent-q-bridge-ensure-helpers (car cur) (cdr cur) (lambda (e) (setq err e)))
    (bench-wait (lambda () (not (eq err 'waiting))) 300 "lisp-cl to load")
    (when err (error "%s" err)))
  (bench-eval `(cl:progn (cl:load ,(expand-file-name "test/fixtures/my-app/load.lisp" bench-root)) t))
  (setq bench-helper-form
        (sly-agent-q-bridge-call-form "describe_symbol" '(:symbol "process-data") "MY-APP"
                                      sly-agent-q-image-timeout))
  (let ((r (bench-eval bench-helper-form "MY-APP")))
    (unless (and (plist-get r :ok) (string-match-p "PROCESS-DATA" (plist-get r :content)))
      (error "describe_symbol does not work in the image: %S" r))))

(defun bench-bare-call (&optional form)
  "One bare round trip: `slime-eval' (or `sly-eval') of FORM, or the helper form."
  (bench-eval (or form bench-helper-form) "MY-APP"))

(defun bench-batch-symbol (i)
  "The symbol the Ith call of figure 2's model message describes."
  (if (cl-evenp i) "process-data" "parse-input"))

(defun bench-batch-forms ()
  "The bridge's call forms of figure 2's 100 calls, for the bare evals to compare with."
  (cl-loop for i below 100
           collect (sly-agent-q-bridge-call-form "describe_symbol" (list :symbol (bench-batch-symbol i))
                                                 "MY-APP" sly-agent-q-image-timeout)))

;;;; The mock LLM and the server

(defvar bench-mock nil)

(defun bench-script ()
  "The mock's steps: figure 2's batches, then figure 3's streams."
  (let* ((calls (apply #'vector
                       (cl-loop for i below 100
                                collect `((type . "tool_use") (name . "describe_symbol")
                                          (input . ((symbol . ,(bench-batch-symbol i))
                                                    (package . "MY-APP")))))))
         (chars (* bench-deltas bench-delta-chars))
         (piece "(defun process-data (items) ...) is fine; ")
         (text (substring (apply #'concat (make-list (1+ (/ chars (length piece))) piece)) 0 chars))
         (pass (append (cl-loop repeat bench-batches
                                append `(((content . ,calls))
                                         ((content . [((type . "text") (text . "All described."))]))))
                       (cl-loop repeat bench-streams
                                collect `((content . [((type . "text") (text . ,text))])
                                          (text_delta_chars . ,bench-delta-chars))))))
    `((steps . ,(vconcat pass)))))

(defun bench-start-mock ()
  (let* ((file (make-temp-file "bench-script" nil ".json" (json-encode (bench-script))))
         (buf (generate-new-buffer " *bench-mock*")))
    (setq bench-mock (make-process :name "bench-mock" :buffer buf :noquery t :connection-type 'pipe
                                   :command (list "node" (expand-file-name "test/fixtures/mock-llm/cli.mjs" bench-root)
                                                  "--script" file)
                                   :stderr (get-buffer-create " *bench-mock-stderr*")))
    (bench-wait (lambda () (with-current-buffer buf (string-match-p "\n" (buffer-string)))) 20 "the mock")
    (delete-file file)                  ; read at start
    (setq sly-agent-q-provider "anthropic"
          sly-agent-q-base-url (with-current-buffer buf
                                 (goto-char (point-min))
                                 (cdr (assq 'url (json-read))))
          sly-agent-q-api-key "bench-key"
          sly-agent-q-model "claude-sonnet-4-5"
          sly-agent-q-max-steps 10)))

(defun bench-start-server ()
  "Start the server through the package; return the connection."
  (let (ready err)
    (sly-agent-q-server-ensure (lambda (c e) (setq ready c err e)))
    (bench-wait (lambda () (or ready err)) 30 "the server")
    (when err (error "%s" err))
    ready))

(defun bench-full-call (conn)
  "One full round trip: tools/call describe_symbol.
`jsonrpc-request' waits the way `slime-eval' does: its callback
throws out of the wait as soon as the answer is read."
  (let ((result (jsonrpc-request conn 'tools/call
                                 '(:name "describe_symbol" :arguments (:symbol "process-data" :package "MY-APP"))
                                 :timeout 60)))
    (unless (eq (plist-get result :success) t) (error "tools/call failed: %S" result))
    result))

;;;; 1. Tool round trip

(defun bench-round-trip (conn)
  (dotimes (_ 20) (bench-bare-call) (bench-full-call conn)) ; warm up both paths
  (let (bare full)
    (dotimes (_ bench-pairs)
      (let ((t0 (float-time))) (bench-bare-call) (push (bench-ms t0) bare))
      (let ((t0 (float-time))) (bench-full-call conn) (push (bench-ms t0) full)))
    (let ((ratio (/ (bench-median full) (bench-median bare))))
      (bench-record :figure (format "1. bare %s-eval of the helper form" bench-lisp) :unit "ms"
                    :samples (vconcat bare) :target "-" :note (format "%s + SBCL" (upcase (symbol-name bench-lisp))))
      (bench-record :figure (format "1. full path: tools/call > server > Emacs > %s" (upcase (symbol-name bench-lisp)))
                    :unit "ms"
                    ;; A regression guard: the server is on the path by design, and what it adds
                    ;; (about half a millisecond) is under a tenth of a percent of one model step.
                    :samples (vconcat full) :target "<= 2.0x bare (guard)" :ratio ratio
                    :pass (bench-pass-p (<= ratio 2.0))
                    :note (format "%d interleaved pairs; ratio = median full / median bare; a regression guard" bench-pairs)))))

(defun bench-emacs-live-mb ()
  "Megabytes of live Lisp data in this Emacs after a full collection (buffer text not included)."
  (/ (cl-loop for (_ size used) in (garbage-collect)
              when (and (numberp size) (numberp used)) sum (* size used))
     1048576.0))

(defun bench-lisp-live-mb ()
  "Megabytes of dynamic space in use in the image (SBCL) after a full collection."
  (bench-eval '(cl:progn (sb-ext:gc :full cl:t) (cl:/ (sb-kernel:dynamic-usage) 1048576.0))))

(defun bench-in-a-row (conn)
  "1,000 full calls in a row: time and memory must stay flat."
  (let* ((server-pid (process-id (jsonrpc--process conn)))
         (mem (lambda () (list (bench-emacs-live-mb) (bench-rss-mb server-pid) (bench-lisp-live-mb))))
         (show (lambda (m) (mapconcat (lambda (x) (format "%.1f" x)) m "/")))
         (m0 (funcall mem)) m1 times)
    (dotimes (i bench-row-calls)
      (when (= i (/ bench-row-calls 2)) (setq m1 (funcall mem)))
      (let ((t0 (float-time))) (bench-full-call conn) (push (bench-ms t0) times)))
    (setq times (nreverse times))
    (let* ((m2 (funcall mem))
           (tenth (/ bench-row-calls 10))
           (first (bench-median (cl-subseq times 0 tenth)))
           (last (bench-median (last times tenth)))
           (growth (cl-mapcar #'- m2 m1))
           (flat (and (<= (/ last first) 1.1) (< (nth 0 growth) 1) (< (nth 2 growth) 1))))
      (bench-record :figure (format "1. %d full calls in a row" bench-row-calls) :unit "ms"
                    :samples (vconcat times) :target "flat" :ratio (/ last first) :pass (bench-pass-p flat)
                    :note (format "flat = median of the last %d calls <= 1.1x the first %d's (%.2f vs %.2f ms), and over the second half Emacs's and the image's live data (after a full GC) grow < 1 MB (the server's: its live-heap row; its RSS is shown, not judged: V8's RSS moves by MBs either way); MB Emacs live/server RSS/SBCL live at call 0: %s, %d: %s, %d: %s"
                                  tenth tenth last first (funcall show m0)
                                  (/ bench-row-calls 2) (funcall show m1) bench-row-calls (funcall show m2))))))

;;;; 13. Inspecting big values

(defconst bench-inspect-calls (if bench-quick 5 20) "Pages timed per row of figure 13.")

(defun bench-inspect-page (conn id offset)
  "One full tools/call of inspect_value: 20 parts of value ID from OFFSET."
  (let* ((result (jsonrpc-request conn 'tools/call
                                  `(:name "inspect_value" :arguments (:id ,id :offset ,offset :limit 20))
                                  :timeout 120))
         (text (format "%s" (plist-get result :content))))
    (unless (and (eq (plist-get result :success) t)
                 (string-match-p (format "Parts %d to %d of 1000000" offset (+ offset 20)) text))
      (error "inspect_value did not give the page: %S" result))))

(defun bench-inspect (conn)
  "Pages of a 1,000,000-entry EQUAL hash table and of a 1,000,000-element
list, near their ends, through the whole tools/call path."
  (let* ((ids (bench-eval '(cl:let ((table (cl:make-hash-table :test (cl:quote cl:equal)))
                                    (list (cl:loop for i below 1000000 collect i)))
                            (cl:dotimes (i 1000000) (cl:setf (cl:gethash (cl:format cl:nil "key-~D" i) table) i))
                            (cl:list (sly-agent-q::inspectable-id table) (sly-agent-q::inspectable-id list)))))
         (rows `(("13. inspect_value: a page of a 1,000,000-entry hash table, at offset 0" ,(nth 0 ids) 0 100)
                 ("13. inspect_value: a page of a 1,000,000-entry hash table, at offset 999,980" ,(nth 0 ids) 999980 100)
                 ("13. inspect_value: a page of a 1,000,000-element list, at offset 999,980" ,(nth 1 ids) 999980 200))))
    (pcase-dolist (`(,figure ,id ,offset ,target) rows)
      (bench-inspect-page conn id offset)     ; warm up
      (let (times)
        (dotimes (_ bench-inspect-calls)
          (let ((t0 (float-time))) (bench-inspect-page conn id offset) (push (bench-ms t0) times)))
        (let ((median (bench-median times))
              ;; The same call timed inside the image: what the page costs there, apart from
              ;; the trips between four processes (which a loaded machine makes long).
              (inside (bench-eval `(cl:loop repeat ,bench-inspect-calls
                                            collect (cl:let ((t0 (cl:get-internal-real-time)))
                                                      (sly-agent-q:call-tool
                                                       "inspect_value"
                                                       (cl:quote (("id" . ,id) ("offset" . ,offset) ("limit" . 20))))
                                                      (cl:/ (cl:* 1000.0 (cl:- (cl:get-internal-real-time) t0))
                                                            cl:internal-time-units-per-second))))))
          (bench-record :figure figure :unit "ms" :samples (vconcat times)
                        :target (format "<= %d ms" target) :ratio (/ median target)
                        :pass (bench-pass-p (<= median target))
                        :note "20 parts a page, the whole tools/call path (server, Emacs, SLIME, the image)")
          (bench-record :figure (concat figure ", in the image alone") :unit "ms" :samples (vconcat inside)
                        :target "-" :note "sly-agent-q:call-tool timed inside the image: the page's own cost"))))
    (bench-eval '(cl:progn (cl:setf sly-agent-q::*inspectables* cl:nil) cl:t))))

;;;; 2. Throughput

(defvar bench-first-call nil)
(defvar bench-last-result nil)
(defvar bench-results-seen 0)

(defun bench-on-notification (_conn method _params)
  "Note the times of the first chat/toolCall and of each chat/toolResult (METHOD)."
  (pcase method
    ('chat/toolCall (unless bench-first-call (setq bench-first-call (float-time))))
    ('chat/toolResult (cl-incf bench-results-seen) (setq bench-last-result (float-time)))))

(defun bench-send (text)
  "Send TEXT through the chat buffer and wait for the turn's outcome plist."
  (let (outcome)
    (sly-agent-q-send text (lambda (p) (setq outcome p)))
    (bench-wait (lambda () outcome) 300 (format "the answer to %S" text))
    (unless (eq (plist-get outcome :status) 'finished) (error "The turn failed: %S" outcome))
    outcome))

(defvar bench-user-gc-cons-threshold (default-toplevel-value 'gc-cons-threshold)
  "Emacs's own threshold, which the server's traffic raises for a while.")

(defun bench-settle ()
  "Wait until the server's traffic no longer holds collections off, then collect.
Each measured segment starts from the user's own threshold and a fresh heap.
Return the milliseconds of collection while waiting (the one held off)."
  (let ((ms0 gc-elapsed))
    (bench-wait (lambda () (= (default-toplevel-value 'gc-cons-threshold) bench-user-gc-cons-threshold))
                10 "collections to be released")
    ;; The release lets the next allocation check collect.
    (dotimes (_ 3) (accept-process-output nil 0.01))
    (prog1 (* 1000 (- gc-elapsed ms0))
      (garbage-collect))))

(defun bench-throughput ()
  (advice-add 'sly-agent-q-handle-notification :before #'bench-on-notification)
  (let ((forms (bench-batch-forms)) full bare gcs after)
    (dotimes (_ bench-batches)
      (bench-settle)
      (setq bench-first-call nil bench-results-seen 0)
      (let ((gc0 gcs-done) (ms0 gc-elapsed))
        (bench-send "Describe process-data and parse-input, fifty times each.")
        (push (list (- gcs-done gc0) (* 1000 (- gc-elapsed ms0))) gcs))
      (unless (= bench-results-seen 100) (error "Expected 100 tool results, saw %d" bench-results-seen))
      (push (* 1000 (- bench-last-result bench-first-call)) full)
      ;; The collection held off during the burst, when it ends.
      (push (bench-settle) after)
      (let ((t0 (float-time)) (gc0 gcs-done))
        (dolist (form forms) (bench-bare-call form))
        (push (bench-ms t0) bare)
        (push (list 'bare (- gcs-done gc0)) gcs)))
    (advice-remove 'sly-agent-q-handle-notification #'bench-on-notification)
    (let ((ratio (/ (bench-median full) (bench-median bare))))
      (bench-record :figure (format "2. 100 sequential bare %s-evals" bench-lisp) :unit "ms"
                    :samples (vconcat bare) :target "-")
      (bench-record :figure (format "2. 100 calls from one model message%s" (if (eq bench-lisp 'sly) " (SLY)" ""))
                    :unit "ms" :samples (vconcat full)
                    :target "<= sequential bare" :ratio ratio :pass (bench-pass-p (<= ratio 1.0))
                    :note (format "first chat/toolCall to the 100th chat/toolResult in Emacs, rendered in the chat buffer; each segment starts after a full collection, at Emacs's own gc-cons-threshold; garbage collections during each turn (count, ms): %s; during the bare evals: %s; when the burst ended (the held-off one, ms): %s"
                                  (mapconcat (lambda (g) (format "%d/%.0f" (car g) (cadr g)))
                                             (reverse (cl-remove 'bare gcs :key #'car)) " ")
                                  (mapconcat (lambda (g) (format "%d" (cadr g)))
                                             (reverse (cl-remove-if-not (lambda (g) (eq (car g) 'bare)) gcs)) " ")
                                  (mapconcat (lambda (ms) (format "%.0f" ms)) (reverse after) " "))))))

;;;; 3. Streaming

(defvar bench-counts nil "Alist of (FUNCTION . CALLS) of functions that force or cause redisplay.")

(defconst bench-redisplay-functions
  '(redisplay force-mode-line-update force-window-update sit-for message recenter))

(defun bench-stream ()
  "Stream one long answer into the chat buffer; return CPU, wall, gap, changes..."
  (let* ((buf (sly-agent-q-chat-buffer))
         (changes 0) (deltas 0) (chars 0) (pre-redisplay 0) (last (float-time)) (gap 0)
         (count-change (lambda (&rest _) (cl-incf changes)))
         (count-delta (lambda (_conn method params)
                        (when (eq method 'chat/textDelta)
                          (cl-incf deltas)
                          (cl-incf chars (length (or (plist-get params :text) ""))))))
         (count-pre (lambda (&rest _) (cl-incf pre-redisplay)))
         (gcs gcs-done) (gc-time gc-elapsed)
         timer)
    (setq bench-counts nil)
    (dolist (f bench-redisplay-functions)
      (advice-add f :before (lambda (&rest _) (cl-incf (alist-get f bench-counts 0))) '((name . bench-count))))
    (advice-add 'sly-agent-q-handle-notification :before count-delta)
    (add-hook 'pre-redisplay-functions count-pre)
    (with-current-buffer buf (add-hook 'after-change-functions count-change nil t))
    ;; The largest interval between firings of a 10 ms timer: how long input would have waited.
    (setq timer (run-with-timer 0.01 0.01 (lambda ()
                                            (let ((now (float-time)))
                                              (setq gap (max gap (- now last)) last now)))))
    (let ((cpu0 (bench-cpu)) (t0 (float-time)) cpu wall)
      (setq last (float-time))
      (bench-send "Tell me everything.")
      (setq cpu (- (bench-cpu) cpu0) wall (- (float-time) t0))
      (cancel-timer timer)
      (dolist (f bench-redisplay-functions) (advice-remove f 'bench-count))
      (advice-remove 'sly-agent-q-handle-notification count-delta)
      (remove-hook 'pre-redisplay-functions count-pre)
      (with-current-buffer buf (remove-hook 'after-change-functions count-change t))
      ;; The server may batch deltas into fewer notifications; every character must arrive.
      (unless (= chars (* bench-deltas bench-delta-chars))
        (error "Expected %d characters of text deltas, got %d" (* bench-deltas bench-delta-chars) chars))
      (bench-log "  stream: cpu %.2f s, wall %.2f s, largest gap %.0f ms, %d chat/textDelta notifications, %d buffer changes, %d GCs (%.2f s), %S"
                 cpu wall (* 1000 gap) deltas changes (- gcs-done gcs) (- gc-elapsed gc-time) bench-counts)
      (list :cpu cpu :wall wall :gap (* 1000 gap) :changes changes :counts bench-counts :notifications deltas
            :gcs (- gcs-done gcs) :gc-time (- gc-elapsed gc-time) :pre-redisplay pre-redisplay))))

(defun bench-streaming ()
  (let* ((runs (cl-loop repeat bench-streams collect (bench-stream)))
         (get (lambda (k) (vconcat (mapcar (lambda (r) (plist-get r k)) runs))))
         (cpu (bench-median (funcall get :cpu)))
         (gap (bench-median (funcall get :gap)))
         (r (car runs)))
    (bench-record :figure (format "3. Emacs CPU, %d deltas of %d chars" bench-deltas bench-delta-chars)
                  :unit "s" :samples (funcall get :cpu) :spread "min-max" :target "< 1 s"
                  :ratio cpu :pass (bench-pass-p (< cpu 1))
                  :note (format "the mock sends %d deltas at once, Emacs got them in %d chat/textDelta notifications; wall %.2f s per stream, of which %.2f s in %d garbage collections; jsonrpc events log %s"
                                bench-deltas (plist-get r :notifications)
                                (bench-median (funcall get :wall)) (plist-get r :gc-time) (plist-get r :gcs)
                                (if (eq sly-agent-q-events-buffer-size 0) "off (the default)"
                                  (format "on (%s chars)" sly-agent-q-events-buffer-size))))
    (bench-record :figure "3. largest input gap while streaming" :unit "ms"
                  :samples (funcall get :gap) :spread "min-max" :target "<= 50 ms"
                  :ratio (/ gap 50.0) :pass (bench-pass-p (<= gap 50))
                  :note "largest interval between firings of a 10 ms repeating timer")
    (bench-record :figure "3. chat buffer changes per stream" :unit "changes"
                  :samples (funcall get :changes) :spread "min-max" :target "batched, << deltas"
                  :pass (bench-pass-p (< (plist-get r :changes) (/ bench-deltas 10)))
                  :note (format "after-change calls in the chat buffer (text is inserted every %s s, each insertion also marks it read-only); calls that force redisplay: %s; pre-redisplay-functions ran %d times (batch Emacs never redisplays)"
                                sly-agent-q-stream-flush-interval
                                (if (plist-get r :counts)
                                    (mapconcat (lambda (c) (format "%s %d" (car c) (cdr c))) (plist-get r :counts) ", ")
                                  "none")
                                (plist-get r :pre-redisplay)))))

;;;; 6. Tokens of the specification's three scenarios

(defconst bench-scenarios
  '(("scenario-1" "scenario-1-describe.json" "Describe the function PROCESS-DATA in MY-APP package")
    ("scenario-2" "scenario-2-fix-bug.json" "There's a bug in PARSE-INPUT, it fails on empty strings")
    ("scenario-3" "scenario-3-add-method.json" "Add a new method to SERIALIZE for MY-CLASS"))
  "(NAME SCRIPT PROMPT): the end-to-end tests' scenarios (test/e2e/scripts/).")

(defvar url-proxy-services)
(defvar url-request-method)
(defvar url-request-data)
(defvar url-request-extra-headers)

(defun bench-mock-http (method path &optional body)
  "METHOD PATH on the mock LLM (loopback only, no proxy), with BODY; return the answer's body."
  (require 'url)
  (let ((url-proxy-services nil)
        (url-request-method method)
        (url-request-data (and body (encode-coding-string body 'utf-8)))
        (url-request-extra-headers (and body '(("Content-Type" . "application/json")))))
    (with-current-buffer (url-retrieve-synchronously (concat sly-agent-q-base-url path) t t 30)
      (prog1 (progn (goto-char (point-min))
                    (re-search-forward "\n\n")
                    (decode-coding-string (buffer-substring-no-properties (point) (point-max)) 'utf-8))
        (kill-buffer)))))

(defun bench-scenario-tokens ()
  "Run the three scenarios in a fresh conversation each; keep what the mock received.
bench/tokens.mjs turns bench/.work/scenario-N.json into the per-request figures."
  (let ((scripts (expand-file-name "test/e2e/scripts" bench-root)))
    (pcase-dolist (`(,name ,script ,prompt) bench-scenarios)
      (bench-eval `(cl:progn (cl:load ,(expand-file-name "test/fixtures/my-app/load.lisp" bench-root)) t))
      (sly-agent-q-new-conversation)
      (bench-mock-http "POST" "/_script"
                       (with-temp-buffer (insert-file-contents (expand-file-name script scripts)) (buffer-string)))
      (bench-send prompt)
      (write-region (bench-mock-http "GET" "/_requests") nil
                    (expand-file-name (format "bench/.work/%s.json" name) bench-root) nil 'silent))))

;;;; Main

(defun bench-main ()
  (let ((t0 (float-time)))
    (when bench-log-on (setq sly-agent-q-events-buffer-size 2000000))
    ;; Conversations are saved as shipped, but not into the user's own directory.
    (setq sly-agent-q-conversation-directory (make-temp-file "bench-conversations" t))
    (bench-log "emacs bench%s: starting SBCL under %s, loading lisp-cl and the fixture"
               (if bench-log-on " (events log on)" "") (upcase (symbol-name bench-lisp)))
    (bench-start-lisp)
    (bench-log "emacs bench: Lisp ready after %.1f s" (- (float-time) t0))
    (bench-start-mock)
    (let ((conn (bench-start-server)))
     (if (equal (getenv "BENCH_ONLY") "13")
         (bench-inspect conn)
      (bench-log "emacs bench: figure 1, tool round trip")
      (bench-round-trip conn)
      ;; Under SLY only the figures that compare with a bare eval: the rest do not depend on it.
      (unless (eq bench-lisp 'sly) (bench-in-a-row conn))
      (bench-log "emacs bench: figure 2, throughput")
      (bench-throughput)
      (unless (eq bench-lisp 'sly)
        (bench-log "emacs bench: figure 3, streaming")
        (bench-streaming))
      (unless (or bench-log-on (eq bench-lisp 'sly))
        (bench-log "emacs bench: figure 6, the three scenarios' requests")
        (bench-scenario-tokens)
        (bench-log "emacs bench: figure 12, inspecting big values")
        (bench-inspect conn))))
    (bench-log "emacs bench: done in %.1f s" (- (float-time) t0))
    (sly-agent-q-server-stop)
    (when (process-live-p bench-mock) (process-send-eof bench-mock))
    (ignore-errors (if (eq bench-lisp 'sly) (sly-quit-lisp t) (slime-quit-lisp t)))))

(unless (getenv "BENCH_NO_MAIN") (bench-main))

;;; emacs.el ends here
