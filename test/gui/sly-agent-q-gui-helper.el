;;; sly-agent-q-gui-helper.el --- The chat in a GUI frame under Xvfb, as drawn  -*- lexical-binding: t; -*-

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

;; The GUI suite's tests run in a real graphic Emacs, its frame on an X
;; display of Xvfb (test/gui/run.sh starts both).  What the frame shows
;; is read back as a person would see it: `sly-agent-q-gui-screenshot'
;; takes the screen with ImageMagick's `import' and reads its pixels,
;; `sly-agent-q-gui-char-box' says where a character of a buffer is drawn
;; on the screen, and `sly-agent-q-gui-ink' and
;; `sly-agent-q-gui-dominant' tell the colour of its glyph and of its
;; background there.
;;
;; `sly-agent-q-gui-run-tests-and-exit' runs the loaded ERT tests as
;; `ert-run-tests-batch-and-exit' does, its output on standard error as
;; a batch run's is (test/ert-run.sh reads it), then ends Emacs.
;; SAQ_GUI_SCREENSHOTS, when it names a directory, keeps the screenshots
;; there as PNG (the README's captures come from it: make gui-screens).

;;; Code:

(require 'sly-agent-q-test-helper
         (expand-file-name "../elisp/sly-agent-q-test-helper"
                           (file-name-directory (or load-file-name buffer-file-name))))
(require 'color)

(defconst sly-agent-q-gui-width 900 "The width of the frame, in pixels: the screen's.")
(defconst sly-agent-q-gui-height 600 "The height of the frame, in pixels: the screen's.")

;;;; Running ERT in a graphic Emacs

(defvar sly-agent-q-gui--shot-directory nil "Where this run's screenshots are written.")

(defun sly-agent-q-gui--message-to-stderr (message &rest args)
  "Call MESSAGE with ARGS, and print what it shows on standard error too."
  (let ((text (apply message args)))
    (when text (princ (concat text "\n") #'external-debugging-output))
    text))

(defun sly-agent-q-gui-run-tests-and-exit (&optional selector)
  "Run the ERT tests SELECTOR selects (all by default) in this graphic Emacs, then exit.
The output is a batch run's, on standard error; the exit status is 0
when every result was expected."
  (let ((standard-output #'external-debugging-output)
        (status 2))
    ;; The screen shows the product's mode line, not ERT's progress in it.
    (setq minor-mode-alist (assq-delete-all 'ert--current-run-stats minor-mode-alist))
    (advice-add 'message :around #'sly-agent-q-gui--message-to-stderr)
    (unwind-protect
        (condition-case err
            (progn
              (sly-agent-q-gui-wait-for-frame)
              (let ((stats (ert-run-tests-batch selector)))
                (setq status (if (zerop (ert-stats-completed-unexpected stats)) 0 1))))
          ;; `debug': a test's failure goes to ERT's debugger first, as in a batch run.
          ((debug error) (princ (format "GUI test run failed: %S\n" err))))
      (when sly-agent-q-gui--shot-directory
        (delete-directory sly-agent-q-gui--shot-directory t))
      (kill-emacs status))))

;;;; The frame

