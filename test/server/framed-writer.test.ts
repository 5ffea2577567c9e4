// What the server writes, read by the real Emacs: characters its JSON parser refuses (NUL, lone
// surrogates, in values and in keys) are replaced so that the message is read, not dropped.

import { spawnSync } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { PassThrough } from "node:stream";
import { expect, it } from "vitest";
import type { Message } from "vscode-jsonrpc/node";
import { FramedMessageWriter, NUL_MARK } from "../../server/rpc/framed-writer.js";

async function frameOf(msg: unknown): Promise<string> {
  const out = new PassThrough();
  const chunks: Buffer[] = [];
  out.on("data", (c: Buffer) => chunks.push(c));
  await new FramedMessageWriter(out).write(msg as Message);
  return Buffer.concat(chunks).toString("utf8");
}

it("writes NULs and lone surrogates so that Emacs reads the message", async () => {
  const msg = { jsonrpc: "2.0", method: "chat/textDelta", params: { text: "a\u0000b \ud800 c\udc00", ["k\u0000"]: ["\u0000"], ok: "\ud83d\ude00 \\u0000" } };
  const frame = await frameOf(msg);
  const body = frame.slice(frame.indexOf("\r\n\r\n") + 4);
  expect(Buffer.byteLength(body, "utf8")).toBe(Number(/Content-Length: (\d+)/.exec(frame)![1]));
  const file = join(mkdtempSync(join(tmpdir(), "agent-q-wire-")), "body.json");
  writeFileSync(file, body, "utf8");
  const emacs = spawnSync("emacs", ["--batch", "-Q", "--eval",
    `(let ((coding-system-for-read 'utf-8)) (with-temp-buffer (insert-file-contents ${JSON.stringify(file)}) (goto-char 1) (princ (json-serialize (json-parse-buffer)))))`],
    { encoding: "utf8" });
  expect(emacs.stderr).toBe("");
  const read = JSON.parse(emacs.stdout) as { params: Record<string, unknown> };
  expect(read.params.text).toBe(`a${NUL_MARK}b \ufffd c\ufffd`);
  expect(read.params[`k${NUL_MARK}`]).toEqual([NUL_MARK]);
  // A well-formed pair and an escaped backslash are left as they were.
  expect(read.params.ok).toBe("\ud83d\ude00 \\u0000");
});
