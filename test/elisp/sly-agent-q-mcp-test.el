;;; sly-agent-q-mcp-test.el --- The MCP configuration entries and server lists  -*- lexical-binding: t; -*-

;; This file is not part of GNU Emacs.

;;; Commentary:

;; What M-x sly-agent-q-mcp-config shows and writes, and what the agent's
;; MCP servers are sent as.  The MCP traffic itself is tested with the
;; real server in test/server/mcp-*.test.ts and test/e2e.

;;; Code:

(require 'sly-agent-q-test-helper
         (expand-file-name "sly-agent-q-test-helper"
                           (file-name-directory (or load-file-name buffer-file-name))))

(ert-deftest sly-agent-q-mcp-config-writes-the-entry-and-keeps-others ()
  "The .mcp.json entry runs the stdio shim, holds no token, and other servers stay."
  (let* ((dir (make-temp-file "agent-q-mcp-conf" t))
         (file (expand-file-name ".mcp.json" dir))
         (sly-agent-q-server-file (expand-file-name "dist/sly-agent-q-server.js" sly-agent-q-test-root)))
    (unwind-protect
        (progn
          (with-temp-file file
            (insert "{\"mcpServers\": {\"other\": {\"command\": \"x\"}, \"sly-agent-q\": {\"command\": \"old\"}}, \"keep\": 1}"))
          (sly-agent-q-mcp-write-claude-config file)
          (let* ((obj (json-parse-string (with-temp-buffer (insert-file-contents file) (buffer-string))
                                         :object-type 'alist))
                 (servers (alist-get 'mcpServers obj))
                 (ours (alist-get 'sly-agent-q servers)))
            (should (equal (alist-get 'keep obj) 1))
            (should (equal (alist-get 'command (alist-get 'other servers)) "x"))
            (should (equal (alist-get 'command ours) sly-agent-q-node-program))
            (should (equal (append (alist-get 'args ours) nil)
                           (list (expand-file-name sly-agent-q-server-file) "--mcp-stdio")))
            (should-not (string-match-p "[Tt]oken\\|Bearer" (with-temp-buffer (insert-file-contents file) (buffer-string))))))
      (delete-directory dir t))))

(ert-deftest sly-agent-q-mcp-config-never-writes-through-a-planted-link ()
  "A cloned project's .mcp.json linked to a file outside it is refused, not rewritten.
A FIFO planted there is refused too, without waiting on it."
  (let* ((dir (make-temp-file "agent-q-mcp-conf" t))
         (outside (make-temp-file "agent-q-users-own" nil ".json"))
         (file (expand-file-name ".mcp.json" dir))
         (mine "{\"settings\": {}, \"projects\": {\"a\": {}}}\n")
         (sly-agent-q-server-file (expand-file-name "dist/sly-agent-q-server.js" sly-agent-q-test-root)))
    (unwind-protect
        (progn
          (write-region mine nil outside nil 'silent)
          (make-symbolic-link outside file)
          (should-error (sly-agent-q-mcp-write-claude-config file) :type 'user-error)
          (should (equal (with-temp-buffer (insert-file-contents outside) (buffer-string)) mine))
          (delete-file file)
          (when (executable-find "mkfifo")
            (call-process "mkfifo" nil nil nil file)
            (should-error (sly-agent-q-mcp-write-claude-config file) :type 'user-error)))
      (delete-directory dir t)
      (delete-file outside))))

(ert-deftest sly-agent-q-mcp-config-goes-to-the-agents-project-root ()
  "The .mcp.json written is the one at the root the agent works in, the user's setting first."
  (let* ((root (make-temp-file "sq-root" t))
         (other (make-temp-file "sq-other" t))
         (sly-agent-q-project-root root))
    (unwind-protect
        (with-temp-buffer
          (setq default-directory (file-name-as-directory other))
          (should (equal (expand-file-name ".mcp.json" root) (sly-agent-q-mcp--project-file))))
      (delete-directory root t)
      (delete-directory other t))))

(ert-deftest sly-agent-q-mcp-codex-entry-names-a-non-default-state-file ()
  "The Codex entry is TOML with the shim's arguments, --mcp-state when the file is not the default."
  (let ((sly-agent-q-server-file (expand-file-name "dist/sly-agent-q-server.js" sly-agent-q-test-root))
        (sly-agent-q-mcp-state-file "/tmp/elsewhere/mcp.json"))
    (should (equal (sly-agent-q-mcp-codex-entry)
                   (format "[mcp_servers.sly-agent-q]\ncommand = \"%s\"\nargs = [\"%s\", \"--mcp-stdio\", \"--mcp-state\", \"/tmp/elsewhere/mcp.json\"]\n"
                           sly-agent-q-node-program (expand-file-name sly-agent-q-server-file))))))

(ert-deftest sly-agent-q-mcp-client-configuration-sends-files-inline-and-levels ()
  "The files go as names (the server reads them); inline servers and levels as objects."
  (let* ((sly-agent-q-mcp-server-files '("~/a/.mcp.json"))
         (sly-agent-q-mcp-servers '(("b" . (:type "http" :url "http://127.0.0.1:1/mcp"))))
         (sly-agent-q-mcp-server-levels '(("a" . safe))))
    (let* ((conf (sly-agent-q-mcp-client-configuration))
           (json (json-parse-string (json-serialize conf) :object-type 'alist)))
      (should (equal (alist-get 'files json) (vector (expand-file-name "~/a/.mcp.json"))))
      (should (equal (alist-get 'url (alist-get 'b (alist-get 'servers json))) "http://127.0.0.1:1/mcp"))
      (should (equal (alist-get 'levels json) '((a . "safe")))))))

(provide 'sly-agent-q-mcp-test)
;;; sly-agent-q-mcp-test.el ends here
