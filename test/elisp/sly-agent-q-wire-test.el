;;; sly-agent-q-wire-test.el --- Every message reaches Emacs whatever it holds  -*- lexical-binding: t; -*-

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

;; The real bundled server, the scripted mock LLM and the stdio MCP
;; fixture: characters that Emacs's JSON parser refuses (NUL, a lone
;; surrogate) in an MCP result and in the model's own text.

;;; Code:

(require 'sly-agent-q-test-helper
         (expand-file-name "sly-agent-q-test-helper"
                           (file-name-directory (or load-file-name buffer-file-name))))
(require 'sly-agent-q-mcp)

(ert-deftest sly-agent-q-wire-nul-reaches-the-chat-and-the-turn-finishes ()
  "A NUL from an MCP result and in the model's text is shown marked; the turn ends."
  (let ((sly-agent-q-mcp-servers
         `(("fixture" . (:command "node"
                         :args ,(vector (expand-file-name "test/fixtures/mcp/stdio-server.mjs"
                                                          sly-agent-q-test-root))))))
        (sly-agent-q-mcp-server-levels '(("fixture" . safe))))
    (sly-agent-q-test-with-server
        `((steps . [((content . [((type . "text") (text . "Quoting a\0b. "))
                                 ((type . "tool_use") (name . "mcp__fixture__echo")
                                  (input . ((text . "x\0y"))))])
                     (stop_reason . "tool_use"))
                    ((content . [((type . "text") (text . "Got: {{last_tool_result}}"))]))]))
      (sly-agent-q-test-wait
       (lambda () (with-current-buffer (sly-agent-q-mcp-log-buffer)
                    (string-match-p "MCP server fixture: connected" (buffer-string))))
       20 "the MCP fixture to connect")
      (let ((outcome (sly-agent-q-test-send "Echo a NUL." 30)))
        (should (eq (plist-get outcome :status) 'finished))
        (let ((chat (sly-agent-q-test-chat-text)))
          (should-not (string-match-p "\0" chat))
          (should (string-match-p "Quoting a␀b\\." chat))
          (should (string-match-p "Got: fixture echo: x␀y" chat)))
        ;; The model itself got the result as the MCP server gave it.
        (should (equal (car (car (last (sly-agent-q-test-tool-results))))
                       "fixture echo: x\0y"))))))

(ert-deftest sly-agent-q-wire-lost-end-ends-the-turn-with-an-error ()
  "A turn whose chat/turnFinished Emacs never read ends with an error, not never."
  (let ((sly-agent-q-turn-check-interval 0.5)
        (drop (lambda (orig conn method params)
                ;; As if Emacs's JSON parser had refused the message.
                (unless (eq method 'chat/turnFinished)
                  (funcall orig conn method params)))))
    (advice-add 'sly-agent-q-handle-notification :around drop)
    (unwind-protect
        (sly-agent-q-test-with-server
            '((steps . [((content . [((type . "text") (text . "An answer whose end is lost."))]))]))
          (let ((outcome (sly-agent-q-test-send "Hello." 20)))
            (should (eq (plist-get outcome :status) 'failed))
            (should (string-match-p "never reached the chat" (plist-get outcome :message)))
            (should (string-match-p "Error: the server ended this turn" (sly-agent-q-test-chat-text)))))
      (advice-remove 'sly-agent-q-handle-notification drop))))

(ert-deftest sly-agent-q-wire-raw-bytes-from-emacs-reach-the-server ()
  "A buffer holding raw bytes and a surrogate code, which Emacs's JSON encoder refuses, is
read by the model: the reply reaches the server (each such character as U+FFFD) at once."
  (let ((buffer (generate-new-buffer "saq-raw-bytes")))
    (unwind-protect
        (progn
          (with-current-buffer buffer
            (insert "before " (string #xD800) " " (decode-coding-string "\377\376" 'raw-text) " after"))
          (sly-agent-q-test-with-server
              `((steps . [((content . [((type . "tool_use") (name . "read_buffer")
                                        (input . ((buffer . ,(buffer-name buffer)))))])
                           (stop_reason . "tool_use"))
                          ((content . [((type . "text") (text . "Read: {{last_tool_result}}"))]))]))
            (let ((outcome (sly-agent-q-test-send "Read it." 20)))
              (should (eq (plist-get outcome :status) 'finished))
              (let ((result (car (car (last (sly-agent-q-test-tool-results))))))
                (should (string-match-p "before \ufffd \ufffd\ufffd after" result))))))
      (kill-buffer buffer))))

(provide 'sly-agent-q-wire-test)
;;; sly-agent-q-wire-test.el ends here
