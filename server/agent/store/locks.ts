// A lock file per conversation keeps two servers (two Emacsen) from appending to the same file; a
// lock whose process is gone is taken over.

import { closeSync, constants, fstatSync, linkSync, openSync, readSync, renameSync, unlinkSync, writeFileSync } from "node:fs";
import { hostname } from "node:os";
import { StoreError } from "./format.js";

/** Where a test steps in between reading a stale lock's owner and taking the lock over. */
export const lockIO = {
  beforeTakeover: (): void => {},
};

/**
 * Takes the lock of conversation file FILE: a file naming this process, made whole beside it and
 * linked into place (so no one ever reads a lock without its owner). A lock left by a process that
 * is gone (same host) is taken over; one held by a live process is refused. Two servers taking over
 * the same stale lock at once cannot both win: the stale lock is moved aside in one step, and what
 * was moved is checked, since another server may have replaced it meanwhile. Returns the lock file.
 */
export function takeLock(file: string): string {
  const lockFile = `${file}.lock`;
  const me = `${process.pid}@${hostname()}`;
  const unique = `${process.pid}.${Date.now().toString(36)}.${Math.random().toString(36).slice(2)}`;
  const whole = `${lockFile}.${unique}.new`;
  try {
    writeFileSync(whole, me, { flag: "wx", mode: 0o600 });
  } catch (err) {
    throw new StoreError(lockFile, `cannot be created: ${(err as Error).message}`);
  }
  const inUse = (owner: string) => new StoreError(file, `is open in another sly-agent-q (process ${owner}); close it there first.`);
  try {
    for (let attempt = 0; attempt < 3; attempt++) {
      try {
        linkSync(whole, lockFile);
        return lockFile;
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw new StoreError(lockFile, `cannot be created: ${(err as Error).message}`);
      }
      const owner = readLock(lockFile);
      if (owner === me) return lockFile;
      if (owner !== undefined && ownerAlive(owner)) throw inUse(owner);
      lockIO.beforeTakeover();
      const aside = `${lockFile}.${unique}.stale`;
      try {
        renameSync(lockFile, aside);
      } catch {
        continue; // Gone already: another server took it over, or let go.
      }
      const moved = readLock(aside);
      if (moved !== undefined && moved !== owner && moved !== me && ownerAlive(moved)) {
        // A live server's lock, made after the stale one was read: put it back.
        try {
          linkSync(aside, lockFile);
        } catch {
          // It made another meanwhile.
        }
        unlinkQuietly(aside);
        throw inUse(moved);
      }
      unlinkQuietly(aside);
    }
    throw new StoreError(file, "its lock could not be taken.");
  } finally {
    unlinkQuietly(whole);
  }
}

/** Lets go of LOCKFILE, if this process holds it. */
export function releaseLock(lockFile: string): void {
  try {
    if (readLock(lockFile) === `${process.pid}@${hostname()}`) unlinkSync(lockFile);
  } catch {
    // Already gone.
  }
}

function unlinkQuietly(file: string): void {
  try {
    unlinkSync(file);
  } catch {
    // Not there.
  }
}

function readLock(lockFile: string): string | undefined {
  try {
    // Read only, never blocking (a FIFO planted at its name).
    const fd = openSync(lockFile, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
    try {
      const size = Math.min(fstatSync(fd).size, 256);
      const buf = Buffer.alloc(size);
      readSync(fd, buf, 0, size, 0);
      return buf.toString("utf8").trim();
    } finally {
      closeSync(fd);
    }
  } catch {
    return undefined;
  }
}

/** Whether the process named OWNER ("pid@host") still runs; a lock from another host counts as live. */
function ownerAlive(owner: string): boolean {
  const [pidText, host] = owner.split("@");
  const pid = Number(pidText);
  if (!Number.isInteger(pid) || pid <= 0) return false;
  if (host !== hostname()) return true;
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "EPERM";
  }
}
