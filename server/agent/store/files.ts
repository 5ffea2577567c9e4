// How the store touches its files: never through a link, never anything but a regular file, and
// always checking that the name still holds the file a descriptor opened.

import { closeSync, constants, fstatSync, lstatSync, openSync, statSync } from "node:fs";
import { StoreError } from "./format.js";

/** A file or directory as the system knows it, whatever its name. */
export interface FileIdentity {
  dev: number;
  ino: number;
}

export const sameFile = (a: FileIdentity, b: FileIdentity): boolean => a.dev === b.dev && a.ino === b.ino;

/**
 * Opens FILE, a conversation file or its name, with FLAGS, never through a link and never anything
 * but a regular file: a link planted at a conversation's name would make the store read or write a
 * file outside its directory. O_NOFOLLOW refuses a link as the last component, O_NONBLOCK keeps a
 * FIFO from blocking the open, and the name's lstat must still be the file the descriptor holds
 * (nothing swapped between the two). WHAT says what was to be done ("read", "opened for writing").
 */
export function openRegular(file: string, flags: number, what: string): number {
  let fd: number;
  try {
    fd = openSync(file, flags | constants.O_NOFOLLOW | constants.O_NONBLOCK, 0o600);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === "ELOOP") throw new StoreError(file, `not ${what}: a link (sly-agent-q never follows a link in its conversations directory).`, code);
    throw new StoreError(file, `cannot be ${what}: ${(err as Error).message}`, code);
  }
  try {
    const opened = fstatSync(fd);
    if (!opened.isFile()) throw new StoreError(file, `not ${what}: not a regular file.`);
    // A file with another name elsewhere (a hard link) is read, never written: writing it would write there.
    if (opened.nlink > 1 && (flags & (constants.O_WRONLY | constants.O_RDWR)) !== 0) throw new StoreError(file, `not ${what}: it has another name elsewhere (a hard link).`);
    if (!sameFile(lstatSync(file), opened)) throw new StoreError(file, `not ${what}: it was replaced while it was opened.`);
    return fd;
  } catch (err) {
    closeSync(fd);
    if (err instanceof StoreError) throw err;
    throw new StoreError(file, `cannot be ${what}: ${(err as Error).message}`, (err as NodeJS.ErrnoException).code);
  }
}

/** The identity of directory DIR (followed if the configuration names a link: the user's choice). */
export function directoryIdentity(dir: string): FileIdentity | undefined {
  try {
    const st = statSync(dir);
    return st.isDirectory() ? { dev: st.dev, ino: st.ino } : undefined;
  } catch {
    return undefined;
  }
}
