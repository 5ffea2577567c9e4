// Files of credentials, as the project tools (search_project, find_files, the git tools) see them: the
// one rule they all ask, through this class. Built-in names (the defaults of Emacs's
// sly-agent-q-private-file-regexps) always; the user's own regexps of that setting, which Emacs
// translates to JavaScript and sends in the configuration (privateFilePatterns), tested as Emacs tests
// them, against the file's true name, case-insensitively (Emacs's case-fold-search is on by default:
// the stricter reading). A regexp Emacs could not translate makes every project tool refuse, since the
// rule it states cannot be applied here.

import { ToolError, type PrivateFileRule } from "../tool.js";

const PRIVATE_DIRS = new Set([".ssh", ".gnupg", ".aws", ".password-store"]);
const PRIVATE_FILES = new Set([".authinfo", ".authinfo.gpg", ".netrc", ".pgpass"]);

/** Whether REL ("/"-separated) is a file of credentials by the built-in names alone. */
export function isPrivatePath(rel: string): boolean {
  const parts = rel.split("/");
  return parts.slice(0, -1).some((p) => PRIVATE_DIRS.has(p)) || PRIVATE_FILES.has(parts[parts.length - 1]!) || PRIVATE_DIRS.has(parts[parts.length - 1]!);
}

export class PrivateFiles implements PrivateFileRule {
  private readonly patterns: RegExp[];
  private readonly untranslated: string[];

  constructor(sources: string[] = [], untranslated: string[] = []) {
    this.untranslated = [...untranslated];
    this.patterns = sources.map((s) => {
      try {
        return new RegExp(s, "iu");
      } catch {
        // Not valid JavaScript: the rule cannot be applied, so the tools refuse (see check).
        this.untranslated.push(s);
        return /(?!)/;
      }
    });
  }

  /** Throws when part of the user's rule cannot be applied here: nothing may be listed or read then. */
  check(): void {
    if (this.untranslated.length > 0) {
      throw new ToolError(
        `sly-agent-q-private-file-regexps holds ${this.untranslated.map((s) => JSON.stringify(s)).join(", ")}, which the server cannot apply (only the common part of Emacs's regexp syntax is translated); the project tools refuse to run until it is written in that part (\\., \\', \\(?:...\\), [...], * + ?, \\|).`,
      );
    }
  }

  /** Whether REL (relative to the true root ROOT, "/"-separated) is a file of credentials. */
  isPrivate(root: string, rel: string): boolean {
    if (isPrivatePath(rel)) return true;
    if (this.patterns.length === 0) return false;
    const abs = rel === "" || rel === "." ? root : `${root === "/" ? "" : root}/${rel}`;
    return this.patterns.some((re) => re.test(abs));
  }
}

/** The built-in rule alone (no user setting known). */
export const BUILT_IN_PRIVATE_FILES = new PrivateFiles();
