// Exports are inert: a conversation whose text (the model's, a tool's, the user's, the title) holds
// everything Org or Emacs would act on is exported as Org and Markdown, each file is opened in a fresh
// `emacs --batch -Q` with default settings and the Org one exported again with org-export-to-file;
// nothing runs (no marker file appears) and nothing asks (no prompt function is called).

import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { expect, it } from "vitest";
import { exportConversation } from "../../server/agent/export.js";
import type { HistoryMessage } from "../../server/protocol.js";

function hostile(dir: string): { title: string; messages: HistoryMessage[] } {
  const mark = (n: string) => JSON.stringify(join(dir, `ran-${n}`));
  const touch = (n: string) => `(write-region "" nil ${mark(n)})`;
  writeFileSync(join(dir, "evil.setup"), `#+MACRO: boom (eval ${touch("setupfile")})\n#+BIND: org-export-with-toc (progn ${touch("bind-setup")} nil)\n`);
  const org = [
    `#+INCLUDE: "/etc/passwd"`,
    `#+SETUPFILE: ${join(dir, "evil.setup")}`,
    `#+MACRO: run (eval ${touch("macro")})`,
    "{{{run}}} {{{boom}}}",
    `#+BIND: org-export-with-toc (progn ${touch("bind")} nil)`,
    `[[elisp:${touch("elisp-link")}][click]] [[shell:touch ${join(dir, "ran-shell")}][run]]`,
    "#+name: helper",
    "#+begin_src emacs-lisp :exports results",
    touch("src-block"),
    "#+end_src",
    "#+CALL: helper()",
    `call_helper() src_emacs-lisp[:exports results]{${touch("inline-src")}}`,
    "* A heading of the model's",
    "#+end_example",
    `#+begin_src emacs-lisp :exports results\n${touch("src-after-end")}\n#+end_src`,
  ].join("\n");
  const html = `<script>alert(1)</script> <img src=x onerror="alert(2)"> &amp; \`<b>inline</b>\`\n\`\`\`html\n<p>fenced stays</p>\n\`\`\``;
  const localVars = `Bye.\n\nLocal Variables:\neval: ${touch("local-variables")}\nEnd:\n`;
  return {
    title: `-*- eval: ${touch("mode-line")} -*- [[elisp:${touch("title-link")}]] {{{run}}}`,
    messages: [
      { role: "user", content: [{ type: "text", text: `-*- eval: ${touch("user-mode-line")} -*-\n${org}` }] },
      {
        role: "assistant",
        content: [
          { type: "text", text: `${org}\n${html}` },
          { type: "tool_use", id: "t1", name: "eval_form", input: { form: `#+end_src\n${org}` } },
        ],
      },
      { role: "user", content: [{ type: "tool_result", toolUseId: "t1", content: `${org}\n${html}`, isError: false }] },
      { role: "assistant", content: [{ type: "text", text: localVars }] },
    ],
  };
}

const OPEN_AND_EXPORT = `
(progn
  (defvar asked nil)
  (dolist (f '(yes-or-no-p y-or-n-p read-string read-from-minibuffer read-char-choice hack-local-variables-confirm))
    (advice-add f :override (lambda (&rest args) (push (cons f args) asked) nil)))
  (let ((file (car command-line-args-left)))
    (setq command-line-args-left nil)
    (find-file file)
    (when (derived-mode-p 'org-mode)
      (require 'ox-ascii)
      (org-export-to-file 'ascii (concat file ".txt"))
      (org-export-to-file 'html (concat file ".html"))))
  (princ (format "ASKED:%S" asked)))`;

it("opens and exports a hostile conversation's Org and Markdown: nothing runs, nothing asks", () => {
  const dir = mkdtempSync(join(tmpdir(), "agent-q-export-"));
  const { title, messages } = hostile(dir);
  const orgText = exportConversation(title, messages, "org");
  const mdText = exportConversation(title, messages, "markdown");
  const orgFile = join(dir, "conversation.org");
  const mdFile = join(dir, "conversation.md");
  writeFileSync(orgFile, orgText);
  writeFileSync(mdFile, mdText);
  for (const file of [orgFile, mdFile]) {
    const emacs = spawnSync("emacs", ["--batch", "-Q", "--eval", OPEN_AND_EXPORT, file], { cwd: dir, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"], timeout: 60_000 });
    expect(emacs.status, emacs.stderr).toBe(0);
    expect(emacs.stdout, `${file}: ${emacs.stderr}`).toBe("ASKED:nil");
  }
  expect(existsSync(`${orgFile}.html`)).toBe(true);
  expect(readdirSync(dir).filter((f) => f.startsWith("ran-"))).toEqual([]);
  // What was exported again holds none of /etc/passwd.
  const again = spawnSync("cat", [`${orgFile}.txt`, `${orgFile}.html`], { encoding: "utf8" }).stdout;
  expect(again).not.toContain("root:x:0:0");
  // The text is all still there, for a reader.
  for (const text of [orgText, mdText]) expect(text).toContain("alert(1)");
  // Markdown: raw HTML outside fences is escaped; inside a fence it stays as written.
  const outsideFences = mdText.replace(/^(`{3,}|~{3,})[^\n]*\n[\s\S]*?^\1\s*$/gm, "");
  expect(outsideFences).not.toMatch(/<script|<img/);
  expect(mdText).toContain("&lt;script&gt;");
  expect(mdText).toContain("<p>fenced stays</p>");
}, 120_000);

it("an inline source block or call glued to a word in the title or a tool name runs nothing", () => {
  const dir = mkdtempSync(join(tmpdir(), "agent-q-export-glued-"));
  const touch = (n: string) => `(write-region "" nil ${JSON.stringify(join(dir, `ran-${n}`))})`;
  // Glued to a letter or an underscore, where the escape (at a word boundary) does not reach.
  const title = `xsrc_emacs-lisp[:exports results]{${touch("title-src")}} ycall_helper()`;
  const messages: HistoryMessage[] = [
    { role: "user", content: [{ type: "text", text: "#+name: helper\n#+begin_src emacs-lisp\n1\n#+end_src" }] },
    { role: "assistant", content: [{ type: "tool_use", id: "t1", name: `_src_emacs-lisp[:exports results]{${touch("tool-src")}}`, input: {} }] },
  ];
  const orgFile = join(dir, "conversation.org");
  writeFileSync(orgFile, exportConversation(title, messages, "org"));
  const emacs = spawnSync("emacs", ["--batch", "-Q", "--eval", OPEN_AND_EXPORT, orgFile], { cwd: dir, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"], timeout: 60_000 });
  expect(emacs.status, emacs.stderr).toBe(0);
  expect(emacs.stdout, emacs.stderr).toBe("ASKED:nil");
  expect(readdirSync(dir).filter((f) => f.startsWith("ran-"))).toEqual([]);
}, 120_000);
