// Files of the project the server reads on its own, without a tool call (the project's instructions):
// a cloned repository chooses them, so they get the confinement the file tools have. After links are
// resolved the file must be inside the project root, a regular file (never /proc, a device or a FIFO,
// which could hand the server's environment to the provider or block the read), and only its first
// bytes up to a bound are read.

import { closeSync, constants, fstatSync, lstatSync, openSync, readSync, realpathSync, statSync } from "node:fs";
import { basename, isAbsolute, join, relative, sep } from "node:path";
import { isPrivatePath } from "../tools/project/private-files.js";

export type ProjectFile =
  | { kind: "read"; text: string; truncated: boolean; size: number }
  | { kind: "absent" }
  | { kind: "refused"; reason: string };

const SYSTEM_TREES = ["/proc", "/sys", "/dev"];

function inside(dir: string, path: string): boolean {
  const rel = relative(dir, path);
  return rel !== "" && !rel.startsWith(`..${sep}`) && rel !== ".." && !isAbsolute(rel);
}

/** NAME under ROOT, read as UTF-8 up to MAX_BYTES, if the confinement allows it. */
export function readProjectFile(root: string, name: string, maxBytes: number): ProjectFile {
  let realRoot: string;
  try {
    realRoot = realpathSync(root);
    lstatSync(join(realRoot, name));
  } catch {
    return { kind: "absent" };
  }
  return readConfinedFile(join(realRoot, name), maxBytes, realRoot);
}

/**
 * PATH read as UTF-8 up to MAX_BYTES if, after its links are resolved, it is a regular file outside
 * the system trees (and inside WITHIN when given). For files a user names (MCP server lists) too.
 */
export function readConfinedFile(path: string, maxBytes: number, within?: string): ProjectFile {
  try {
    lstatSync(path);
  } catch {
    return { kind: "absent" };
  }
  let real: string;
  try {
    real = realpathSync(path);
  } catch {
    return { kind: "refused", reason: "it is a link to nothing that exists" };
  }
  if (SYSTEM_TREES.some((t) => real === t || real.startsWith(`${t}/`))) return { kind: "refused", reason: "it leads into a system tree (/proc, /sys or /dev)" };
  if (within !== undefined && !inside(within, real)) return { kind: "refused", reason: "it leads outside the project root" };
  // Never a file the file tools refuse as holding credentials (AGENT-Q.md a link to .authinfo would
  // put its password in the system prompt).
  if (isPrivatePath((within !== undefined ? relative(within, real) : real).split(sep).join("/"))) {
    return { kind: "refused", reason: `it is a link to ${basename(real)}, a file holding credentials` };
  }
  let fd: number;
  try {
    if (!statSync(real).isFile()) return { kind: "refused", reason: "it is not a regular file" };
    // No following a link swapped in since, and no waiting on a FIFO swapped in since.
    fd = openSync(real, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  } catch (err) {
    return { kind: "refused", reason: `it cannot be opened (${(err as NodeJS.ErrnoException).code ?? "error"})` };
  }
  try {
    const st = fstatSync(fd);
    if (!st.isFile()) return { kind: "refused", reason: "it is not a regular file" };
    const buf = Buffer.alloc(Math.min(st.size, maxBytes));
    let got = 0;
    while (got < buf.length) {
      const n = readSync(fd, buf, got, buf.length - got, got);
      if (n === 0) break;
      got += n;
    }
    return { kind: "read", text: buf.subarray(0, got).toString("utf8"), truncated: st.size > maxBytes, size: st.size };
  } catch (err) {
    return { kind: "refused", reason: `it cannot be read (${(err as NodeJS.ErrnoException).code ?? "error"})` };
  } finally {
    closeSync(fd);
  }
}