(defun sly-agent-q-gui-wait-for-frame ()
  "Wait until the selected frame is shown on an X display, the size of the screen.
Fail when Emacs has no graphic frame (started with --batch or -nw)."
  (unless (eq window-system 'x)
    (error "Not a graphic Emacs on X (window-system is %S)" window-system))
  (sly-agent-q-test-wait (lambda () (eq (frame-visible-p (selected-frame)) t)) 30 "the frame to be shown")
  ;; What a capture should show: the chat and the menu bar, no blinking cursor, no tool bar.
  (tool-bar-mode -1)
  (scroll-bar-mode -1)
  (blink-cursor-mode -1)
  (setq inhibit-message nil)
  (let ((frame (selected-frame)))
    (set-frame-position frame 0 0)
    ;; `set-frame-size' sets the text area's size: the rest (menu bar, fringes) comes on top.
    (setq frame-resize-pixelwise t)
    (sly-agent-q-test-wait
     (lambda ()
       (let* ((outer (alist-get 'outer-size (frame-geometry frame)))
              (dw (- sly-agent-q-gui-width (car outer)))
              (dh (- sly-agent-q-gui-height (cdr outer))))
         (or (and (zerop dw) (zerop dh))
             (progn (set-frame-size frame (+ (frame-text-width frame) dw) (+ (frame-text-height frame) dh) t)
                    (redisplay t)
                    nil))))
     10 (lambda () (format "the frame to be %dx%d (it is %S)" sly-agent-q-gui-width sly-agent-q-gui-height
                          (alist-get 'outer-size (frame-geometry frame)))))))

(defun sly-agent-q-gui-use-theme (theme)
  "Draw the frame in THEME (a theme that ships with Emacs), no other theme on."
  (mapc #'disable-theme custom-enabled-themes)
  (load-theme theme t)
  (redisplay t))

(defun sly-agent-q-gui-show (buffer start)
  "Show BUFFER alone in the frame from START, without a cursor; return its window."
  (delete-other-windows)
  (switch-to-buffer buffer)
  ;; Point goes where the window shows; its cursor would hide what is under it.
  (setq-local cursor-type nil)
  (goto-char start)
  (set-window-start (selected-window) start)
  (message nil)
  (redisplay t)
  (selected-window))

;;;; The screen, read back

(cl-defstruct (sly-agent-q-gui-shot (:constructor sly-agent-q-gui--make-shot))
  "A screenshot: its WIDTH and HEIGHT in pixels, its PIXELS (RGB bytes from OFFSET)."
  width height pixels offset)

(defun sly-agent-q-gui--read-ppm (file)
  "The screenshot in FILE, a binary PPM (P6) of 8 bits a channel."
  (with-temp-buffer
    (set-buffer-multibyte nil)
    (insert-file-contents-literally file)
    (goto-char (point-min))
    (unless (looking-at "P6[ \t\n]+\\([0-9]+\\)[ \t\n]+\\([0-9]+\\)[ \t\n]+255[ \t\n]")
      (error "Not an 8-bit PPM: %s" file))
    (sly-agent-q-gui--make-shot :width (string-to-number (match-string 1))
                                :height (string-to-number (match-string 2))
                                :offset (1- (match-end 0))
                                :pixels (buffer-string))))

(defun sly-agent-q-gui-screenshot (&optional name)
  "Take the screen as it is drawn now (`import'); return it as a `sly-agent-q-gui-shot'.
With NAME, keep it as NAME.png in SAQ_GUI_SCREENSHOTS when that names a directory."
  (redisplay t)
  ;; A round trip to the X server: what Emacs sent before is drawn before `import' reads it.
  (x-window-property "WM_NAME" nil "STRING" nil nil)
  (unless sly-agent-q-gui--shot-directory
    (setq sly-agent-q-gui--shot-directory (make-temp-file "agent-q-gui-shots" t)))
  (let ((ppm (expand-file-name (format "%s.ppm" (or name "shot")) sly-agent-q-gui--shot-directory))
        (keep (getenv "SAQ_GUI_SCREENSHOTS")))
    (unless (zerop (call-process "import" nil nil nil "-display" (frame-parameter nil 'display)
                                 "-window" "root" "-depth" "8" ppm))
      (ert-fail (list "import could not take the screen" ppm)))
    (when (and name keep (not (string-empty-p keep)))
      (make-directory keep t)
      ;; 256 colours (PNG8) are enough for text, and half the size.
      (unless (zerop (call-process "convert" nil nil nil ppm "-strip" "-colors" "256"
                                   (concat "PNG8:" (expand-file-name (concat name ".png") keep))))
        (ert-fail (list "convert could not write the capture" name))))
    (prog1 (sly-agent-q-gui--read-ppm ppm)
      (delete-file ppm))))

(defun sly-agent-q-gui-pixel (shot x y)
  "The colour of SHOT at X, Y: a list of red, green and blue, 0 to 255."
  (let ((i (+ (sly-agent-q-gui-shot-offset shot) (* 3 (+ x (* y (sly-agent-q-gui-shot-width shot))))))
        (pixels (sly-agent-q-gui-shot-pixels shot)))
    (list (aref pixels i) (aref pixels (+ i 1)) (aref pixels (+ i 2)))))

(defun sly-agent-q-gui-rgb (color)
  "COLOR (a name or #RRGGBB) as this frame draws it: red, green and blue, 0 to 255."
  (mapcar (lambda (v) (/ v 257)) (color-values color)))

(defun sly-agent-q-gui-distance (a b)
  "How far apart the colours A and B are (each red, green and blue, 0 to 255)."
  (sqrt (apply #'+ (cl-mapcar (lambda (x y) (* (- x y) (- x y))) a b))))

(defun sly-agent-q-gui-char-box (pos &optional window)
  "Where the character at POS of WINDOW's buffer is drawn: (X Y WIDTH HEIGHT) on the screen.
The frame is at the screen's top left: the screen's coordinates are its own."
  (let* ((window (or window (selected-window)))
         (posn (and (pos-visible-in-window-p pos window) (posn-at-point pos window)))
         ;; The text area's corner, below the header line; `window-absolute-pixel-position'
         ;; counts the header line twice in Emacs 28.
         (area (window-inside-absolute-pixel-edges window)))
    (unless posn (ert-fail (list "not on the screen" pos)))
    (pcase-let ((`(,x . ,y) (posn-x-y posn))
                (`(,w . ,h) (posn-object-width-height posn)))
      (list (+ (nth 0 area) x) (+ (nth 1 area) y) w h))))

(defun sly-agent-q-gui--box-pixels (shot box)
  "The colours of SHOT's pixels inside BOX, (X Y WIDTH HEIGHT)."
  (pcase-let ((`(,x ,y ,w ,h) box))
    (cl-loop for j from y below (+ y h)
             nconc (cl-loop for i from x below (+ x w)
                            collect (sly-agent-q-gui-pixel shot i j)))))

(defun sly-agent-q-gui-dominant (shot box)
  "The colour most of BOX's pixels in SHOT have: a glyph's background."
  (let ((counts (make-hash-table :test #'equal)))
    (dolist (p (sly-agent-q-gui--box-pixels shot box))
      (puthash p (1+ (gethash p counts 0)) counts))
    (let (best (n 0))
      (maphash (lambda (k v) (when (> v n) (setq best k n v))) counts)
      best)))

(defun sly-agent-q-gui-ink (shot box)
  "The colour of the glyph drawn in BOX of SHOT: its pixel farthest from the background."
  (let ((background (sly-agent-q-gui-dominant shot box)))
    (cl-reduce (lambda (a b) (if (>= (sly-agent-q-gui-distance a background)
                                     (sly-agent-q-gui-distance b background))
                                 a b))
               (sly-agent-q-gui--box-pixels shot box))))

(defun sly-agent-q-gui-at (regexp &optional group)
  "The start of the first match of REGEXP (its GROUP) in the current buffer."
  (save-excursion
    (goto-char (point-min))
    (unless (re-search-forward regexp nil t) (ert-fail (list "not in the buffer" regexp)))
    (match-beginning (or group 0))))

(provide 'sly-agent-q-gui-helper)
;;; sly-agent-q-gui-helper.el ends here
